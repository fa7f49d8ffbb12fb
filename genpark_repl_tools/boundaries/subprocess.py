"""The subprocess boundary: a sandboxed worker process per session, forked from a zygote.

    ReplEngine(boundary="subprocess", limits=Limits(timeout_s=5, memory_mb=1024))
    ReplEngine(boundary="subprocess", session_ttl_s=300, max_workers=8, preload=("numpy",))

See docs/subprocess.md for how it works, what is enforced where, and the limits of the approach.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import TypeAdapter, ValidationError

from .._boundary import BaseBoundary, ExecutionRequest, cancelled_before_start
from .._exceptions import BoundaryError, CapacityError, SessionNotFound
from .._files import WorkspaceDir
from .._limits import Limits
from .._models import ExecutionResult, SessionRestore, SnapshotManifest, VariableInfo
from .._session import DESCRIBE_BUDGET_S, SessionTable, not_defined
from ..policy import Policy
from ._subprocess import _claims
from ._subprocess import _protocol as P
from ._subprocess._host import (
    FAILED_BYTES,
    Died,
    Invalid,
    Lost,
    OutputSink,
    TimedOut,
    WorkerClient,
    attach_output,
)
from ._subprocess._os import prepare_workspace_root, resolve_user, session_dirname
from ._subprocess._spawn import WorkerPool, worker_env, zygote_config

if TYPE_CHECKING:
    from ..egress import EgressProxy, NetworkPolicy
    from ..snapshot import SessionSnapshot
    from ._subprocess._egress import SessionEgress

__all__ = ["DEFAULT_MEMORY_MB", "SubprocessBoundary"]

DEFAULT_MEMORY_MB = 4096

_EXIT_WAIT_S = 2.0
_EVICTED_KEPT = 4096
_QUERY_SLACK_S = 2.0
# How long an interrupted cell may take to stop by itself before its worker is killed. The worker's
# watchdog raises the interrupt within 50 ms in pure-Python code.
_INTERRUPT_GRACE_S = 0.25
_VARIABLES = TypeAdapter(list[VariableInfo])
# A snapshot or restore in the worker is bounded by max(timeout_s, this) there (snapshot/_save.py,
# _load.py); the host waits that long plus room for moving the blob.
_SNAPSHOT_BUDGET_S = 60.0


class _SessionState:
    """The host's view of one session: its worker (if any), lock and bookkeeping. The namespace
    and the `Session` itself live in the worker; requests go to it through the worker's client."""

    __slots__ = (
        "checkpointed",
        "closed",
        "execution_count",
        "last_used",
        "lock",
        "lost",
        "name",
        "running",
        "running_since",
        "worker",
        "workspace",
    )

    def __init__(self, name: str, workspace: Path) -> None:
        self.name = name
        self.workspace = workspace
        self.lock = threading.Lock()
        self.worker: WorkerClient | None = None
        self.execution_count = 0
        self.last_used = time.monotonic()
        self.lost: str | None = None  # why the next worker starts without the old namespace
        self.closed = False
        self.running: ExecutionRequest | None = None  # the call waiting on the worker now
        self.running_since = 0.0
        self.checkpointed = False  # whether the last cell ran with a checkpoint (or was rolled back)


