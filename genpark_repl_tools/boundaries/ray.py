"""The Ray boundary: sessions spread over the nodes of a Ray cluster, each node running them in a
sandboxed subprocess boundary of its own.

    ReplEngine(boundary="ray", address="ray://head:10001", sessions_per_node=200)
    RayBoundary(Policy.preset("untrusted"), Limits(timeout_s=5), address="auto")

See docs/ray.md for what each node needs, placement, node loss and sizing. Needs the `ray` extra
(`pip install genpark-repl-tools[ray]`); nothing else in the package imports Ray.
"""

from __future__ import annotations

import contextlib
import pickle
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

try:
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError, RayError
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test
    from .._exceptions import MissingDependency

    raise MissingDependency(
        "the ray boundary needs Ray: install genpark-repl-tools[ray]", name="ray"
    ) from exc

from .._boundary import BaseBoundary, ExecutionRequest, cancelled_before_start
from .._exceptions import BoundaryError, CapacityError
from .._host_tools import POOL, ToolRun
from .._limits import Limits
from .._models import ErrorInfo, ExecutionResult, VariableInfo
from .._session import DESCRIBE_BUDGET_S, SessionTable, not_defined
from ..policy import Policy
from ._ray._actors import Placement, Raised, SessionHost, Streamed
from ._subprocess import _claims

if TYPE_CHECKING:
    from ..stores import SessionStore

__all__ = ["RayBoundary"]

NAMESPACE = "genpark-repl"
PLACEMENT_NAME = "genpark-repl-placement"
# How often a waiting caller checks that the host of its call is alive (a ping the host answers while
# the call runs). Ray reports a dead actor at once, so a lost node is noticed within about this long.
_POLL_S = 0.25
# How often a streamed call's output is fetched while it runs (that poll is also its liveness check):
# a chunk reaches the caller about this long after it is written (streaming promises 250 ms at most).
_STREAM_POLL_S = 0.05
# Room beyond a call's own deadline (timeout + kill grace) for the host's reply to arrive.
_REPLY_SLACK_S = 1.0
# Bound on small control calls (ping, interrupt, close_session, placement).
_CONTROL_S = 10.0
# A call runs again on another node only if Ray recorded its host's death (on the head node's clock)
# this long before the call was sent (on the driver's clock); see docs/ray.md on clock skew.
_DIED_BEFORE_MARGIN_S = 0.0
_START_S = 120.0  # a new host: a worker process on its node, then its zygote
_HEAD = "node:__internal_head__"  # a resource only the head node has
_LOST_HINT = "The session's variables are gone; re-create what you need."
_ACTOR_ALIVE = 2  # ActorTableData.ALIVE in Ray's gcs.proto (a protobuf wire value, so it stays)


class _Lost(Exception):
    """The host of a call is gone (its node or its actor died) or did not answer in time."""

    def __init__(self, why: str, *, dead: bool, actor_id: str | None = None) -> None:
        super().__init__(why)
        self.dead = dead  # the host itself is gone (else: only this call went unanswered)
        self.actor_id = actor_id  # the dead host's actor id, when Ray said which


class _Placed:
    """The driver's view of one session: its node and host, lock, and the call in flight."""

    __slots__ = ("abandoned", "host", "lock", "lost", "name", "node", "running")

    def __init__(self, name: str) -> None:
        self.name = name
        self.lock = threading.Lock()
        self.node: str | None = None
        self.host: Any = None
        self.lost: str | None = None  # why the next call starts the session again, empty
        self.running: tuple[ExecutionRequest, str] | None = None  # (request, request id)
        self.abandoned: list[Any] = []  # refs of calls the caller stopped waiting for


