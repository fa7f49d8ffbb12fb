"""Frames: generators, coroutines and tracebacks lead to frames, frames to real globals and builtins."""

from __future__ import annotations

import pytest
from _security import blocked, ok, refusal, run

from genpark_repl_tools import ReplEngine

GENERATOR_FRAME = "g = (x for x in [1])\ng.gi_frame.f_back.f_globals"
GENERATOR_FRAME_GETATTR = "g = (x for x in [1])\ngetattr(g, 'gi_' + 'frame')"
GENERATOR_CODE = "def gen():\n    yield 1\ngen().gi_code"
TRACEBACK_FRAME = "try:\n    1 / 0\nexcept Exception as e:\n    frame = e.__traceback__.tb_frame"
TRACEBACK_GETATTR = "try:\n    1 / 0\nexcept Exception as e:\n    tb = getattr(e, '__trace' + 'back__')"
ATTRGETTER_FRAME = "import operator\ng = (x for x in [1])\noperator.attrgetter('gi_frame')(g)"
HASATTR_FRAME = "g = (x for x in [1])\nhasattr(g, 'gi_frame')"
COROUTINE = "async def f():\n    pass\nf().cr_frame"
SYS_GETFRAME = "import sys\nsys._getframe()"
INSPECT = "import inspect\ninspect.currentframe()"
EXCEPTION_CONTEXT = "try:\n    1 / 0\nexcept Exception as e:\n    ctx = e.__context__"

INTERNALS = "frame, code and traceback internals are not available"


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (GENERATOR_FRAME, "attribute 'gi_frame' is not allowed under policy '{policy}': " + INTERNALS),
        (GENERATOR_CODE, "attribute 'gi_code' is not allowed under policy '{policy}': " + INTERNALS),
        (
            TRACEBACK_FRAME,
            "attribute '__traceback__' is not allowed under policy '{policy}': names starting with '_' "
            "are private; "
            "use the public API instead",
        ),
        (
            EXCEPTION_CONTEXT,
            "attribute '__context__' is not allowed under policy '{policy}': names starting with '_' are "
            "private; "
            "use the public API instead",
        ),
        (COROUTINE, "'async def' is not supported (no event loop is available) under policy '{policy}'"),
    ],
)
def test_frame_routes_are_refused_before_running(engine: ReplEngine, code: str, message: str) -> None:
    assert blocked(run(engine, code)) == message.format(policy=engine.policy.name)


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (
            GENERATOR_FRAME_GETATTR,
            "attribute 'gi_frame' is not allowed under policy '{policy}': " + INTERNALS,
        ),
        (ATTRGETTER_FRAME, "attribute 'gi_frame' is not allowed under policy '{policy}': " + INTERNALS),
        (
            TRACEBACK_GETATTR,
            "attribute '__traceback__' is not allowed under policy '{policy}': names starting with '_' are "
            "private; use the public API instead",
        ),
        # hasattr is the real builtin; the audit hook refuses the C-level read of a frame it makes.
        (HASATTR_FRAME, "reading internal attribute 'gi_frame' is not allowed under policy '{policy}'"),
    ],
)
def test_computed_frame_routes_are_refused_at_run_time(engine: ReplEngine, code: str, message: str) -> None:
    assert refusal(run(engine, code)) == message.format(policy=engine.policy.name)


@pytest.mark.parametrize("code", [SYS_GETFRAME, INSPECT, "import traceback", "import gc"])
def test_frame_providing_modules_are_refused(engine: ReplEngine, code: str) -> None:
    assert blocked(run(engine, code)).startswith("import of ")


@pytest.mark.parametrize(
    ("code", "value"),
    [
        ("def gen(n):\n    for i in range(n):\n        yield i * i\nsum(gen(4))", "14"),
        ("g = (x for x in [1, 2])\nnext(g), list(g)", "(1, [2])"),
        (
            "try:\n    int('x')\nexcept ValueError as e:\n    msg = str(e)\nmsg",
            "\"invalid literal for int() with base 10: 'x'\"",
        ),
        ("try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    r = e.args\nr", "('division by zero',)"),
        ("def gen():\n    x = yield 1\n    yield x * 2\ng = gen()\nnext(g)\ng.send(5)", "10"),
    ],
)
def test_generators_and_exceptions_work(engine: ReplEngine, code: str, value: str) -> None:
    assert ok(run(engine, code)).value == value


def test_errors_show_the_users_own_frames_only(engine: ReplEngine) -> None:
    result = run(engine, "def f():\n    return 1 / 0\nf()")
    assert result.status == "error"
    assert result.error is not None
    assert "genpark_repl_tools" not in result.error.traceback
    assert result.error.traceback.count('File "<input>"') == 2
