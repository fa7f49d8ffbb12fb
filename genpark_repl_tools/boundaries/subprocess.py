"""The subprocess boundary: a sandboxed worker process per session, forked from a zygote.

    ReplEngine(boundary="subprocess", limits=Limits(timeout_s=5, memory_mb=1024))
    ReplEngine(boundary="subprocess", session_ttl_s=300, max_workers=8, preload=("numpy",))

See docs/subprocess.md for how it works, what is enforced where, and the limits of the approach.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import re
import shutil
import signal
import socket
import stat
import sys
import tempfile
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Iterable
from hashlib import sha1
from pathlib import Path
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from .._boundary import BaseBoundary, ExecutionRequest, cancelled_before_start
from .._exceptions import BoundaryError, CapacityError, MissingDependency, SessionNotFound, VariableNotFound
from .._limits import Limits
from .._models import ErrorInfo, ExecutionResult, VariableInfo
from ..policy import Policy
from ._subprocess import _protocol as P
from ._subprocess._host import PIPE_BUFFER_BYTES, Died, OutputSink, TimedOut, WorkerHandle, ZygoteClient

__all__ = ["SubprocessBoundary"]

_NOBODY = 65534
_START_TIMEOUT_S = 30.0
_EXIT_WAIT_S = 2.0
_EVICTED_KEPT = 4096
_MIN_HEADROOM_MB = 64
_QUERY_SLACK_S = 2.0
# How long an interrupted cell may take to stop by itself before its worker is killed. The worker's
# watchdog raises the interrupt within 50 ms in pure-Python code.
_INTERRUPT_GRACE_S = 0.25
_VARIABLES = TypeAdapter(list[VariableInfo])
_PASSED_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")
# One thread per library pool keeps the zygote single-threaded after `preload` and keeps workers
# from multiplying their threads by the core count; pass env={...} to override.
_THREAD_CAPS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")

_SIGNAL_TEXT = {
    signal.SIGSEGV: "a segmentation fault (SIGSEGV): invalid memory access, usually in C code or ctypes",
    signal.SIGBUS: "a bus error (SIGBUS): invalid memory access, usually in C code or ctypes",
    signal.SIGILL: "an illegal instruction (SIGILL) in native code",
    signal.SIGFPE: "a floating-point exception (SIGFPE) in native code",
    signal.SIGABRT: "an abort (SIGABRT): a C library or the interpreter gave up",
    signal.SIGKILL: "SIGKILL: the code killed its own process, or the system ran out of memory",
}


class _SessionState:
    __slots__ = (
        "closed",
        "execution_count",
        "last_used",
        "lock",
        "lost",
        "name",
        "running",
        "worker",
        "workspace",
    )

    def __init__(self, name: str, workspace: Path) -> None:
        self.name = name
        self.workspace = workspace
        self.lock = threading.Lock()
        self.worker: WorkerHandle | None = None
        self.execution_count = 0
        self.last_used = time.monotonic()
        self.lost: str | None = None  # why the next worker starts without the old namespace
        self.closed = False
        self.running: ExecutionRequest | None = None  # the call waiting on the worker now


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
        max_workers     live worker processes at most; CapacityError beyond
        network         True lets workers use the network (default: none)
        confine_reads   False lets workers read any file their user may read
        read_paths      extra paths workers may read (with confine_reads)
        user            uid workers run as: "auto" (65534 when the host is root), an int, or None
        preload         modules the zygote imports once, so workers start with them (e.g. "numpy")
        env             extra environment variables for workers (the host's are not passed on)
        kill_grace_s    how long past the deadline a worker may take to stop by itself
        max_processes   RLIMIT_NPROC for workers (only with a non-root user; counted per uid)
        require         protections that must be active, e.g. ("network_isolation",
                        "filesystem_confinement"); BoundaryError at construction otherwise
        python          interpreter for the zygote (default: this one)
    """

    name = "subprocess"

    def __init__(
        self,
        policy: Policy,
        limits: Limits,
        *,
        workspace_root: str | Path | None = None,
        session_ttl_s: float | None = 600.0,
        max_workers: int | None = 32,
        network: bool = False,
        confine_reads: bool = True,
        read_paths: Iterable[str | Path] = (),
        user: int | Literal["auto"] | None = "auto",
        preload: Iterable[str] = (),
        env: dict[str, str] | None = None,
        kill_grace_s: float = 0.25,
        max_processes: int | None = None,
        require: Iterable[str] = (),
        python: str | None = None,
    ) -> None:
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
        self._network = network
        uid, self._user_note = _resolve_user(user)
        self._uid = uid
        self._root, self._owns_root = _workspace_root(workspace_root, policy, dropping=uid is not None)
        self._lock = threading.Lock()
        self._sessions: dict[str, _SessionState] = {}
        self._evicted: OrderedDict[str, None] = OrderedDict()
        self._starting = 0
        # Every live handle, also reachable by the finalizer (which must not reference self).
        self._handles: dict[str, WorkerHandle] = {}
        self._tokens = itertools.count(1)
        self._zygote_lock = threading.Lock()
        self._hello: dict[str, Any] | None = None

        config = {
            "policy": policy.model_dump(mode="json"),
            "limits": limits.model_dump(mode="json"),
            "preload": list(preload),
            "workspace_root": str(self._root),
            "sandbox": {
                "uid": uid,
                "gid": uid,
                "network": network,
                "confine_reads": confine_reads,
                "read_paths": [str(Path(p).resolve()) for p in read_paths],
                "memory_mb": limits.memory_mb,
                "cpu_s": limits.cpu_s,
                "max_open_files": limits.max_open_files,
                "max_file_size_mb": limits.max_file_size_mb,
                "max_processes": max_processes,
            },
        }
        worker_env = {k: os.environ[k] for k in _PASSED_ENV if k in os.environ}
        worker_env.setdefault("PATH", os.defpath)
        worker_env.update(dict.fromkeys(_THREAD_CAPS, "1"))
        worker_env["MALLOC_ARENA_MAX"] = "2"  # glibc reserves 64 MiB of address space per arena
        worker_env.update(env or {})
        # Weak: the zygote's reader thread and the finalizer must not keep an unclosed boundary alive.
        on_death = weakref.WeakMethod(self._on_zygote_death)
        self._zygote = ZygoteClient(
            config, worker_env, python or sys.executable, lambda: (method := on_death()) and method()
        )
        self._zygote.start()
        self._finalizer = weakref.finalize(
            self, _emergency_cleanup, self._zygote, self._handles, self._root if self._owns_root else None
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

    # ---- contract -------------------------------------------------------------------------------

    def execute(self, request: ExecutionRequest) -> ExecutionResult:
        self._check_open()
        while True:
            state = self._session_for_run(request.session)
            with state.lock:
                if state.closed:  # closed or evicted while this call waited for the lock
                    continue
                try:
                    return self._execute_locked(state, request)
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
            return _VARIABLES.validate_json(payload)

    def inspect(self, session: str, name: str) -> VariableInfo:
        state = self._get(session)
        with state.lock:
            worker = self._live_worker(state)
            if worker is None:
                raise VariableNotFound(f"name {name!r} is not defined in session {session!r}")
            kind, payload = self._query(state, worker, P.INSPECT, {"name": name})
            if kind == P.NOT_FOUND:
                raise VariableNotFound(payload.decode("utf-8", "replace"))
            if kind != P.VARIABLE:
                raise self._unexpected(state, worker, kind)
            return VariableInfo.model_validate_json(payload)

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
        with self._lock:
            state = self._sessions.pop(session, None)
        if state is None:
            return False
        self._close_state(state)
        if self._owns_root:
            shutil.rmtree(state.workspace, ignore_errors=True)
        return True

    def sessions(self) -> list[str]:
        with self._lock:
            return list(self._sessions)

    def describe(self) -> dict[str, Any]:
        hello = self._ensure_zygote()
        probe: dict[str, Any] = hello.get("probe", {})
        limits = self.limits
        enforced: dict[str, Any] = {
            "namespace_isolation": True,
            "timeout": (
                f"hard: the worker's process group is killed {self.kill_grace_s:g} s after the deadline "
                "(C-level code included); pure-Python code is stopped at the deadline and keeps the session"
            ),
            "output_bounds": True,
            "memory_limit": f"RLIMIT_AS {limits.memory_mb} MiB per worker" if limits.memory_mb else False,
            "cpu_limit": f"RLIMIT_CPU {limits.cpu_s:g} s per worker process" if limits.cpu_s else False,
            "open_files_limit": f"RLIMIT_NOFILE {limits.max_open_files}" if limits.max_open_files else False,
            "file_size_limit": f"RLIMIT_FSIZE {limits.max_file_size_mb} MiB"
            if limits.max_file_size_mb
            else False,
            "crash_isolation": True,
            "network_isolation": _network_claim(hello, probe),
            "filesystem_confinement": _filesystem_claim(hello, probe),
            "process_tree_kill": (
                "process group; setsid/setpgid refused by seccomp"
                if hello.get("seccomp") and probe.get("setsid_denied")
                else "process group only: code can leave it with setsid (no seccomp)"
            ),
            "syscall_filter": (
                "seccomp: namespaces, ptrace, mounts, kernel modules, bpf, perf, io_uring, setrlimit refused"
                if hello.get("seccomp") and probe.get("setsid_denied")
                else False
            ),
            "privileges": _privilege_claim(hello, probe, self._user_note),
            "signal_isolation": "workers cannot signal the host"
            if probe.get("signal_host_denied")
            else False,
            "orphan_cleanup": (
                "workers die with the zygote (parent-death signal); the zygote kills them when the host exits"
                if hello.get("pdeathsig")
                else "the zygote kills workers when the host exits (no parent-death signal on this OS)"
            ),
        }
        unavailable = {
            key: reason
            for key, reason in (
                ("network_namespace", hello.get("network_reason")),
                ("seccomp", hello.get("seccomp_reason")),
                ("landlock", hello.get("landlock_reason")),
            )
            if reason
        }
        with self._lock:
            live = sum(1 for s in self._sessions.values() if s.worker is not None and not s.worker.dead)
        return {
            "boundary": self.name,
            "policy": self.policy.name,
            "enforced": enforced,
            "unavailable": unavailable,
            "workers": {"live": live, "max": self.max_workers, "uid": hello.get("uid")},
            "session_ttl_s": self.session_ttl_s,
            "workspace_root": str(self._root),
            "platform": hello.get("platform"),
        }

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._janitor_stop.set()
        with self._lock:
            states = list(self._sessions.values())
            self._sessions.clear()
        for state in states:
            state.closed = True
            worker = state.worker
            if worker is not None:
                self._zygote.kill(worker.token)
        # The zygote kills every group it started, reaps them and exits; waiting for it means no
        # worker outlives close().
        self._zygote.close()
        for state in states:
            if state.lock.acquire(timeout=_EXIT_WAIT_S):
                try:
                    if state.worker is not None:
                        state.worker.close()
                        state.worker = None
                finally:
                    state.lock.release()
        with self._lock:
            for handle in self._handles.values():
                handle.close()
            self._handles.clear()
        if self._janitor is not None and self._janitor is not threading.current_thread():
            self._janitor.join(_EXIT_WAIT_S)
        if self._owns_root:
            shutil.rmtree(self._root, ignore_errors=True)
        self._finalizer.detach()

    # ---- execution ------------------------------------------------------------------------------

    def _execute_locked(self, state: _SessionState, request: ExecutionRequest) -> ExecutionResult:
        limits = self.limits
        timeout = request.timeout_s if request.timeout_s is not None else limits.timeout_s
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
        out = OutputSink(limits.max_output_chars)
        err = OutputSink(limits.max_output_chars)
        rid = worker.send_json(P.EXEC, {"code": request.code, "timeout_s": timeout})
        state.running = request
        try:
            if worker.pid is None:
                self._await_ready(state, worker)
                state.lost = None  # the fresh worker knows (restarted=...) and reports it in this result
            if request.cancelled:  # cancelled between the check above and `running` being set
                self.interrupt(state.name, request)
            started = time.monotonic()
            reply = worker.wait(started + timeout + self.kill_grace_s, out, err, rid) if rid else Died()
        except BaseException:
            self._abandon(state, worker)
            raise
        finally:
            state.running = None
        if isinstance(reply, tuple) and reply[0] == P.RESULT:
            try:
                result = ExecutionResult.model_validate_json(reply[1])
            except ValidationError:
                reply = Died()
            else:
                state.execution_count = result.execution_count
                _attach_output(result, out, err)
                result.notes[:0] = notes
                return result
        killed = isinstance(reply, TimedOut)
        interrupted = killed and reply.interrupted  # type: ignore[union-attr]
        code = self._retire(state, worker, drain=(out, err))
        elapsed = time.monotonic() - started
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
        _attach_output(result, out, err)
        if interrupted and code in (-signal.SIGKILL, None):
            result.status = "cancelled"
            result.error = ErrorInfo(
                type="Cancelled",
                message=(
                    f"execution was interrupted after {elapsed:.1f} s; the code did not stop by itself "
                    "(C-level work cannot be interrupted), so its worker process was killed"
                ),
                hint="The session's variables are lost; the next run starts a fresh session.",
            )
        elif killed and code in (-signal.SIGKILL, None):
            result.status = "timeout"
            result.error = ErrorInfo(
                type="Timeout",
                message=(
                    f"execution stopped after {elapsed:.1f} s (limit {timeout:g} s); the code did not stop "
                    "by itself (C-level work cannot be interrupted), so its worker process was killed"
                ),
                hint=(
                    "The session's variables are lost; the next run starts a fresh session. "
                    "Make the code faster, work on less data, or split the work into several calls."
                ),
            )
        elif state.closed:
            result.error = ErrorInfo(
                type="SessionClosed",
                message="the session was closed while this code ran",
                hint="Run the code again; it starts a new, empty session.",
            )
        elif not isinstance(reply, (TimedOut, Died)):
            result.error = ErrorInfo(
                type="WorkerCrashed",
                message="the worker process sent an invalid reply and was stopped",
                hint="The session's variables are lost; the next run starts a fresh session.",
            )
        else:
            result.error = ErrorInfo(
                type="WorkerCrashed",
                message=_explain_exit(code, limits),
                hint=(
                    "The session's variables are lost; the next run starts a fresh session. "
                    "Re-create what you need and avoid what ended the process."
                ),
            )
        return result

    def _abandon(self, state: _SessionState, worker: WorkerHandle) -> None:
        """The caller stopped waiting mid-call (KeyboardInterrupt, a cancelled task, an exception
        raised into its thread). Stop the work it started; the next call on the session settles it."""
        if worker.dead:
            return
        if not worker.pending:
            return  # the reply was read; nothing is in flight
        worker.abandoned = True
        self._interrupt_worker(worker)

    def _settle(self, state: _SessionState, worker: WorkerHandle) -> WorkerHandle | None:
        """Wait (bounded) for the late reply of an abandoned call and drop it with its output; if it
        does not come, kill the worker. Returns the worker if it is usable, else None."""
        rid = worker.pending
        if rid and not worker.dead:
            reply = worker.wait(time.monotonic() + _INTERRUPT_GRACE_S + self.kill_grace_s, rid=rid)
            if isinstance(reply, tuple):
                worker.abandoned = False
                return worker
        self._retire(state, worker, drain=(None, None))
        state.lost = "crashed"
        return None

    def interrupt(self, session: str, request: ExecutionRequest | None = None) -> bool:
        with self._lock:
            state = self._sessions.get(session)
        if state is None:
            return False
        running, worker = state.running, state.worker
        if running is None or worker is None or (request is not None and running is not request):
            return False
        self._interrupt_worker(worker)
        # A cell that ignores the interrupt (C code, a handler of its own) is killed after this grace.
        worker.cut_short(_INTERRUPT_GRACE_S + self.kill_grace_s)
        return True

    def _interrupt_worker(self, worker: WorkerHandle) -> None:
        """Stop the request the worker is serving (or will serve): its id into the worker's
        interrupt pipe, then the zygote rings the bell (SIGUSR1). Ids make it exact: an interrupt
        that arrives after its request finished is ignored, never applied to the next one."""
        if worker.pending and worker.post_interrupt(worker.pending):
            self._zygote.interrupt(worker.token)

    def _start_worker(self, state: _SessionState, *, restarted: bool) -> WorkerHandle:
        self._ensure_zygote()
        with self._lock:
            cap = self.max_workers
            live = sum(1 for s in self._sessions.values() if s.worker is not None and not s.worker.dead)
            if cap is not None and live + self._starting >= cap:
                raise CapacityError(
                    f"{cap} worker processes are live (max_workers={cap}); close a session with "
                    "engine.close(session) or raise max_workers"
                )
            self._starting += 1
        try:
            state.workspace.mkdir(mode=0o700, parents=True, exist_ok=True)
            token = str(next(self._tokens))
            host_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            int_r, int_w = os.pipe()
            for fd in (out_r, err_r):
                os.set_blocking(fd, False)
                if hasattr(fcntl, "F_SETPIPE_SZ"):  # room to batch output reads (Linux)
                    with contextlib.suppress(OSError):
                        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BUFFER_BYTES)
            try:
                self._zygote.spawn(
                    token,
                    {"session": state.name, "workspace": str(state.workspace), "restarted": restarted},
                    [worker_end.fileno(), out_w, err_w, int_r],
                )
            except BaseException:
                host_end.close()
                for fd in (out_r, err_r, int_w):
                    os.close(fd)
                raise
            finally:
                worker_end.close()
                for fd in (out_w, err_w, int_r):
                    os.close(fd)
            worker = WorkerHandle(token, host_end, out_r, err_r, int_w)
            with self._lock:
                state.worker = worker
                self._handles[token] = worker
        finally:
            with self._lock:
                self._starting -= 1
        return worker

    def _await_ready(self, state: _SessionState, worker: WorkerHandle) -> None:
        err = OutputSink(4000)
        try:
            reply = worker.wait(time.monotonic() + _START_TIMEOUT_S, None, err)
        except BaseException:
            self._retire(state, worker, drain=(None, None))  # nothing in it yet worth keeping
            raise
        if isinstance(reply, tuple) and reply[0] == P.READY:
            worker.pid = int(json.loads(reply[1])["pid"])
            return
        failure = self._zygote.spawn_failure(worker.token)
        self._retire(state, worker, drain=(None, err))
        detail = failure or err.finish()[0].strip() or "it exited during setup"
        raise BoundaryError(f"the worker for session {state.name!r} could not start: {detail}")

    def _retire(
        self, state: _SessionState, worker: WorkerHandle, drain: tuple[OutputSink | None, OutputSink | None]
    ) -> int | None:
        """Kill the worker's group (harmless if it is gone), wait until it is reaped, close our ends."""
        self._zygote.kill(worker.token)
        code = self._zygote.wait_exit(worker.token, _EXIT_WAIT_S)
        worker.drain(*drain, limit=1 << 22, until_eof_s=0.2)
        worker.close()
        with self._lock:
            if state.worker is worker:
                state.worker = None
            self._handles.pop(worker.token, None)
        return code

    # ---- queries --------------------------------------------------------------------------------

    def _live_worker(self, state: _SessionState) -> WorkerHandle | None:
        """The session's worker, if it has one (caller holds state.lock)."""
        if state.closed:
            raise SessionNotFound(f"session {state.name!r} was closed")
        worker = state.worker
        return None if worker is None or worker.dead else worker

    def _query(
        self, state: _SessionState, worker: WorkerHandle, kind: int, request: dict[str, Any]
    ) -> tuple[int, bytes]:
        budget = min(self.limits.timeout_s, 5.0) + _QUERY_SLACK_S + self.kill_grace_s
        if worker.abandoned:
            settled = self._settle(state, worker)
            if settled is None:
                raise BoundaryError(
                    f"the worker of session {state.name!r} did not stop an interrupted call and was "
                    "stopped; the session restarts empty on its next run"
                )
            worker = settled
        reply: tuple[int, bytes] | Died | TimedOut = Died()
        rid = worker.send_json(kind, request)
        if rid:
            try:
                reply = worker.wait(time.monotonic() + budget, rid=rid)
            except BaseException:
                self._abandon(state, worker)
                raise
        state.last_used = time.monotonic()
        if isinstance(reply, tuple):
            if reply[0] == P.FAILED:
                raise BoundaryError(f"the worker could not answer: {reply[1].decode('utf-8', 'replace')}")
            return reply
        what = "did not answer in time" if isinstance(reply, TimedOut) else "ended"
        code = self._retire(state, worker, drain=(None, None))
        state.lost = "crashed"
        detail = "" if isinstance(reply, TimedOut) else f" ({_explain_exit(code, self.limits)})"
        raise BoundaryError(
            f"the worker of session {state.name!r} {what}{detail}; it was stopped and the session "
            "restarts empty on its next run"
        )

    def _unexpected(self, state: _SessionState, worker: WorkerHandle, kind: int) -> BoundaryError:
        self._retire(state, worker, drain=(None, None))
        state.lost = "crashed"
        return BoundaryError(f"the worker of session {state.name!r} sent an unexpected reply ({kind!r})")

    # ---- sessions -------------------------------------------------------------------------------

    def _get(self, session: str) -> _SessionState:
        self._check_open()
        with self._lock:
            state = self._sessions.get(session)
        if state is None:
            raise SessionNotFound(f"no session {session!r}; run code in it first")
        return state

    def _session_for_run(self, session: str) -> _SessionState:
        with self._lock:
            self._check_open()
            state = self._sessions.get(session)
            if state is None:
                cap = self.limits.max_sessions
                if cap is not None and len(self._sessions) >= cap:
                    raise CapacityError(
                        f"{cap} sessions are live (Limits.max_sessions); close one with engine.close(session)"
                    )
                state = _SessionState(session, self._root / _dirname(session))
                state.lost = "evicted" if self._was_evicted(session) else None
                self._sessions[session] = state
        return state

    def _was_evicted(self, session: str) -> bool:
        # caller holds self._lock
        if session in self._evicted:
            del self._evicted[session]
            return True
        return False

    def _close_state(self, state: _SessionState) -> None:
        state.closed = True
        worker = state.worker
        if worker is not None:
            self._zygote.kill(worker.token)  # an execution in flight ends now, not at its deadline
        with state.lock:
            worker = state.worker
            if worker is not None:
                self._retire(state, worker, drain=(None, None))

    def _evict_idle(self) -> None:
        ttl = self.session_ttl_s
        if ttl is None:
            return
        now = time.monotonic()
        with self._lock:
            idle = [s for s in self._sessions.values() if now - s.last_used > ttl]
        for state in idle:
            if not state.lock.acquire(blocking=False):
                continue  # busy right now, so not idle
            try:
                if state.closed or time.monotonic() - state.last_used <= ttl:
                    continue
                with self._lock:
                    if self._sessions.get(state.name) is state:
                        del self._sessions[state.name]
                    self._evicted[state.name] = None
                    while len(self._evicted) > _EVICTED_KEPT:
                        self._evicted.popitem(last=False)
                state.closed = True
                if state.worker is not None:
                    self._retire(state, state.worker, drain=(None, None))
            finally:
                state.lock.release()

    # ---- zygote ---------------------------------------------------------------------------------

    def _ensure_zygote(self) -> dict[str, Any]:
        with self._zygote_lock:
            if self._hello is not None and self._zygote.alive:
                return self._hello
            if self._hello is not None:  # it died (killed from outside); its workers died with it
                self._zygote.start()
            hello = self._zygote.hello(_START_TIMEOUT_S)
            memory_mb = self.limits.memory_mb
            if memory_mb is not None:
                needed = hello.get("vm_size_kb", 0) // 1024 + _MIN_HEADROOM_MB
                if memory_mb < needed:
                    raise BoundaryError(
                        f"Limits.memory_mb={memory_mb} is too small: a worker starts with "
                        f"{needed - _MIN_HEADROOM_MB} MiB of address space; use at least {needed}"
                    )
            self._hello = hello
            return hello

    def _on_zygote_death(self) -> None:
        """The zygote was killed from outside (it never exits on its own while the host lives).

        Its workers died with it (parent-death signal), but what they started is now orphaned and
        nobody kills their groups: do it from here. Each group id is a worker pid we were told; the
        kernel does not reuse it while any member lives, and a dead, empty group is reused only
        after the pid space wraps, so the window for hitting an unrelated group is negligible.
        """
        with self._lock:
            pids = [s.worker.pid for s in self._sessions.values() if s.worker is not None and s.worker.pid]
        for pid in pids:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)

    def _check_required(self, required: list[str]) -> None:
        description = self.describe()
        enforced = description["enforced"]
        unknown = [name for name in required if name not in enforced]
        if unknown:
            raise ValueError(f"unknown protections {unknown}; choose from {sorted(enforced)}")
        missing = [name for name in required if not enforced[name]]
        if not missing:
            return
        reasons = "; ".join(f"{k}: {v}" for k, v in description["unavailable"].items())
        message = f"required protections are not active here: {', '.join(missing)}"
        if reasons:
            message += f" ({reasons})"
        if "pyseccomp is not installed" in reasons:
            raise MissingDependency(message)
        raise BoundaryError(message)


