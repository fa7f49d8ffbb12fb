"""The two actors of the Ray boundary, as plain classes (the boundary makes them remote).

SessionHost  one per node and boundary: owns a SubprocessBoundary and runs its sessions' requests
Placement    one per cluster (a named detached actor): which node holds which session

Neither is restarted by Ray (max_restarts=0): a restarted host would hold none of its sessions and
answer as if nothing happened. The boundary notices a dead host and reports the loss instead.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ray

from ..._boundary import BaseBoundary, ExecutionRequest
from ..._exceptions import ReplError
from ..._limits import Limits
from ..._models import ExecutionResult
from ...policy import Policy
from ...snapshot._durable import Durability, resolve_key
from ..inprocess import InProcessBoundary
from ..subprocess import SubprocessBoundary

if TYPE_CHECKING:
    from ...stores import SessionStore

# A result bigger than this (estimated from its text and attachments) goes into the object store and
# the host returns its reference, so the actor's reply stays small.
BIG_RESULT_CHARS = 64 * 1024
_CANCELLED_KEPT = 1024


class Raised:
    """An exception a host method raised on purpose (SessionNotFound, ...), for the caller to re-raise."""

    def __init__(self, error: ReplError) -> None:
        self.error = error


class SessionHost:
    """Runs the requests of the sessions placed on its node, in its own SubprocessBoundary.

    Methods run on the actor's thread pool (max_concurrency > 1): calls on different sessions run in
    parallel, and `interrupt` reaches a session while its `execute` runs.
    """

    def __init__(
        self,
        policy: Policy,
        limits: Limits,
        options: dict[str, Any],
        store: Callable[[], SessionStore] | None = None,
        snapshot_key: bytes | str | None = None,
    ) -> None:
        self._durable: Durability | None = None
        self._boundary: BaseBoundary
        if store is None:
            self._boundary = SubprocessBoundary(policy, limits, **options)
        else:
            # Store-backed sessions: durable sessions work with the in-process boundary only for now,
            # so they run in this actor's process (already apart from the driver), through the
            # engine's durability layer: take the session's lease, restore it when stale, run, save.
            opened = store()
            self._boundary = InProcessBoundary(policy, limits)
            self._durable = Durability(self._boundary, resolve_key(snapshot_key, opened), opened)
        self._lock = threading.Lock()
        self._requests: dict[str, ExecutionRequest] = {}  # by request id, while queued or running
        self._cancelled: OrderedDict[str, None] = OrderedDict()  # interrupted before they arrived
        self.big_results = 0

    def ping(self) -> str:
        return str(ray.get_runtime_context().get_node_id())

    def execute(self, session: str, code: str, timeout_s: float | None, rid: str) -> Any:
        request = ExecutionRequest(code=code, session=session, timeout_s=timeout_s)
        with self._lock:
            if self._cancelled.pop(rid, 0) is None:
                request.cancelled = True
            self._requests[rid] = request
        try:
            if self._durable is not None:
                result = self._durable.run(request, self._boundary.execute)  # lease, restore, run, save
            else:
                result = self._boundary.execute(request)
        finally:
            with self._lock:
                del self._requests[rid]
        if _size(result) > BIG_RESULT_CHARS:
            self.big_results += 1
            return ray.put(result)
        return result

    def interrupt(self, session: str, rid: str | None) -> bool:
        if rid is None:
            return self._boundary.interrupt(session)
        with self._lock:
            request = self._requests.get(rid)
            if request is None:  # not arrived yet (or just finished): it will not start
                self._cancelled[rid] = None
                while len(self._cancelled) > _CANCELLED_KEPT:
                    self._cancelled.popitem(last=False)
                return True
            request.cancelled = True
        return self._boundary.interrupt(session, request)

    def variables(self, session: str, include_hidden: bool) -> Any:
        try:
            return self._boundary.variables(session, include_hidden=include_hidden)
        except ReplError as exc:
            return Raised(exc)

    def inspect(self, session: str, name: str) -> Any:
        try:
            return self._boundary.inspect(session, name)
        except ReplError as exc:
            return Raised(exc)

    def reset(self, session: str) -> Any:
        try:
            self._boundary.reset(session)
        except ReplError as exc:
            return Raised(exc)
        if self._durable is not None:
            self._durable.forget(session)  # the stored snapshot goes too
        return None

    def close_session(self, session: str, forget: bool = True) -> bool:
        if self._durable is not None and forget:
            self._durable.forget(session)  # the stored snapshot goes too
        return self._boundary.close_session(session)

    def sessions(self) -> list[str]:
        return self._boundary.sessions()

    def describe(self) -> dict[str, Any]:
        description = self._boundary.describe()
        description["node"] = self.ping()
        description["big_results"] = self.big_results
        return description

    def close(self) -> None:
        self._boundary.close()
        if self._durable is not None and self._durable.store is not None:
            self._durable.store.close()


def _size(result: ExecutionResult) -> int:
    size = len(result.stdout) + len(result.stderr) + len(result.value or "")
    for attachment in result.attachments:
        size += len(attachment.model_dump_json())
    return size


class Placement:
    """Which node holds which session, for every boundary on the cluster (keyed by boundary key).

    A new session goes to the least-loaded live node with room (ties: the lowest node id); a placed
    session stays on its node until it is closed or its node is lost.
    """

    def __init__(self) -> None:
        self._where: dict[str, dict[str, str]] = {}

    def place(self, key: str, session: str, nodes: list[str], per_node: int | None) -> str | None:
        table = self._where.setdefault(key, {})
        current = table.get(session)
        if current is not None and current in nodes:
            return current
        loads = Counter(node for sessions in self._where.values() for node in sessions.values())
        room = [n for n in nodes if per_node is None or loads[n] < per_node]
        if not room:
            table.pop(session, None)
            return None
        node = min(room, key=lambda n: (loads[n], n))
        table[session] = node
        return node

    def adopt(self, key: str, table: dict[str, str]) -> None:
        """Take a boundary's placements again (this actor was restarted and lost its table)."""
        self._where.setdefault(key, {}).update(table)

    def forget(self, key: str, session: str) -> bool:
        return self._where.get(key, {}).pop(session, None) is not None

    def forget_key(self, key: str) -> int:
        return len(self._where.pop(key, {}))

    def drop_node(self, node: str) -> int:
        """Forget every session on a lost node; how many there were."""
        dropped = 0
        for table in self._where.values():
            for session in [s for s, n in table.items() if n == node]:
                del table[session]
                dropped += 1
        return dropped

    def table(self, key: str) -> dict[str, str]:
        return dict(self._where.get(key, {}))

    def loads(self) -> dict[str, int]:
        return dict(Counter(node for sessions in self._where.values() for node in sessions.values()))
