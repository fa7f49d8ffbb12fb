"""The refusal log: every refusal as a structured event, derived from the run's result; and the
calls session code made to host tools, which run with the host's rights.

    ReplEngine(on_event=print, refusal_log="refusals.jsonl")

Kinds of refusal and where each is seen:

    audit_finding   the static audit refused the code (status "blocked"): one event per finding
    runtime_guard   a runtime guard of the policy raised PolicyViolation (ErrorInfo.refused_by "guard")
    audit_hook      the policy's audit hook raised PolicyViolation (ErrorInfo.refused_by "audit_hook")
    sandbox         the OS refused the subprocess worker (PermissionError / EPERM, EACCES, ENETUNREACH)
    budget          the session's budget (Limits.max_session_calls / max_session_cpu_s) was spent
    tool_call       session code called a host tool (not a refusal, unless `tool_outcome` says
                    "refused": its arguments, or Limits.max_tool_calls): one event per call
    network         a connection through the egress proxy of a boundary with a network policy
                    (not a refusal, unless `verdict` says "refused"): one event per connection,
                    allowed or not, with its host, port, verdict and bytes

Events come from results, so the policy code knows nothing of them. The price: a refusal the code
caught and did not let escape (`try: open(...) except OSError: pass`) ran nothing and leaves no
trace in the result, so it leaves none here either.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import threading
import weakref
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from ._models import ExecutionResult

if TYPE_CHECKING:
    from ._host_tools import ToolRun
    from .egress import ConnectionRecord

__all__ = [
    "AuditEvent",
    "EventKind",
    "JsonlRefusalLog",
    "events_from",
    "network_events",
    "refusal_layer",
    "tool_events",
]

EventKind = Literal[
    "audit_finding", "runtime_guard", "audit_hook", "sandbox", "budget", "tool_call", "network"
]

_CODE_KEPT = 2000
_CAUSES_FOLLOWED = 8
_POLICY_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "policy")
_OS_REFUSALS = frozenset({errno.EPERM, errno.EACCES, errno.ENETUNREACH})
_log = logging.getLogger("genpark_repl_tools")


class AuditEvent(BaseModel):
    """One refusal: what was refused, by which layer, in which session and call."""

    model_config = ConfigDict(extra="forbid")

    time: datetime
    kind: EventKind
    session: str
    execution_count: int
    policy: str
    boundary: str
    call_id: str | None = None
    rule: str | None = Field(None, description="The audit rule id; for budgets 'calls' or 'cpu'.")
    error_type: str | None = None
    message: str
    line: int | None = None
    column: int | None = None
    source_line: str | None = None
    code: str = Field(description=f"The code submitted, cut to its first {_CODE_KEPT:,} characters.")
    code_sha256: str
    tool: str | None = Field(None, description="tool_call: the host tool's name.")
    tool_outcome: Literal["ok", "error", "refused"] | None = Field(
        None, description="tool_call: ok, error (the tool raised) or refused (arguments, call limit)."
    )
    duration_ms: float | None = Field(None, description="tool_call: host time spent in the call.")
    host: str | None = Field(None, description="network: the name (or address) the code asked for.")
    port: int | None = Field(None, description="network: the port it asked for.")
    verdict: Literal["allowed", "refused", "failed"] | None = Field(
        None, description="network: allowed, refused (policy, limits, a malformed request) or failed."
    )
    bytes_up: int | None = Field(None, description="network: bytes sent to the server.")
    bytes_down: int | None = Field(None, description="network: bytes received from it.")


def refusal_layer(exc: BaseException) -> Literal["guard", "audit_hook", "os"] | None:
    """Which protection refused, if one did: the exception or what it was raised from.

    A PolicyViolation counts only if the policy's own code raised it (the innermost frame of its
    traceback is in genpark_repl_tools/policy/): code that raises one itself has refused nothing.
    """
    from .policy._errors import PolicyViolation

    seen: BaseException | None = exc
    for _ in range(_CAUSES_FOLLOWED):
        if seen is None:
            return None
        if isinstance(seen, PolicyViolation):
            tb = seen.__traceback__
            while tb is not None and tb.tb_next is not None:
                tb = tb.tb_next
            filename = tb.tb_frame.f_code.co_filename if tb is not None else ""
            if os.path.dirname(filename) == _POLICY_DIR:
                return "audit_hook" if filename.endswith("_audithook.py") else "guard"
        elif isinstance(seen, OSError) and seen.errno in _OS_REFUSALS:
            return "os"
        seen = seen.__cause__ or seen.__context__
    return None


def events_from(result: ExecutionResult, code: str, call_id: str | None) -> list[AuditEvent]:
    """The refusals a result records (usually none)."""
    error = result.error
    if result.status == "blocked" and (error is None or error.refused_by is None):
        return [
            _event(result, code, call_id, "audit_finding", f.message, rule=f.rule,
                   error_type="PolicyViolation", line=f.line, column=f.column, source_line=f.source_line)
            for f in result.findings
        ]  # fmt: skip
    if error is None or error.refused_by is None:
        return []
    if error.refused_by == "os":
        if result.boundary != "subprocess":
            return []  # the host's own permissions, not a protection of ours
        kind: EventKind = "sandbox"
    else:
        kind = "runtime_guard" if error.refused_by == "guard" else "audit_hook"
    return [
        _event(result, code, call_id, kind, error.message, error_type=error.type, line=error.line,
               column=error.column, source_line=error.source_line)
    ]  # fmt: skip


def tool_events(result: ExecutionResult, code: str, call_id: str | None, tools: ToolRun) -> list[AuditEvent]:
    """One event per host tool call the run made (the first ones, if it made very many)."""
    events = []
    for tool, outcome, ms, message in list(tools.records):
        events.append(
            _event(result, code, call_id, "tool_call", message, tool=tool, tool_outcome=outcome,
                   duration_ms=ms, error_type=None if outcome == "ok" else "ToolError")
        )  # fmt: skip
    return events


def network_events(
    result: ExecutionResult, code: str, call_id: str | None, records: Iterable[ConnectionRecord]
) -> list[AuditEvent]:
    """One event per connection the run made through the egress proxy, allowed or not."""
    return [
        _event(result, code, call_id, "network", r.reason or r.verdict, host=r.host, port=r.port,
               verdict=r.verdict, bytes_up=r.bytes_up, bytes_down=r.bytes_down)
        for r in records
    ]  # fmt: skip


def budget_event(result: ExecutionResult, code: str, call_id: str | None, rule: str) -> AuditEvent:
    assert result.error is not None
    return _event(
        result, code, call_id, "budget", result.error.message, rule=rule, error_type="BudgetExceeded"
    )


def _event(
    result: ExecutionResult,
    code: str,
    call_id: str | None,
    kind: EventKind,
    message: str,
    **fields: object,
) -> AuditEvent:
    return AuditEvent.model_validate(
        {
            "time": datetime.now(timezone.utc),
            "kind": kind,
            "session": result.session,
            "execution_count": result.execution_count,
            "policy": result.policy,
            "boundary": result.boundary,
            "call_id": call_id,
            "message": message,
            "code": code[:_CODE_KEPT],
            "code_sha256": hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest(),
            **fields,
        }
    )


class JsonlRefusalLog:
    """Appends each refusal event as one JSON line to a file (O_APPEND: several processes may share it)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._finalizer = weakref.finalize(self, os.close, self._fd)  # an engine dropped unclosed

    def __call__(self, event: AuditEvent) -> None:
        line = event.model_dump_json().encode() + b"\n"
        with self._lock:
            if self._fd is None:
                raise ValueError(f"the refusal log {self.path} is closed")
            view = memoryview(line)
            while view:  # one write per event; the loop only covers a short write
                view = view[os.write(self._fd, view) :]

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                self._finalizer.detach()
                os.close(self._fd)
                self._fd = None


def deliver(sinks: Iterable[Callable[[AuditEvent], None]], events: list[AuditEvent]) -> None:
    """Hand events to every sink. A failing sink is logged, never raised into the run that is over."""
    for event in events:
        for sink in sinks:
            try:
                sink(event)
            except Exception:
                _log.exception("a refusal event sink failed (event kind %s)", event.kind)
