"""Timeouts: code cannot catch, suppress or outlast the time limit."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from _security import blocked, run

from genpark_repl_tools import Limits, ReplEngine

TIMEOUT_S = 0.3
SLACK_S = 3.0  # generous: the machine is shared; the point is "stops", not "stops fast"

CATCH_ALL_LOOP = (
    "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass"
)
BARE_EXCEPT_LOOP = "while True:\n    try:\n        while True:\n            pass\n    except:\n        pass"
SUPPRESSING_CONTEXT = (
    "class Swallow:\n    def __enter__(self):\n        return self\n    def __exit__(self, *exc):\n      "
    "  return True\n"
    "while True:\n    with Swallow():\n        while True:\n            pass"
)
SLEEP_LOOP = (
    "import time\nwhile True:\n    try:\n        time.sleep(10)\n    except BaseException:\n        pass"
)
FINALLY_RETURN = (
    "def f():\n    try:\n        while True:\n            pass\n    finally:\n        "
    "return 1\nwhile True:\n    f()"
)
FINALLY_CONTINUE = (
    "while True:\n    try:\n        while True:\n            pass\n    finally:\n        continue"
)
FINALLY_BREAK = "for i in range(3):\n    try:\n        pass\n    finally:\n        break"
HANDLER_IN_REPR = (
    "class Stubborn:\n    def __repr__(self):\n        while True:\n            try:\n                "
    "while True:\n"
    "                    pass\n            except BaseException:\n                pass\nStubborn()"
)


@pytest.fixture(scope="module", params=["strict", "standard"])
def quick(request: pytest.FixtureRequest) -> Iterator[ReplEngine]:
    with ReplEngine(boundary="inprocess", policy=request.param, limits=Limits(timeout_s=TIMEOUT_S)) as e:
        yield e


@pytest.mark.parametrize(
    "code", [CATCH_ALL_LOOP, BARE_EXCEPT_LOOP, SUPPRESSING_CONTEXT, SLEEP_LOOP, HANDLER_IN_REPR]
)
def test_catching_the_timeout_does_not_keep_the_code_running(quick: ReplEngine, code: str) -> None:
    started = time.monotonic()
    result = run(quick, code)
    assert result.status == "timeout", result.to_observation()
    assert time.monotonic() - started < TIMEOUT_S + SLACK_S


@pytest.mark.parametrize(
    ("code", "word"), [(FINALLY_RETURN, "return"), (FINALLY_CONTINUE, "continue"), (FINALLY_BREAK, "break")]
)
def test_leaving_a_finally_block_early_is_refused(quick: ReplEngine, code: str, word: str) -> None:
    assert blocked(run(quick, code)) == (
        f"'{word}' inside 'finally' is not allowed under policy '{quick.policy.name}': it would swallow "
        "the time "
        "limit; move it after the try statement"
    )


def test_ordinary_exception_handling_still_works(quick: ReplEngine) -> None:
    code = (
        "hits = 0\nfor i in range(1000):\n    try:\n        1 / (i % 2)\n    except "
        "ZeroDivisionError:\n        hits += 1\nhits"
    )
    assert run(quick, code).value == "500"
    loop_in_finally = (
        "total = 0\ntry:\n    pass\nfinally:\n    for i in range(3):\n        if i == 1:\n "
        "           continue\n        total += i\ntotal"
    )
    assert run(quick, loop_in_finally).value == "2"
