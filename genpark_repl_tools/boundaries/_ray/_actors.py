"""The two actors of the Ray boundary, as plain classes (the boundary makes them remote).

SessionHost  one per node and boundary: owns a SubprocessBoundary and runs its sessions' requests
Placement    one per cluster (a named detached actor): which node holds which session
Lane         a host's Unix socket for the plain calls of a driver on the same machine

Neither is restarted by Ray (max_restarts=0): a restarted host would hold none of its sessions and
answer as if nothing happened. The boundary notices a dead host and reports the loss instead.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import pickle
import secrets
import socket
import struct
import sys
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ray

from ..._boundary import BaseBoundary, ExecutionRequest
from ..._exceptions import ReplError
from ..._host_tools import ToolRun
from ..._limits import Limits
from ..._models import ExecutionResult
from ..._stream import join_runs
from ...policy import Policy
from ...snapshot._durable import Durability, resolve_key
from ..subprocess import SubprocessBoundary

if TYPE_CHECKING:
    from ...stores import SessionStore

# A result bigger than this (estimated from its text and attachments) goes into the object store and
# the host returns its reference, so the actor's reply stays small.
BIG_RESULT_CHARS = 64 * 1024
_CANCELLED_KEPT = 1024
TOKEN_BYTES = 32  # a lane's token
_LANE_HELLO_S = 5.0  # how long a new lane connection has to present the token


class Raised:
    """An exception a host method raised on purpose (SessionNotFound, ...), for the caller to re-raise."""

    def __init__(self, error: ReplError) -> None:
        self.error = error


class Streamed:
    """The reply to a streamed call: the output its caller may not have yet, then the result.

    `items[k]` is output item number `first + k` (see `Outbox`); `result` is the `ExecutionResult`, or
    its reference in the object store when it is big.
    """

    __slots__ = ("first", "items", "result")

    def __init__(self, first: int, items: list[tuple[str, str]], result: Any) -> None:
        self.first = first
        self.items = items
        self.result = result


class Outbox:
    """The output of one streamed call on its way from the host to the caller.

    The thread running the call hands each write to `put` (one deque append, no lock: the same cost
    as a local stream). The caller takes it with its liveness polls (`SessionHost.output`) and the rest
    comes with the result. What a take finds is joined per stream and its progress-bar redraws
    squashed (`squash_returns`), then numbered: each take returns every item the caller has not
    acknowledged, so an item both a poll and the result carry (the poll's reply still on its way when
    the result came) reaches the caller once, and a lost poll reply loses nothing.
    """

    __slots__ = ("_acked", "_items", "_lock", "_pieces", "put")

    def __init__(self) -> None:
        self._pieces: deque[tuple[str, str]] = deque()
        self.put = self._pieces.append
        self._lock = threading.Lock()
        self._items: list[tuple[str, str]] = []  # numbered from _acked
        self._acked = 0

    def take(self, acked: int, *, final: bool = False) -> tuple[int, list[tuple[str, str]]]:
        """Forget the items before `acked`; the number of the first item left, and the items left."""
        with self._lock:
            if acked > self._acked:
                del self._items[: acked - self._acked]
                self._acked = acked
            pieces = self._pieces
            if final:  # the call has ended: nobody writes any more
                taken = list(pieces)
                pieces.clear()
            else:
                pop = pieces.popleft
                taken = [pop() for _ in range(len(pieces))]  # what is there now; more may come
            self._items.extend(join_runs(taken))
            return self._acked, list(self._items)


class RelayedTools(ToolRun):
    """The host tools of one call, as the actor holds them: only their names and docs. The tools run
    in the driver: each call waits here (`serve`, on a host thread of the actor) until the driver
    takes it with a poll (`SessionHost.tool_calls`) and answers it (`SessionHost.tool_reply`)."""

    __slots__ = ("_offer", "_pending", "_replies", "_seq", "_signal")

    def __init__(self, offer: tuple[tuple[str, str], ...]) -> None:
        super().__init__({}, None)
        self._offer = offer
        self._signal = threading.Condition()
        self._pending: list[tuple[int, bytes]] = []  # calls the driver has not taken yet
        self._replies: dict[int, bytes] = {}
        self._seq = 0

    def offer(self) -> tuple[tuple[str, str], ...]:
        return self._offer

    def serve(self, payload: bytes) -> bytes:
        with self._signal:
            self._seq += 1
            seq = self._seq
            self._pending.append((seq, payload))
            self._signal.notify_all()
            while seq not in self._replies:
                if not self._signal.wait(timeout=max(0.0, self.deadline - time.monotonic())):
                    return b"E" + b"the tool's reply did not come before the run's deadline"
            return self._replies.pop(seq)

    def take(self, wait_s: float) -> list[tuple[int, bytes]]:
        with self._signal:
            if not self._pending:
                self._signal.wait(timeout=wait_s)
            taken, self._pending = self._pending, []
            return taken

    def answer(self, seq: int, reply: bytes) -> None:
        with self._signal:
            self._replies[seq] = reply
            self._signal.notify_all()


class Lane:
    """A host's Unix socket for the plain calls (no streaming, no host tools) of a driver on the
    same machine: one such call through Ray costs an actor round trip (about 0.7-0.8 ms of CPU on
    both sides on a 2-core machine), through this socket a few microseconds. Calls from other
    machines, and every other method, go through Ray.

    The socket is abstract (Linux only): no file to leave behind when the host dies, and reachable
    only from the host's network namespace (a driver in another container goes through Ray; a
    sandboxed worker has a namespace of its own, and seccomp refuses it Unix sockets). A connection
    is served only if its process runs as the host's user, and only after it sends the lane's token
    (32 random bytes that reach the driver as the return value of a Ray call, `SessionHost.lane`).
    Requests and replies are frames: 4 bytes of length (big-endian), then a pickle; each is read
    only from a connection that presented the token, so the trust is the same as for a Ray call. A
    reply is `b"R"` and the pickled result, or `b"E"` and the pickled exception the call raised.
    """

    def __init__(self, run: Callable[[bytes], bytes]) -> None:
        self.token = secrets.token_bytes(TOKEN_BYTES)
        self._run = run
        self.path = "\0genpark-repl-lane-" + secrets.token_hex(16)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._listener.bind(self.path)
            self._listener.listen(64)
        except BaseException:
            self.close()
            raise
        threading.Thread(target=self._accept, name="genpark-repl-lane", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # closed
                return
            if _peer_uid(conn) != os.getuid():  # another user of this machine: not even a thread
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(_LANE_HELLO_S)  # a connection that never sends the token is dropped
            presented = _read_exactly(conn, TOKEN_BYTES)
            if presented is None or not hmac.compare_digest(presented, self.token):
                return
            try:
                conn.sendall(b"\x01")
            except OSError:
                return
            conn.settimeout(None)  # the driver bounds each call and closes a connection it gives up on
            while True:
                frame = _read_frame(conn)
                if frame is None:
                    return
                try:
                    reply = b"R" + self._run(frame)
                except Exception as exc:  # the call raised (SessionClosed, ...): the driver re-raises it
                    try:
                        reply = b"E" + pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
                    except Exception:  # an exception that cannot be pickled: its words
                        error = ReplError(f"{type(exc).__name__}: {exc}")
                        reply = b"E" + pickle.dumps(error, protocol=pickle.HIGHEST_PROTOCOL)
                try:
                    conn.sendall(len(reply).to_bytes(4, "big") + reply)
                except OSError:
                    return

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept (a close alone does not)
        with contextlib.suppress(OSError):
            self._listener.close()


def _peer_uid(conn: socket.socket) -> int | None:
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    return int(struct.unpack("3i", creds)[1])


def _read_exactly(conn: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = conn.recv(n - len(buf))
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _read_frame(conn: socket.socket) -> bytes | None:
    header = _read_exactly(conn, 4)
    return None if header is None else _read_exactly(conn, int.from_bytes(header, "big"))


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
        self._boundary: BaseBoundary = SubprocessBoundary(policy, limits, **options)
        if store is not None:
            # Store-backed sessions go through the engine's durability layer: take the session's
            # lease, restore it when stale, run, save after every call (a lost node has no
            # checkpoint to roll back to). Its workers are a cache over the store, as on one host.
            try:
                opened = store()
                self._durable = Durability(self._boundary, resolve_key(snapshot_key, opened), opened)
            except BaseException:
                self._boundary.close()
                raise
        self._lock = threading.Lock()
        self._requests: dict[str, ExecutionRequest] = {}  # by request id, while queued or running
        self._outboxes: dict[str, Outbox] = {}  # streamed calls' output, by request id, while running
        self._tools: dict[str, RelayedTools] = {}  # calls with host tools, by request id, while running
        self._cancelled: OrderedDict[str, None] = OrderedDict()  # interrupted before they arrived
        self._lane: Lane | None = None
        self.big_results = 0
        self.lane_calls = 0

    def ping(self) -> str:
        return str(ray.get_runtime_context().get_node_id())

    def lane(self) -> tuple[str, bytes] | None:
        """The path and token of this host's `Lane` (made on first use); None if it cannot be made
        (not Linux, ...)."""
        if not sys.platform.startswith("linux"):  # abstract sockets are Linux's
            return None
        with self._lock:
            if self._lane is None:
                try:
                    self._lane = Lane(self._lane_call)
                except OSError:
                    return None
            return self._lane.path, self._lane.token

    def _lane_call(self, call: bytes) -> bytes:
        result, _ = self._run(call)
        self.lane_calls += 1
        return pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)

    def execute(self, call: bytes) -> Any:
        """Runs `call`, the pickled (session, code, timeout_s, rid, stream, tools); the result, pickled
        (or its reference in the object store when big). With `stream`, its output is kept for
        `output` polls while it runs, and the reply is a `Streamed`. With `tools` (the names and docs
        of the driver's host tools), the code's calls of them wait for the driver, which takes them
        with `tool_calls` polls and answers with `tool_reply`."""
        result, outbox = self._run(call)
        if outbox is None:
            if _size(result) > BIG_RESULT_CHARS:
                self.big_results += 1
                return ray.put(result)
            # Bytes cross Ray with less work than a model Ray pickles itself (about 0.1 ms a call).
            return pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
        first, items = outbox.take(0, final=True)
        reply = Streamed(first, items, result)
        if _size(result) + sum(len(text) for _, text in items) > BIG_RESULT_CHARS:
            self.big_results += 1
            return ray.put(reply)
        return reply

    def _run(self, call: bytes) -> tuple[ExecutionResult, Outbox | None]:
        session, code, timeout_s, rid, stream, tools = pickle.loads(call)
        request = ExecutionRequest(code=code, session=session, timeout_s=timeout_s)
        outbox = Outbox() if stream else None
        if outbox is not None:
            request.on_output = outbox.put
        relayed = RelayedTools(tools) if tools else None
        request.tools = relayed
        with self._lock:
            if self._cancelled.pop(rid, 0) is None:
                request.cancelled = True
            self._requests[rid] = request
            if outbox is not None:
                self._outboxes[rid] = outbox
            if relayed is not None:
                self._tools[rid] = relayed
        try:
            if self._durable is not None:
                result = self._durable.run(request, self._boundary.execute)  # lease, restore, run, save
            else:
                result = self._boundary.execute(request)
        finally:
            with self._lock:
                del self._requests[rid]
                self._outboxes.pop(rid, None)
                self._tools.pop(rid, None)
        return result, outbox

    def output(self, rid: str, acked: int) -> tuple[int, list[tuple[str, str]]] | None:
        """What streamed call `rid` wrote that its caller has not acknowledged (`acked` items); None
        once it has ended (the rest comes with its result) or before it has arrived. The caller's
        liveness poll while the call runs, like `ping`."""
        with self._lock:
            outbox = self._outboxes.get(rid)
        return None if outbox is None else outbox.take(acked)

    def tool_calls(self, rid: str, wait_s: float) -> list[tuple[int, bytes]] | None:
        """The host tool calls of call `rid` waiting for the driver (each taken once), as soon as
        there is one or after `wait_s`; None once it has ended or before it has arrived. The
        caller's liveness poll while the call runs."""
        with self._lock:
            relayed = self._tools.get(rid)
        return None if relayed is None else relayed.take(wait_s)

    def tool_reply(self, rid: str, seq: int, reply: bytes) -> None:
        """The driver's answer to host tool call `seq` of call `rid` (dropped if the call ended)."""
        with self._lock:
            relayed = self._tools.get(rid)
        if relayed is not None:
            relayed.answer(seq, reply)

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
        description["lane_calls"] = self.lane_calls
        return description

    def close(self) -> None:
        if self._lane is not None:
            self._lane.close()
        if self._durable is not None:
            self._durable.close()
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
