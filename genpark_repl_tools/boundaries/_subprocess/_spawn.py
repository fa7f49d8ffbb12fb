"""The launcher of the subprocess boundary: the zygote, and starting, resuming and retiring workers.

The boundary decides which session has which worker and when one goes; `WorkerPool` does it: it owns
the zygote client, every live worker client and the `max_workers` cap. It is used only when a worker
is started, resumed or ended: a request goes from the boundary to the worker's client (_host) and
the wire, never through here. The host never forks: the zygote is started with `subprocess.Popen`
(fork+exec, safe from a threaded host) and forks the workers itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from importlib.util import resolve_name
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..._exceptions import BoundaryError, CapacityError
from ..._limits import Limits
from ...policy import Policy
from . import _protocol as P
from . import _zygote
from ._host import OutputSink, WorkerClient

if TYPE_CHECKING:
    from ._egress import SessionEgress

__all__ = [
    "IDENTITY",
    "START_TIMEOUT_S",
    "WorkerPool",
    "ZygoteClient",
    "interpreter_paths",
    "package_identity",
    "worker_env",
    "zygote_config",
]

START_TIMEOUT_S = 30.0
_EXIT_WAIT_S = 2.0
_MIN_HEADROOM_MB = 64
_PASSED_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")
# The zygote imports the snapshot code (see zygote_config). Named as relative imports are: a module
# that moves fails every zygote's start, loudly.
_SNAPSHOT_MODULES = tuple(
    resolve_name(name, __package__) for name in ("...snapshot._load", "...snapshot._save")
)
# One thread per library pool keeps the zygote single-threaded after `preload` and keeps workers
# from multiplying their threads by the core count; pass env={...} to override.
_THREAD_CAPS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")
_READ_CHUNK = 1 << 16
_MAX_PASSED = 4  # descriptors one read of the zygote's socket may carry (a SPARE frame has one)
_EXITS_KEPT = 4096
_PIPE_BUFFER_BYTES = 256 * 1024


# Named through the module object, so a rename or move cannot leave a stale string behind.
_BOOTSTRAP = (
    "import json, sys\n"
    "sys.path[:] = json.loads(sys.argv[1])\n"
    f"from {_zygote.__name__} import {_zygote.main.__name__}\n"
    f"{_zygote.main.__name__}(int(sys.argv[2]))\n"
)
# The package's identity: its version and a digest of every module's source. A zygote started by another
# interpreter (a venv's, an image's) imports its own copy of the package, which must be this one, or it
# would read this host's frames and configuration with other code. The source of a function, so the
# other interpreter runs exactly what this one does.
IDENTITY = (
    "def identity(package):\n"
    "    import hashlib, os\n"
    "    root, digest = os.path.dirname(package.__file__), hashlib.sha256()\n"
    "    for base, dirs, files in sorted(os.walk(root)):\n"
    "        dirs.sort()\n"
    "        for name in sorted(f for f in files if f.endswith('.py')):\n"
    "            path = os.path.join(base, name)\n"
    "            digest.update(os.path.relpath(path, root).replace(os.sep, '/').encode() + b'\\0')\n"
    "            with open(path, 'rb') as f:\n"
    "                digest.update(f.read())\n"
    "    return package.__version__ + '/' + digest.hexdigest()[:16]\n"
)
_identity: list[str] = []
# Run by another interpreter with the zygote's flags (-I): its own sys.path, and its package's identity.
_INTERPRETER_PROBE = (
    "import json, sys\n" + IDENTITY + "try:\n"
    "    import genpark_repl_tools as g\n"
    "except ImportError as exc:\n"
    "    print(json.dumps({'error': str(exc), 'version': sys.version.split()[0]}))\n"
    "    raise SystemExit\n"
    "print(json.dumps({'path': sys.path, 'identity': identity(g), 'version': sys.version.split()[0]}))\n"
)


def package_identity() -> str:
    """This process's package identity (see IDENTITY)."""
    if not _identity:
        namespace: dict[str, Any] = {}
        exec(IDENTITY, namespace)  # the same function the other interpreter runs
        _identity.append(namespace["identity"](sys.modules[__name__.partition(".")[0]]))
    return _identity[0]


