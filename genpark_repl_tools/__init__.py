"""genpark-repl-tools: run agent-written Python in per-conversation namespaces.

from genpark_repl_tools import ReplEngine
with ReplEngine() as engine:
    result = engine.run("x = 6 * 7\nx", session="user-42")
    print(result.to_observation())
"""

from __future__ import annotations

from ._boundary import BaseBoundary, ExecutionRequest
from ._engine import ReplEngine
from ._exceptions import (
    BoundaryError,
    CapacityError,
    EngineClosed,
    MissingDependency,
    ReplError,
    SessionNotFound,
    VariableNotFound,
)
from ._limits import Limits
from ._models import (
    Attachment,
    AuditFinding,
    AuditReport,
    ErrorInfo,
    ExecutionResult,
    Status,
    VariableChanges,
    VariableInfo,
)
from ._observation import render_variables
from .boundaries import InProcessBoundary, MockBoundary
from .policy import Policy

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
    "InProcessBoundary",
    "Limits",
    "MissingDependency",
    "MockBoundary",
    "Policy",
    "ReplEngine",
    "ReplError",
    "SessionNotFound",
    "Status",
    "VariableChanges",
    "VariableInfo",
    "VariableNotFound",
    "__version__",
    "render_variables",
]
