"""The host's side: a client for the zygote and a handle per worker.

Nothing here runs the agent's code. The host never forks: the zygote is started with
`subprocess.Popen` (fork+exec, safe from a threaded host) and forks the workers itself.
"""

from __future__ import annotations

import codecs
import contextlib
import itertools
import json
import os
import select
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from ..._capture import BoundedText, StreamingText
from ..._exceptions import BoundaryError
from ..._text import BYTES_ERRORS
from . import _protocol as P
from . import _zygote

if TYPE_CHECKING:
    from ..._host_tools import ToolRun

__all__ = ["Died", "Invalid", "OutputSink", "TimedOut", "WorkerHandle", "ZygoteClient"]

# Named through the module object, so a rename or move cannot leave a stale string behind.
_BOOTSTRAP = (
    "import json, sys\n"
    "sys.path[:] = json.loads(sys.argv[1])\n"
    f"from {_zygote.__name__} import {_zygote.main.__name__}\n"
    f"{_zygote.main.__name__}(int(sys.argv[2]))\n"
)
_READ_CHUNK = 1 << 16
# After a reply, output the worker keeps producing (a thread printing forever) is left for later.
_DRAIN_AFTER_REPLY_BYTES = 4 << 20
# The worker writes each line at once (so output survives a crash); the host reads it in batches:
# after reading, it stops watching the pipes this long and lets their buffers fill, so a print loop
# does not cost a host wake-up per line.
_OUTPUT_BATCH_S = 0.002
PIPE_BUFFER_BYTES = 256 * 1024
_EXITS_KEPT = 4096
_RID = struct.Struct("!I")
# A thread waiting for a reply wakes at least this often, so an exception raised into it (a
# framework abandoning the call) takes effect and the call is abandoned cleanly (see _abandon).
_POLL_CAP_S = 0.25


@dataclass(frozen=True)
class Died:
    """The worker's socket closed before a reply."""


@dataclass(frozen=True)
class Invalid:
    """The worker broke the protocol (a frame over the size limit, a reply that is not a valid
    result): it is stopped like a crashed one, and says so."""


@dataclass(frozen=True)
class TimedOut:
    """No reply before the deadline (`interrupted`: the deadline an interrupt cut short)."""

    interrupted: bool = False


class OutputSink:
    """One stream of one call: decoded incrementally, kept as head + tail."""

    __slots__ = ("_decoder", "_emit", "_limit", "_name", "_text")

    def __init__(
        self, limit: int, emit: Callable[[tuple[str, str]], object] | None = None, name: str = "stdout"
    ) -> None:
        self._limit = limit
        self._emit = emit  # streamed calls: each decoded piece, as the in-process capture hands it
        self._name = name
        self._decoder: codecs.IncrementalDecoder | None = None
        self._text: BoundedText | None = None  # built on first output: most calls print nothing

    def write(self, data: bytes) -> None:
        if self._text is None or self._decoder is None:
            self._decoder = codecs.getincrementaldecoder("utf-8")(BYTES_ERRORS)  # as in-process
            emit = self._emit
            if emit is None:
                self._text = BoundedText(self._limit)
            else:
                self._text = StreamingText(self._limit, emit, self._name)
        self._text.write(self._decoder.decode(data))

    def finish(self) -> tuple[str, bool]:
        if self._text is None or self._decoder is None:
            return "", False
        self._text.write(self._decoder.decode(b"", final=True))
        return self._text.getvalue(), self._text.truncated


