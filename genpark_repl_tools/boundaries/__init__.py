"""Where code runs: every boundary, one module each.

    genpark_repl_tools.boundaries.inprocess.InProcessBoundary    the caller's process (the default)
    genpark_repl_tools.boundaries.subprocess.SubprocessBoundary  a sandboxed worker process per session
    genpark_repl_tools.boundaries.docker.DockerBoundary          a container per session (the docker CLI)
    genpark_repl_tools.boundaries.mock.MockBoundary              runs nothing; answers with a handler
    genpark_repl_tools.boundaries.ray.RayBoundary                sessions over a Ray cluster (extra `ray`)

The contract they share (`BaseBoundary`, `ExecutionRequest`) is in `genpark_repl_tools._boundary`.
The subprocess, docker and Ray boundaries are imported on first use (`ReplEngine(boundary="subprocess")`
does it); Ray itself is imported only by the Ray boundary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .inprocess import InProcessBoundary
from .mock import MockBoundary

if TYPE_CHECKING:
    from .docker import DockerBoundary
    from .ray import RayBoundary
    from .subprocess import SubprocessBoundary

__all__ = ["DockerBoundary", "InProcessBoundary", "MockBoundary", "RayBoundary", "SubprocessBoundary"]


def __getattr__(name: str) -> Any:
    if name == "SubprocessBoundary":
        from .subprocess import SubprocessBoundary

        return SubprocessBoundary
    if name == "DockerBoundary":
        from .docker import DockerBoundary

        return DockerBoundary
    if name == "RayBoundary":
        from .ray import RayBoundary

        return RayBoundary
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