class SubprocessBoundary(BaseBoundary):
    """Runs each session in its own sandboxed worker process, forked from a single-threaded zygote.

    Security model: an OS boundary. A worker can crash, exhaust its limits or run C code forever
    without touching the host: the host kills the worker's whole process group at the deadline and
    reports what happened. Where the OS offers it (detected at start; `describe()` reports exactly
    what is active and checked), a worker also runs as an unprivileged user without capabilities,
    in a network namespace with no interface up, under Landlock (writes only in the session's
    workspace, reads only system and Python paths) and a seccomp filter (no setsid/setpgid, no
    namespaces, ptrace, mounts or kernel interfaces), with rlimits for memory, CPU, open files and
    file size. Inside the worker the policy's own layers run exactly as in-process. It does not hide
    CPU/memory side channels, nor the host's world-readable system files.

    Options (all keyword):
        workspace_root  directory holding one workspace per session (default: a temporary
                        directory removed on close; Policy.workspace if the policy sets one)
        session_ttl_s   idle sessions are closed after this many seconds (None: never)
        max_workers     live worker processes at most (checkpoint copies are not counted); at
                        the cap, an engine with a store hibernates the least recently used idle
                        session to free its worker; CapacityError when none can go
        network         False (default): no network; True: all of it; a NetworkPolicy: only the
                        names it lists, through an egress proxy on the host (each worker gets a
                        network namespace of its own whose loopback reaches its session's proxy,
                        set in HTTP_PROXY/HTTPS_PROXY; see docs/network.md)
        egress_proxy    the EgressProxy that serves a NetworkPolicy (default: one of its own,
                        closed with the boundary); pass one for its options or its on_record
                        audit callback
        confine_reads   False lets workers read any file their user may read
        read_paths      extra paths workers may read (with confine_reads)
        user            uid workers run as: "auto" (65534 when the host is root), an int, or None
        preload         modules the zygote imports once, so workers start with them (e.g. "numpy")
        env             extra environment variables for workers (the host's are not passed on)
        kill_grace_s    how long past the deadline a worker may take to stop by itself
        max_processes   RLIMIT_NPROC for workers (only with a non-root user; counted per uid)
        require         protections that must be active: keys of describe()["enforced"] or
                        "seccomp", "landlock", "network_namespace"; BoundaryError at
                        construction otherwise, naming what is missing and why
        python          interpreter for the zygote (default: this one); another one starts from
                        its own sys.path and must have this very package installed (same
                        version and sources), so a reviewed venv of any supported Python works
        default_memory_mb  the address-space cap of a worker when Limits.memory_mb is not set
                        (4096 MiB: a memory bomb fails inside its worker, never on the host);
                        None lifts it
        checkpoints     after each reply the worker forks a paused copy of itself, ready for
                        the next cell (off the call's path); when that cell ends the worker
                        (crash, deadline kill of C code, interrupt that had to kill), the copy
                        becomes the session's worker and the session goes on from before the
                        cell (default True; Linux with a child subreaper)
    """

    name = "subprocess"
    supports_tools = True
    # Where a worker's egress listener binds: a network namespace of its own (a container's is
    # already the session's own).
    _egress_in_place = False

    def __init__(
        self,
        policy: Policy,
        limits: Limits,
        *,
        workspace_root: str | Path | None = None,
        session_ttl_s: float | None = 600.0,
        max_workers: int | None = 32,
        network: bool | NetworkPolicy = False,
        egress_proxy: EgressProxy | None = None,
        confine_reads: bool = True,
        read_paths: Iterable[str | Path] = (),
        user: int | Literal["auto"] | None = "auto",
        preload: Iterable[str] = (),
        env: dict[str, str] | None = None,
        kill_grace_s: float = 0.25,
        max_processes: int | None = None,
        require: Iterable[str] = (),
        python: str | None = None,
        default_memory_mb: int | None = DEFAULT_MEMORY_MB,
        checkpoints: bool = True,
    ) -> None:
        if limits.memory_mb is None and default_memory_mb is not None:
            # A safe cap unless the caller chose one: the boundary's promise is that a memory bomb
            # cannot touch the host. Everything downstream (rlimits, describe()) sees the same Limits.
            limits = limits.model_copy(update={"memory_mb": default_memory_mb})
        super().__init__(policy, limits)
        if session_ttl_s is not None and session_ttl_s <= 0:
            raise ValueError("session_ttl_s must be positive or None")
        if max_workers is not None and max_workers <= 0:
            raise ValueError("max_workers must be positive or None")
        if kill_grace_s < 0:
            raise ValueError("kill_grace_s must be >= 0")
        self.session_ttl_s = session_ttl_s
        self.max_workers = max_workers
        self.kill_grace_s = kill_grace_s
        uid, self._user_note = resolve_user(user)
        self._file_owner = None if uid is None else (uid, uid)  # as the sandbox drops to (uid, gid=uid)
        self._root, self._owns_root = prepare_workspace_root(workspace_root, policy, dropping=uid is not None)
        self._sessions: SessionTable[_SessionState] = SessionTable(limits.max_sessions)
        self._evicted: OrderedDict[str, None] = OrderedDict()  # guarded by self._sessions.lock
        self._make_room: Callable[[list[str]], bool] | None = None
        self._egress: SessionEgress | None = None
        if not isinstance(network, bool):
            from ..egress import NetworkPolicy
            from ._subprocess._egress import SessionEgress

            if not isinstance(network, NetworkPolicy):
                raise TypeError(
                    f"network must be True, False or a NetworkPolicy, not {type(network).__name__}"
                )
            if policy.restricted:  # its audit hook refuses every socket, whatever the proxy allows
                raise ValueError(
                    f"policy {policy.name!r} refuses all network access in the code, so no name a "
                    "NetworkPolicy lists could be reached: use policy='trusted' (the sandbox still "
                    "confines the code, and the proxy lets it reach only the listed names)"
                )
            self._egress = SessionEgress(network, egress_proxy)
            self.network_policy = network
            # Its folder (the engine's certificate authority, for secrets over HTTPS) is the
            # workers' to read.
            read_paths = [*read_paths, self._egress.folder]
        elif egress_proxy is not None:
            raise ValueError("egress_proxy serves a NetworkPolicy: pass network=NetworkPolicy(allow=[...])")
        config = zygote_config(
            policy,
            limits,
            workspace_root=self._root,
            uid=uid,
            network=network is True,
            confine_reads=confine_reads,
            read_paths=read_paths,
            preload=preload,
            max_processes=max_processes,
            checkpoints=checkpoints,
            egress_port=None if self._egress is None else self._egress.port,
            egress_in_place=self._egress_in_place,
        )
        try:
            self._pool = self._make_pool(config, worker_env(env), python, limits, max_workers)
        except BaseException:  # an interpreter or zygote that cannot start: the temporary root goes too
            if self._owns_root:
                shutil.rmtree(self._root, ignore_errors=True)
            if self._egress is not None:
                self._egress.close()
            raise
        self._pool.egress = self._egress
        # The finalizer must not reference self: it runs when a boundary is dropped without close().
        self._finalizer = weakref.finalize(
            self, _emergency_cleanup, self._pool, self._root if self._owns_root else None
        )
        self._janitor_stop = threading.Event()
        self._janitor: threading.Thread | None = None
        if session_ttl_s is not None:
            self._janitor = threading.Thread(
                target=_janitor,
                args=(weakref.ref(self), self._janitor_stop, min(max(session_ttl_s / 4, 0.05), 30.0)),
                name="genpark-repl-session-ttl",
                daemon=True,
            )
            self._janitor.start()
        required = list(require)
        if required:
            try:
                self._check_required(required)
            except BaseException:
                self.close()
                raise

    def _make_pool(
        self,
        config: dict[str, Any],
        env: dict[str, str],
        python: str | None,
        limits: Limits,
        max_workers: int | None,
    ) -> WorkerPool:
        """Where workers are launched: forked by a zygote here; the container boundary starts its
        zygotes in containers instead, through the same session handling."""
        return WorkerPool(config, env, python, limits, max_workers)

    # ---- contract -------------------------------------------------------------------------------

    def execute(self, request: ExecutionRequest) -> ExecutionResult:
        self._check_open()
        while True:
            # A live session is found with one lookup; a new one is made under the table's lock.
            state = self._sessions.find(request.session) or self._session_for_run(request.session)
            with state.lock:
                if state.closed:  # closed or evicted while this call waited for the lock
                    continue
                try:
                    result = self._execute_locked(state, request)
                    if self._egress is not None:
                        line, request.connections = self._egress.report(state.name)
                        if line:
                            result.notes.append(line)
                    return result
                finally:
                    state.last_used = time.monotonic()

    def variables(self, session: str, *, include_hidden: bool = False) -> list[VariableInfo]:
        state = self._get(session)
        with state.lock:
            worker = self._live_worker(state)
            if worker is None:
                return []
            kind, payload = self._query(state, worker, P.VARIABLES, {"hidden": include_hidden})
            if kind != P.VARIABLE_LIST:
                raise self._unexpected(state, worker, kind)
            try:
                return _VARIABLES.validate_json(payload)
            except ValidationError:
                raise self._unexpected(state, worker, kind, malformed=True) from None

    def inspect(self, session: str, name: str) -> VariableInfo:
        state = self._get(session)
        with state.lock:
            worker = self._live_worker(state)
            if worker is None:
                raise not_defined(name, session)
            kind, payload = self._query(state, worker, P.INSPECT, {"name": name})
            if kind == P.NOT_FOUND:
                raise not_defined(name, session)
            if kind != P.VARIABLE:
                raise self._unexpected(state, worker, kind)
            try:
                return VariableInfo.model_validate_json(payload)
            except ValidationError:
                raise self._unexpected(state, worker, kind, malformed=True) from None

    def reset(self, session: str) -> None:
        state = self._get(session)
        with state.lock:
            worker = self._live_worker(state)
            if worker is not None:
                kind, _ = self._query(state, worker, P.RESET, {})
                if kind != P.ACK:
                    raise self._unexpected(state, worker, kind)
            state.execution_count = 0
            state.lost = None  # an empty namespace is what was asked for, not a loss to report

    def close_session(self, session: str) -> bool:
        state = self._sessions.pop(session)
        if state is None:
            return False
        self._close_state(state)
        if self._egress is not None:
            self._egress.close_session(session)
        if self._owns_root:
            shutil.rmtree(state.workspace, ignore_errors=True)
        return True

    def session_workspace(self, session: str, *, create: bool = False) -> WorkspaceDir | None:
        """The session's workspace on this host: it outlives the session's workers (restarts,
        eviction), and goes with close_session."""
        if create:
            state = self._session_for_run(session)
        else:
            found = self._sessions.find(session)
            if found is None:
                return None
            state = found
        return WorkspaceDir(state.workspace, self._file_owner)

    def sessions(self) -> list[str]:
        return self._sessions.names()

    @property
    def supports_rollback(self) -> bool:  # type: ignore[override]  # a class attribute elsewhere
        """Whether a cell that ends its worker leaves the session as it was before the cell."""
        return bool(self._pool.hello().get("checkpoints"))

    def describe(self) -> dict[str, Any]:
        hello = self._pool.hello()
        return {
            "boundary": self.name,
            "checkpoints": bool(hello.get("checkpoints")),
            "policy": self.policy.name,
            "enforced": _claims.enforced(hello, self.limits, self.kill_grace_s, self._user_note),
            "unavailable": _claims.unavailable(hello),
            "workers": {"live": self._pool.live(), "max": self.max_workers, "uid": hello.get("uid")},
            "session_ttl_s": self.session_ttl_s,
            "workspace_root": str(self._root),
            "platform": hello.get("platform"),
        }

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._janitor_stop.set()
        states = self._sessions.clear()
        for state in states:
            state.closed = True
            worker = state.worker
            if worker is not None:
                self._pool.kill(worker)
        self._pool.stop_zygote()
        for state in states:
            if state.lock.acquire(timeout=_EXIT_WAIT_S):
                try:
                    if state.worker is not None:
                        state.worker.close()
                        state.worker = None
                finally:
                    state.lock.release()
        self._pool.close_handles()
        if self._egress is not None:
            self._egress.close()
        if self._janitor is not None and self._janitor is not threading.current_thread():
            self._janitor.join(_EXIT_WAIT_S)
        if self._owns_root:
            shutil.rmtree(self._root, ignore_errors=True)
        self._finalizer.detach()

    # ---- snapshots --------------------------------------------------------------------------------
    # The worker takes and loads snapshots itself, under its policy and inside its sandbox, with the
    # code the in-process boundary uses. It never holds the key: the host checks a blob before the
    # worker sees it and signs what the worker returns, marking it as made in a sandboxed worker.

    supports_snapshots = True

    def snapshot_session(self, session: str, key: bytes) -> SessionSnapshot:
        from ..snapshot._format import SnapshotError

        state = self._get(session)
        with state.lock:
            worker = self._live_worker(state)
            if worker is None:
                raise SnapshotError(
                    f"session {session!r} has no live worker (it was stopped or lost); nothing to snapshot"
                )
            kind, data = self._snapshot_call(state, worker, P.SNAPSHOT, b"")
            if kind == P.REFUSED:
                raise _refusal(data)
            if kind != P.SNAPSHOT_DATA:
                raise self._unexpected(state, worker, kind)
            return _sign_worker_snapshot(data, key)

    def restore_session(self, session: str, snapshot: SessionSnapshot, key: bytes) -> SessionRestore:
        snapshot.header_data(key)  # authenticates: nothing unchecked reaches the worker
        blob = snapshot.to_bytes()
        return self._load(session, lambda state, worker: self._snapshot_call(state, worker, P.LOAD, blob))

    def _load(
        self, session: str, call: Callable[[_SessionState, WorkerClient], tuple[int, bytes]]
    ) -> SessionRestore:
        """Load a session's state into its worker (started if it has none) with `call`."""
        self._check_open()
        while True:
            state = self._session_for_run(session)
            with state.lock:
                if state.closed:
                    continue
                worker = state.worker
                if worker is not None and worker.abandoned:
                    worker = self._settle(state, worker)
                if worker is None or worker.dead:
                    worker = self._start_worker(state, restarted=False)
                kind, data = call(state, worker)
                if kind == P.REFUSED:
                    raise _refusal(data)
                if kind != P.RESTORED:
                    raise self._unexpected(state, worker, kind)
                try:
                    info = SessionRestore.model_validate_json(data)
                except ValidationError:
                    raise self._unexpected(state, worker, kind, malformed=True) from None
                state.execution_count = info.execution_count
                state.lost = None  # the session is the snapshot's now, not an empty restart
                state.last_used = time.monotonic()
                return info

    # ---- engine.fork, worker to worker -----------------------------------------------------------
    # The source's worker writes its session into a sealed memory file, the host passes the file to
    # the target's worker, which maps it copy-on-write and loads it (snapshot/_handoff.py): no blob on
    # the host, no signature. Why no signature is sound: a signature stands between a blob and whoever
    # could alter it on its way (a store, another host). This one never leaves the host, nobody but
    # the source's worker writes it, and it is sealed before it is passed on, so nothing reaches the
    # target but what the source's worker wrote, once. A hostile source can then put into the target
    # only what a restore lets it: the target loads it under the same policy, in the same sandbox,
    # in a workspace the engine filled with a copy of the source's own. Whatever that makes the
    # target do, the source's code could already do in its own worker, and the target is by design
    # a copy of the source: it gains nothing over the host or any other session. The seals also
    # keep it from changing the target's memory afterwards (a channel between the two copies).

    def fork_out(self, session: str, target: str) -> Handoff | None:
        """`session`'s state, out of its worker, for fork_in into the new session `target`, whose
        worker starts meanwhile (the caller closes `target` if the fork fails). None when the state
        cannot go worker to worker here (then engine.fork takes a snapshot): not Linux, a container
        boundary (its workers do not share this host's memory accounting), no live worker, or the
        worker could not write the file (RLIMIT_FSIZE: Limits.max_file_size_mb). SnapshotError as
        for a snapshot."""
        from ..snapshot._format import SnapshotError

        if not sys.platform.startswith("linux") or not isinstance(self._pool, WorkerPool):
            return None
        # Started now, the target's worker gets ready while the source's writes the file.
        self._check_open()
        new = self._session_for_run(target)
        with new.lock:
            if new.worker is None or new.worker.dead:
                self._start_worker(new, restarted=False)
        state = self._get(session)
        with state.lock:
            worker = self._live_worker(state)
            if worker is None:
                return None
            budget = max(self.limits.timeout_s, _SNAPSHOT_BUDGET_S) + _QUERY_SLACK_S + self.kill_grace_s
            try:
                reply, fd = worker.hand_out(session, budget)
            except BaseException:
                self._forget_unstarted(state, worker)
                raise
            if isinstance(reply, tuple) and reply[0] == P.FAILED:
                return None
            kind, data = self._answer(state, worker, reply, " while taking a snapshot")
            if kind == P.REFUSED:
                raise _refusal(data)
            if kind != P.FORK_DATA or fd < 0:
                raise self._unexpected(state, worker, kind)
            why = _not_sealed(fd, self.limits)
            if why is not None:
                os.close(fd)
                self._retire(state, worker, drain=(None, None))
                state.lost = "crashed"
                raise SnapshotError(
                    f"the worker of session {session!r} handed over {why}; it was stopped and the "
                    "session starts empty on its next run"
                )
            return Handoff(fd, data)

    def fork_in(self, session: str, handoff: Handoff) -> SessionRestore:
        """Load a fork_out's state into `session`'s worker (started if it has none)."""
        budget = max(self.limits.timeout_s, _SNAPSHOT_BUDGET_S) + _QUERY_SLACK_S + self.kill_grace_s

        def hand_in(state: _SessionState, worker: WorkerClient) -> tuple[int, bytes]:
            try:
                reply = worker.hand_in(state.name, handoff.index, handoff.fd, budget)
            except BaseException:
                self._forget_unstarted(state, worker)
                raise
            return self._answer(state, worker, reply, " while loading a copy of a session")

        return self._load(session, hand_in)

    def session_lost(self, session: str) -> bool:
        state = self._sessions.find(session)
        return state is not None and not state.closed and state.lost is not None

    def checkpointed(self, session: str) -> bool:
        state = self._sessions.find(session)
        return state is not None and not state.closed and state.checkpointed

    def _snapshot_call(
        self, state: _SessionState, worker: WorkerClient, kind: int, payload: bytes
    ) -> tuple[int, bytes]:
        """Send SNAPSHOT or LOAD (caller holds state.lock) and wait for the reply, bounded."""
        from ..snapshot._format import SnapshotParts, SnapshotTooLarge, snapshot_limit

        budget = max(self.limits.timeout_s, _SNAPSHOT_BUDGET_S) + _QUERY_SLACK_S + self.kill_grace_s
        try:
            # Within the snapshot limit, whatever the worker sends: it checked the limit itself.
            parts = SnapshotParts(snapshot_limit(self.limits))
            reply = worker.transfer(state.name, kind, payload, budget, parts)
        except SnapshotTooLarge as exc:  # past the worker's own check: it is not our worker any more
            self._retire(state, worker, drain=(None, None))
            state.lost = "crashed"
            raise SnapshotTooLarge(
                f"{exc}; the worker was stopped and the session starts empty on its next run"
            ) from None
        except BaseException:
            self._forget_unstarted(state, worker)
            raise
        verb = "taking a snapshot" if kind == P.SNAPSHOT else "restoring a snapshot"
        return self._answer(state, worker, reply, f" while {verb}")

    # ---- execution ------------------------------------------------------------------------------

    def _execute_locked(self, state: _SessionState, request: ExecutionRequest) -> ExecutionResult:
        timeout = request.timeout_s if request.timeout_s is not None else self.limits.timeout_s
        notes: list[str] = []
        if request.cancelled:
            return cancelled_before_start(request, self.policy.name, self.name, state.execution_count)
        worker = state.worker
        if worker is not None and worker.abandoned:
            worker = self._settle(state, worker)
        if worker is None or worker.dead:
            if state.lost == "evicted":
                notes.append(
                    f"The session was idle for more than {self.session_ttl_s:g} s and was closed to free "
                    "its worker; files in its workspace are kept."
                )
            worker = self._start_worker(state, restarted=state.lost is not None)
        fresh = worker.pid is None
        state.running, state.running_since = request, time.monotonic()
        try:
            outcome = worker.execute(
                request,
                timeout,
                self.limits,
                kill_grace_s=self.kill_grace_s,
                interrupt_grace_s=_INTERRUPT_GRACE_S,
                stamp=(state.name, self.policy.name, self.name),
            )
        except BaseException:
            self._forget_unstarted(state, worker)
            raise
        finally:
            state.running = None
            if fresh and worker.pid is not None:
                state.lost = None  # the fresh worker knows (restarted=...) and reports it in its result
        if isinstance(outcome, Lost):
            return self._lost_call(state, worker, outcome, timeout, notes)
        state.execution_count = outcome.execution_count
        state.checkpointed = worker.checkpoints and worker.no_checkpoint is None
        if worker.no_checkpoint is not None:
            notes.append(
                f"No checkpoint was taken before this cell ({worker.no_checkpoint}): a cell "
                "that ends the worker process loses the session's variables."
            )
            worker.no_checkpoint = None
        if notes:
            outcome.notes[:0] = notes
        return outcome

    def _lost_call(
        self, state: _SessionState, worker: WorkerClient, lost: Lost, timeout: float, notes: list[str]
    ) -> ExecutionResult:
        """A call that ended its worker: stop what is left of it, say what happened, and roll the
        session back to its checkpoint if the zygote kept one (caller holds state.lock)."""
        reply = lost.reply
        killed = isinstance(reply, TimedOut)
        interrupted = isinstance(reply, TimedOut) and reply.interrupted
        code = self._retire(state, worker, drain=(lost.out, lost.err), keep_checkpoint=not state.closed)
        elapsed = time.monotonic() - lost.started
        state.execution_count += 1
        state.lost = "timeout" if killed else "crashed"
        result = ExecutionResult(
            status="crashed",
            session=state.name,
            execution_count=state.execution_count,
            duration_ms=round(elapsed * 1000, 3),
            policy=self.policy.name,
            boundary=self.name,
            notes=notes,
        )
        attach_output(result, lost.out, lost.err)
        how: _claims.Lost
        if killed and code in (-signal.SIGKILL, None):
            how = "interrupted" if interrupted else "timeout"
        elif state.closed:
            how = "closed"
        elif isinstance(reply, Invalid):
            how = "invalid"
        else:
            how = "ended"
        result.status, result.error = _claims.lost_call(how, code, elapsed, timeout, self.limits, lost.why)
        if how == "ended" and worker.ended_by:
            result.error.message = f"{result.error.message}: {worker.ended_by}"
        state.checkpointed = False  # until the copy serves the session
        if worker.checkpoint:
            self._roll_back(state, worker, result, how)
        elif worker.no_checkpoint is not None:
            result.notes.append(
                f"No checkpoint was taken before this cell ({worker.no_checkpoint}), so it could not "
                "be rolled back."
            )
        return result

    def _roll_back(
        self, state: _SessionState, dead: WorkerClient, result: ExecutionResult, how: _claims.Lost
    ) -> None:
        """Make the checkpoint the zygote kept for `dead` the session's worker: the session is as it
        was before the cell (caller holds state.lock). On failure the result stays a loss."""
        try:
            worker = state.worker = self._launch(
                state, lambda: self._pool.resume(dead, state.execution_count)
            )
            try:
                self._pool.await_ready(state.name, worker)
            except BaseException:
                self._forget_unstarted(state, worker)
                raise
        except BoundaryError as exc:
            result.notes.append(f"Rolling back to the checkpoint taken before this cell failed: {exc}")
            return
        state.lost = None
        state.checkpointed = True  # the resumed copy forks its own after READY
        result.rolled_back = True
        if result.error is not None:
            result.error.hint = _claims.rolled_back_hint(how)

    def _settle(self, state: _SessionState, worker: WorkerClient) -> WorkerClient | None:
        """Let an abandoned call's late reply come (bounded) and drop it; if it does not come, stop
        the worker. Returns the worker if it is usable, else None."""
        if worker.settle(time.monotonic() + _INTERRUPT_GRACE_S + self.kill_grace_s):
            return worker
        self._retire(state, worker, drain=(None, None))
        state.lost = "crashed"
        return None

    def interrupt(self, session: str, request: ExecutionRequest | None = None) -> bool:
        state = self._sessions.find(session)
        if state is None:
            return False
        running, worker = state.running, state.worker
        if running is None or worker is None or (request is not None and running is not request):
            return False
        return worker.interrupt(_INTERRUPT_GRACE_S + self.kill_grace_s)

    def _start_worker(self, state: _SessionState, *, restarted: bool) -> WorkerClient:
        worker = state.worker = self._launch(
            state, lambda: self._pool.start(state.name, state.workspace, restarted=restarted)
        )
        return worker

    def set_room_maker(self, make_room: Callable[[list[str]], bool] | None) -> None:
        self._make_room = make_room

    def _launch(self, state: _SessionState, launch: Callable[[], WorkerClient]) -> WorkerClient:
        """A new worker for `state` (caller holds its lock). At max_workers, the room maker (an
        engine with a store) hibernates an idle session, and the launch is tried again: another
        call may have taken the freed slot meanwhile, so until nothing more can go."""
        while True:
            try:
                return launch()
            except CapacityError as exc:
                make_room = self._make_room
                if make_room is None:
                    raise CapacityError(
                        f"{exc}. With a store (ReplEngine(store=...)), idle sessions hibernate to it "
                        "and free their workers"
                    ) from None
                if not make_room(self._idle_sessions(state)):
                    raise self._no_room() from None

    def _idle_sessions(self, state: _SessionState) -> list[str]:
        """Sessions with a live worker and no call running, least recently used first (read
        without their locks: hibernation checks each again under its own)."""
        idle = [
            s
            for s in self._sessions.values()
            if s is not state
            and not s.closed
            and s.running is None
            and s.worker is not None
            and not s.worker.dead
        ]
        idle.sort(key=lambda s: s.last_used)
        return [s.name for s in idle]

    def _no_room(self) -> CapacityError:
        cap = self.max_workers
        now = time.monotonic()
        running = [now - s.running_since for s in self._sessions.values() if s.running is not None]
        oldest = f"the oldest has run for {max(running):.1f} s" if running else ""
        if running and len(running) >= (cap or 0):
            return CapacityError(
                f"all {cap} workers are running calls (max_workers={cap}); {oldest}. Try again when one "
                "finishes, or raise max_workers"
            )
        calls = f"{len(running)} are running calls ({oldest}); " if running else ""
        return CapacityError(
            f"all {cap} workers are in use (max_workers={cap}) and none could hibernate: {calls}the others "
            "are busy or hold changes the store could not save. Try again shortly, or raise max_workers"
        )

    def _forget_unstarted(self, state: _SessionState, worker: WorkerClient) -> None:
        """After a failed call: a worker the launcher retired (it did not start) is no longer the
        session's."""
        if worker.dead and state.worker is worker:
            state.worker = None

    def _retire(
        self,
        state: _SessionState,
        worker: WorkerClient,
        drain: tuple[OutputSink | None, OutputSink | None],
        *,
        keep_checkpoint: bool = False,
    ) -> int | None:
        """Stop the session's worker for good (see WorkerPool.retire); its exit code."""
        code = self._pool.retire(worker, drain, keep_checkpoint=keep_checkpoint)
        if state.worker is worker:
            state.worker = None
        return code

    # ---- queries --------------------------------------------------------------------------------

    def _live_worker(self, state: _SessionState) -> WorkerClient | None:
        """The session's worker, if it has one (caller holds state.lock)."""
        if state.closed:
            raise SessionNotFound(f"session {state.name!r} was closed")
        worker = state.worker
        return None if worker is None or worker.dead else worker

    def _query(
        self, state: _SessionState, worker: WorkerClient, kind: int, request: dict[str, Any]
    ) -> tuple[int, bytes]:
        # The worker's own describe budget, plus room for the reply and a kill.
        budget = min(self.limits.timeout_s, DESCRIBE_BUDGET_S) + _QUERY_SLACK_S + self.kill_grace_s
        if worker.abandoned:
            settled = self._settle(state, worker)
            if settled is None:
                raise BoundaryError(
                    f"the worker of session {state.name!r} did not stop an interrupted call and was "
                    "stopped; the session restarts empty on its next run"
                )
            worker = settled
        return self._answer(state, worker, worker.query(kind, request, time.monotonic() + budget))

    def _answer(
        self,
        state: _SessionState,
        worker: WorkerClient,
        reply: tuple[int, bytes] | Died | Invalid | TimedOut,
        doing: str = "",
    ) -> tuple[int, bytes]:
        """A query's reply; a worker that failed, died or did not answer is stopped (BoundaryError)."""
        state.last_used = time.monotonic()
        if isinstance(reply, tuple):
            if reply[0] == P.FAILED:  # bounded: the worker's words end up before a model or in a log
                why = reply[1][:FAILED_BYTES].decode("utf-8", "replace")
                raise BoundaryError(f"the worker could not answer: {why}")
            return reply
        code = self._retire(state, worker, drain=(None, None))
        state.lost = "crashed"
        what, detail = "ended", f" ({_claims.explain_exit(code, self.limits)})"
        if isinstance(reply, TimedOut):
            what, detail = "did not answer in time", ""
        elif isinstance(reply, Invalid):
            what, detail = "sent an invalid reply", ""
        raise BoundaryError(
            f"the worker of session {state.name!r} {what}{doing}{detail}; it was stopped and the session "
            "restarts empty on its next run"
        )

    def _unexpected(
        self, state: _SessionState, worker: WorkerClient, kind: int, *, malformed: bool = False
    ) -> BoundaryError:
        self._retire(state, worker, drain=(None, None))
        state.lost = "crashed"
        what = "a malformed" if malformed else "an unexpected"
        return BoundaryError(
            f"the worker of session {state.name!r} sent {what} reply ({kind!r}); it was stopped and the "
            "session restarts empty on its next run"
        )

    # ---- sessions -------------------------------------------------------------------------------

    def _get(self, session: str) -> _SessionState:
        self._check_open()
        return self._sessions.get(session)

    def _session_for_run(self, session: str) -> _SessionState:
        with self._sessions.lock:
            self._check_open()  # under the lock: close() empties the table under it
            return self._sessions.get_or_create(session, self._new_state)

    def _new_state(self, session: str) -> _SessionState:
        # called under self._sessions.lock, which also guards self._evicted
        state = _SessionState(session, self._root / session_dirname(session))
        if session in self._evicted:
            del self._evicted[session]
            state.lost = "evicted"
        return state

    def _close_state(self, state: _SessionState) -> None:
        state.closed = True
        worker = state.worker
        if worker is not None:
            self._pool.kill(worker)  # an execution in flight ends now, not at its deadline
        with state.lock:
            worker = state.worker
            if worker is not None:
                self._retire(state, worker, drain=(None, None))

    def _evict_idle(self) -> None:
        ttl = self.session_ttl_s
        if ttl is None:
            return
        now = time.monotonic()
        idle = [s for s in self._sessions.values() if now - s.last_used > ttl]
        for state in idle:
            if not state.lock.acquire(blocking=False):
                continue  # busy right now, so not idle
            try:
                if state.closed or time.monotonic() - state.last_used <= ttl:
                    continue
                self._evict(state)
            finally:
                state.lock.release()

    def _evict(self, state: _SessionState) -> None:
        """Drop an idle session and stop its worker, keeping its workspace (caller holds state.lock)."""
        with self._sessions.lock:
            self._sessions.pop(state.name, state)
            self._evicted[state.name] = None
            while len(self._evicted) > _EVICTED_KEPT:
                self._evicted.popitem(last=False)
        state.closed = True
        if state.worker is not None:
            self._retire(state, state.worker, drain=(None, None))

    def hibernate(self, session: str) -> bool:
        state = self._sessions.find(session)
        if state is None or not state.lock.acquire(blocking=False):
            return False  # unknown, or busy right now
        try:
            if state.closed or state.running is not None:
                return False
            self._evict(state)
            return True
        finally:
            state.lock.release()

    def _check_required(self, required: list[str]) -> None:
        description = self.describe()
        enforced = description["enforced"]
        unknown = [name for name in required if _REQUIRE_ALIASES.get(name, name) not in enforced]
        if unknown:
            known = sorted({*enforced, *_REQUIRE_ALIASES})
            raise ValueError(f"unknown protections {unknown}; choose from {known}")
        missing = [name for name in required if not enforced[_REQUIRE_ALIASES.get(name, name)]]
        if not missing:
            return
        reasons = "; ".join(f"{k}: {v}" for k, v in description["unavailable"].items())
        message = f"required protections are not active here: {', '.join(missing)}"
        if reasons:
            message += f" ({reasons})"
        raise BoundaryError(message)


