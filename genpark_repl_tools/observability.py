"""Observability and accounting: the types behind spans, usage, budgets, the audit trail and history.

    from genpark_repl_tools import Limits, ReplEngine
    from genpark_repl_tools.observability import AuditEvent

    engine = ReplEngine(limits=Limits(max_session_calls=50), on_event=print, audit_log="refusals.jsonl")
    result = engine.run("sum(range(10**6))", "user-42")
    result.usage                        # Usage: wall_ms, cpu_ms, peak_memory_mb (subprocess)
    engine.usage("user-42")             # SessionUsage: totals and what the budget leaves
    engine.history("user-42")           # list[HistoryEntry], bounded
    engine.export_notebook("user-42", "user-42.ipynb")

See docs/observability.md.
"""

from __future__ import annotations

from ._events import AuditEvent, EventKind, JsonlAuditLog
from ._history import HistoryEntry
from ._models import Usage
from ._usage import SessionUsage

__all__ = ["AuditEvent", "EventKind", "HistoryEntry", "JsonlAuditLog", "SessionUsage", "Usage"]