class WorkerHandle:
    """The host's end of one worker: its socket and the read ends of its stdout/stderr pipes."""

    def __init__(self, token: str, sock: socket.socket, out_r: int, err_r: int, interrupt_w: int) -> None:
        self.token = token
        self.sock = sock
        self.out_r = out_r
        self.err_r = err_r
        self.interrupt_w = interrupt_w  # request ids to stop, for the worker's SIGUSR1 handler
        self.pid: int | None = None
        self.dead = False
        self.checkpoint = False  # once retired: the zygote holds its checkpoint copy (see resume)
        self.no_checkpoint: str | None = None  # why the running cell has no checkpoint, if it said
        self.frames = P.FrameBuffer()
        # Every request carries a fresh id and the worker echoes it: `wait` drops the late reply of a
        # call that was abandoned mid-flight instead of handing it to the next caller.
        self._rids = itertools.count(1)
        self.pending = 0  # id of the request sent and not answered yet (0: none)
        self.abandoned = False  # its caller gave up waiting; the next caller settles it first
        # interrupt() moves the deadline of the wait in progress forward and wakes it.
        self.cut_deadline = float("inf")
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._poll = select.poll()
        self._open: dict[int, int] = {}  # fd -> 0 socket, 1 stdout, 2 stderr, 3 wake-up
        for fd, which in ((sock.fileno(), 0), (out_r, 1), (err_r, 2), (self._wake_r, 3)):
            self._poll.register(fd, select.POLLIN)
            self._open[fd] = which
        # After a reply: one poll(0) says whether the output pipes hold anything, instead of a read
        # per pipe that fails with EAGAIN on nearly every call.
        self._pipes = select.poll()
        for fd in (out_r, err_r):
            self._pipes.register(fd, select.POLLIN)

    def send(self, kind: int, payload: bytes = b"") -> int:
        """Send one request; its id, or 0 if the worker is gone."""
        rid = next(self._rids)
        try:
            self.sock.sendall(P.encode(kind, payload, rid))
        except OSError:
            return 0
        self.pending = rid
        self.abandoned = False
        self.cut_deadline = float("inf")
        return rid

    def send_tools(self, offer: tuple[tuple[str, str], ...]) -> None:
        """Name the host tools of the EXEC sent next (no reply; a gone worker shows at that EXEC)."""
        payload = json.dumps(offer, separators=(",", ":")).encode()
        with contextlib.suppress(OSError):
            self.sock.sendall(P.encode(P.TOOLS, payload))

    def send_json(self, kind: int, obj: Any) -> int:
        return self.send(kind, json.dumps(obj, separators=(",", ":")).encode())

    def post_interrupt(self, rid: int) -> bool:
        """Tell the worker which request to stop (before the zygote signals it)."""
        try:
            os.write(self.interrupt_w, _RID.pack(rid))
        except OSError:
            return False
        return True

    def cut_short(self, grace_s: float) -> None:
        """Make the wait in progress give up `grace_s` from now (thread-safe; called by interrupt)."""
        self.cut_deadline = min(self.cut_deadline, time.monotonic() + grace_s)
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"!")

    def wait(
        self,
        deadline: float,
        out: OutputSink | None = None,
        err: OutputSink | None = None,
        rid: int = 0,
        tools: ToolRun | None = None,
    ) -> tuple[int, bytes] | Died | Invalid | TimedOut:
        """Pump output until the frame answering request `rid` arrives (0: an unsolicited frame such
        as READY), the socket closes, or the deadline passes. Frames answering other requests are
        late replies to abandoned calls: dropped. A host tool call of the running cell is served
        (`tools`) while this waits, and answered."""
        sinks = (None, out, err)
        sock_fd = self.sock.fileno()
        muted_until = 0.0
        received: tuple[int, int, bytes] | None = None  # the frame the last read completed
        try:
            while True:
                tagged = received
                if tagged is not None:
                    received = None
                else:
                    try:
                        tagged = self.frames.next_tagged()
                    except P.ProtocolError:
                        return Invalid()
                if tagged is not None:
                    if tagged[1] != rid:
                        continue
                    if tagged[0] == P.TOOL_CALL:
                        self._serve_tool(tools, tagged[2])
                        continue
                    if rid == self.pending:
                        self.pending = 0
                    # The worker writes its output before its reply, so it is in the pipes now.
                    if self._pipes.poll(0):
                        self.drain(out, err, limit=_DRAIN_AFTER_REPLY_BYTES)
                    return tagged[0], tagged[2]
                if sock_fd not in self._open:
                    return Died()
                now = time.monotonic()
                cut = self.cut_deadline
                remaining = min(deadline, cut) - now
                if remaining <= 0:
                    return TimedOut(interrupted=cut < deadline)
                if muted_until:
                    if now >= muted_until:
                        self._watch_output(True)
                        muted_until = 0.0
                    else:
                        remaining = min(remaining, muted_until - now)
                for fd, _ in self._poll.poll(min(remaining, _POLL_CAP_S) * 1000 + 1):
                    which = self._open.get(fd)
                    if which == 0:
                        try:
                            data = self.sock.recv(_READ_CHUNK)
                        except OSError:
                            data = b""
                        if not data:
                            self._close_fd(fd)
                        else:  # `received` is None here: the loop took the last one first
                            try:
                                received = self.frames.next_from(data)
                            except P.ProtocolError:
                                return Invalid()
                    elif which == 3:
                        with contextlib.suppress(OSError):
                            os.read(fd, 64)
                    elif which is not None:
                        self._read_output(fd, sinks[which])
                        if not muted_until:
                            self._watch_output(False)
                            muted_until = time.monotonic() + _OUTPUT_BATCH_S
        finally:
            if muted_until:
                self._watch_output(True)

    def _serve_tool(self, tools: ToolRun | None, payload: bytes) -> None:
        """Run one tool call of the cell on a host thread and answer it, unless the run's deadline
        (or an interrupt) comes first: the cell has given up on it then, and the tool's thread
        finishes on its own, its reply dropped."""
        from ..._host_tools import POOL

        if len(payload) < P.TOOL_CALL_HEAD.size:
            return
        (number,) = P.TOOL_CALL_HEAD.unpack_from(payload)
        if tools is None:  # a stub kept from an earlier run that had tools
            reply: bytes | None = b"E" + b"tools can be called only while the session's code runs"
        else:
            job = POOL.submit(tools.serve, payload[P.TOOL_CALL_HEAD.size :])
            reply = tools.wait(job, lambda: self.cut_deadline)
        if reply is not None:
            with contextlib.suppress(OSError):
                self.sock.sendall(P.encode(P.TOOL_REPLY, reply, number))

    def _watch_output(self, on: bool) -> None:
        for fd in (self.out_r, self.err_r):  # the wake-up pipe stays watched
            if fd in self._open:
                self._poll.modify(fd, select.POLLIN if on else 0)

    def drain(
        self, out: OutputSink | None, err: OutputSink | None, *, limit: int, until_eof_s: float = 0
    ) -> None:
        """Read what the pipes hold now (or, after a kill, until EOF or `until_eof_s`)."""
        deadline = time.monotonic() + until_eof_s
        for fd, sink in ((self.out_r, out), (self.err_r, err)):
            budget = limit
            while fd in self._open and budget > 0:
                try:
                    data = os.read(fd, _READ_CHUNK)
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        break
                    select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
                    continue
                except OSError:
                    data = b""
                if not data:
                    self._close_fd(fd)
                    break
                budget -= len(data)
                if sink is not None:
                    sink.write(data)

    def _read_output(self, fd: int, sink: OutputSink | None) -> None:
        # Empty the pipe (up to a bound) before muting it, so the worker is never left blocked.
        for _ in range(16):
            try:
                data = os.read(fd, _READ_CHUNK)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._close_fd(fd)
                return
            if sink is not None:
                sink.write(data)
            if len(data) < _READ_CHUNK:
                return

    def _close_fd(self, fd: int) -> None:
        if self._open.pop(fd, None) is not None:
            self._poll.unregister(fd)
            if fd != self.sock.fileno():
                with contextlib.suppress(KeyError):
                    self._pipes.unregister(fd)

    def close(self) -> None:
        """Idempotent: a second close must not close descriptor numbers reused since the first."""
        if self.dead:
            return
        self.dead = True
        self._open.clear()
        self.sock.close()
        for fd in (self.out_r, self.err_r, self._wake_r, self._wake_w, self.interrupt_w):
            with contextlib.suppress(OSError):
                os.close(fd)


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
        self._hello: dict[str, Any] | None = None
        self._dead = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._ctl: socket.socket | None = None
        self._stderr: IO[bytes] | None = None
        self._reader: threading.Thread | None = None
        self.generation = 0

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
            self.generation += 1
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
        with self._cond:
            self._dead = True
            self._cond.notify_all()

    # ---- requests -------------------------------------------------------------------------------

    def spawn(self, token: str, request: dict[str, Any], fds: list[int]) -> None:
        self._send_with_fds(P.SPAWN, {"token": token, **request}, fds)

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

    def forget(self, token: str) -> None:
        with self._cond:
            self._exits.pop(token, None)
            self._failures.pop(token, None)

    def spawn_failure(self, token: str) -> str | None:
        with self._cond:
            return self._failures.pop(token, None)

    # ---- reader ---------------------------------------------------------------------------------

    def _read_loop(self, ctl: socket.socket) -> None:
        frames = P.FrameBuffer()
        while True:
            try:
                data = ctl.recv(_READ_CHUNK)
            except OSError:
                data = b""
            if not data:
                break
            frames.feed(data)
            try:
                while (frame := frames.next()) is not None:
                    self._handle(*frame)
            except (P.ProtocolError, ValueError):
                break
        with self._cond:
            current = self._ctl is ctl
            if current:
                self._dead = True
            self._cond.notify_all()
        if current and not self._closing and self._on_death is not None:
            self._on_death()

    def _handle(self, kind: int, payload: bytes) -> None:
        message = json.loads(payload) if payload else {}
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

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None