def interpreter_paths(python: str) -> list[str]:
    """The sys.path `python` starts with (-I): a zygote of another interpreter must import its own
    standard library and packages, never this process's (another version's compiled extensions).
    BoundaryError unless it runs and imports this very package."""
    try:
        done = subprocess.run(
            [python, "-I", "-c", _INTERPRETER_PROBE],
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,
            env={k: os.environ[k] for k in _PASSED_ENV if k in os.environ},
        )
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        raise BoundaryError(f"the interpreter {python} could not be started: {exc}") from None
    if "error" in found:
        raise BoundaryError(
            f"the interpreter {python} (Python {found['version']}) cannot import genpark_repl_tools "
            f"({found['error']}); install genpark-repl-tools=={package_identity().split('/')[0]} "
            "into its environment"
        )
    if found["identity"] != package_identity():
        raise BoundaryError(
            f"the interpreter {python} has genpark_repl_tools {found['identity']}, this process "
            f"{package_identity()}: install this process's version into its environment"
        )
    return [p for p in found["path"] if p]


def zygote_config(
    policy: Policy,
    limits: Limits,
    *,
    workspace_root: Path,
    uid: int | None,
    network: bool,
    confine_reads: bool,
    read_paths: Iterable[str | Path],
    preload: Iterable[str],
    max_processes: int | None,
    checkpoints: bool = True,
    egress_port: int | None = None,
    egress_in_place: bool = False,
) -> dict[str, Any]:
    """What the zygote needs to build the runtime and sandbox every worker the same way."""
    return {
        "checkpoints": checkpoints,
        "policy": policy.model_dump(mode="json"),
        "limits": limits.model_dump(mode="json"),
        # The snapshot code too: a worker restoring a hibernated session would import it on every
        # return (about 20 ms); imported once in the zygote, each fork shares it.
        "preload": [*preload, *_SNAPSHOT_MODULES],
        "workspace_root": str(workspace_root),
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
            "egress_port": egress_port,
            "egress_in_place": egress_in_place,
        },
    }


def worker_env(extra: dict[str, str] | None) -> dict[str, str]:
    """The workers' environment: a few of the host's variables (never all of them), plus `extra`."""
    env = {k: os.environ[k] for k in _PASSED_ENV if k in os.environ}
    env.setdefault("PATH", os.defpath)
    env.update(dict.fromkeys(_THREAD_CAPS, "1"))
    env["MALLOC_ARENA_MAX"] = "2"  # glibc reserves 64 MiB of address space per arena
    env.update(extra or {})
    return env


