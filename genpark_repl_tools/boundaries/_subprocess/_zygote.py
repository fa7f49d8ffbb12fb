"""The zygote: a single-threaded fork template that forks one sandboxed worker per session.

Security model: the zygote runs the host's code only (never the agent's), with a minimal
environment and no network (it enters the workers' network namespace itself). It imports the
runner once, prepares the sandbox once, then forks: a worker starts in ~5 ms with everything
already imported, sharing the zygote's memory copy-on-write. It keeps one spare forked ahead of the
next request (`_fork_spare`), warmed up by a first call of its own, so a new session waits neither
for the fork nor for a first call's one-time work.

It stays single-threaded (forking a process with threads can deadlock the child on a lock another
thread held), checks that after `preload`, and never runs a cell itself. It is the parent and reaper
of every worker (and, as a child subreaper, of every orphaned grandchild): when a worker exits it
kills the worker's whole process group before reaping it, and tells the host how it ended. When
the host goes away (its socket closes, or this process is re-parented) it kills everything and exits.

    python -I -c "...; main(ctl_fd)"   started by _spawn.ZygoteClient; talks on the inherited socket
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import select
import selectors
import shutil
import signal
import socket
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, cast

from ..._introspect import prepare_data
from ..._limits import Limits
from ..._rich import prepare_figures
from ...policy import Policy, PolicyRuntime, runtime_for
from . import _protocol as P
from . import _sandbox
from ._sandbox import Prepared, SandboxConfig, SandboxError
from ._worker import prepare, thread_count, warm_up

if TYPE_CHECKING:
    from ...policy._restricted import RestrictedRuntime

__all__ = ["main"]

_MAX_FDS_PER_MESSAGE = 16
_PARENT_CHECK_S = 1.0
# A spare warms up (`_worker.warm_up`) once it waited this long for a request: a request that comes
# at once (new sessions one after another) takes it as it is, and its warm-up does not take a CPU
# from the first call of the session just handed the previous spare.
_WARM_UP_AFTER_S = 0.03
_SHUTDOWN_WAIT_S = 5.0
_EXIT_SETUP_FAILED = 70
_PROBE_HEADROOM_KB = 64 * 1024  # as the host's check of Limits.memory_mb (_spawn._MIN_HEADROOM_MB)
# Where `pip install` puts packages in a session with a network policy (in its workspace).
PACKAGES_DIR = ".python-packages"

# Each spawn request carries the worker's socket, its stdout and stderr pipes, and the read end of
# its interrupt pipe (request ids the host wants stopped; a SIGUSR1 from here rings the bell).
_FDS_PER_WORKER = 4


class _Zygote:
    """The fork template's state and loop.

    Security model: runs only the host's code, single-threaded, in the workers' network namespace;
    every worker it forks is sandboxed (`_sandbox.apply`) before it reads a request, and it kills
    the process group of each worker that exits and of every worker when the host goes away.
    """

    def __init__(self, ctl: socket.socket) -> None:
        self.ctl = ctl
        self.parent = os.getppid()
        self.frames = P.FrameBuffer()
        self.fds: deque[int] = deque()
        self.by_token: dict[str, int] = {}
        self.by_pid: dict[int, str] = {}
        self.prepared: Prepared | None = None
        self.policy: Policy | None = None
        self.runtime: PolicyRuntime | None = None
        self.limits: Limits | None = None
        self.boundary = "subprocess"
        self.workspace_root = ""
        # The next worker, forked ahead of its request: its pid and our end of its checkpoint channel
        # (-1: none), until the host says it took it (TAKEN). The host holds the other end of the
        # socket it waits on (passed with SPARE) and sends it its request itself.
        self.spare: tuple[int, int] | None = None
        self.lost_spare: tuple[int, int] | None = None  # a spare that died: its pid and exit code
        self.spares = True  # off for good once a spare dies unassigned: each request then forks
        self.wake_r, self.wake_w = os.pipe()
        self.selector = selectors.DefaultSelector()
        # Checkpoints (see _worker._Worker._checkpoint): per worker token, our end of its checkpoint
        # channel (raw descriptors here: a socket object's finalizer could close a reused number in
        # a fork), the copy it last announced and the copies of dead workers we hold, each as its
        # pid and our end of the socket only that copy waits on (its inbox).
        # Until a worker announces anything, its state is a new worker's: its copy is a new worker
        # forked from its spawn request (kept in `fresh`), so its first request waits for no fork.
        self.checkpoints = False
        self.channels: dict[str, int] = {}
        self.announced: dict[str, tuple[int, int]] = {}
        self.held: dict[str, tuple[int, int]] = {}
        self.fresh: dict[str, dict[str, Any]] = {}
        self.held_fresh: dict[str, dict[str, Any]] = {}

    # ---- start ----------------------------------------------------------------------------------

    def start(self) -> None:
        kind, payload = P.recv_frame(self.ctl)
        if kind != P.CONFIG:
            raise P.ProtocolError("expected the configuration frame first")
        config = json.loads(payload)
        hello: dict[str, Any] = {
            "pid": os.getpid(),
            "python": sys.version.split()[0],
            "platform": sys.platform,
        }
        try:
            self.limits = Limits.model_validate(config["limits"])
            self.policy = Policy.model_validate(config["policy"])
            self.runtime = runtime_for(self.policy)
            for module in config["preload"]:
                importlib.import_module(module)
            prepare_figures()  # what each worker's first run would do first: done once, here
            prepare_data()
            threads = thread_count()
            if threads > 1:
                raise SandboxError(
                    f"after preloading {config['preload']} the zygote has {threads} threads; a process "
                    "with threads cannot be forked safely (set OMP_NUM_THREADS=1 or preload less)"
                )
            self.prepared = _sandbox.prepare(SandboxConfig.from_json(config["sandbox"]))
            # The copy of a dead worker must become our child to be kept (we are its subreaper).
            self.checkpoints = bool(config.get("checkpoints")) and self.prepared.subreaper
            memory_mb = self.limits.memory_mb
            if memory_mb is not None and memory_mb * 1024 < _vm_size_kb() + _PROBE_HEADROOM_KB:
                # No process forked from here could run under that limit, the probe included: the
                # host reads the size and says which limit to use instead.
                hello["vm_size_kb"] = _vm_size_kb()
                P.send_frame(self.ctl, P.HELLO, json.dumps(hello).encode())
                return
            self.workspace_root = config["workspace_root"]
            hello["probe"] = self._probe(self.workspace_root)
        except Exception as exc:
            hello["error"] = f"{type(exc).__name__}: {exc}"
            P.send_frame(self.ctl, P.HELLO, json.dumps(hello).encode())
            raise
        hello.update(_describe_prepared(self.prepared))
        hello["checkpoints"] = self.checkpoints
        hello["vm_size_kb"] = _vm_size_kb()
        # Objects that exist now are shared with every worker; keep the collector off their pages.
        gc.freeze()
        P.send_frame(self.ctl, P.HELLO, json.dumps(hello).encode())

    def _probe(self, workspace_root: str) -> dict[str, Any]:
        """Fork one sandboxed child and check from inside that each protection actually holds."""
        assert self.prepared is not None
        workspace = os.path.join(workspace_root, f".probe-{os.getpid()}")
        os.makedirs(workspace, mode=0o700, exist_ok=True)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the forked child
            os.close(r)
            code = 0
            try:
                listener = None  # held while the checks run, as a worker's is by the host
                if self.prepared.config.egress_port is not None:
                    listener = _sandbox.egress_listener(self.prepared)
                _sandbox.apply(self.prepared, workspace)
                checks = _probe_checks(workspace_root, self.parent)
                if listener is not None:
                    checks["egress_only"] = _egress_only(self.prepared.config.egress_port)
            except BaseException as exc:
                checks = {"error": f"{type(exc).__name__}: {exc}"}
                code = _EXIT_SETUP_FAILED
            try:
                _write_all(w, json.dumps(checks).encode())
            finally:
                os._exit(code)
        os.close(w)
        chunks = []
        while chunk := os.read(r, 65536):
            chunks.append(chunk)
        os.close(r)
        os.waitpid(pid, 0)
        shutil.rmtree(workspace, ignore_errors=True)
        report: dict[str, Any] = json.loads(b"".join(chunks) or b'{"error": "the probe died"}')
        if "error" in report:
            raise SandboxError(f"the sandbox could not be applied: {report['error']}")
        return report

    # ---- loop -----------------------------------------------------------------------------------

    def serve(self) -> Callable[[], None]:
        """The zygote's loop: it never ends in the zygote. In a worker forked from it, it returns the
        worker's loop (see main)."""
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        # A Python-level handler is needed for the wakeup fd to be written; the work happens in the loop.
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.signal(signal.SIGTERM, lambda signum, frame: self.shutdown())
        self.selector.register(self.ctl, selectors.EVENT_READ, "ctl")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "wake")
        while True:
            if self.spare is None and self.spares:
                worker = self._fork_spare()
                if worker is not None:  # in the spare, once it has its request
                    return worker
            for key, _ in self.selector.select(_PARENT_CHECK_S):
                if key.data == "ctl":
                    worker = self._read_ctl()
                    if worker is not None:
                        return worker
                elif key.data == "wake":
                    os.read(self.wake_r, 4096)
                    self._reap()
                else:
                    self._read_channel(key.data)
            if os.getppid() != self.parent:  # the host died; its socket may still be held by a fork
                self.shutdown()

    def _read_ctl(self) -> Callable[[], None] | None:
        try:
            data, ancdata, _, _ = self.ctl.recvmsg(1 << 16, socket.CMSG_SPACE(_MAX_FDS_PER_MESSAGE * 4))
        except ConnectionError:
            data, ancdata = b"", []
        self.fds.extend(P.passed_fds(ancdata))
        if not data:
            self.shutdown()
        self.frames.feed(data)
        while (frame := self.frames.next()) is not None:
            kind, payload = frame
            if kind == P.SPAWN:
                worker = self._spawn(json.loads(payload))
                if worker is not None:  # in the forked worker: the frames left are the zygote's
                    return worker
            elif kind == P.KILL:
                self._kill(json.loads(payload)["token"])
            elif kind == P.INTERRUPT:
                self._interrupt(json.loads(payload)["token"])
            elif kind == P.RESUME:
                worker = self._resume(json.loads(payload))
                if worker is not None:  # in a worker forked for a new worker's checkpoint
                    return worker
            elif kind == P.DISCARD:
                self._discard(json.loads(payload)["token"])
            elif kind == P.TAKEN:
                self._taken(json.loads(payload))
            elif kind == P.QUIT:
                self.shutdown()
        return None

    def _spawn(self, request: dict[str, Any]) -> Callable[[], None] | None:
        """Fork a worker. None in the zygote; in the worker, its loop (see main)."""
        token = request["token"]
        if len(self.fds) < _FDS_PER_WORKER:
            self._send(P.SPAWN_FAILED, {"token": token, "error": "the spawn request carried no descriptors"})
            return None
        fds = [self.fds.popleft() for _ in range(_FDS_PER_WORKER)]
        channel = -1
        if self.checkpoints:
            ours_c, theirs_c = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            channel = ours_c.detach()
            fds.append(theirs_c.detach())
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            if channel >= 0:
                os.close(channel)
            self._send(P.SPAWN_FAILED, {"token": token, "error": f"fork failed: {exc}"})
            return None
        if pid == 0:  # pragma: no cover - runs in the forked child
            return self._become_worker(request, *fds, detached=False)
        for fd in fds:
            os.close(fd)
        # Also done by the child: whichever runs first, the group exists before anyone kills it.
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)
        self._started(token, pid, channel, request)
        return None

    def _started(self, token: str, pid: int, channel: int, request: dict[str, Any]) -> None:
        self.by_token[token] = pid
        self.by_pid[pid] = token
        if channel >= 0:
            os.set_blocking(channel, False)
            self.channels[token] = channel
            self.selector.register(channel, selectors.EVENT_READ, token)
            self.fresh[token] = request

    def _fork_spare(self) -> Callable[[], None] | None:
        """Fork the next worker before anyone asks for it: the fork, and the first writes to the
        pages it shares with the zygote (each a copy-on-write fault), are then off a new session's
        path. The spare runs only our code: it waits, unsandboxed and holding none of the zygote's
        descriptors, for one request, then becomes a worker exactly as a worker forked for the
        request would. The host sends that request itself, on the socket whose other end we pass it
        (SPARE), and then tells us which token took the spare (TAKEN): a new session's request
        wakes one process, not two. None in the zygote; in the spare, its worker's loop (see main)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        channel = (-1, -1)
        if self.checkpoints:
            ours_c, theirs_c = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            channel = (ours_c.detach(), theirs_c.detach())
        try:
            pid = os.fork()
        except OSError:
            ours.close()
            theirs.close()
            for fd in channel:
                if fd >= 0:
                    os.close(fd)
            self.spares = False
            return None
        if pid == 0:  # pragma: no cover - runs in the forked child
            # Closed now: left to its finalizer, it would close whatever reuses its number later.
            ours.close()
            if channel[0] >= 0:
                os.close(channel[0])
            return self._wait_as_spare(theirs, channel[1])
        theirs.close()
        if channel[1] >= 0:
            os.close(channel[1])
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)
        self.spare = (pid, channel[0])
        try:
            P.send_frame(self.ctl, P.SPARE, json.dumps({"pid": pid}).encode(), [ours.fileno()])
        except OSError:
            self.shutdown()
        finally:
            ours.close()  # the host's now: the spare exits when the host closes it unused
        return None

    def _taken(self, message: dict[str, Any]) -> None:
        """The host sent our spare `pid` the request of worker `token` (see `_fork_spare`)."""
        token, pid = message["token"], message["pid"]
        if self.spare is not None and self.spare[0] == pid:
            channel = self.spare[1]
            self.spare = None
            self._started(token, pid, channel, message)
            return
        # It died before we knew it was taken (`_reap` counted it as unassigned): the host learns
        # that its worker ended, as of any worker that dies while it starts.
        code = self.lost_spare[1] if self.lost_spare is not None and self.lost_spare[0] == pid else -9
        self._send(P.EXITED, {"token": token, "code": code, "checkpoint": False})

    def _wait_as_spare(self, sock: socket.socket, channel_fd: int) -> Callable[[], None]:
        """In the spare: drop the zygote's state, wait for a request, then become its worker."""
        try:
            self._detach()
            assert self.prepared is not None
            _close_all_but({0, 1, 2, sock.fileno(), channel_fd, *self.prepared.inherited_fds()} - {-1})
            # While it waits, a first call's copy-on-write faults and one-time paths: off the
            # session's first call.
            assert self.runtime is not None and self.limits is not None
            waiting, _, _ = select.select([sock], [], [], _WARM_UP_AFTER_S)
            if not waiting and os.path.isdir(self.workspace_root):
                warm_up(self.runtime, self.limits, self.boundary, self.workspace_root)
            data, ancdata, flags, _ = sock.recvmsg(1 << 20, socket.CMSG_SPACE((_FDS_PER_WORKER + 1) * 4))
            if not data:  # the host let this spare go, or is gone
                os._exit(0)
            fds = P.passed_fds(ancdata)
            frames = P.FrameBuffer()
            frames.feed(data)
            frame = frames.next()
            if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or frame is None or frame[0] != P.SPAWN:
                raise P.ProtocolError("the spare got something other than one whole spawn request")
            if len(fds) != _FDS_PER_WORKER:
                raise P.ProtocolError(f"the spare got {len(fds)} descriptors, not {_FDS_PER_WORKER}")
            request = json.loads(frame[1])
            sock.close()
        except BaseException:
            try:
                _write_all(2, traceback.format_exc().encode())
            finally:
                os._exit(_EXIT_SETUP_FAILED)
        sock_fd, out_fd, err_fd, interrupt_fd = fds
        return self._become_worker(request, sock_fd, out_fd, err_fd, interrupt_fd, channel_fd, detached=True)

    def _detach(self) -> None:
        """In a forked child: stop being the zygote (its signal handlers, selector, control socket)."""
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(signum, signal.SIG_DFL)
        # An interrupt that arrives before prepare() installs its handler must not kill the worker.
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        self.selector.close()
        self.ctl.close()

    def _become_worker(
        self,
        request: dict[str, Any],
        sock_fd: int,
        out_fd: int,
        err_fd: int,
        interrupt_fd: int,
        channel_fd: int = -1,
        *,
        detached: bool,
    ) -> Callable[[], None]:
        """Sandbox this forked child and set up its session; its loop, or exit if that fails."""
        code = 0
        try:
            if not detached:
                self._detach()
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.dup2(out_fd, 1)
            os.dup2(err_fd, 2)
            assert self.prepared is not None
            assert self.runtime is not None
            assert self.limits is not None
            keep = {0, 1, 2, sock_fd, interrupt_fd, channel_fd, *self.prepared.inherited_fds()}
            _close_all_but(keep)
            workspace = request["workspace"]
            os.environ.update({"HOME": workspace, "TMPDIR": workspace, "PWD": workspace})
            os.environ.update(request.get("env", {}))  # the session's proxy and secrets' placeholders
            listener = None
            if self.prepared.config.egress_port is not None:
                listener = _sandbox.egress_listener(self.prepared)
            if "tempfile" in sys.modules:  # it caches the directory it found first; find it again
                import tempfile

                tempfile.tempdir = None
            runtime = self.runtime
            if self.policy is not None and self.policy.restricted:
                # The policy's own file rules and Landlock must name the same directory: this one.
                runtime = cast("RestrictedRuntime", runtime).with_workspace(workspace)
            _sandbox.apply(self.prepared, workspace)
            if self.prepared.config.egress_port is not None:
                _packages_in_workspace(workspace)
            os.set_inheritable(sock_fd, False)
            sock = socket.socket(fileno=sock_fd)
            os.set_inheritable(interrupt_fd, False)
            return prepare(
                sock,
                interrupt_fd,
                request["session"],
                runtime,
                self.limits,
                self.boundary,
                restarted=request["restarted"],
                execution_count=int(request.get("execution_count", 0)),
                channel_fd=channel_fd,
                listener=listener,
            )
        except SandboxError as exc:
            _write_all(2, f"worker sandbox setup failed: {exc}\n".encode())
            code = _EXIT_SETUP_FAILED
        except BaseException:
            try:
                _write_all(2, traceback.format_exc().encode())
            finally:
                code = _EXIT_SETUP_FAILED
        os._exit(code)

    def _kill(self, token: str) -> None:
        pid = self.by_token.get(token)
        if pid is None:
            return
        # The worker announces its copy before it reads the request being stopped, so the
        # announcement is in the channel already, but this loop may not have read it yet (the host's
        # kill can be handled first): read it now, or a stale "no copy" would kill the copy too.
        self._read_channel(token)
        if self.announced.get(token):
            # Only the worker for now: its copy is in its group. _reap moves the copy out of the
            # group once it is ours, then kills the rest of the group.
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        else:
            _kill_group(pid)

    # ---- checkpoints --------------------------------------------------------------------------------

    def _read_channel(self, token: str) -> None:
        """The copies a worker announced, each a pid with its inbox (the last one counts; 0: none);
        EOF: nothing holds the channel."""
        channel = self.channels.get(token)
        while channel is not None:
            try:
                data, fds = _recv_with_fds(channel)
            except BlockingIOError:
                return
            except OSError:
                data, fds = b"", []
            if len(data) == P.CHECKPOINT_PID.size:
                self.fresh.pop(token, None)
                self._let_go(token)
                pid = P.CHECKPOINT_PID.unpack(data)[0]
                if pid > 0 and fds:
                    inbox = fds.pop(0)
                    os.set_blocking(inbox, False)  # a send to it never blocks this loop
                    self.announced[token] = (pid, inbox)
            for fd in fds:  # more than the worker sends: not kept
                os.close(fd)
            if not data:  # the worker and any copy are gone: nothing can be resumed from it
                self._close_channel(token)
                return

    def _let_go(self, token: str) -> None:
        """The announced copy is stale: closing its inbox ends its wait (it exits)."""
        copy = self.announced.pop(token, None)
        if copy is not None:
            os.close(copy[1])

    def _close_channel(self, token: str) -> None:
        channel = self.channels.pop(token, None)
        self._let_go(token)
        if channel is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(channel)
            os.close(channel)

    def _adopt(self, token: str, worker_pid: int) -> bool:
        """The worker `worker_pid` is a zombie: keep the copy it announced, if it is ours now, or
        its spawn request if it announced nothing (it had changed nothing, see `fresh`).

        The pid comes from the session's own process, so it is checked: it must be our child now
        (the copy is re-parented to us when the worker exits) and in the dead worker's group. At
        worst a session names another process of its own, which then serves the same session."""
        self._read_channel(token)  # what the worker sent before it died (its channel may be closed)
        request = self.fresh.pop(token, None)
        if request is not None:  # it had changed nothing: a new worker is its copy
            self.held_fresh[token] = request
            self._close_channel(token)
            return True
        copy = self.announced.pop(token, None)
        if copy is None:
            return False
        pid, inbox = copy
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            state, parent, group = fields[0], int(fields[1]), int(fields[2])
            ours = parent == os.getpid() and group == worker_pid
            if not ours or state in ("Z", "X") or token not in self.channels:  # a dead copy cannot resume
                raise ValueError(f"pid {pid} is not a live copy of worker {worker_pid}")
            os.setpgid(pid, pid)  # out of the group that is about to be killed
        except (OSError, ValueError, IndexError):
            os.close(inbox)
            return False
        self.held[token] = copy
        return True

    def _resume(self, request: dict[str, Any]) -> Callable[[], None] | None:
        """Hand a held copy the new worker's descriptors: it serves the session from now on. None
        in the zygote; in a new worker forked to stand for a dead one's copy, its loop."""
        token, old = request.pop("token"), request.pop("from")
        spawn = self.held_fresh.pop(old, None)
        if spawn is not None:
            return self._spawn({**spawn, "token": token, "execution_count": request["execution_count"]})
        fds = [self.fds.popleft() for _ in range(min(_FDS_PER_WORKER, len(self.fds)))]
        held = self.held.pop(old, None)
        pid = held[0] if held is not None else None
        channel = self.channels.pop(old, None)
        error = "no checkpoint of the session's worker was kept"
        if held is not None and channel is not None and len(fds) == _FDS_PER_WORKER:
            try:
                sock = socket.socket(fileno=held[1])
                try:
                    P.send_frame(sock, P.RESUME, json.dumps(request).encode(), fds)
                finally:
                    sock.detach()
            except OSError as exc:
                error = f"the checkpoint could not be reached: {exc}"
            else:
                error = ""
        if held is not None:
            os.close(held[1])  # the request stays readable in the copy's inbox
        for fd in fds:
            os.close(fd)
        if error:
            if pid is not None:
                _kill_group(pid)
            if channel is not None:
                with contextlib.suppress(KeyError, ValueError):
                    self.selector.unregister(channel)
                os.close(channel)
            self._send(P.SPAWN_FAILED, {"token": token, "error": error})
            return None
        assert pid is not None and channel is not None
        self.selector.modify(channel, selectors.EVENT_READ, token)
        self.channels[token] = channel
        self.by_token[token] = pid
        self.by_pid[pid] = token
        return None

    def _discard(self, token: str) -> None:
        self.held_fresh.pop(token, None)
        held = self.held.pop(token, None)
        if held is not None:
            _kill_group(held[0])
            os.close(held[1])
        self._close_channel(token)

    def _interrupt(self, token: str) -> None:
        # Only the worker itself, not its group: the worker turns SIGUSR1 into a cancel of its cell.
        # The pid is ours until we reap it, so it cannot name another process.
        pid = self.by_token.get(token)
        if pid is not None:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGUSR1)

    def _reap(self) -> None:
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or info.si_pid == 0:
                return
            pid = info.si_pid
            lost = self.spare is not None and pid == self.spare[0]
            if self.spare is not None and lost:  # died unassigned: no more spares
                if self.spare[1] >= 0:
                    os.close(self.spare[1])
                self.spare = None
                self.spares = False
            token = self.by_pid.pop(pid, None)
            kept = False
            if token is not None:
                kept = self._adopt(token, pid)
                # The exited leader is still a zombie, so its group id cannot have been reused:
                # whatever it started (and did not escape) dies with it.
                _kill_group(pid)
                if not kept:
                    self._close_channel(token)
                    self.fresh.pop(token, None)
            else:  # a held copy that ended before anyone asked for it
                for held, (held_pid, inbox) in list(self.held.items()):
                    if held_pid == pid:
                        del self.held[held]
                        os.close(inbox)
                        self._close_channel(held)
            _, status = os.waitpid(pid, 0)
            if lost:  # the host may have sent it a request already: see _taken
                self.lost_spare = (pid, os.waitstatus_to_exitcode(status))
            if token is not None:
                del self.by_token[token]
                code = os.waitstatus_to_exitcode(status)
                self._send(P.EXITED, {"token": token, "code": code, "checkpoint": kept})

    def _send(self, kind: int, obj: Any) -> None:
        try:
            P.send_frame(self.ctl, kind, json.dumps(obj).encode())
        except OSError:
            self.shutdown()

    def shutdown(self) -> NoReturn:
        if self.spare is not None:
            _kill_group(self.spare[0])
        for pid in [*self.by_pid, *(held[0] for held in self.held.values())]:
            _kill_group(pid)
        deadline = time.monotonic() + _SHUTDOWN_WAIT_S
        while time.monotonic() < deadline:
            for pid in _children():  # orphans re-parented to us (we are a subreaper), escaped or not
                _kill_group(pid)
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                time.sleep(0.005)
        os._exit(0)


