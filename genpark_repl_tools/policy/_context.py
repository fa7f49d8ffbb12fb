"""Per-execution values a boundary hands the restricted runtime (a leaf module: no imports back)."""

from __future__ import annotations

import contextvars

__all__ = ["session_workspace"]

# The workspace of the session whose cell runs in this context, set by a boundary that gives each
# session its own directory (the in-process boundary); restricted runtimes use it instead of the
# policy's shared workspace. The value is a real path.
session_workspace: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "genpark_repl_session_workspace", default=None
)