class _LaneClient:
    """The driver's side of a host's `Lane` (see _ray/_actors.py): its open connections, each
    carrying one call at a time. At most `limit` calls use it at once (the host's concurrency);
    more go through Ray."""

    __slots__ = ("_closed", "_idle", "_lock", "busy", "limit", "path", "token")

    def __init__(self, path: str, token: bytes, limit: int) -> None:
        self.path = path
        self.token = token
        self.limit = limit
        self.busy = 0
        self._idle: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False

    def take(self) -> socket.socket | None:
        """A connection for one call (None: `limit` calls use the lane now). OSError if the host
        does not take a new one (gone, or not on this machine)."""
        with self._lock:
            if self._closed or self.busy >= self.limit:
                return None
            self.busy += 1
            if self._idle:
                return self._idle.pop()
        try:
            return self._connect()
        except BaseException:
            with self._lock:
                self.busy -= 1
            raise

    def _connect(self) -> socket.socket:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.settimeout(_CONTROL_S)
            conn.connect(self.path)
            conn.sendall(self.token)
            if conn.recv(1) != b"\x01":
                raise ConnectionError("the host did not accept the lane's token")
        except BaseException:
            conn.close()
            raise
        return conn

    def give(self, conn: socket.socket, *, keep: bool) -> None:
        """Hand back a call's connection; `keep` only one whose reply was read whole."""
        with self._lock:
            self.busy -= 1
            if keep and not self._closed:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class _Relay:
    """The caller's side of one streamed call: hands the host's numbered output items to the
    request's `on_output`, each once and in order (see `Outbox` in _ray/_actors.py)."""

    __slots__ = ("emit", "received", "rid")

    def __init__(self, emit: Callable[[tuple[str, str]], object], rid: str) -> None:
        self.emit = emit
        self.rid = rid
        self.received = 0  # items handed on so far

    def poll(self, host: Any) -> Any:
        return host.output.remote(self.rid, self.received)

    def deliver(self, first: int, items: list[tuple[str, str]]) -> None:
        for item in items[max(self.received - first, 0) :]:
            self.emit(item)
        self.received = max(self.received, first + len(items))


class _ToolRelay:
    """The caller's side of the host tools of one call: takes the calls waiting on the host with its
    polls, runs each on a host thread of this process (where the tools are) and sends the answer."""

    __slots__ = ("rid", "tools")

    def __init__(self, tools: ToolRun, rid: str) -> None:
        self.tools = tools
        self.rid = rid

    def poll(self, host: Any) -> Any:
        return host.tool_calls.remote(self.rid, _POLL_S)

    def deliver(self, host: Any, calls: list[tuple[int, bytes]]) -> None:
        for seq, payload in calls:

            def serve(payload: bytes, seq: int = seq) -> bytes:
                reply = self.tools.serve(payload)
                host.tool_reply.remote(self.rid, seq, reply)
                return reply

            POOL.submit(serve, payload)