# ---- helpers ----------------------------------------------------------------------------------------


def _packages_in_workspace(workspace: str) -> None:
    """With a network policy, `pip install` in a session installs into its workspace (the only place
    it may write, and kept with it), and what is installed there can be imported."""
    packages = os.path.join(workspace, PACKAGES_DIR)
    os.environ.update({"PIP_TARGET": packages, "PIP_NO_CACHE_DIR": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    with contextlib.suppress(OSError):  # a full workspace: pip says so when it is used
        os.makedirs(packages, exist_ok=True)
    sys.path.append(packages)  # after the interpreter's own: an install cannot shadow what is there


def _kill_group(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(OSError):
            kill(pid, signal.SIGKILL)


def _recv_with_fds(fd: int) -> tuple[bytes, list[int]]:
    """One message from the socket `fd` (a raw descriptor), with the descriptors it carried."""
    sock = socket.socket(fileno=fd)
    try:
        data, ancdata, _, _ = sock.recvmsg(64, socket.CMSG_SPACE(4))
    finally:
        sock.detach()
    return data, P.passed_fds(ancdata)


def _children() -> list[int]:
    pids: list[int] = []
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children") as f:
                pids.extend(int(p) for p in f.read().split())
    except OSError:
        pass
    return pids


def _close_all_but(keep: set[int]) -> None:
    start = 0
    for fd in sorted(keep):
        if fd > start:
            os.closerange(start, fd)
        start = fd + 1
    os.closerange(start, 1 << 16)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _vm_size_kb() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _describe_prepared(prepared: Prepared | None) -> dict[str, Any]:
    assert prepared is not None
    _fs, net, scoped = _sandbox.landlock_rights(prepared) if prepared.landlock_abi else (0, 0, 0)
    return {
        "uid": prepared.drop_to[0] if prepared.drop_to else os.geteuid(),
        "dropped_root": prepared.drop_to is not None,
        "subreaper": prepared.subreaper,
        "pdeathsig": _sandbox.LINUX,
        "network_namespace": prepared.network_namespace,
        "network_reason": prepared.network_reason,
        "seccomp": prepared.seccomp_bpf is not None,
        "seccomp_reason": prepared.seccomp_reason,
        "seccomp_blocks_inet": prepared.seccomp_blocks_inet,
        "seccomp_blocks_unix": prepared.seccomp_blocks_unix,
        "landlock_abi": prepared.landlock_abi,
        "landlock_reason": prepared.landlock_reason,
        "landlock_net": bool(net),
        "egress_port": prepared.config.egress_port,
        "landlock_scoped": bool(scoped),
        "confine_reads": prepared.config.confine_reads and bool(prepared.landlock_abi),
    }


def _probe_checks(workspace_root: str, host_pid: int) -> dict[str, Any]:
    """Run inside the sandboxed probe child: what actually holds, checked by trying."""
    outside = os.path.join(workspace_root, f".probe-outside-{os.getpid()}")
    return {
        "uid": os.getuid(),
        "write_inside": not _refused(lambda: _create(os.path.join(os.getcwd(), "inside.txt"))),
        "write_outside_denied": _refused(lambda: _create(outside)),
        "read_outside_denied": _refused(lambda: os.listdir("/")),
        "setsid_denied": _refused(os.setsid),
        "signal_host_denied": _signal_refused(host_pid),
        "unix_socket_blocked": _refused(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()),
        "network_blocked": _network_blocked(),
    }


def _refused(action: Any) -> bool:
    try:
        action()
    except OSError:
        return True
    return False


def _create(path: str) -> None:
    with open(path, "x") as f:
        f.write("probe")
    os.unlink(path)


def _signal_refused(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True
    except OSError:
        return False  # no such process: nothing was proven
    return False


def _network_blocked() -> bool:
    import errno

    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    except OSError:
        return True
    with s:
        s.settimeout(2)
        try:
            s.connect(("127.0.0.1", 9))
        except OSError as exc:
            # Refused means packets flow (someone could listen); unreachable or denied means none do.
            return exc.errno in (errno.ENETUNREACH, errno.EACCES, errno.EPERM)
    return False


def _egress_only(port: int | None) -> bool:
    """With a network policy: the worker's one way out is its egress listener. An address off the
    host has no route, and another loopback port has nothing (or Landlock refuses it)."""
    import errno

    def refused(address: tuple[str, int], errnos: tuple[int, ...]) -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            try:
                s.connect(address)
            except OSError as exc:
                return exc.errno in errnos
            return False

    denied = (errno.EACCES, errno.EPERM)
    return (
        port is not None
        and refused(("192.0.2.1", 80), (errno.ENETUNREACH, *denied))
        and refused(("127.0.0.1", 9), (errno.ECONNREFUSED, *denied))
    )


def main(ctl_fd: int) -> None:
    ctl = socket.socket(fileno=ctl_fd)
    zygote = _Zygote(ctl)
    try:
        zygote.start()
    except Exception:
        traceback.print_exc()
        os._exit(_EXIT_SETUP_FAILED)
    loop = zygote.serve()
    # Only a forked worker gets here (in the zygote, serve() never returns): it has left the zygote's
    # loop and handlers, whose failures mean a failed set-up, and a failure of its own loop is its own.
    code = 0
    try:  # pragma: no cover - runs in the forked child
        loop()
    except BaseException:
        try:
            _write_all(2, traceback.format_exc().encode())
        finally:
            code = _EXIT_SETUP_FAILED
    os._exit(code)
