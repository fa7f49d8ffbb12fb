"""Results the runner assembles without validation are what validation would have made."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from genpark_repl_tools import ExecutionResult, Limits, ReplEngine
from genpark_repl_tools._models import Usage, VariableChanges, VariableInfo, assemble, set_field
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
    """The assembled value holds exactly the types validation makes (an IntEnum is not an int)."""
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
def test_assembled_results_equal_validated_ones(policy: str, name: str) -> None:
    with ReplEngine(policy=policy, limits=Limits(timeout_s=10)) as engine:
        result = engine.run(CELLS[name])
        if policy == "trusted":
            assert result.status in ("ok", "error"), result.error
        _check(result)


def test_int_subclass_sizes_become_ints() -> None:
    with ReplEngine(policy="trusted") as engine:
        result = engine.run(CELLS["int-subclass-sizes"])
    (table,) = [v for v in result.changes.created if v.name == "t"]
    assert table.shape == [3, 1] and type(table.shape[0]) is int and type(table.shape[1]) is int
    assert table.size == 3 and type(table.size) is int


@pytest.mark.parametrize("case", BAD_OUTPUTS, ids=kind_of)
def test_bad_output_results_equal_validated_ones(case: Any) -> None:
    with ReplEngine(policy="trusted", limits=Limits(timeout_s=BAD_OUTPUT_TIMEOUT_S)) as engine:
        _check(engine.run(case.code))


def test_timeout_and_blocked_results_equal_validated_ones() -> None:
    with ReplEngine(policy="strict", limits=Limits(timeout_s=0.3)) as engine:
        timed_out = engine.run("while True:\n    pass")
        blocked = engine.run("import os")
    assert timed_out.status == "timeout" and blocked.status == "blocked"
    _check(timed_out)
    _check(blocked)


def test_defaults_are_fresh_per_instance() -> None:
    first = assemble(ExecutionResult, {"status": "ok", "session": "s"})
    second = assemble(ExecutionResult, {"status": "ok", "session": "s"})
    first.notes.append("mine")
    first.changes.created.append(VariableInfo(name="x", type="int", repr="1"))
    assert second.notes == [] and second.changes.created == []
    assert first.usage is not second.usage
    assert isinstance(first.usage, Usage) and isinstance(first.changes, VariableChanges)
    assert first.model_fields_set == {"status", "session"}
    assert first == ExecutionResult(status="ok", session="s", notes=["mine"], changes=first.changes)


def test_a_missing_required_field_is_refused() -> None:
    with pytest.raises(TypeError, match="session"):
        assemble(ExecutionResult, {"status": "ok"})


def test_a_session_name_given_as_a_str_subclass_is_held_as_a_str() -> None:
    class Name(str):
        pass

    with ReplEngine(policy="trusted") as engine:
        result = engine.run("x = 1", Name("conversation-1"))
    assert type(result.session) is str and result.session == "conversation-1"
    _check(result)


def test_set_field_is_what_assignment_makes() -> None:
    assigned = assemble(ExecutionResult, {"status": "ok", "session": "s"})
    direct = assemble(ExecutionResult, {"status": "ok", "session": "s"})
    assigned.usage.wall_ms = 1.5
    assigned.files = []
    set_field(direct.usage, "wall_ms", 1.5)
    set_field(direct, "files", [])
    assert direct == assigned
    assert direct.model_fields_set == assigned.model_fields_set == {"status", "session", "files"}
    assert direct.usage.model_fields_set == assigned.usage.model_fields_set == {"wall_ms"}
    assert ExecutionResult.model_validate(direct.model_dump()) == direct


def test_builders_are_made_before_any_sandbox_runs() -> None:
    # A builder is compiled; the subprocess worker assembles its first result inside the sandbox,
    # whose audit hook refuses compiling: every model the runner assembles is planned at import.
    from genpark_repl_tools import _models

    for cls in (ExecutionResult, VariableChanges, VariableInfo, Usage):
        assert cls in _models._plans


def test_a_run_that_changes_nothing_reports_no_changes_and_one_that_does_reports_it() -> None:
    with ReplEngine(policy="trusted") as engine:
        engine.run("x = 1\ny = 2")
        same = engine.run("x = 1")  # small ints are cached: the name holds the very same object
        rebound = engine.run("x = 2\ndel y")
    assert same.changes == VariableChanges()
    assert [v.name for v in rebound.changes.rebound] == ["x"] and rebound.changes.deleted == ["y"]


def test_a_builder_makes_what_assemble_makes_from_the_same_fields() -> None:
    from genpark_repl_tools._models import UNSET, builder

    build = builder(ExecutionResult, "status", "session", optional=("value", "changes", "notes"))
    given = build("ok", "s", value="42", changes=UNSET, notes=["a note"])
    values = {"status": "ok", "session": "s", "value": "42", "notes": ["a note"]}
    assert given == assemble(ExecutionResult, values)
    assert given.model_fields_set == {"status", "session", "value", "notes"}
    assert list(given.__dict__) == list(ExecutionResult.model_fields)  # the model's own order (repr)
    first, second = build("ok", "s"), build("ok", "s")
    assert first.model_fields_set == {"status", "session"}
    first.changes.created.append(VariableInfo(name="x", type="int", repr="1"))
    first.notes.append("mine")
    assert second.changes.created == [] and second.notes == [] and first.usage is not second.usage
    _check(first)


def test_a_builder_refuses_fields_the_model_does_not_have_or_needs() -> None:
    from genpark_repl_tools._models import builder

    with pytest.raises(TypeError, match="no fields"):
        builder(ExecutionResult, "status", "session", "nonsense")
    with pytest.raises(TypeError, match="session"):
        builder(ExecutionResult, "status")
