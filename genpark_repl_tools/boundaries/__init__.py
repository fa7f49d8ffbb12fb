"""Where code runs: every boundary, one module each.

    genpark_repl_tools.boundaries.inprocess.InProcessBoundary    the caller's process (the default)
    genpark_repl_tools.boundaries.subprocess.SubprocessBoundary  a sandboxed worker process per session
    genpark_repl_tools.boundaries.mock.MockBoundary              runs nothing; answers with a handler

The contract they share (`BaseBoundary`, `ExecutionRequest`) is in `genpark_repl_tools._boundary`.
The subprocess boundary is imported on first use (`ReplEngine(boundary="subprocess")` does it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .inprocess import InProcessBoundary
from .mock import MockBoundary

if TYPE_CHECKING:
    from .subprocess import SubprocessBoundary

__all__ = ["InProcessBoundary", "MockBoundary", "SubprocessBoundary"]


def __getattr__(name: str) -> Any:
    if name == "SubprocessBoundary":
        from .subprocess import SubprocessBoundary

        return SubprocessBoundary
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
