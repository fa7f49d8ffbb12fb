"""Zygotes in containers: one container per session, its zygote forking the session's worker inside.

The host side is the subprocess boundary's: the same session table, worker clients and wire, and
the same worker pool and zygote client. Only the launch differs. The zygote is started by `docker
run` (attached, so the CLI process lives exactly as long as the container) with the image's own
python3, and connects back to a Unix socket in a host directory mounted read-only into the
container; the host then passes each worker's socket and pipes over it with SCM_RIGHTS as it does to
a local zygote (one kernel: descriptors cross the mount). The zygote is the container's PID 1, so
when it ends every process in the container ends.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..._exceptions import BoundaryError, CapacityError
from ..._limits import Limits
from .._subprocess import _protocol, _zygote
from .._subprocess._host import OutputSink, WorkerClient
from .._subprocess._spawn import IDENTITY, WorkerPool, ZygoteClient, package_identity
from . import _cli
from ._settings import CONTAINER_EGRESS_DIR, CONTAINER_RUN_DIR, CONTAINER_WORKSPACE, ContainerSettings

if TYPE_CHECKING:
    from .._subprocess._egress import SessionEgress

__all__ = ["ContainerPool"]

_SOCKET = "ctl.sock"
_MISMATCH_EXIT = 78
# Run in the container by its python3 with -I (the image's own paths, never the host's). It checks
# that the image's package is this host's before anything else, then connects.
_BOOTSTRAP = (
    "import socket, sys\n"
    "try:\n"
    "    import genpark_repl_tools as g\n"
    f"    from {_zygote.__name__} import main\n"
    "except ImportError as exc:\n"
    "    sys.exit(f'this image has no usable genpark_repl_tools ({exc}); build it with "
    "genpark-repl image build')\n" + IDENTITY + "ours = identity(g)\n"
    "if ours != sys.argv[2]:\n"
    "    sys.stderr.write(f'protocol mismatch: the image has genpark_repl_tools {ours}, the host '\n"
    "                     f'{sys.argv[2]}; rebuild the image with this host\\'s package "
    "(genpark-repl image build)\\n')\n"
    f"    sys.exit({_MISMATCH_EXIT})\n"
    "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
    "s.connect(sys.argv[1])\n"
    "main(s.detach())\n"
)


class _DockerZygoteClient(ZygoteClient):
    """A zygote client whose zygote is PID 1 of a container started by `docker run`."""

    def __init__(
        self,
        config: dict[str, Any],
        env: dict[str, str],
        launch: _Launch,
        on_death: Callable[[], None] | None,
    ) -> None:
        super().__init__(config, env, "python3", on_death)
        self._launch = launch

    def start(self) -> None:
        self._release_previous()
        launch = self._launch
        launch.remove()  # the container of a zygote that died, if the daemon still has it
        run_dir = Path(tempfile.mkdtemp(prefix="genpark-docker-"))
        path = run_dir / _SOCKET
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(path))
            listener.listen(1)
            if os.geteuid() == 0:  # the container's user must reach the socket
                os.chown(run_dir, launch.settings.uid, launch.settings.gid)
                os.chown(path, launch.settings.uid, launch.settings.gid)
            self._stderr = tempfile.TemporaryFile()  # noqa: SIM115  # the container's last words
            self._proc = launch.run(run_dir, self._env, self._stderr)
            host = self._accept(listener, self._proc, time.monotonic() + launch.settings.start_timeout_s)
        except BaseException:
            self._proc_failed()
            raise
        finally:
            listener.close()
            shutil.rmtree(run_dir, ignore_errors=True)  # the mount keeps nothing the zygote needs now
        self._ctl = host
        with self._cond:
            self._hello = None
            self._dead = False
        _protocol.send_frame(host, _protocol.CONFIG, _json(self._config))
        self._reader = threading.Thread(
            target=self._read_loop, args=(host,), name="genpark-repl-docker-zygote", daemon=True
        )
        self._reader.start()

    def _accept(
        self, listener: socket.socket, proc: subprocess.Popen[bytes], deadline: float
    ) -> socket.socket:
        listener.settimeout(0.02)
        while True:
            try:
                host, _ = listener.accept()
            except TimeoutError:
                if proc.poll() is not None:
                    raise BoundaryError(_cli.explain_failure(self._stderr_text(), self._launch)) from None
                if time.monotonic() > deadline:
                    raise BoundaryError(
                        f"the container for {self._launch.session!r} did not start within "
                        f"{self._launch.settings.start_timeout_s:g} s: {self._stderr_text()}"
                    ) from None
                continue
            host.settimeout(None)
            return host

    def _proc_failed(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        self._launch.remove()
        if self._stderr is not None:  # its text is in the error raised already
            self._stderr.close()
        self._proc = self._stderr = None
        with self._cond:
            self._dead = True
            self._cond.notify_all()

    def hello(self, timeout: float) -> dict[str, Any]:
        try:
            return super().hello(timeout)
        except BoundaryError as exc:
            raise BoundaryError(str(exc).replace("subprocess boundary", "container boundary")) from None

    def _release_previous(self) -> None:
        super()._release_previous()  # kills the `docker run` client, not the container
        self._launch.remove()

    def close(self, timeout: float = 5.0) -> None:
        super().close(timeout)
        self._launch.remove()


class _Launch:
    """How one session's container is started and removed."""

    _names = itertools.count(1)

    def __init__(self, settings: ContainerSettings, session: str, workspace: Path) -> None:
        self.settings = settings
        self.session = session
        self.workspace = workspace
        self.name = f"genpark-{settings.engine_id}-{os.getpid()}-{next(self._names)}"
        self.started = False

    def run(self, run_dir: Path, env: dict[str, str], stderr: Any) -> subprocess.Popen[bytes]:
        s = self.settings
        command = [s.docker, "run", "--rm", "--pull", "never", "--name", self.name, "--log-driver", "none"]
        for key, value in s.labels(self.session).items():
            command += ["--label", f"{key}={value}"]
        command += s.run_options()
        command += ["--volume", f"{self.workspace}:{CONTAINER_WORKSPACE}"]
        command += ["--volume", f"{run_dir}:{CONTAINER_RUN_DIR}:ro"]
        if s.egress_folder is not None:
            command += ["--volume", f"{s.egress_folder}:{CONTAINER_EGRESS_DIR}:ro"]
        for key, value in env.items():
            if key != "PATH":  # the image's own PATH finds its python3
                command += ["--env", f"{key}={value}"]
        command += [
            s.image,
            "python3",
            "-I",
            "-c",
            _BOOTSTRAP,
            f"{CONTAINER_RUN_DIR}/{_SOCKET}",
            package_identity(),
        ]
        self.started = True
        try:
            return subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                close_fds=True,
                start_new_session=True,  # a Ctrl-C in the host's terminal must not reach it
            )
        except OSError as exc:
            raise BoundaryError(f"could not run the docker CLI ({s.docker}): {exc}") from exc

    def remove(self) -> None:
        if self.started:
            _cli.remove([self.name], self.settings.docker)
            self.started = False