# ---- helpers ----------------------------------------------------------------------------------------


def _attach_output(result: ExecutionResult, out: OutputSink, err: OutputSink) -> None:
    stdout, stdout_cut = out.finish()
    stderr, stderr_cut = err.finish()
    result.stdout = result.stdout + stdout if result.stdout else stdout
    result.stderr = result.stderr + stderr if result.stderr else stderr
    result.stdout_truncated = result.stdout_truncated or stdout_cut
    result.stderr_truncated = result.stderr_truncated or stderr_cut


def _explain_exit(code: int | None, limits: Limits) -> str:
    if code is None:
        return "the worker process ended unexpectedly"
    if code >= 0:
        return (
            f"the code ended the worker process with exit code {code} (os._exit or a C library calling exit)"
        )
    signum = -code
    if signum == signal.SIGXCPU:
        return f"the worker used up its CPU-time limit (Limits.cpu_s = {limits.cpu_s:g} s) and was stopped"
    if signum == signal.SIGKILL and limits.cpu_s is not None:
        return (
            "the worker process was killed (SIGKILL): the code killed its own process, it passed its "
            "CPU-time limit, or the system ran out of memory"
        )
    text = _SIGNAL_TEXT.get(signal.Signals(signum)) if signum in signal.valid_signals() else None
    if text is None:
        name = signal.Signals(signum).name if signum in signal.valid_signals() else str(signum)
        text = f"signal {name}"
    return f"the worker process crashed with {text}"


