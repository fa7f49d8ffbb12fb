"""What the engine does around each run for observability and accounting.

One object per engine, called once per run: budget check, span, usage, refusal events, history. With
nothing configured it costs a few microseconds: one lock for the ledger, one for the history.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from ._boundary import ExecutionRequest
from ._events import (
    AuditEvent,
    JsonlRefusalLog,
    budget_event,
    deliver,
    events_from,
    network_events,
    tool_events,
)
from ._history import History
from ._limits import Limits
from ._models import ExecutionResult
from ._telemetry import Tracing, finish_span, start_span, use_span
from ._usage import Ledger

__all__ = ["Observer"]

EventSink = Callable[[AuditEvent], None]

_perf_counter = time.perf_counter

# Accounts and histories of sessions the boundary dropped by itself (idle eviction) are pruned once
# there are this many, and again each time their number doubles past the live sessions.
_PRUNE_AT = 1024


class Observer:
    def __init__(
        self,
        limits: Limits,
        live_sessions: Callable[[], list[str]],
        *,
        on_event: EventSink | None = None,
        refusal_log: str | os.PathLike[str] | None = None,
        tracing: bool | Any | None = None,
    ) -> None:
        if on_event is not None and not callable(on_event):
            raise TypeError("on_event must be a callable taking an AuditEvent")
        self.tracing = Tracing(tracing)
        self.ledger = Ledger(limits)
        self.history = History(limits)
        self._log = JsonlRefusalLog(refusal_log) if refusal_log is not None else None
        self._sinks: tuple[EventSink, ...] = tuple(s for s in (on_event, self._log) if s is not None)
        self._live_sessions = live_sessions
        self._prune_at = _PRUNE_AT

    def call(
        self,
        request: ExecutionRequest,
        call_id: str | None,
        policy: str,
        boundary: str,
        execute: Callable[[ExecutionRequest], ExecutionResult],
        finish: Callable[[ExecutionRequest, ExecutionResult], None],
    ) -> ExecutionResult:
        """`execute(request)`, then `finish(request, result)` (the engine's own step after a run),
        accounted, traced and logged."""
        ledger = self.ledger
        if ledger.budgeted:  # without budgets there is nothing to reserve (Ledger.admit)
            refused = ledger.admit(request.session, policy, boundary)
            if refused is not None:
                result, rule = refused
                if self._sinks:
                    deliver(self._sinks, [budget_event(result, request.code, call_id, rule)])
                return result
        tracer = self.tracing.tracer()
        span = None
        started = _perf_counter()
        try:
            if tracer is None:
                result = execute(request)
                finish(request, result)
            else:
                span = start_span(tracer, request.session, call_id, policy, boundary, len(request.code))
                with use_span(span):
                    result = execute(request)
                    finish(request, result)
        except BaseException as exc:
            ledger.release(request.session)
            if span is not None:
                finish_span(span, None, exc)
            raise
        wall_s = _perf_counter() - started
        tools = request.tools
        if tools is not None:  # the host's own count: what a worker's result says is not believed
            result.usage.tool_calls = tools.calls
            result.usage.tool_ms = round(tools.tool_s * 1e6) / 1000
        # Rounded to the microsecond, as round(ms, 3) would, without its decimal conversion.
        result.usage.wall_ms = round(wall_s * 1e6) / 1000
        accounts = ledger.record(result, wall_s, request.timeout_s)
        if self._sinks:
            if tools is not None and tools.records:
                deliver(self._sinks, tool_events(result, request.code, call_id, tools))
            if request.connections:
                deliver(self._sinks, network_events(result, request.code, call_id, request.connections))
            if result.error is not None or result.status == "blocked":
                deliver(self._sinks, events_from(result, request.code, call_id))
        history = self.history
        if history.max_cells > 0:  # History.enabled
            history.add(request.code, result, call_id)
        if span is not None:
            finish_span(span, result)
        if accounts > self._prune_at:
            self._prune()
        return result

    def _prune(self) -> None:
        """Forget sessions the boundary no longer holds (closed by itself, e.g. evicted when idle).

        Such a session that comes back starts a fresh account: its budget starts over.
        """
        live = set(self._live_sessions())
        for session in self.ledger.sessions():
            if session not in live:
                self.forget(session)
        self._prune_at = max(_PRUNE_AT, 2 * len(self.ledger))

    def reset(self, session: str) -> None:
        self.history.mark_reset(session)

    def forget(self, session: str) -> None:
        self.ledger.forget(session)
        self.history.forget(session)

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