class _ContainerWorkerPool(WorkerPool):
    """The subprocess boundary's worker pool for one session, its zygote in that session's container."""

    zygote_gone = "its container stopped (killed from outside, or the Docker daemon stopped)"

    def __init__(self, config: dict[str, Any], env: dict[str, str], limits: Limits, launch: _Launch) -> None:
        self.launch = launch
        super().__init__(config, env, None, limits, None)

    def _make_zygote(
        self, config: dict[str, Any], env: dict[str, str], python: str, on_death: Callable[[], None]
    ) -> ZygoteClient:
        return _DockerZygoteClient(config, env, self.launch, on_death)

    def worker_path(self, workspace: Path) -> str:
        return CONTAINER_WORKSPACE

    def start(self, session: str, workspace: Path, *, restarted: bool) -> WorkerClient:
        if os.geteuid() == 0:  # the container's user writes there
            workspace.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chown(workspace, self.launch.settings.uid, self.launch.settings.gid)
        return super().start(session, workspace, restarted=restarted)

    def _on_zygote_death(self) -> None:
        # The pids the workers reported are the container's, not this host's: nothing to kill here.
        # The zygote was the container's PID 1, so every process in it ended with it.
        pass


class ContainerPool:
    """The container boundary's worker pool: the subprocess boundary's interface, one container per
    session (a `_ContainerWorkerPool` each), and the `max_workers` cap over all of them.

    With `warm` > 0 it keeps that many containers started ahead, each with its zygote ready and an
    empty directory of its own mounted at /workspace. A new session (one whose workspace does not
    exist yet) takes one: its directory is renamed to the session's workspace (the mount follows the
    directory, not its name), and a replacement starts in the background.
    """

    def __init__(
        self,
        config: dict[str, Any],
        env: dict[str, str],
        limits: Limits,
        max_workers: int | None,
        settings: ContainerSettings,
        root: Path,
        warm: int = 0,
    ) -> None:
        self.limits = limits
        self.max_workers = max_workers
        self.settings = settings
        self._config = config
        self._env = env
        self._root = root
        self._probe_dir = root / ".probe"
        self._lock = threading.Lock()
        self._pools: dict[str, _ContainerWorkerPool] = {}  # per session
        self._owners: dict[int, tuple[WorkerClient, _ContainerWorkerPool]] = {}  # id(worker) -> its pool
        self._hello: dict[str, Any] | None = None
        self._starting = 0
        self._warm_target = warm
        self._warm: list[_ContainerWorkerPool] = []
        self._fillers: list[threading.Thread] = []
        self._closed = False
        self.egress: SessionEgress | None = None  # a network policy's proxy (set by the boundary)
        self._refill()

    # ---- what the subprocess boundary calls ----------------------------------------------------

    def hello(self) -> dict[str, Any]:
        """What a zygote in this image detected: from a running container, or from a probe one."""
        with self._lock:
            if self._hello is not None:
                return self._hello
            pools = list(self._pools.values()) + self._warm
        if pools:
            hello = pools[0].hello()
        else:
            self._make_dir(self._probe_dir)
            probe = self._new_pool("(probe)", self._probe_dir)
            try:
                hello = probe.hello()
            finally:
                probe.shutdown()
        with self._lock:
            self._hello = hello
        return hello

    def live(self) -> int:
        with self._lock:
            pools = list(self._pools.values())
        return sum(pool.live() for pool in pools)

    def start(self, session: str, workspace: Path, *, restarted: bool) -> WorkerClient:
        with self._lock:
            pool = self._pools.get(session)
            if pool is None:
                cap = self.max_workers
                if cap is not None and len(self._pools) + self._starting >= cap:
                    raise CapacityError(
                        f"{cap} session containers are running (max_workers={cap}); close a session with "
                        "engine.close(session) or raise max_workers"
                    )
                self._starting += 1
                # A warm container can only take a new workspace (its empty directory becomes it).
                warm = self._warm.pop(0) if self._warm and not workspace.exists() else None
        if pool is None:  # start its container outside the lock (the session's own lock is held)
            try:
                pool = self._adopt(warm, session, workspace) if warm is not None else None
                if pool is None:
                    pool = self._new_pool(session, workspace)
            finally:
                with self._lock:
                    self._starting -= 1
            with self._lock:
                self._pools[session] = pool
            if warm is not None:
                self._refill()
        pool.egress = self.egress  # read at each start: a warm container was made before it was set
        try:
            worker = pool.start(session, workspace, restarted=restarted)
        except BaseException:
            self._drop(session, pool)
            raise
        self._own(worker, pool)
        return worker

    def resume(self, dead: WorkerClient, execution_count: int) -> WorkerClient:
        pool = self._disown(dead)  # kept by retire() for this
        if pool is None:
            raise BoundaryError("the container holding this session's checkpoint is gone")
        worker = pool.resume(dead, execution_count)
        self._own(worker, pool)
        return worker

    def await_ready(
        self, session: str, worker: WorkerClient, out: OutputSink | None = None, err: OutputSink | None = None
    ) -> None:
        pool = self._pool_of(worker)
        if pool is None:
            raise BoundaryError(f"the container of session {session!r} is gone")
        try:
            pool.await_ready(session, worker, out, err)
        except BaseException:
            self._disown(worker)
            raise

    def retire(
        self,
        worker: WorkerClient,
        drain: tuple[OutputSink | None, OutputSink | None],
        *,
        keep_checkpoint: bool = False,
    ) -> int | None:
        pool = self._pool_of(worker)
        if pool is None:
            worker.close()
            return None
        code = pool.retire(worker, drain, keep_checkpoint=keep_checkpoint)
        if not worker.checkpoint:  # nothing left in the container to roll back to: it goes
            self._disown(worker)
            self._drop(pool.launch.session, pool)
        return code

    def kill(self, worker: WorkerClient) -> None:
        pool = self._pool_of(worker)
        if pool is not None:
            pool.kill(worker)

    def interrupt(self, worker: WorkerClient) -> None:
        pool = self._pool_of(worker)
        if pool is not None:
            pool.interrupt(worker)

    def stop_zygote(self) -> None:
        with self._lock:
            self._closed = True
            fillers = list(self._fillers)
        for filler in fillers:  # a container being started now must not appear after the sweep below
            filler.join(self.settings.start_timeout_s + 5)
        with self._lock:
            pools = list(self._pools.values()) + self._warm
            self._pools.clear()
            self._warm.clear()
        for pool in pools:
            # QUIT: the zygote kills its workers and exits; the container (its PID 1) ends with it.
            with contextlib.suppress(Exception):
                pool.zygote.close(timeout=2.0)
        _cli.remove_labelled(self.settings)  # anything the engine started that is still there
        for folder in self._root.glob(".warm-*"):
            shutil.rmtree(folder, ignore_errors=True)

    def close_handles(self) -> None:
        with self._lock:
            owned = list(self._owners.values())
            self._owners.clear()
        for worker, _ in owned:
            worker.close()

    def shutdown(self) -> None:
        self.stop_zygote()
        self.close_handles()

    # ---- bookkeeping ----------------------------------------------------------------------------

    def _new_pool(self, session: str, workspace: Path) -> _ContainerWorkerPool:
        return _ContainerWorkerPool(
            self._config, self._env, self.limits, _Launch(self.settings, session, workspace)
        )

    def _make_dir(self, folder: Path) -> None:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if os.geteuid() == 0:  # the container's user writes there
            os.chown(folder, self.settings.uid, self.settings.gid)

    def _refill(self) -> None:
        """Start warm containers in the background until there are `warm` of them (ready or starting)."""
        with self._lock:
            self._fillers = [t for t in self._fillers if t.is_alive()]
            needed = self._warm_target - len(self._warm) - len(self._fillers)
            if self._closed or needed <= 0:
                return
            for _ in range(needed):
                filler = threading.Thread(target=self._fill_one, name="genpark-repl-docker-warm", daemon=True)
                self._fillers.append(filler)
                filler.start()

    def _fill_one(self) -> None:
        folder = self._root / f".warm-{os.urandom(6).hex()}"
        pool = None
        try:
            self._make_dir(folder)
            pool = self._new_pool("", folder)
            pool.hello()  # ready: imports done, sandbox prepared, a spare worker forked
        except Exception:  # Docker failing: the next new session starts cold and says why
            if pool is not None:
                pool.shutdown()
            shutil.rmtree(folder, ignore_errors=True)
            return
        with self._lock:
            if not self._closed:
                self._warm.append(pool)
                return
        pool.shutdown()
        shutil.rmtree(folder, ignore_errors=True)

    def _adopt(
        self, warm: _ContainerWorkerPool, session: str, workspace: Path
    ) -> _ContainerWorkerPool | None:
        """A warm container as `session`'s: its directory becomes the session's workspace."""
        try:
            os.rename(warm.launch.workspace, workspace)
        except OSError:
            warm.shutdown()
            shutil.rmtree(warm.launch.workspace, ignore_errors=True)
            return None
        warm.launch.workspace, warm.launch.session = workspace, session
        return warm

    def _drop(self, session: str, pool: _ContainerWorkerPool) -> None:
        with self._lock:
            if self._pools.get(session) is pool:
                del self._pools[session]
        pool.shutdown()

    def _own(self, worker: WorkerClient, pool: _ContainerWorkerPool) -> None:
        worker.launcher = self  # its READY and interrupts go through the owner's bookkeeping
        with self._lock:
            self._owners[id(worker)] = (worker, pool)

    def _disown(self, worker: WorkerClient) -> _ContainerWorkerPool | None:
        with self._lock:
            entry = self._owners.pop(id(worker), None)
        return entry[1] if entry is not None else None

    def _pool_of(self, worker: WorkerClient) -> _ContainerWorkerPool | None:
        with self._lock:
            entry = self._owners.get(id(worker))
        return entry[1] if entry is not None else None


def _json(value: Any) -> bytes:
    import json

    return json.dumps(value).encode()