class RayBoundary(BaseBoundary):
    """Places each session on one node of a Ray cluster; the node runs it in a SubprocessBoundary.

    Security model: that of the subprocess boundary, on every node (the same sandbox, checked on each
    node by `describe()`), plus Ray's own: anyone who can reach the cluster can run code on it, so the
    cluster must be private (see docs/ray.md). Plain calls to a host on the driver's own machine skip
    Ray's round trip through the host's lane, a Unix socket that serves only a connection presenting
    a token the driver received through Ray (see `Lane`).

    Options (all keyword):
        address            Ray cluster address for ray.init when Ray is not initialized yet
                           (None: a running cluster if there is one, else a local one)
        sessions_per_node  sessions one node holds at most (None: no cap); CapacityError when every
                           node is full
        key                names this boundary's sessions in the cluster-wide placement table and its
                           host actors (default: random; give the same key to share nothing else)
        store              a function that opens the session store on a node, e.g.
                           `lambda: RedisStore(url)`: sessions (sandboxed as without one) are then
                           saved after each call, idle ones hibernate to free workers at max_workers,
                           and a lost node's sessions are restored from the store on another node
                           (`session_restored`)
        snapshot_key       the HMAC key of the snapshots (required with a store; same on every node)
        host_cpus          CPUs each host actor reserves on its node (default 0: the workers it starts
                           are not Ray tasks, size nodes for them instead)
        host_concurrency   calls one host runs at once through Ray (threads of the actor), and
                           again through its lane
        lane               plain calls to a host on this machine go through its lane, not Ray
                           (default True; False: every call through Ray, as to other machines)
        **subprocess       every SubprocessBoundary option (session_ttl_s, max_workers, preload, ...),
                           applied on each node
    """

    name = "ray"
    supports_tools = True

    def __init__(
        self,
        policy: Policy,
        limits: Limits,
        *,
        address: str | None = None,
        sessions_per_node: int | None = 64,
        key: str | None = None,
        store: Callable[[], SessionStore] | None = None,
        snapshot_key: bytes | str | None = None,
        host_cpus: float = 0.0,
        host_concurrency: int = 64,
        lane: bool = True,
        **subprocess_options: Any,
    ) -> None:
        super().__init__(policy, limits)
        if store is not None and not callable(store):
            raise TypeError(
                "store must be a function that opens the store on each node, e.g. "
                "lambda: RedisStore(url); a store object holds connections that cannot travel"
            )
        if store is not None and snapshot_key is None:
            raise ValueError("a store needs a snapshot_key shared by every node (at least 16 bytes)")
        if sessions_per_node is not None and sessions_per_node <= 0:
            raise ValueError("sessions_per_node must be positive or None")
        if host_concurrency < 2:
            raise ValueError("host_concurrency must be >= 2 (interrupts reach a host while it runs a call)")
        if not ray.is_initialized():
            ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)
        self.sessions_per_node = sessions_per_node
        self.key = key or uuid.uuid4().hex[:12]
        self._options = subprocess_options
        self._store = store
        self._snapshot_key = snapshot_key
        self._host_cpus = host_cpus
        self._host_concurrency = host_concurrency
        self._use_lanes = lane
        self._kill_grace_s = float(subprocess_options.get("kill_grace_s", 0.25))
        self._sessions: SessionTable[_Placed] = SessionTable(limits.max_sessions)
        self._hosts: dict[str, Any] = {}  # node id -> host actor, guarded by _hosts_lock
        # node id -> (host, its lane, or None where there is none: a host on another machine)
        self._lanes: dict[str, tuple[Any, _LaneClient | None]] = {}  # guarded by _hosts_lock
        self._hosts_lock = threading.Lock()
        self._placement: Any = _placement_actor()
        # Start a host on every live node now, so a new session does not wait for one.
        try:
            nodes = self._live_nodes()
            handles = [self._host(node, wait=False) for node in nodes]
            ray.get([h.ping.remote() for h in handles], timeout=_START_S)
        except BaseException:
            self.close()
            raise

    # ---- contract -------------------------------------------------------------------------------

    def execute(self, request: ExecutionRequest) -> ExecutionResult:
        self._check_open()
        with self._sessions.lock:
            self._check_open()
            state = self._sessions.get_or_create(request.session, _Placed)
        with state.lock:
            if request.cancelled:
                return cancelled_before_start(request, self.policy.name, self.name)
            self._settle(state)
            lost_why = state.lost if state.host is None else None  # why the session was lost
            for attempt in range(2):
                if state.host is None:
                    self._place(state)
                started, sent = time.monotonic(), time.time()
                try:
                    result = self._call(state, request)
                except _Lost as lost:
                    why = self._lose(state, lost)
                    if self._closed:
                        return self._closed_result(request, started)
                    if attempt == 0 and _died_before(lost, sent):
                        lost_why = f"{why}; this code ran on another node"
                        continue
                    return self._lost_result(request, why, started)
                state.lost = None
                result.boundary = self.name
                if lost_why is not None:
                    if result.session_restored is not None:  # a store brought it back: not a restart
                        result.notes.insert(0, f"{lost_why}. The session was restored from the store.")
                    else:
                        result.notes.insert(0, f"{lost_why}. The session restarted empty.")
                        result.session_restarted = True
                return result
        raise AssertionError("unreachable")  # pragma: no cover

    def interrupt(self, session: str, request: ExecutionRequest | None = None) -> bool:
        state = self._sessions.find(session)
        if state is None:
            return False
        running, host = state.running, state.host
        if running is None or host is None or (request is not None and running[0] is not request):
            return False
        try:
            return bool(ray.get(host.interrupt.remote(session, running[1]), timeout=_CONTROL_S))
        except (RayActorError, GetTimeoutError):
            return False

    def variables(self, session: str, *, include_hidden: bool = False) -> list[VariableInfo]:
        state = self._get(session)
        with state.lock:
            self._settle(state)
            if state.host is None:
                return []
            reply = self._control(state, state.host.variables.remote(session, include_hidden))
            return list(reply)

    def inspect(self, session: str, name: str) -> VariableInfo:
        state = self._get(session)
        with state.lock:
            self._settle(state)
            if state.host is None:
                raise not_defined(name, session)
            info: VariableInfo = self._control(state, state.host.inspect.remote(session, name))
            return info

    def reset(self, session: str) -> None:
        state = self._get(session)
        with state.lock:
            self._settle(state)
            if state.host is not None:
                self._control(state, state.host.reset.remote(session))
            state.lost = None

    def close_session(self, session: str) -> bool:
        state = self._sessions.pop(session)
        if state is None:
            return False
        host = state.host
        if host is not None:
            running = state.running
            if running is not None:
                host.interrupt.remote(session, running[1])
            with contextlib.suppress(RayActorError, GetTimeoutError):  # its node is gone, and the session
                ray.get(host.close_session.remote(session), timeout=_CONTROL_S)
        self._placement.forget.remote(self.key, session)
        return True

    def sessions(self) -> list[str]:
        return self._sessions.names()

    def describe(self) -> dict[str, Any]:
        with self._hosts_lock:
            hosts = dict(self._hosts)
        nodes: dict[str, Any] = {}
        for node, host in hosts.items():
            try:
                nodes[node] = ray.get(host.describe.remote(), timeout=_CONTROL_S)
            except (RayActorError, GetTimeoutError) as exc:
                nodes[node] = {"error": type(exc).__name__}
        enforced, unavailable = _everywhere([d for d in nodes.values() if "enforced" in d])
        return {
            "boundary": self.name,
            "policy": self.policy.name,
            "key": self.key,
            "sessions_per_node": self.sessions_per_node,
            "enforced": enforced,
            "unavailable": unavailable,
            "placement": self._placement_call("table", self.key),
            "nodes": nodes,
        }

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        states = self._sessions.clear()
        with self._hosts_lock:
            hosts = list(self._hosts.values())
            self._hosts.clear()
            lanes = [lane for _, lane in self._lanes.values() if lane is not None]
            self._lanes.clear()
        for lane in lanes:
            lane.close()
        closing = [host.close.remote() for host in hosts]
        if closing:
            ray.wait(closing, num_returns=len(closing), timeout=_CONTROL_S)
        for state in states:  # let the calls that were running get their answer (SessionClosed)
            if state.lock.acquire(timeout=_CONTROL_S):
                state.lock.release()
        for host in hosts:
            ray.kill(host, no_restart=True)
        self._placement.forget_key.remote(self.key)

    # ---- calls ----------------------------------------------------------------------------------

    def _call(self, state: _Placed, request: ExecutionRequest) -> ExecutionResult:
        host = state.host
        timeout = request.timeout_s if request.timeout_s is not None else self.limits.timeout_s
        rid = uuid.uuid4().hex
        relay = None if request.on_output is None else _Relay(request.on_output, rid)
        tools, offer = None, None
        if request.tools is not None:  # the host runs the code; the tools run here, when it asks
            request.tools.begin(timeout)
            tools = _ToolRelay(request.tools, rid)
            offer = request.tools.offer()
        # One pickled argument: Ray handles it faster than six (about 0.1 ms a call).
        call = (state.name, request.code, request.timeout_s, rid, relay is not None, offer)
        payload = pickle.dumps(call, protocol=pickle.HIGHEST_PROTOCOL)
        deadline = time.monotonic() + timeout + self._kill_grace_s + _REPLY_SLACK_S
        plain = relay is None and tools is None and self._use_lanes
        lane = self._lane(state.node, host) if plain else None
        if lane is not None and _alive(host):
            try:
                conn = lane.take()
            except OSError as exc:  # no new connection (the call never left): is the host gone?
                lost = self._broken(host, sent=False)
                if lost.dead:
                    raise lost from exc
                conn = None  # it lives (this process is out of descriptors, ...): through Ray
            if conn is not None:
                return self._call_lane(state, request, rid, payload, lane, conn, deadline)
        ref = host.execute.remote(payload)
        state.running = (request, rid)
        try:
            if request.cancelled:  # cancelled between the check in execute and `running` being set
                host.interrupt.remote(state.name, rid)
            if tools is None:
                reply = self._wait(host, ref, deadline, relay)
            else:
                reply = self._wait_with_tools(host, ref, deadline, relay, tools)
        except _Lost:
            raise
        except BaseException:
            # The caller stopped waiting (Ctrl-C, a cancelled task): stop the code; the session's next
            # call waits for it (bounded) before it runs.
            host.interrupt.remote(state.name, rid)
            state.abandoned.append(ref)
            raise
        finally:
            state.running = None
        if isinstance(reply, ray.ObjectRef):  # a big result, in the object store
            try:
                reply = ray.get(reply, timeout=_CONTROL_S)
            except RayError as exc:  # its node (which owned it) died between the reply and the fetch
                raise _Lost(f"its result was lost with its node ({type(exc).__name__})", dead=True) from exc
        if isinstance(reply, bytes):  # the host pickles a plain call's result (see SessionHost.execute)
            # Not validated again: the host checked the worker's reply (its schema and what it
            # claims) before it made this result, and these bytes come from the host actor, not the
            # worker. Whoever could forge them could forge any value the actor returns, which Ray
            # unpickles itself, so a second check here would stop nothing.
            reply = pickle.loads(reply)
        if relay is not None and isinstance(reply, Streamed):
            relay.deliver(reply.first, reply.items)  # the output no poll brought, before the result
            reply = reply.result
        if not isinstance(reply, ExecutionResult):
            raise _Lost(f"the host of session {state.name!r} sent {type(reply).__name__}", dead=False)
        return reply

    def _call_lane(
        self,
        state: _Placed,
        request: ExecutionRequest,
        rid: str,
        payload: bytes,
        lane: _LaneClient,
        conn: socket.socket,
        deadline: float,
    ) -> ExecutionResult:
        """`_call` through the host's lane: the same call, its liveness checked by the same pings."""
        host = state.host
        state.running = (request, rid)
        read_whole = False
        try:
            if request.cancelled:  # cancelled between the check in execute and `running` being set
                host.interrupt.remote(state.name, rid)
            try:
                conn.sendall(len(payload).to_bytes(4, "big") + payload)
            except OSError as exc:
                raise self._broken(host, sent=True) from exc
            reply = self._wait_lane(host, conn, deadline)
            read_whole = True
        except _Lost:
            raise
        except BaseException:
            # The caller stopped waiting (Ctrl-C, a cancelled task): stop the code. Its connection is
            # closed; the session's next call waits on its host for this one to end (bounded).
            host.interrupt.remote(state.name, rid)
            raise
        finally:
            state.running = None
            lane.give(conn, keep=read_whole)
        # The same trust as a result through Ray (see `_call`): the host made it, and only a
        # connection that presented the lane's token, which came through Ray, carries it.
        answer = pickle.loads(reply[1:])
        if reply[:1] == b"E":  # the call raised on the host (SessionClosed, ...)
            raise answer
        if not isinstance(answer, ExecutionResult):
            raise _Lost(f"the host of session {state.name!r} sent {type(answer).__name__}", dead=False)
        return answer

    def _wait_lane(self, host: Any, conn: socket.socket, deadline: float) -> bytes:
        """The reply frame of the call sent on `conn`, or _Lost once its host is dead, the
        connection broke or the deadline has passed; while it runs, a ping every poll as in `_wait`."""
        buf = bytearray()
        need = 0  # the frame's whole length, once its header is in
        probe: Any = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Lost("the node holding the session did not answer in time", dead=False)
            conn.settimeout(min(_POLL_S, remaining))
            try:
                chunk = conn.recv(max(need - len(buf), 1 << 16))
            except TimeoutError:
                probe = self._probe(host, probe)
                continue
            except OSError:
                chunk = b""
            if not chunk:
                raise self._broken(host, sent=True)
            buf += chunk
            if not need and len(buf) >= 4:
                need = 4 + int.from_bytes(buf[:4], "big")
            if need and len(buf) >= need:
                return bytes(buf[4:need])

    def _broken(self, host: Any, *, sent: bool) -> _Lost:
        """Why a lane connection failed in a call: its host is gone (Ray says so), or not. A call
        that was `sent` may have run on the host's process however long ago Ray recorded its death
        (the process can outlive that record), so it is never run again elsewhere: no actor id."""
        try:
            ray.get(host.ping.remote(), timeout=_CONTROL_S)
        except RayActorError as exc:
            actor_id = None if sent else getattr(exc, "actor_id", None)
            return _Lost(_explain(exc), dead=True, actor_id=actor_id)
        except GetTimeoutError:
            return _Lost("the node holding the session did not answer in time", dead=False)
        return _Lost("its host closed the call's connection", dead=False)

    def _lane(self, node: str | None, host: Any) -> _LaneClient | None:
        """The lane of `host`, found on its first plain call; None for a host on another machine
        (its socket is not reachable from here) or one that has none."""
        with self._hosts_lock:
            known = self._lanes.get(node or "")
        if known is not None and known[0] is host:
            return known[1]
        lane = None
        try:
            found = ray.get(host.lane.remote(), timeout=_CONTROL_S)
        except (RayActorError, GetTimeoutError):
            return None  # the call will find out why
        if found is not None:
            path, token = found
            lane = _LaneClient(path, token, self._host_concurrency)
            try:
                first = lane.take()
            except OSError:  # not on this machine (or not this host's socket): through Ray
                lane = None
            else:
                if first is not None:
                    lane.give(first, keep=True)
        with self._hosts_lock:
            known = self._lanes.get(node or "")
            if known is not None and known[0] is host:  # another call found it first
                kept: _LaneClient | None = known[1]
            elif self._closed or node is None or self._hosts.get(node) is not host:
                kept = None
            else:
                self._lanes[node] = (host, lane)
                return lane
        if lane is not None:
            lane.close()
        return kept

    def _probe(self, host: Any, probe: Any, relay: _Relay | None = None) -> Any:
        """Take the answer of the liveness probe in flight (`probe`, if there is one and it has
        answered) and send the next: a ping, or for a streamed call (`relay`) its output poll.
        _Lost if the host is dead or did not answer."""
        try:
            if probe is not None and ray.wait([probe], timeout=0)[0]:
                answer = ray.get(probe, timeout=_CONTROL_S)
                probe = None
                if relay is not None and answer is not None:
                    relay.deliver(*answer)
            if probe is None:
                probe = host.ping.remote() if relay is None else relay.poll(host)
        except RayActorError as exc:
            raise _Lost(_explain(exc), dead=True, actor_id=getattr(exc, "actor_id", None)) from exc
        except GetTimeoutError as exc:
            raise _Lost("the node holding the session did not answer in time", dead=False) from exc
        return probe

    def _wait(self, host: Any, ref: Any, deadline: float, relay: _Relay | None = None) -> Any:
        """The reply to `ref`, or _Lost once its host is dead or the deadline has passed.

        One blocking get per poll (a fast call costs a single round trip); while the call runs, a
        ping checks every poll that its host is alive, since Ray fails calls to a dead actor at once.
        A streamed call (`relay`) polls more often, and its poll takes the output written since the
        last one (`SessionHost.output`) instead of pinging: one call for both.
        """
        poll_s = _POLL_S if relay is None else _STREAM_POLL_S
        probe: Any = None  # the ping or output poll in flight
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Lost("the node holding the session did not answer in time", dead=False)
            try:
                return ray.get(ref, timeout=min(poll_s, remaining))
            except GetTimeoutError:
                pass
            except RayActorError as exc:
                raise _Lost(_explain(exc), dead=True, actor_id=getattr(exc, "actor_id", None)) from exc
            probe = self._probe(host, probe, relay)

    def _wait_with_tools(
        self, host: Any, ref: Any, deadline: float, relay: _Relay | None, tools: _ToolRelay
    ) -> Any:
        """`_wait` for a call with host tools: the reply to `ref`, while a long poll of the host
        (`SessionHost.tool_calls`, which answers as soon as the code calls a tool) brings each tool
        call here to run. That poll is the liveness check; a streamed call's output poll runs too."""
        probe: Any = None  # the output poll in flight (streamed calls)
        tool_probe: Any = None
        quiet_until = 0.0  # the host had no such call yet (or it ended): poll again after this
        while True:
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                raise _Lost("the node holding the session did not answer in time", dead=False)
            try:
                if tool_probe is None and now >= quiet_until:
                    tool_probe = tools.poll(host)
                if relay is not None and probe is None:
                    probe = relay.poll(host)
                waiting = [ref, *(p for p in (tool_probe, probe) if p is not None)]
                ready, _ = ray.wait(waiting, num_returns=1, timeout=min(_STREAM_POLL_S, remaining))
                if ref in ready:
                    return ray.get(ref, timeout=_CONTROL_S)
                if tool_probe is not None and tool_probe in ready:
                    calls = ray.get(tool_probe, timeout=_CONTROL_S)
                    tool_probe = None
                    if calls is None:
                        quiet_until = time.monotonic() + _STREAM_POLL_S
                    elif calls:
                        tools.deliver(host, calls)
                if probe is not None and probe in ready:
                    answer = ray.get(probe, timeout=_CONTROL_S)
                    probe = None
                    if relay is not None and answer is not None:
                        relay.deliver(*answer)
            except RayActorError as exc:
                raise _Lost(_explain(exc), dead=True, actor_id=getattr(exc, "actor_id", None)) from exc
            except GetTimeoutError as exc:
                raise _Lost("the node holding the session did not answer in time", dead=False) from exc

    def _control(self, state: _Placed, ref: Any) -> Any:
        """A query's reply (variables, inspect, reset), bounded; a lost host loses the session."""
        budget = min(self.limits.timeout_s, DESCRIBE_BUDGET_S) + 2.0 + self._kill_grace_s + _REPLY_SLACK_S
        try:
            reply = self._wait(state.host, ref, time.monotonic() + budget)
        except _Lost as lost:
            why = self._lose(state, lost)
            raise BoundaryError(f"{why}; the session restarts empty on its next run") from None
        if isinstance(reply, Raised):
            raise reply.error
        return reply

    def _settle(self, state: _Placed) -> None:
        """Wait (bounded) for calls the caller abandoned: they were interrupted and end soon."""
        if state.abandoned:
            bound = 0.25 + self._kill_grace_s + _REPLY_SLACK_S + _CONTROL_S
            ray.wait(state.abandoned, num_returns=len(state.abandoned), timeout=bound)
            state.abandoned.clear()

    # ---- placement ------------------------------------------------------------------------------

    def _live_nodes(self) -> list[str]:
        return sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive"))  # type: ignore[no-untyped-call]

    def _place(self, state: _Placed) -> None:
        nodes = self._live_nodes()
        node: str | None = self._placement_call("place", self.key, state.name, nodes, self.sessions_per_node)
        if node is None:
            raise CapacityError(
                f"every live node ({len(nodes)}) holds {self.sessions_per_node} sessions "
                "(sessions_per_node); close sessions or add nodes"
            )
        state.node, state.host = node, self._host(node)

    def _placement_call(self, method: str, *args: Any) -> Any:
        """Call the placement table; if its actor was lost (or restarted empty), give it this
        boundary's placements again and call once more."""
        try:
            return ray.get(getattr(self._placement, method).remote(*args), timeout=_CONTROL_S)
        except RayActorError:
            self._placement = _placement_actor()
            table = {s.name: s.node for s in self._sessions.values() if s.node is not None}
            ray.get(self._placement.adopt.remote(self.key, table), timeout=_CONTROL_S)
            return ray.get(getattr(self._placement, method).remote(*args), timeout=_CONTROL_S)

    def _host(self, node: str, *, wait: bool = True) -> Any:
        host: Any
        with self._hosts_lock:
            self._check_open()
            host = self._hosts.get(node)
            if host is None:
                host = self._hosts[node] = (
                    ray.remote(SessionHost)
                    .options(
                        name=f"genpark-repl-host-{self.key}-{node[:16]}",
                        namespace=NAMESPACE,
                        get_if_exists=True,
                        num_cpus=self._host_cpus,
                        max_concurrency=self._host_concurrency,
                        max_restarts=0,
                        # Ray records each call's state changes and ships them to the head node
                        # (for its dashboard's task list): CPU on the driver, the host and the head
                        # on every call. Calls are the boundary's own business; it reports them.
                        enable_task_events=False,
                        scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
                    )
                    .remote(self.policy, self.limits, self._options, self._store, self._snapshot_key)
                )
        if wait:
            try:
                ray.get(host.ping.remote(), timeout=_START_S)
            except (RayActorError, GetTimeoutError) as exc:
                with self._hosts_lock:
                    if self._hosts.get(node) is host:
                        del self._hosts[node]
                raise BoundaryError(
                    f"could not start a session host on node {node[:12]} ({_explain(exc)}); try again"
                ) from None
        return host

    def _lose(self, state: _Placed, lost: _Lost) -> str:
        """Forget what a lost host held; the sentence that says so."""
        node = state.node or "?"
        host = state.host
        state.host, state.node = None, None
        if lost.dead:
            with self._hosts_lock:
                if self._hosts.get(node) is host:
                    del self._hosts[node]
                known = self._lanes.get(node)
                if known is not None and known[0] is host:
                    del self._lanes[node]
                    if known[1] is not None:
                        known[1].close()
            self._placement.drop_node.remote(node)
            why = f"the node holding session {state.name!r} (node {node[:12]}) was lost: {lost}"
        else:
            if host is not None:  # stop whatever it still runs there; the session starts again
                host.close_session.remote(state.name, False)  # a stored snapshot stays
            self._placement.forget.remote(self.key, state.name)
            why = f"session {state.name!r} on node {node[:12]} was lost: {lost}"
        state.lost = why[0].upper() + why[1:]
        return why

    # ---- results --------------------------------------------------------------------------------

    def _lost_result(self, request: ExecutionRequest, why: str, started: float) -> ExecutionResult:
        return ExecutionResult(
            status="crashed",
            session=request.session,
            duration_ms=round((time.monotonic() - started) * 1000, 3),
            policy=self.policy.name,
            boundary=self.name,
            error=ErrorInfo(type="SessionLost", message=why, hint=_LOST_HINT),
        )

    def _closed_result(self, request: ExecutionRequest, started: float) -> ExecutionResult:
        elapsed = time.monotonic() - started
        status, error = _claims.lost_call("closed", None, elapsed, elapsed, self.limits)
        return ExecutionResult(
            status=status,
            session=request.session,
            duration_ms=round(elapsed * 1000, 3),
            policy=self.policy.name,
            boundary=self.name,
            error=error,
        )

    def _get(self, session: str) -> _Placed:
        self._check_open()
        return self._sessions.get(session)


