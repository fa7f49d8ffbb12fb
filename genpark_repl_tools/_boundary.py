"""Where code runs. A boundary is one narrow contract: execute a request, describe a session, close.

BaseBoundary           the contract every boundary passes (genpark_repl_tools.testing)
├── InProcessBoundary  the caller's process: microseconds, namespace isolation + policy layers
├── SubprocessBoundary a worker process per session
└── MockBoundary       answers with a handler you give it; for tests of code built on the engine

The boundaries themselves live in `genpark_repl_tools.boundaries`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._exceptions import EngineClosed
from ._files import WorkspaceDir
from ._limits import Limits
from ._models import ErrorInfo, ExecutionResult, SessionRestore, VariableInfo
from .policy import Policy

if TYPE_CHECKING:
    from ._host_tools import ToolRun
    from .egress import ConnectionRecord, NetworkPolicy
    from .snapshot import SessionSnapshot

__all__ = ["BaseBoundary", "ExecutionRequest", "cancelled_before_start"]


@dataclass(slots=True, eq=False)
class ExecutionRequest:
    """One call to run code in a session.

    A plain dataclass, not a pydantic model: it is built on every call (validation would cost more
    than a trivial execution) from arguments `ReplEngine.run` has already checked. It is also the
    call's identity: `cancelled` is set by whoever cancels the call (`ReplEngine.arun` when its task
    is cancelled); a boundary that has not started it yet runs nothing.

    `on_output((stream_name, text))`, when set (`ReplEngine.stream`), is called with the call's
    stdout/stderr text as it is written, within the output bounds, from whatever thread captures it
    (one tuple, so a `deque.append` can take it without a Python frame); it must be quick and must
    not raise.

    `tools`, when the session has host tools, serves this run's calls of them (the engine makes it;
    the boundary calls `tools.begin` before the code runs and hands each call to `tools.serve`).

    `connections` is filled by a boundary with a network policy: the egress proxy's records of the
    connections the run made (`genpark_repl_tools.egress.ConnectionRecord`), for the audit trail.
    """

    code: str
    session: str = "default"
    timeout_s: float | None = None  # overrides Limits.timeout_s for this call
    cancelled: bool = False
    on_output: Callable[[tuple[str, str]], object] | None = None
    tools: ToolRun | None = None
    connections: list[ConnectionRecord] | None = None


def cancelled_before_start(
    request: ExecutionRequest, policy: str, boundary: str, execution_count: int = 0
) -> ExecutionResult:
    """The result of a call cancelled before it ran: nothing ran, nothing changed."""
    return ExecutionResult(
        status="cancelled",
        session=request.session,
        execution_count=execution_count,
        policy=policy,
        boundary=boundary,
        error=ErrorInfo(
            type="Cancelled",
            message="the call was cancelled before it started; nothing ran",
            hint="The session and its variables are unchanged.",
        ),
    )


class BaseBoundary(ABC):
    """Runs requests for many sessions under one policy and one set of limits.

    Security model: whatever the concrete boundary states; this base only fixes the contract.
    Implementations must be safe to call from many threads: calls on one session are serialized,
    calls on different sessions may run in parallel.
    """

    name: str = "base"

    def __init__(self, policy: Policy, limits: Limits) -> None:
        self.policy = policy
        self.limits = limits
        self._closed = False

    @abstractmethod
    def execute(self, request: ExecutionRequest) -> ExecutionResult:
        """Run the request's code in its session, creating the session on first use."""

    @abstractmethod
    def variables(self, session: str, *, include_hidden: bool = False) -> list[VariableInfo]:
        """Describe the session's variables (modules and `_private` names hidden unless asked)."""

    @abstractmethod
    def inspect(self, session: str, name: str) -> VariableInfo:
        """Describe one variable; raises SessionNotFound / VariableNotFound."""

    @abstractmethod
    def reset(self, session: str) -> None:
        """Empty the session's namespace (the session stays, its counter restarts)."""

    @abstractmethod
    def close_session(self, session: str) -> bool:
        """Forget the session and free what it holds; False if there was none."""

    @abstractmethod
    def sessions(self) -> list[str]:
        """Live session ids."""

    def interrupt(self, session: str, request: ExecutionRequest | None = None) -> bool:
        """Stop the cell running in `session` now (only if it is `request`, when given); False if
        nothing (or something else) was running there.

        The interrupted call returns a result with status `cancelled` and the session keeps its
        variables. Returns promptly: it does not wait for that call to return. A boundary that
        cannot interrupt says so by returning False.
        """
        return False

    # Host tools: a boundary that serves `ExecutionRequest.tools` calls from session code says so.
    supports_tools = False

    # Network by name: the NetworkPolicy a sandboxed boundary enforces through its egress proxy.
    network_policy: NetworkPolicy | None = None

    # Durable sessions. A boundary that can snapshot overrides both; `supports_snapshots`
    # is how the engine tells before it relies on them.
    supports_snapshots = False

    def snapshot_session(self, session: str, key: bytes) -> SessionSnapshot:
        """The session's state as a snapshot signed with `key`; SessionNotFound if it has none."""
        raise NotImplementedError(f"the {self.name} boundary does not take snapshots")

    def restore_session(self, session: str, snapshot: SessionSnapshot, key: bytes) -> SessionRestore:
        """Replace the session's state (creating it) with `snapshot`, checked against `key` first.

        Raises SnapshotAuthError or SnapshotRefused and then leaves the session as it was.
        """
        raise NotImplementedError(f"the {self.name} boundary does not restore snapshots")

    # Checkpoints: a boundary whose sessions survive a cell that takes their process down (the
    # session goes back to its state before the cell) says so here; the conformance suite tests it.
    supports_rollback = False

    def hibernate(self, session: str) -> bool:
        """Stop an idle session's process, keeping its files (its state is in the session store);
        False if it is busy, unknown, or this boundary has nothing to stop."""
        return False

    def set_room_maker(self, make_room: Callable[[list[str]], bool] | None) -> None:
        """Installed by an engine with a store: at the boundary's cap on live processes,
        `make_room(idle)` is asked to hibernate one of `idle` (least recently used first) and says
        whether it did. A boundary without such a cap ignores it."""
        return

    def session_lost(self, session: str) -> bool:
        """Whether the session's state was lost (its worker ended) and it would restart empty."""
        return False

    def checkpointed(self, session: str) -> bool:
        """Whether the session's last cell ran with a checkpoint (so the next one most likely does
        too): a store may then be written on a cadence instead of after every cell."""
        return False

    def session_workspace(self, session: str, *, create: bool = False) -> WorkspaceDir | None:
        """The directory holding `session`'s files on this host (None: this boundary has none the
        host can reach). With `create`, the session is created if needed (a host upload seeds it);
        the directory itself is made by the file operation that needs it."""
        return None

    def workspace_writes(self, session: str) -> int | None:
        """A stamp that changes whenever code of `session` may have written to its workspace
        (created, written, renamed or removed an entry), or None when this boundary cannot tell:
        the engine then looks at the directory after every run."""
        return None

    def describe(self) -> dict[str, Any]:
        """What this boundary actually enforces here (never claims a protection that is off)."""
        return {"boundary": self.name, "policy": self.policy.name}

    def close(self) -> None:
        """Close every session and release the boundary's resources. Idempotent."""
        for session in self.sessions():
            self.close_session(session)
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise EngineClosed(f"the {self.name} boundary is closed")
