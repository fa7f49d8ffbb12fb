"""Observability and accounting: the types behind spans, usage, budgets, the refusal log and history.

    from genpark_repl_tools import Limits, ReplEngine
    from genpark_repl_tools.observability import AuditEvent

    engine = ReplEngine(limits=Limits(max_session_calls=50), on_event=print, refusal_log="refusals.jsonl")
    result = engine.run("sum(range(10**6))", "user-42")
    result.usage                        # Usage: wall_ms, cpu_ms, peak_memory_mb (subprocess)
    engine.usage("user-42")             # SessionUsage: totals and what the budget leaves
    engine.history("user-42")           # list[HistoryEntry], bounded
    engine.export_notebook("user-42", "user-42.ipynb")

See docs/observability.md.
"""

from __future__ import annotations

import warnings

from ._events import AuditEvent, EventKind, JsonlRefusalLog
from ._history import HistoryEntry
from ._models import Usage
from ._usage import SessionUsage

__all__ = ["AuditEvent", "EventKind", "HistoryEntry", "JsonlRefusalLog", "SessionUsage", "Usage"]


def __getattr__(name: str) -> object:
    # The log's old name, kept for a release: "audit" also names the static check and the audit hook.
    if name == "JsonlAuditLog":
        warnings.warn("JsonlAuditLog is deprecated: use JsonlRefusalLog", DeprecationWarning, stacklevel=2)
        return JsonlRefusalLog
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