def _network_claim(hello: dict[str, Any], probe: dict[str, Any]) -> str | bool:
    if not probe.get("network_blocked"):
        return False
    if hello.get("network_namespace"):
        text = f"{hello['network_namespace']} with no interface up"
    elif hello.get("seccomp_blocks_inet"):
        text = "seccomp: AF_INET/AF_INET6 sockets refused"
        if hello.get("landlock_net"):
            text += "; Landlock: TCP bind/connect refused"
    else:
        return False
    if probe.get("unix_socket_blocked"):
        text += "; Unix sockets by path refused (seccomp)"
    return text


def _filesystem_claim(hello: dict[str, Any], probe: dict[str, Any]) -> str | bool:
    if not (hello.get("landlock_abi") and probe.get("write_outside_denied") and probe.get("write_inside")):
        return False
    text = f"Landlock ABI {hello['landlock_abi']}: writes only inside the session's workspace"
    if hello.get("confine_reads") and probe.get("read_outside_denied"):
        text += "; reads only system, Python and workspace paths"
    return text


def _privilege_claim(hello: dict[str, Any], probe: dict[str, Any], note: str | None) -> str:
    uid = probe.get("uid", hello.get("uid"))
    if hello.get("dropped_root"):
        return f"uid {uid} (root dropped), no capabilities"
    if uid == 0:
        return f"root without capabilities{f' ({note})' if note else ''}"
    return f"the host's user (uid {uid}), no capabilities"


