"""The public API: names, input validation, misuse errors, MockBoundary."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import genpark_repl_tools
from genpark_repl_tools import (
    CapacityError,
    EngineClosed,
    ExecutionRequest,
    ExecutionResult,
    Limits,
    MockBoundary,
    ReplEngine,
    SessionNotFound,
)

EXPECTED_ALL = {
    "Attachment",
    "AuditFinding",
    "AuditReport",
    "BaseBoundary",
    "BoundaryError",
    "CapacityError",
    "EngineClosed",
    "ErrorInfo",
    "ExecutionRequest",
    "ExecutionResult",
    "FileChange",
    "FileError",
    "FileInfo",
    "FileNotFound",
    "FileQuotaExceeded",
    "FilesUnavailable",
    "InProcessBoundary",
    "Limits",
    "MissingDependency",
    "MockBoundary",
    "Policy",
    "ReplEngine",
    "ReplError",
    "SQLiteStore",
    "SessionBusy",
    "SessionNotFound",
    "SessionRestore",
    "SessionSnapshot",
    "SessionStore",
    "SkippedVariable",
    "SnapshotAuthError",
    "SnapshotError",
    "SnapshotManifest",
    "SnapshotRefused",
    "SnapshotVariable",
    "Status",
    "StoreError",
    "UnsafeFileName",
    "VariableChanges",
    "VariableInfo",
    "VariableNotFound",
    "__version__",
    "render_variables",
    # streaming
    "FigureEvent",
    "OutputEvent",
    "ResultEvent",
    "StreamEvent",
    "ToolError",
}


def test_public_names_are_exactly_these() -> None:
    assert set(genpark_repl_tools.__all__) == EXPECTED_ALL
    for name in EXPECTED_ALL:
        assert hasattr(genpark_repl_tools, name)


@pytest.mark.parametrize("code", [None, b"x = 1", 42, ["x = 1"]])
def test_code_must_be_a_string(code: object) -> None:
    with ReplEngine(boundary="inprocess") as engine, pytest.raises(TypeError, match="code must be a str"):
        engine.run(code)  # type: ignore[arg-type]


@pytest.mark.parametrize("session", ["", "x" * 300, "bad\nid", 7])
def test_session_id_is_validated(session: object) -> None:
    with ReplEngine(boundary="inprocess") as engine, pytest.raises((TypeError, ValueError)):
        engine.run("1", session=session)  # type: ignore[arg-type]


def test_oversized_code_is_an_error_result_not_a_run() -> None:
    with ReplEngine(boundary="inprocess", limits=Limits(max_code_chars=1000)) as engine:
        result = engine.run("x = 1\n" + "#" * 2000)
        assert result.status == "error"
        assert result.error is not None and result.error.type == "InputTooLarge"
        assert "limit is 1,000" in result.error.message
        assert engine.sessions() == []


def test_unknown_policy_and_boundary_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="unknown policy 'paranoid'"):
        ReplEngine(boundary="inprocess", policy="paranoid")
    with pytest.raises(ValueError, match="unknown boundary 'cloud'"):
        ReplEngine(boundary="cloud")


def test_session_cap() -> None:
    with ReplEngine(boundary="inprocess", limits=Limits(max_sessions=2)) as engine:
        engine.run("1", session="a")
        engine.run("1", session="b")
        with pytest.raises(CapacityError, match="max_sessions"):
            engine.run("1", session="c")
        engine.close("a")
        assert engine.run("1", session="c").status == "ok"


def test_unknown_session_has_no_variables_but_cannot_be_inspected() -> None:
    with ReplEngine(boundary="inprocess") as engine:
        assert engine.variables("ghost") == []
        with pytest.raises(SessionNotFound, match="no session 'ghost'"):
            engine.inspect("x", session="ghost")


def test_context_manager_closes() -> None:
    with ReplEngine(boundary="inprocess") as engine:
        engine.run("x = 1")
    with pytest.raises(EngineClosed):
        engine.sessions()
    assert engine.close() is True  # idempotent


def test_describe_is_honest_about_inprocess() -> None:
    with ReplEngine(boundary="inprocess") as engine:
        enforced = engine.describe()["enforced"]
        assert enforced["memory_limit"] is False
        assert enforced["crash_isolation"] is False
        assert enforced["namespace_isolation"] is True


def test_mock_boundary_runs_nothing_and_records_requests() -> None:
    def handler(request: ExecutionRequest) -> ExecutionResult:
        return ExecutionResult(
            status="ok", session=request.session, value=repr(request.code), boundary="mock"
        )

    boundary = MockBoundary(handler)
    with ReplEngine(boundary=boundary) as engine:
        result = engine.run("import os; os.remove('/')", session="t1")
        assert result.value == repr("import os; os.remove('/')")
        assert [r.code for r in boundary.requests("t1")] == ["import os; os.remove('/')"]
        assert engine.sessions() == ["t1"]
        assert engine.variables("t1") == []


def test_boundary_instance_excludes_boundary_options() -> None:
    boundary = MockBoundary(lambda r: ExecutionResult(status="ok", session=r.session))
    with pytest.raises(TypeError, match="boundary options"):
        ReplEngine(boundary=boundary, workers=3)


def test_result_json_schema_is_available() -> None:
    schema = ExecutionResult.model_json_schema()
    assert schema["properties"]["status"]["enum"] == [
        "ok",
        "error",
        "blocked",
        "timeout",
        "cancelled",
        "crashed",
    ]
    json.dumps(schema)


def test_audit_under_trusted_allows_everything() -> None:
    with ReplEngine(boundary="inprocess", policy="trusted") as engine:
        report = engine.audit("import os\nos.getcwd()")
        assert report.allowed and report.findings == []
        with pytest.raises(TypeError):
            engine.audit(None)  # type: ignore[arg-type]


def test_repr_shows_policy_and_sessions() -> None:
    with ReplEngine(boundary="inprocess", policy="trusted") as engine:
        engine.run("1", session="a")
        assert repr(engine) == "<ReplEngine policy='trusted' boundary='inprocess' 1 sessions>"


def test_the_core_imports_no_framework() -> None:
    # A fresh interpreter: the test process itself may have loaded anything.
    code = (
        "import sys\n"
        "import genpark_repl_tools, genpark_repl_tools.cli, genpark_repl_tools.testing\n"
        "from genpark_repl_tools import ReplEngine\n"
        "with ReplEngine(policy='trusted') as engine:\n"
        "    assert engine.run('x = 1\\nx').value == '1'\n"
        "roots = {name.partition('.')[0] for name in sys.modules}\n"
        "print(sorted(roots & {'langchain', 'langchain_core', 'langgraph', 'llama_index', 'mcp', 'anyio',\n"
        "                      'ray', 'redis', 'opentelemetry'}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[]\n"