# The OS mechanisms `describe()["unavailable"]` names, as the protections they give.
_REQUIRE_ALIASES = {
    "seccomp": "syscall_filter",
    "landlock": "filesystem_confinement",
    "network_namespace": "network_isolation",
}


# ---- helpers ----------------------------------------------------------------------------------------


class Handoff:
    """A session's state on its way from one worker to another (fork_out, fork_in): a sealed memory
    file and its index. close() when done with it."""

    __slots__ = ("fd", "index")

    def __init__(self, fd: int, index: bytes) -> None:
        self.fd = fd
        self.index = index

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _not_sealed(fd: int, limits: Limits) -> str | None:
    """What is wrong with a descriptor a worker handed over as its state, if anything: it must be a
    memory file sealed against every change, within the snapshot limit."""
    import fcntl

    from ..snapshot._format import snapshot_limit
    from ..snapshot._handoff import SEALS

    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)  # EINVAL for anything but a memfd
        size = os.fstat(fd).st_size
    except OSError:
        return "something other than a memory file"
    if seals & SEALS != SEALS:
        return "a memory file it could still change"
    limit = snapshot_limit(limits)
    if limit is not None and size > limit:
        over = f"over the limit of {limit / 1e6:,.1f} MB (Limits.max_snapshot_bytes)"
        return f"a copy of {size / 1e6:,.1f} MB, {over}"
    return None


