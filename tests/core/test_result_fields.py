"""What the runner puts into a result has the exact types the model declares: dumping a result and
validating the dump gives it back, equal and type for type, and it dumps to JSON without a warning."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from genpark_repl_tools import ExecutionResult, Limits, ReplEngine
from genpark_repl_tools._models import VariableChanges
from genpark_repl_tools.testing.bad_output import BAD_OUTPUT_TIMEOUT_S, BAD_OUTPUTS, kind_of

CELLS = {
    "value": "x = 41\nx + 1",
    "print": "print('hello', 'wörld')",
    "rebind-and-delete": "a = 1\nb = [1, 2]\ndel a\nb",
    "function-and-class": "def f(n):\n    return n\nclass C:\n    pass\nf",
    "error": "{}['missing']",
    "syntax-error": "def (",
    "system-exit": "raise SystemExit(0)",
    "str-subclass-repr": (
        "class S(str):\n    pass\nclass R:\n    def __repr__(self):\n        return S('r\\udcff')\nR()"
    ),
    "int-subclass-sizes": (
        "import enum\n"
        "class N(enum.IntEnum):\n    A = 3\n"
        "class Table:\n    shape = (N.A, True)\n    size = N.A\n    dtype = 'int64'\n"
        "t = Table()"
    ),
}


def _same_types(built: Any, validated: Any, where: str = "result") -> None:
    """The built value holds exactly the types validation makes (an IntEnum is not an int)."""
    assert type(built) is type(validated), f"{where}: {type(built).__name__} != {type(validated).__name__}"
    if isinstance(built, BaseModel):
        assert built.__dict__.keys() == validated.__dict__.keys(), where
        for name in built.__dict__:
            _same_types(built.__dict__[name], validated.__dict__[name], f"{where}.{name}")
    elif isinstance(built, list):
        assert len(built) == len(validated), where
        for i, (a, b) in enumerate(zip(built, validated, strict=True)):
            _same_types(a, b, f"{where}[{i}]")


def _check(result: ExecutionResult) -> None:
    validated = ExecutionResult.model_validate(result.model_dump())
    assert validated == result
    _same_types(result, validated)
    result.model_dump_json()  # a value of the wrong type would warn here (warnings are errors)


@pytest.mark.parametrize("policy", ["trusted", "standard"])
@pytest.mark.parametrize("name", sorted(CELLS))
def test_results_equal_their_validated_dumps(policy: str, name: str) -> None:
    with ReplEngine(boundary="inprocess", policy=policy, limits=Limits(timeout_s=10)) as engine:
        result = engine.run(CELLS[name])
        if policy == "trusted":
            assert result.status in ("ok", "error"), result.error
        _check(result)


def test_int_subclass_sizes_become_ints() -> None:
    with ReplEngine(boundary="inprocess", policy="trusted") as engine:
        result = engine.run(CELLS["int-subclass-sizes"])
    (table,) = [v for v in result.changes.created if v.name == "t"]
    assert table.shape == [3, 1] and type(table.shape[0]) is int and type(table.shape[1]) is int
    assert table.size == 3 and type(table.size) is int


@pytest.mark.parametrize("case", BAD_OUTPUTS, ids=kind_of)
def test_bad_output_results_equal_their_validated_dumps(case: Any) -> None:
    with ReplEngine(
        boundary="inprocess", policy="trusted", limits=Limits(timeout_s=BAD_OUTPUT_TIMEOUT_S)
    ) as engine:
        _check(engine.run(case.code))


def test_timeout_and_blocked_results_equal_their_validated_dumps() -> None:
    with ReplEngine(boundary="inprocess", policy="strict", limits=Limits(timeout_s=0.3)) as engine:
        timed_out = engine.run("while True:\n    pass")
        blocked = engine.run("import os")
    assert timed_out.status == "timeout" and blocked.status == "blocked"
    _check(timed_out)
    _check(blocked)


def test_a_session_name_given_as_a_str_subclass_is_held_as_a_str() -> None:
    class Name(str):
        pass

    with ReplEngine(boundary="inprocess", policy="trusted") as engine:
        result = engine.run("x = 1", Name("conversation-1"))
    assert type(result.session) is str and result.session == "conversation-1"
    _check(result)


def test_a_run_that_changes_nothing_reports_no_changes_and_one_that_does_reports_it() -> None:
    with ReplEngine(boundary="inprocess", policy="trusted") as engine:
        engine.run("x = 1\ny = 2")
        same = engine.run("x = 1")  # small ints are cached: the name holds the very same object
        rebound = engine.run("x = 2\ndel y")
    assert same.changes == VariableChanges()
    assert [v.name for v in rebound.changes.rebound] == ["x"] and rebound.changes.deleted == ["y"]