def _resolve_user(user: int | Literal["auto"] | None) -> tuple[int | None, str | None]:
    """The uid workers switch to (None: keep the host's), and why "auto" kept root if it did."""
    if user is None:
        return None, "user=None"
    if user != "auto":
        if not isinstance(user, int) or isinstance(user, bool) or user < 0:
            raise ValueError(f"user must be 'auto', None or a uid, got {user!r}")
        return user, None
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None, None
    blocked = _first_private_path(_interpreter_paths())
    if blocked is not None:
        return None, (
            f"{blocked} is not readable by other users, so a worker running as uid {_NOBODY} could not "
            "import from this Python installation"
        )
    return _NOBODY, None


def _interpreter_paths() -> list[str]:
    import sysconfig

    paths = {os.path.dirname(os.__file__), os.path.realpath(sys.executable), os.path.dirname(__file__)}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path and os.path.exists(path):
            paths.add(path)
    return sorted(paths)


def _first_private_path(paths: list[str]) -> str | None:
    """The first directory on the way to `paths` that others cannot search or read, if any."""
    for path in paths:
        target = Path(path)
        for part in (*reversed(target.parents), target):
            try:
                mode = os.stat(part).st_mode
            except OSError:
                return str(part)
            needed = 0o004 if part == target and not stat.S_ISDIR(mode) else 0o001
            if part == target and stat.S_ISDIR(mode):
                needed = 0o005
            if mode & needed != needed:
                return str(part)
    return None


