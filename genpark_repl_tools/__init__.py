"""genpark-repl-tools: run agent-written Python in per-conversation namespaces.

from genpark_repl_tools import ReplEngine
with ReplEngine() as engine:
    result = engine.run("x = 6 * 7\nx", session="user-42")
    print(result.to_observation())
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._boundary import BaseBoundary, ExecutionRequest
from ._engine import ReplEngine
from ._exceptions import (
    BoundaryError,
    CapacityError,
    EngineClosed,
    FileError,
    FileNotFound,
    FileQuotaExceeded,
    FilesUnavailable,
    MissingDependency,
    ReplError,
    SessionNotFound,
    UnsafeFileName,
    VariableNotFound,
)
from ._host_tools import ToolError
from ._limits import Limits
from ._models import (
    Attachment,
    AuditFinding,
    AuditReport,
    ErrorInfo,
    ExecutionResult,
    FileChange,
    FileInfo,
    SessionRestore,
    SkippedVariable,
    SnapshotManifest,
    SnapshotVariable,
    Status,
    VariableChanges,
    VariableInfo,
)
from ._observation import render_variables
from ._stream import FigureEvent, OutputEvent, ResultEvent, StreamEvent
from .boundaries import InProcessBoundary, MockBoundary
from .policy import Policy

if TYPE_CHECKING:
    from .snapshot import SessionSnapshot, SnapshotAuthError, SnapshotError, SnapshotRefused
    from .stores import SessionBusy, SessionStore, SQLiteStore, StoreError

__version__ = "0.2.0"  # the one source: pyproject.toml reads it (keep CHANGELOG.md in step)

__all__ = [
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
    "FigureEvent",
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
    "OutputEvent",
    "Policy",
    "ReplEngine",
    "ReplError",
    "ResultEvent",
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
    "StreamEvent",
    "ToolError",
    "UnsafeFileName",
    "VariableChanges",
    "VariableInfo",
    "VariableNotFound",
    "__version__",
    "render_variables",
]

# Durable sessions load on first use: `import genpark_repl_tools` does not import sqlite3 or pickle.
_LAZY = {
    "SessionSnapshot": "snapshot",
    "SnapshotAuthError": "snapshot",
    "SnapshotError": "snapshot",
    "SnapshotRefused": "snapshot",
    "SQLiteStore": "stores",
    "SessionBusy": "stores",
    "SessionStore": "stores",
    "StoreError": "stores",
}


def __getattr__(name: str) -> Any:
    package = _LAZY.get(name)
    if package is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{package}", __name__), name)