def _sign_worker_snapshot(data: bytes, key: bytes) -> SessionSnapshot:
    """Sign what a worker produced with the engine's key, marked as made in a sandboxed worker.

    The worker's header is checked for shape only (it is untrusted data either way: whoever restores
    it loads it under a policy, or inside a worker); the mark keeps an in-process `trusted` restore
    from giving it the host's rights.
    """
    from ..snapshot._format import SANDBOXED_ORIGIN, SessionSnapshot, SnapshotError

    made = SessionSnapshot.from_bytes(data, max_bytes=None)  # the parts were bounded as they came
    try:
        header = json.loads(made.header)
        if not isinstance(header, dict):
            raise TypeError("the header is not an object")
        SnapshotManifest.model_validate(header.get("manifest"))
    except (ValueError, TypeError) as exc:  # json and pydantic errors are ValueErrors
        raise SnapshotError(f"the worker sent a malformed snapshot ({type(exc).__name__})") from None
    header["origin"] = SANDBOXED_ORIGIN
    return SessionSnapshot.sign(header, made.payload, made.buffers, key)


def _refusal(data: bytes) -> Exception:
    """The SnapshotError a worker reported, as the same exception type here."""
    from ..snapshot._format import SnapshotAuthError, SnapshotError, SnapshotRefused, SnapshotTooLarge

    try:
        info = json.loads(data)
        kind, message, reason = str(info["type"]), str(info["message"]), str(info["reason"])
    except (ValueError, KeyError, TypeError):
        return SnapshotError("the worker refused the snapshot without saying why")
    message = message[:2000]
    if kind == "SnapshotRefused":
        return SnapshotRefused(message, reason=reason[:500])
    if kind == "SnapshotAuthError":
        return SnapshotAuthError(message)
    if kind == "SnapshotTooLarge":
        return SnapshotTooLarge(message)
    return SnapshotError(message)


def _janitor(ref: weakref.ref[SubprocessBoundary], stop: threading.Event, interval: float) -> None:
    while not stop.wait(interval):
        boundary = ref()
        if boundary is None:  # dropped without close(); its finalizer cleans up
            return
        boundary._evict_idle()
        del boundary


def _emergency_cleanup(pool: WorkerPool, root: Path | None) -> None:
    # A boundary dropped without close(): the zygote kills every group it started and exits.
    pool.shutdown()
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)