def _workspace_root(given: str | Path | None, policy: Policy, *, dropping: bool) -> tuple[Path, bool]:
    if given is None and policy.workspace is not None:
        given = policy.workspace
    if given is None:
        root = Path(tempfile.mkdtemp(prefix="genpark-repl-"))
        if dropping:
            os.chmod(root, 0o711)  # the unprivileged worker must reach its own directory inside
        return root, True
    root = Path(given).resolve()
    root.mkdir(parents=True, exist_ok=True)
    if dropping:
        for part in (root, *root.parents):
            if not os.stat(part).st_mode & 0o001:
                raise BoundaryError(
                    f"workers run as an unprivileged user and cannot reach {root}: {part} is not "
                    f"searchable by others (chmod o+x {part}), or pass user=None"
                )
    return root, False


def _dirname(session: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", session)[:40].lstrip(".") or "session"
    return f"{safe}-{sha1(session.encode('utf-8', 'surrogatepass')).hexdigest()[:10]}"


def _janitor(ref: weakref.ref[SubprocessBoundary], stop: threading.Event, interval: float) -> None:
    while not stop.wait(interval):
        boundary = ref()
        if boundary is None:  # dropped without close(); its finalizer cleans up
            return
        boundary._evict_idle()
        del boundary


def _emergency_cleanup(zygote: ZygoteClient, handles: dict[str, WorkerHandle], root: Path | None) -> None:
    # A boundary dropped without close(): the zygote kills every group it started and exits.
    zygote.close()
    for handle in list(handles.values()):
        handle.close()
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)
