"""Boundaries beyond the in-process default. Each lives in its own module, imported on first use.

    genpark_repl_tools.boundaries.subprocess.SubprocessBoundary   a sandboxed worker process per session

`ReplEngine(boundary="subprocess")` imports it for you; importing this package imports nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .subprocess import SubprocessBoundary

__all__ = ["SubprocessBoundary"]


def __getattr__(name: str) -> Any:
    if name == "SubprocessBoundary":
        from .subprocess import SubprocessBoundary

        return SubprocessBoundary
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
