"""Finalizers: code that would run when an object is collected, later and outside the time limit."""

from __future__ import annotations

import pytest
from _security import blocked, ok, refusal, run

from genpark_repl_tools import ReplEngine

DEL_METHOD = "class A:\n    def __del__(self):\n        while True:\n            pass"
DEL_BY_TYPE = "type('A', (), {'__del__': print})"
DEL_BY_ENUM = "import enum\nenum.Enum('A', {'__del__': print})"
GENERATOR_FINALLY = (
    "def gen():\n    try:\n        yield 1\n    finally:\n        while True:\n            pass"
)
GENERATOR_BARE_EXCEPT = "def gen():\n    try:\n        yield 1\n    except:\n        pass"
GENERATOR_BASE_EXCEPTION = "def gen():\n    try:\n        yield 1\n    except BaseException:\n        pass"
GENERATOR_EXIT = (
    "def gen():\n    try:\n        yield 1\n    except (ValueError, GeneratorExit):\n        pass"
)
GENERATOR_DYNAMIC_EXCEPT = (
    "caught = BaseException\n"
    "def gen():\n    try:\n        yield 1\n    except caught:\n        pass\n"
    "g = gen()\nnext(g)\ng.close()"
)
GENERATOR_USER_CONTEXT = (
    "class Keep:\n    def __enter__(self):\n        return self\n    def __exit__(self, *exc):\n        "
    "return True\n"
    "def gen():\n    with Keep():\n        yield 1\n"
    "g = gen()\nnext(g)"
)
LAMBDA_GENERATOR = "g = (lambda: (yield 1))()\nnext(g)"

DISCARDED = "the handler would run when the generator is discarded, outside the time limit"


def test_del_methods_are_refused(engine: ReplEngine) -> None:
    assert blocked(run(engine, DEL_METHOD)).startswith(
        f"defining '__del__' is not allowed under policy '{engine.policy.name}': "
        "a finalizer runs whenever the object is collected, outside the time limit"
    )


@pytest.mark.parametrize("code", [DEL_BY_TYPE, DEL_BY_ENUM])
def test_del_through_class_factories_is_refused(engine: ReplEngine, code: str) -> None:
    assert "'__del__'" in refusal(run(engine, code))


def test_finally_in_generators_is_refused(engine: ReplEngine) -> None:
    assert blocked(run(engine, GENERATOR_FINALLY)) == (
        f"'finally' inside a generator is not allowed under policy '{engine.policy.name}': it runs when the "
        "generator is discarded, possibly later and outside the time limit; release resources outside "
        "the generator"
    )


@pytest.mark.parametrize(
    ("code", "label"),
    [
        (GENERATOR_BARE_EXCEPT, "everything (bare except)"),
        (GENERATOR_BASE_EXCEPTION, "BaseException"),
        (GENERATOR_EXIT, "(ValueError, GeneratorExit)"),
    ],
)
def test_generators_cannot_catch_their_own_closing(engine: ReplEngine, code: str, label: str) -> None:
    assert blocked(run(engine, code)) == (
        f"catching {label} inside a generator is not allowed under policy '{engine.policy.name}': "
        f"{DISCARDED}; "
        "catch Exception or a narrower class"
    )


def test_computed_exception_classes_are_checked_when_caught(engine: ReplEngine) -> None:
    assert refusal(run(engine, GENERATOR_DYNAMIC_EXCEPT)) == (
        f"catching BaseException inside a generator is not allowed under policy '{engine.policy.name}'; "
        f"{DISCARDED}"
    )


def test_own_context_managers_inside_generators_are_refused(engine: ReplEngine) -> None:
    assert refusal(run(engine, GENERATOR_USER_CONTEXT)) == (
        f"a 'with' block of your own context manager inside a generator is not allowed under policy "
        f"'{engine.policy.name}'; its __exit__ would run when the generator is discarded, outside the "
        "time limit"
    )


@pytest.mark.parametrize(
    ("code", "value"),
    [
        (
            "def gen():\n    for i in range(3):\n        try:\n            yield 10 // (i - 1)\n        "
            "except ZeroDivisionError:\n            yield 0\nlist(gen())",
            "[-10, 0, 10]",
        ),
        (
            "import decimal\ndef gen():\n    with decimal.localcontext() as c:\n        c.prec = 3\n     "
            "   yield decimal.Decimal(1) / 7\nnext(gen())",
            "Decimal('0.143')",
        ),
        ("def f():\n    try:\n        return 1\n    finally:\n        x = 2\nf()", "1"),
        (LAMBDA_GENERATOR, "1"),
        (
            "class Res:\n    def __enter__(self):\n        return 5\n    def __exit__(self, *exc):\n     "
            "   return False\nwith Res() as r:\n    v = r\nv",
            "5",
        ),
    ],
)
def test_ordinary_generators_and_cleanup_work(engine: ReplEngine, code: str, value: str) -> None:
    assert ok(run(engine, code)).value == value
