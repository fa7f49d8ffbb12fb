"""The refusal log: one structured event per refusal, to a callback and an append-only JSON-lines file."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from genpark_repl_tools import ReplEngine, observability
from genpark_repl_tools.observability import AuditEvent, JsonlRefusalLog


@pytest.fixture
def events() -> list[AuditEvent]:
    return []


def test_static_audit_finding(events: list[AuditEvent]) -> None:
    code = "import os\nimport subprocess"
    with ReplEngine(boundary="inprocess", on_event=events.append) as engine:
        result = engine.run(code, "s", call_id="call_1")
    assert result.status == "blocked"
    assert [e.kind for e in events] == ["audit_finding", "audit_finding"]
    first = events[0]
    assert (first.session, first.policy, first.boundary, first.call_id) == (
        "s",
        "standard",
        "inprocess",
        "call_1",
    )
    assert first.rule == result.findings[0].rule
    assert (first.line, first.source_line) == (1, "import os")
    assert events[1].line == 2
    assert first.code == code and len(first.code_sha256) == 64
    assert first.error_type == "PolicyViolation"


def test_runtime_guard(events: list[AuditEvent]) -> None:
    with ReplEngine(boundary="inprocess", on_event=events.append) as engine:
        result = engine.run("name = '_' + '_class__'\ngetattr(1, name)")
    assert result.error is not None and result.error.refused_by == "guard"
    [event] = events
    assert event.kind == "runtime_guard"
    assert event.error_type == "PolicyViolation"
    assert event.line == 2 and "__class__" in event.message


def test_audit_hook(events: list[AuditEvent]) -> None:
    with ReplEngine(boundary="inprocess", on_event=events.append) as engine:
        result = engine.run("import pathlib\npathlib.Path('/etc/hostname').read_text()")
    assert result.error is not None and result.error.refused_by == "audit_hook"
    [event] = events
    assert event.kind == "audit_hook"
    assert "/etc/hostname" in event.message


def test_a_refusal_the_code_wrapped_is_still_seen(events: list[AuditEvent]) -> None:
    code = (
        "try:\n    open('/etc/hostname')\n"
        "except OSError as exc:\n    raise RuntimeError('could not read') from exc"
    )
    with ReplEngine(boundary="inprocess", on_event=events.append) as engine:
        result = engine.run(code)
    assert result.error is not None and result.error.type == "RuntimeError"
    assert [(e.kind, e.error_type) for e in events] == [("runtime_guard", "RuntimeError")]


def test_a_policy_violation_raised_by_the_code_itself_is_no_refusal(events: list[AuditEvent]) -> None:
    code = (
        "try:\n    open('/etc/hostname')\nexcept OSError as exc:\n    kind = type(exc)\nraise kind('made up')"
    )
    with ReplEngine(boundary="inprocess", on_event=events.append) as engine:
        result = engine.run(code)
    assert result.error is not None and result.error.type == "PolicyViolation"
    assert result.error.refused_by is None
    assert events == []


def test_ordinary_errors_make_no_event(events: list[AuditEvent]) -> None:
    with ReplEngine(boundary="inprocess", on_event=events.append) as engine:
        engine.run("1 / 0")
        engine.run("x +")
        engine.run("x = 1")
    assert events == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("code", "error_type"),
    [
        ("open('/etc/obs-audit-test', 'w')", "PermissionError"),  # Landlock: writes outside the workspace
        ("import os\nos.setsid()", "PermissionError"),  # seccomp
        ("import socket\nsocket.create_connection(('192.0.2.1', 80), timeout=2)", "OSError"),  # no network
    ],
)
def test_sandbox_denial(sub_engine: ReplEngine, code: str, error_type: str) -> None:
    enforced = sub_engine.describe()["enforced"]
    if not (
        enforced["filesystem_confinement"] and enforced["syscall_filter"] and enforced["network_isolation"]
    ):
        pytest.skip(f"the sandbox is not fully active here: {sub_engine.describe()['unavailable']}")
    seen: list[AuditEvent] = []
    with ReplEngine(policy="trusted", boundary="subprocess", on_event=seen.append) as engine:
        result = engine.run(code, "sandboxed")
    assert result.error is not None and result.error.type == error_type, result.to_observation()
    assert result.error.refused_by == "os"
    [event] = seen
    assert (event.kind, event.boundary, event.error_type) == ("sandbox", "subprocess", error_type)


def test_os_permission_errors_in_process_are_not_sandbox_events(events: list[AuditEvent]) -> None:
    # In-process there is no sandbox of ours: an EACCES is the host's own file permissions.
    with ReplEngine(boundary="inprocess", policy="trusted", on_event=events.append) as engine:
        result = engine.run("raise PermissionError(13, 'Permission denied', '/some/file')")
    assert result.error is not None and result.error.refused_by == "os"
    assert events == []


def test_jsonl_log_is_append_only_and_parseable(tmp_path: Path) -> None:
    log = tmp_path / "refusals.jsonl"
    with ReplEngine(boundary="inprocess", refusal_log=log) as engine:
        engine.run("import os", "a")
    with ReplEngine(
        boundary="inprocess", refusal_log=log
    ) as engine:  # a second engine appends, it does not truncate
        engine.run("getattr(1, '_' + '_class__')", "b")
    lines = log.read_text().splitlines()
    assert len(lines) == 2
    records = [AuditEvent.model_validate_json(line) for line in lines]
    assert [(r.kind, r.session) for r in records] == [("audit_finding", "a"), ("runtime_guard", "b")]
    assert json.loads(lines[0])["code"] == "import os"
    assert log.stat().st_mode & 0o777 == 0o600


def test_a_failing_callback_is_logged_and_the_result_still_returned(caplog: pytest.LogCaptureFixture) -> None:
    def broken(event: AuditEvent) -> None:
        raise RuntimeError("sink down")

    with (
        caplog.at_level(logging.ERROR, logger="genpark_repl_tools"),
        ReplEngine(boundary="inprocess", on_event=broken) as engine,
    ):
        result = engine.run("import os")
    assert result.status == "blocked"
    assert "a refusal event sink failed" in caplog.text and "sink down" in caplog.text


def test_on_event_must_be_callable() -> None:
    with pytest.raises(TypeError, match="on_event must be a callable"):
        ReplEngine(boundary="inprocess", on_event="events.log")  # type: ignore[arg-type]


def test_the_log_file_is_closed_with_the_engine(tmp_path: Path) -> None:
    import os

    log = tmp_path / "a.jsonl"

    def open_on_log() -> int:
        fds = os.listdir("/proc/self/fd")
        return sum(1 for fd in fds if os.path.realpath(f"/proc/self/fd/{fd}") == str(log.resolve()))

    engine = ReplEngine(boundary="inprocess", refusal_log=log)
    assert open_on_log() == 1
    engine.close()
    assert open_on_log() == 0


def test_audit_log_is_the_deprecated_name_of_refusal_log(tmp_path: Path) -> None:
    log = tmp_path / "old.jsonl"
    with pytest.deprecated_call(match=r"audit_log=\.\.\.\) is deprecated: use refusal_log="):
        engine = ReplEngine(boundary="inprocess", audit_log=log)
    with engine:
        engine.run("import os", "a")
    records = [AuditEvent.model_validate_json(line) for line in log.read_text().splitlines()]
    assert [(r.kind, r.session) for r in records] == [("audit_finding", "a")]


def test_audit_log_and_refusal_log_together_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="give refusal_log, not audit_log too"):
        ReplEngine(boundary="inprocess", refusal_log=tmp_path / "a.jsonl", audit_log=tmp_path / "b.jsonl")
    assert list(tmp_path.iterdir()) == []  # refused before either file was opened


def test_jsonl_audit_log_is_the_deprecated_name_of_jsonl_refusal_log(tmp_path: Path) -> None:
    with pytest.deprecated_call(match="JsonlAuditLog is deprecated: use JsonlRefusalLog"):
        old = observability.JsonlAuditLog
    assert old is JsonlRefusalLog
    with pytest.deprecated_call(match="use JsonlRefusalLog"):
        from genpark_repl_tools.observability import JsonlAuditLog  # noqa: F401
    with pytest.raises(AttributeError, match="no attribute 'JsonlNoSuchLog'"):
        observability.JsonlNoSuchLog


def test_the_new_names_warn_nothing(tmp_path: Path) -> None:
    # pytest turns warnings into errors here: a warning from the new spelling would fail this test.
    log = JsonlRefusalLog(tmp_path / "direct.jsonl")
    log.close()
    with ReplEngine(boundary="inprocess", refusal_log=tmp_path / "r.jsonl"):
        pass
    assert "JsonlAuditLog" not in observability.__all__
    assert "JsonlRefusalLog" in observability.__all__