class ZygoteClient:
    """Starts the zygote and talks to it. Thread-safe; one reader thread collects its messages."""

    def __init__(
        self,
        config: dict[str, Any],
        env: dict[str, str],
        python: str,
        on_death: Callable[[], None] | None = None,
        paths: list[str] | None = None,
    ) -> None:
        self._config = config
        self._paths = paths  # the zygote's sys.path; None: this process's (the same interpreter)
        self._on_death = on_death
        self._closing = False
        self._env = env
        self._python = python
        self._send_lock = threading.Lock()
        self._cond = threading.Condition()
        self._exits: OrderedDict[str, int] = OrderedDict()
        self._failures: dict[str, str] = {}
        self._kept: set[str] = set()  # dead workers whose checkpoint copy the zygote holds
        # The zygote's spare (its pid, and the socket it waits on), until a spawn takes it.
        self._spare: tuple[int, socket.socket] | None = None
        self._hello: dict[str, Any] | None = None
        self._dead = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._ctl: socket.socket | None = None
        self._stderr: IO[bytes] | None = None
        self._reader: threading.Thread | None = None

    # ---- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self._release_previous()
        host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        paths = self._paths
        if paths is None:
            paths = [os.path.abspath(p) if p else os.getcwd() for p in sys.path]
        # Kept open for the zygote's lifetime: its last words when it fails to start.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        try:
            self._proc = subprocess.Popen(
                [self._python, "-I", "-c", _BOOTSTRAP, json.dumps(paths), str(child.fileno())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._stderr,
                pass_fds=(child.fileno(),),
                env=self._env,
                close_fds=True,
                # Its own session: a Ctrl-C in the host's terminal must not reach the workers.
                start_new_session=True,
            )
        except OSError as exc:
            host.close()
            raise BoundaryError(f"could not start the zygote ({self._python}): {exc}") from exc
        finally:
            child.close()
        self._ctl = host
        with self._cond:
            self._hello = None
            self._dead = False
        P.send_frame(host, P.CONFIG, json.dumps(self._config).encode())
        self._reader = threading.Thread(
            target=self._read_loop, args=(host,), name="genpark-repl-zygote-reader", daemon=True
        )
        self._reader.start()

    def hello(self, timeout: float) -> dict[str, Any]:
        """The zygote's report of what it detected (waits for its start)."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._hello is not None or self._dead, timeout):
                raise BoundaryError(f"the zygote did not start within {timeout:g} s")
            hello = self._hello
        if hello is None or "error" in hello:
            detail = hello.get("error") if hello else self._stderr_text()
            raise BoundaryError(f"the subprocess boundary could not start: {detail}")
        return hello

    @property
    def alive(self) -> bool:
        with self._cond:
            return not self._dead and self._proc is not None

    def _release_previous(self) -> None:
        """After the zygote died: reap it and close what pointed at it."""
        proc, ctl, stderr, reader = self._proc, self._ctl, self._stderr, self._reader
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if ctl is not None:
            ctl.close()
        if reader is not None and reader is not threading.current_thread():
            reader.join(5)
        if stderr is not None:
            stderr.close()
        self._drop_spare()
        self._proc = self._ctl = self._stderr = self._reader = None

    def close(self, timeout: float = 5.0) -> None:
        self._closing = True
        proc, ctl = self._proc, self._ctl
        if proc is None or ctl is None:
            return
        with self._send_lock, contextlib.suppress(OSError):
            P.send_frame(ctl, P.QUIT)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            # Its workers die with it (parent-death signal); its own children were already killed.
            proc.kill()
            proc.wait(timeout)
        ctl.close()
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(timeout)
        if self._stderr is not None:
            self._stderr.close()
        self._drop_spare()
        with self._cond:
            self._dead = True
            self._cond.notify_all()

    # ---- requests -------------------------------------------------------------------------------

    def spawn(self, token: str, request: dict[str, Any], fds: list[int]) -> None:
        """Start worker `token`: the zygote's spare if it has one (the request goes to it straight,
        and the zygote learns who took it), else a worker the zygote forks for the request."""
        with self._cond:
            spare, self._spare = self._spare, None
        if spare is not None:
            pid, sock = spare
            try:
                P.send_frame(sock, P.SPAWN, json.dumps(request).encode(), fds)
            except OSError:  # it died unassigned: the zygote forks one, as without spares
                pass
            else:
                self._send_with_fds(P.TAKEN, {"token": token, "pid": pid, **request}, [])
                return
            finally:
                sock.close()
        self._send_with_fds(P.SPAWN, {"token": token, **request}, fds)

    def _drop_spare(self) -> None:
        with self._cond:
            spare, self._spare = self._spare, None
        if spare is not None:
            spare[1].close()  # the spare sees its socket close, and exits

    def _send_with_fds(self, kind: int, message: dict[str, Any], fds: list[int]) -> None:
        ctl = self._ctl
        if ctl is None or not self.alive:
            raise BoundaryError("the zygote is not running")
        with self._send_lock:
            try:
                P.send_frame(ctl, kind, json.dumps(message).encode(), fds)
            except OSError as exc:
                raise BoundaryError(f"the zygote is not reachable: {exc}") from exc

    def kill(self, token: str) -> None:
        self._tell(P.KILL, token)

    def resume(self, token: str, old: str, request: dict[str, Any], fds: list[int]) -> None:
        """Make the checkpoint copy of dead worker `old` the worker `token` (its READY, or a spawn
        failure, follows as for `spawn`)."""
        self._send_with_fds(P.RESUME, {"token": token, "from": old, **request}, fds)

    def discard(self, token: str) -> None:
        """Drop the checkpoint copy the zygote holds for dead worker `token`, if any."""
        with self._cond:
            self._kept.discard(token)
        self._tell(P.DISCARD, token)

    def kept_checkpoint(self, token: str) -> bool:
        """Whether the zygote kept a checkpoint copy when worker `token` ended (asked once)."""
        with self._cond:
            if token in self._kept:
                self._kept.discard(token)
                return True
            return False

    def interrupt(self, token: str) -> None:
        """Ask the worker to stop its running cell (SIGUSR1; the worker turns it into a cancel)."""
        self._tell(P.INTERRUPT, token)

    def _tell(self, kind: int, token: str) -> None:
        ctl = self._ctl
        if ctl is None:
            return
        with self._send_lock, contextlib.suppress(OSError):
            P.send_frame(ctl, kind, json.dumps({"token": token}).encode())

    def wait_exit(self, token: str, timeout: float) -> int | None:
        """Exit code (negative: signal number) of the worker, once the zygote reaped it."""
        with self._cond:
            # A worker that never started (a failed spawn or resume) never exits either.
            self._cond.wait_for(
                lambda: token in self._exits or token in self._failures or self._dead, timeout
            )
            return self._exits.pop(token, None)

    def spawn_failure(self, token: str) -> str | None:
        with self._cond:
            return self._failures.pop(token, None)

    # ---- reader ---------------------------------------------------------------------------------

    def _read_loop(self, ctl: socket.socket) -> None:
        frames = P.FrameBuffer()
        passed: deque[int] = deque()  # descriptors, in the order of the frames that carry them
        while True:
            try:
                data, ancdata, _, _ = ctl.recvmsg(_READ_CHUNK, socket.CMSG_SPACE(_MAX_PASSED * 4))
            except OSError:
                data, ancdata = b"", []
            passed.extend(P.passed_fds(ancdata))
            if not data:
                break
            frames.feed(data)
            try:
                while (frame := frames.next()) is not None:
                    self._handle(*frame, passed)
            except (P.ProtocolError, ValueError, IndexError):
                break
        for fd in passed:
            os.close(fd)
        with self._cond:
            current = self._ctl is ctl
            if current:
                self._dead = True
            self._cond.notify_all()
        if current:
            self._drop_spare()  # it waits for a request from us; without a zygote none comes
        if current and not self._closing and self._on_death is not None:
            self._on_death()

    def _handle(self, kind: int, payload: bytes, passed: deque[int]) -> None:
        message = json.loads(payload) if payload else {}
        if kind == P.SPARE:
            spare = (int(message["pid"]), socket.socket(fileno=passed.popleft()))
            with self._cond:
                old, self._spare = self._spare, spare
            if old is not None:  # never expected: the zygote keeps one spare until it is taken
                old[1].close()
            if self._closing:
                self._drop_spare()
            return
        with self._cond:
            if kind == P.HELLO:
                self._hello = message
            elif kind == P.EXITED:
                self._exits[message["token"]] = int(message["code"])
                if message.get("checkpoint"):
                    self._kept.add(message["token"])
                while len(self._exits) > _EXITS_KEPT:
                    self._exits.popitem(last=False)
            elif kind == P.SPAWN_FAILED:
                self._failures[message["token"]] = str(message["error"])
            self._cond.notify_all()

    def _stderr_text(self) -> str:
        if self._stderr is None:
            return "no output"
        try:
            self._stderr.seek(0)
            text = self._stderr.read()[-4000:].decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return "no output"
        return text or "the zygote exited without output"


class WorkerPool:
    """The zygote and the workers it forked for one boundary.

    Security model: host code only; it starts and kills processes and never runs the agent's code.
    It holds no reference to its boundary, so a boundary dropped without close() can be collected
    and its finalizer can `shutdown()` the pool.
    """

    # What ended a worker whose zygote is gone (its exit code is lost with the zygote).
    zygote_gone = "its zygote process ended (killed from outside)"

    def __init__(
        self,
        config: dict[str, Any],
        env: dict[str, str],
        python: str | None,
        limits: Limits,
        max_workers: int | None,
    ) -> None:
        self.limits = limits
        self.max_workers = max_workers
        self._lock = threading.Lock()
        self._handles: dict[str, WorkerClient] = {}  # every live handle
        self._starting = 0
        self._tokens = itertools.count(1)
        self._zygote_lock = threading.Lock()
        self._hello: dict[str, Any] | None = None
        self.egress: SessionEgress | None = None  # a network policy's proxy (set by the boundary)
        # Weak: the zygote's reader thread must not keep the pool alive.
        on_death = weakref.WeakMethod(self._on_zygote_death)
        self.zygote = self._make_zygote(
            config, env, python or sys.executable, lambda: (method := on_death()) and method()
        )
        self.zygote.start()

    def _make_zygote(
        self, config: dict[str, Any], env: dict[str, str], python: str, on_death: Callable[[], None]
    ) -> ZygoteClient:
        """The zygote's client (the container boundary's starts it in a container). Another
        interpreter than this process's starts from its own paths."""
        paths = None if python == sys.executable else interpreter_paths(python)
        return ZygoteClient(config, env, python, on_death, paths)

    def worker_path(self, workspace: Path) -> str:
        """The session's workspace as the worker sees it (the same path here; /workspace in a container)."""
        return str(workspace)

    def hello(self) -> dict[str, Any]:
        """What the zygote detected; (re)starts it first if it is not running."""
        with self._zygote_lock:
            if self._hello is not None and self.zygote.alive:
                return self._hello
            if self._hello is not None:  # it died (killed from outside); its workers died with it
                self.zygote.start()
            hello = self.zygote.hello(START_TIMEOUT_S)
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

    def live(self) -> int:
        with self._lock:
            return sum(1 for h in self._handles.values() if not h.dead)

    def start(self, session: str, workspace: Path, *, restarted: bool) -> WorkerClient:
        """Fork a worker for `session`; it is ready once `await_ready` returns."""
        self.hello()
        workspace.mkdir(mode=0o700, parents=True, exist_ok=True)
        request: dict[str, Any] = {
            "session": session,
            "workspace": self.worker_path(workspace),
            "restarted": restarted,
        }
        if self.egress is not None:
            request["env"] = self.egress.environment(session)
        return self._launch(lambda token, fds: self.zygote.spawn(token, request, fds))

    def resume(self, dead: WorkerClient, execution_count: int) -> WorkerClient:
        """The checkpoint copy the zygote kept for `dead` (see `retire`) as a new worker, with the
        session's state from before the cell that ended `dead`; ready once `await_ready` returns."""
        request = {"execution_count": execution_count}
        return self._launch(lambda token, fds: self.zygote.resume(token, dead.token, request, fds))

    def _launch(self, ask: Callable[[str, list[int]], None]) -> WorkerClient:
        """A new worker's socket and pipes, handed to the zygote by `ask(token, fds)`."""
        with self._lock:
            cap = self.max_workers
            live = sum(1 for h in self._handles.values() if not h.dead)
            if cap is not None and live + self._starting >= cap:
                raise CapacityError(
                    f"{cap} worker processes are live (max_workers={cap}); close a session with "
                    "engine.close(session) or raise max_workers"
                )
            self._starting += 1
        try:
            token = str(next(self._tokens))
            host_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            int_r, int_w = os.pipe()
            for fd in (out_r, err_r):
                os.set_blocking(fd, False)
                if hasattr(fcntl, "F_SETPIPE_SZ"):  # room to batch output reads (Linux)
                    with contextlib.suppress(OSError):
                        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIPE_BUFFER_BYTES)
            try:
                ask(token, [worker_end.fileno(), out_w, err_w, int_r])
            except BaseException:
                host_end.close()
                for fd in (out_r, err_r, int_w):
                    os.close(fd)
                raise
            finally:
                worker_end.close()
                for fd in (out_w, err_w, int_r):
                    os.close(fd)
            checkpoints = bool(self._hello and self._hello.get("checkpoints"))
            worker = WorkerClient(token, host_end, out_r, err_r, int_w, self, checkpoints=checkpoints)
            worker.wants_listener = self.egress is not None
            with self._lock:
                self._handles[token] = worker
        finally:
            with self._lock:
                self._starting -= 1
        return worker

    def await_ready(
        self, session: str, worker: WorkerClient, out: OutputSink | None = None, err: OutputSink | None = None
    ) -> None:
        """Wait for the worker's READY; retire it and raise BoundaryError if it does not come.

        `out`/`err` are the sinks of the call that started the worker: it was sent before READY
        arrives, so its first output can be read in the same wait and must not be dropped.
        """
        err = err if err is not None else OutputSink(4000)
        try:
            reply = worker.wait(time.monotonic() + START_TIMEOUT_S, out, err)
        except BaseException:
            self.retire(worker, drain=(None, None))  # nothing in it yet worth keeping
            raise
        if isinstance(reply, tuple) and reply[0] == P.READY:
            worker.pid = int(json.loads(reply[1])["pid"])
            listener, worker.listener = worker.listener, None
            if listener is not None and self.egress is not None:
                self.egress.serve(session, listener)
            elif listener is not None:
                listener.close()
            return
        failure = self.zygote.spawn_failure(worker.token)
        self.retire(worker, drain=(None, err))
        detail = failure or err.finish()[0].strip() or "it exited during setup"
        raise BoundaryError(f"the worker for session {session!r} could not start: {detail}")

    def retire(
        self,
        worker: WorkerClient,
        drain: tuple[OutputSink | None, OutputSink | None],
        *,
        keep_checkpoint: bool = False,
    ) -> int | None:
        """Kill the worker's group (harmless if it is gone), wait until it is reaped, close our ends.

        Returns its exit code (negative: the signal), None if unknown (`worker.ended_by` then says
        why, when the zygote went with it). With `keep_checkpoint`, a checkpoint copy the zygote
        kept is left for `resume` (`worker.checkpoint` says so); otherwise it goes."""
        self.zygote.kill(worker.token)
        code = self.zygote.wait_exit(worker.token, _EXIT_WAIT_S)
        if code is None and not self.zygote.alive:
            worker.ended_by = self.zygote_gone
        if self.zygote.kept_checkpoint(worker.token):
            if keep_checkpoint:
                worker.checkpoint = True
            else:
                self.zygote.discard(worker.token)
        worker.drain(*drain, limit=1 << 22, until_eof_s=0.2)
        worker.close()
        with self._lock:
            self._handles.pop(worker.token, None)
        return code

    def kill(self, worker: WorkerClient) -> None:
        """Kill the worker's group now, without waiting (a call waiting on it returns at once)."""
        self.zygote.kill(worker.token)

    def interrupt(self, worker: WorkerClient) -> None:
        """Stop the request the worker is serving (or will serve): its id into the worker's
        interrupt pipe, then the zygote rings the bell (SIGUSR1). Ids make it exact: an interrupt
        that arrives after its request finished is ignored, never applied to the next one."""
        if worker.pending and worker.post_interrupt(worker.pending):
            self.zygote.interrupt(worker.token)

    def stop_zygote(self) -> None:
        """The zygote kills every group it started, reaps them and exits; this waits for it, so no
        worker outlives it."""
        self.zygote.close()

    def close_handles(self) -> None:
        with self._lock:
            for handle in self._handles.values():
                handle.close()
            self._handles.clear()

    def shutdown(self) -> None:
        """Everything at once, for a boundary dropped without close()."""
        self.stop_zygote()
        self.close_handles()

    def _on_zygote_death(self) -> None:
        """The zygote was killed from outside (it never exits on its own while the host lives).

        Its workers died with it (parent-death signal), but what they started is now orphaned and
        nobody kills their groups: do it from here. Each group id is a worker pid we were told; the
        kernel does not reuse it while any member lives, and a dead, empty group is reused only
        after the pid space wraps, so the window for hitting an unrelated group is negligible.
        """
        with self._lock:
            pids = [h.pid for h in self._handles.values() if h.pid]
        for pid in pids:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