def _placement_actor() -> Any:
    """The cluster's placement table: a named detached actor on the head node (created if need be)."""
    return (
        ray.remote(Placement)
        .options(
            name=PLACEMENT_NAME,
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
            num_cpus=0,
            resources={_HEAD: 0.001},
            max_restarts=-1,
        )
        .remote()
    )


def _everywhere(nodes: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """What the answering nodes all enforce, in the shape of one subprocess boundary's `enforced`
    (a protection a node lacks: False; one all have in different forms: "differs by node"), and
    what any of them lacks, with the first reason given."""
    enforced: dict[str, Any] = {}
    unavailable: dict[str, Any] = {}
    for node in nodes:
        for name, why in node.get("unavailable", {}).items():
            unavailable.setdefault(name, why)
    for name in dict.fromkeys(k for node in nodes for k in node["enforced"]):
        values = [node["enforced"].get(name, False) for node in nodes]
        if not all(values):
            enforced[name] = False
        elif all(v == values[0] for v in values):
            enforced[name] = values[0]
        else:
            enforced[name] = "differs by node (see nodes)"
    return enforced, unavailable


def _alive(host: Any) -> bool:
    """Whether this driver's Ray still counts `host` alive: a lane call goes only to a host Ray
    would send a call to (Ray records a death before the actor's process is gone, and a killed
    host must run nothing more). Unknown counts as no: the call goes through Ray."""
    try:
        return bool(host._get_local_state() == _ACTOR_ALIVE)
    except Exception:  # a private method: if it moves, calls go through Ray (the lane tests say so)
        return False


def _died_before(lost: _Lost, sent: float) -> bool:
    """Whether Ray recorded the death of the call's host before the call was sent: then the code
    never ran there, and running it on another node runs it once. Unknown counts as no."""
    if not lost.dead or not lost.actor_id:
        return False
    try:
        from ray._private.state import actors  # the GCS actor table (ray.util.state needs the dashboard)

        info = actors(lost.actor_id)
    except Exception:  # a private API: if it moves, the call is reported lost instead of rerun
        return False
    end_ms = info.get("EndTime") if isinstance(info, dict) else None
    return bool(info.get("State") == "DEAD" and end_ms and end_ms / 1000 < sent - _DIED_BEFORE_MARGIN_S)


def _explain(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"{type(exc).__name__}: {first}"
