"""The worker's main loop: one session, the same runner as in-process, driven over a socket.

Security model: by the time `prepare()` runs, `_sandbox.apply` has confined this process (see
docs/subprocess.md); inside it the policy's own layers run exactly as in-process. This loop trusts
nothing it receives beyond the frame format, and the host trusts nothing it sends back beyond
the result schema.

Output: the runner captures `print()` per execution into a `Capture`. Here that capture writes
through to file descriptors 1 and 2, which are pipes the host reads while the code runs, so
`print()`, `os.write(1, ...)`, C extensions and child processes land in one ordered stream, output
written before a crash survives it, and the host bounds it (head + tail) however much arrives.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import gc
import io
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from ..._boundary import ExecutionRequest, cancelled_before_start
from ..._exceptions import VariableNotFound
from ..._host_tools import ToolStubs
from ..._limits import Limits
from ..._models import ErrorInfo, ExecutionResult
from ..._runner import OUT_OF_MEMORY, run_cell
from ..._session import Session
from ..._text import clean
from ..._watchdog import watchdog
from ...policy import PolicyRuntime
from ...policy._restricted import RestrictedRuntime
from ...snapshot._format import SessionSnapshot, SnapshotError, SnapshotRefused
from ...snapshot._handoff import make_file, read_handoff, write_handoff
from ...snapshot._load import restore_snapshot
from ...snapshot._save import take_snapshot
from . import _protocol as P
from . import _sandbox

__all__ = ["prepare", "thread_count"]

_FLUSH_AT = 8192
_RID = struct.Struct("!I")
# The first lines of each call are written one by one, so the output before a crash survives it.
# A call that keeps printing is batched (8 KiB or 10 ms) instead: a print loop then costs a few
# hundred writes, not one per line, and a crash loses at most its last 10 ms of output.
_EAGER_LINES = 200
_BATCH_S = 0.01
# Objects that exist when a cell starts are frozen (kept out of the cycle collector) while the cell
# runs, so a collection in the worker does not write to every page it shares with its checkpoint.
# Cycles among them that became garbage are collected after the cell, off the call's path: a full
# collection once this many cells have passed, at most a tenth of the time.
_COLLECT_EVERY = 16
_COLLECT_SHARE = 10
# A cell waiting for a host tool's reply wakes this often, so its timeout or an interrupt lands.
_TOOL_WAIT_SLICE_MS = 20


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "backslashreplace")  # the one rule for text that is not UTF-8 (_text)


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class _FdText:
    """Stands in for the runner's bounded text buffer: writes through to a file descriptor."""

    __slots__ = ("_buf", "_fd", "_flushed_at", "_lines")

    truncated = False  # the host bounds the stream and reports truncation

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buf = bytearray()
        self._lines = 0
        self._flushed_at = 0.0

    def start_call(self) -> None:
        self._lines = 0

    def write(self, text: str) -> None:
        data = _encode(text)
        self._buf += data
        if len(self._buf) >= _FLUSH_AT:
            self.flush()
        elif b"\n" in data or b"\r" in data:  # a progress bar redraws with \r
            self._lines += 1
            if self._lines <= _EAGER_LINES or time.monotonic() - self._flushed_at >= _BATCH_S:
                self.flush()

    def flush(self) -> None:
        if self._buf:
            # Dropped first: if the code closed the descriptor, the error is the code's, once.
            buf, self._buf = self._buf, bytearray()
            self._flushed_at = time.monotonic()
            _write_all(self._fd, buf)

    def getvalue(self) -> str:
        self.flush()
        return ""


_STDOUT = _FdText(1)
_STDERR = _FdText(2)


class _FdCapture:
    """The runner's `Capture`, writing through to fds 1 and 2 instead of keeping text in memory."""

    __slots__ = ("stderr", "stdout")

    def __init__(self) -> None:
        self.stdout = _STDOUT
        self.stderr = _STDERR


_CAPTURE = _FdCapture()


def _capture_for_call(limit: int) -> _FdCapture:
    """The runner's capture factory. One capture serves every call: it holds no text, only the two
    descriptors' writers, whose eager-line count starts over here (the host applies `limit`)."""
    del limit
    _STDOUT.start_call()
    _STDERR.start_call()
    return _CAPTURE


@functools.cache
def _c_fflush() -> Any:
    try:
        return ctypes.CDLL(None).fflush
    except (OSError, AttributeError):
        return None


# The worker's own sys.stdout and sys.stderr (_install_streams): write-through over an unbuffered
# FileIO, they hold no text while they stay write-through (code may reconfigure them), so
# flushing them does nothing and is skipped.
_own_streams: list[io.TextIOWrapper | None] = [None, None]


def _flush_all() -> None:
    """Everything written so far reaches the pipes before the reply does (the host relies on it)."""
    own_out, own_err = _own_streams
    if own_out is not None and not own_out.write_through:
        own_out = None
    if own_err is not None and not own_err.write_through:
        own_err = None
    for stream in (_STDOUT, _STDERR, sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None and stream is not own_out and stream is not own_err:
                stream.flush()
        except (OSError, ValueError):  # the code closed or replaced the stream; not ours to fix
            pass
    fflush = _c_fflush()
    if fflush is not None:
        fflush(None)  # C stdio buffers (printf from extensions)


@functools.cache  # once per process: a spare's warm-up does it before the request
def _line_buffer_c_stdio() -> None:
    # C stdio fully buffers a pipe; line buffering (as on a terminal) keeps printf output in order
    # with everything else. glibc only: elsewhere the end-of-call fflush still delivers it.
    try:
        libc = ctypes.CDLL(None)
        for name in ("stdout", "stderr"):
            stream = ctypes.c_void_p.in_dll(libc, name)
            libc.setvbuf(stream, None, 1, 0)  # _IOLBF
    except (OSError, ValueError, AttributeError):
        pass


def _install_streams() -> None:
    # Writes outside an execution (threads the code started) go to the same pipes, unbuffered.
    out, err = (
        io.TextIOWrapper(
            io.FileIO(fd, "w", closefd=False),
            encoding="utf-8",
            errors="backslashreplace",
            line_buffering=True,
            write_through=True,
        )
        for fd in (1, 2)
    )
    # sys.__stdout__ too: the interpreter's own wrappers over fds 1 and 2 buffer (a pipe is not a
    # terminal), so text written to them waited for the end-of-call flush, out of order.
    sys.stdout, sys.stderr = out, err
    sys.__stdout__, sys.__stderr__ = out, err  # type: ignore[misc]  # typeshed marks them Final
    _own_streams[:] = (out, err)
    _line_buffer_c_stdio()


class _Resumed(BaseException):
    """In a checkpoint copy the zygote made the session's worker: unwinds to the loop, which then
    serves the new socket (the copy's stack is the worker's as it was before the failed cell)."""


class _Worker:
    """Serves one session's requests in a sandboxed worker process.

    Security model: the OS sandbox applied before it starts plus the policy's layers inside
    `run_cell`, as in-process; replies are data the host validates, never trusted.
    """

    def __init__(
        self,
        sock: socket.socket,
        interrupt_fd: int,
        session: Session,
        runtime: PolicyRuntime,
        limits: Limits,
        boundary: str,
        channel: socket.socket | None,
    ) -> None:
        self.sock = sock
        self.interrupt_fd = interrupt_fd
        self.current = 0  # id of the request being served (0: between requests)
        self.started = 0  # highest request id served so far
        self.cancelled: set[int] = set()  # ids interrupted before they started
        self.session = session
        self.runtime = runtime
        self.limits = limits
        self.boundary = boundary
        self._limits_by_timeout: dict[float, Limits] = {limits.timeout_s: limits}
        self._parts: list[bytes] = []  # LOAD_PART payloads before their LOAD
        self.frames = P.FrameBuffer()
        self.held: list[tuple[int, int, bytes]] = []  # frames read while a tool call waited for its reply
        self.offer: tuple[tuple[str, str], ...] = ()  # the host tools of the next EXEC (a TOOLS frame)
        self.tool_calls = 0  # numbers this worker's tool calls (their replies carry it)
        self.in_cell = False
        self._tool_lock = threading.Lock()  # one call on the socket at a time (threads of trusted code)
        self.replied: ExecutionResult | None = None  # the result of the reply being sent
        self.reply_fds: list[int] = []  # descriptors that go with the reply (then closed here)
        # Checkpoints: our end of a socket to the zygote (None: off), the copy of the state as it is
        # now (for the next request; 0: none, and no_copy says why), and the zygote, which becomes
        # the copy's parent once this process is gone.
        self.channel = channel
        self.copy_pid = 0
        self.no_copy = "no copy was taken yet"
        # Until the first request is answered the state is a new worker's, and the zygote stands
        # for its copy with a new worker (so the first request waits for no fork).
        self.fresh = channel is not None
        self.dropped: list[int] = []  # earlier copies, killed and not reaped yet
        self.zygote_pid = os.getppid()
        self._cells_since_collect = 0
        self._collect_cost = 0.0
        self._collected_at = time.monotonic()
        # The egress listener (a network policy only): passed out with the first READY, never kept.
        self.listener: socket.socket | None = None

    def loop(self) -> None:
        # One frame below the cell's, on purpose: the policy's audit hook walks every frame under a
        # run. A copy that resumes (_Resumed) starts over here with its new socket.
        while True:
            try:
                ready = json.dumps({"pid": os.getpid()}).encode()
                if self.listener is not None:
                    P.send_frame(self.sock, P.READY, ready, [self.listener.fileno()])
                    self.listener.close()
                    self.listener = None
                else:
                    P.send_frame(self.sock, P.READY, ready)
                if not self.fresh:  # a resumed copy: the next request's, while the host reads READY
                    self._checkpoint()
                frames = self.frames = P.FrameBuffer()
                self.held.clear()
                sock = self.sock
                while True:
                    frame = self.held.pop(0) if self.held else frames.next_tagged()
                    if frame is None:
                        data = sock.recv(1 << 16)  # one syscall per request, however it is framed
                        if not data:
                            return
                        frame = frames.next_from(data)
                        if frame is None:
                            continue
                    kind, rid, payload = frame
                    if kind == P.LOAD_PART:  # part of a large snapshot: kept until its LOAD, no reply
                        self._parts.append(payload)
                        continue
                    if kind == P.TOOLS:
                        self.offer = _tool_offer(payload)
                        continue
                    if kind == P.TOOL_REPLY:  # the late reply to a call a timeout gave up on
                        continue
                    self.current = self.started = rid
                    try:
                        if rid in self.cancelled:
                            self.cancelled.discard(rid)
                            reply_kind, reply = self._cancelled(payload)
                        elif kind == P.EXEC:
                            reply_kind, reply = self._exec(payload)
                        else:
                            try:
                                reply_kind, reply = self._query(kind, payload)
                            # an infrastructure failure here; tell the host what broke
                            except Exception as exc:
                                reply_kind, reply = P.FAILED, _encode(f"{type(exc).__name__}: {exc}")
                    finally:
                        self.current = 0
                        self.session.cancel_pending = False
                    _flush_all()
                    if self.reply_fds:
                        self._send_with_fds(reply_kind, reply, rid)
                    else:
                        sock.sendall(P.encode(reply_kind, reply, rid))
                    self.replied = None
                    # Off the call's path: while the host reads the reply and the worker would
                    # otherwise wait. A request that arrives meanwhile waits in the socket for it.
                    self._checkpoint()
            except _Resumed:
                continue

    def _send_with_fds(self, kind: int, payload: bytes, rid: int) -> None:
        fds, self.reply_fds = self.reply_fds, []
        try:
            P.send_frame(self.sock, kind, payload, fds, rid)
        finally:
            for fd in fds:
                os.close(fd)

    def on_interrupt(self, signum: int, frame: Any) -> None:
        """SIGUSR1: the host wrote request ids to stop into the interrupt pipe.

        Runs in the main thread between two bytecodes, so it only reads a pipe and stores flags:
        the running request is cancelled (the runner arms it even if the cell has not started
        yet), a request not started yet is remembered, a finished one is ignored.
        """
        try:
            data = os.read(self.interrupt_fd, 4096)
        except OSError:
            return
        for (rid,) in _RID.iter_unpack(data[: len(data) - len(data) % _RID.size]):
            if rid == self.current:
                self.session.cancel_pending = True
                watchdog.cancel_thread(threading.main_thread().ident)
            elif rid > self.started:
                self.cancelled.add(rid)

    def _cancelled(self, payload: bytes) -> tuple[int, bytes]:
        del payload
        request = ExecutionRequest("", self.session.name)
        result = cancelled_before_start(
            request, self.runtime.name, self.boundary, self.session.execution_count
        )
        return P.RESULT, result.model_dump_json().encode()

    def _exec(self, payload: bytes) -> tuple[int, bytes]:
        code, timeout_s = P.decode_exec(payload)
        if self.channel is not None and not self.copy_pid and not self.fresh:
            # Said before the cell runs: the host words it, in the result or for the crash.
            P.send_frame(self.sock, P.NO_CHECKPOINT, _encode(self.no_copy), rid=self.current)
        started = time.perf_counter()
        own, children = _rusage()
        cpu_started = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
        offer, self.offer = self.offer, ()
        if offer or self.session.tools is not None:
            stubs = self.session.tools
            if stubs is None:
                stubs = self.session.tools = ToolStubs(self._tool_send)
            stubs.install(self.session.builtins, offer)
        try:
            limits = self._limits_for(timeout_s)
            self.in_cell = True
            try:
                with self.session.lock:
                    result = run_cell(
                        self.session,
                        code,  # compiled by run_cell, inside its output routing
                        self.runtime,
                        limits,
                        self.boundary,
                        capture_factory=_capture_for_call,
                        measure_cpu=False,  # set below, for the whole worker
                    )
            finally:
                self.in_cell = False
            # The run's usage: the whole worker's CPU, and its peak memory (a process high-water mark).
            own, children = _rusage()
            cpu = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
            result.usage.cpu_ms = round((cpu - cpu_started) * 1000, 3)
            result.usage.peak_memory_mb = _peak_memory_mb(own)
            error = result.error
            if error is not None and error.message == OUT_OF_MEMORY and limits.memory_mb:
                # The worker's address-space cap is what ran out: say so (Python's MemoryError is silent).
                error.message = (
                    f"the worker's memory limit of {limits.memory_mb} MiB (Limits.memory_mb) was reached"
                )
            self.replied = result  # freed once the reply is on its way, not before it is sent
            return P.RESULT, result.model_dump_json().encode()
        except Exception as exc:  # e.g. MemoryError building the result under a tight memory_mb
            fallback = ExecutionResult(
                status="error",
                session=self.session.name,
                execution_count=self.session.execution_count,
                policy=self.runtime.name,
                boundary=self.boundary,
                duration_ms=round((time.perf_counter() - started) * 1000, 3),
                error=ErrorInfo(
                    type=type(exc).__name__,
                    message=clean(f"the worker could not report this run: {exc}"[:2000]),
                    hint="The session is still alive; retry with smaller values or output.",
                ),
            )
            return P.RESULT, fallback.model_dump_json().encode()

    def _tool_send(self, payload: bytes) -> bytes:
        """A host tool call from the cell: sent to the host, which answers while the cell waits.

        Waits in short slices, so the cell's timeout or an interrupt lands meanwhile; a reply that
        comes after that is dropped by the loop."""
        if not self.in_cell:
            return b"E" + b"tools can be called only while the session's code runs"
        lock = self._tool_lock
        while not lock.acquire(timeout=_TOOL_WAIT_SLICE_MS / 1000):
            pass
        try:
            return self._tool_round_trip(payload)
        finally:
            lock.release()

    def _tool_round_trip(self, payload: bytes) -> bytes:
        self.tool_calls += 1
        number = self.tool_calls
        gone = b"E" + b"the host is gone; the tool could not be called"
        try:
            self.sock.sendall(P.encode(P.TOOL_CALL, P.TOOL_CALL_HEAD.pack(number) + payload, self.current))
        except OSError:
            return gone
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        while True:
            frame = self.frames.next_tagged()
            if frame is None:
                if not poller.poll(_TOOL_WAIT_SLICE_MS):
                    continue
                try:
                    data = self.sock.recv(1 << 16)
                except OSError:
                    data = b""
                if not data:
                    return gone
                self.frames.feed(data)
                continue
            kind, rid, reply = frame
            if kind == P.TOOL_REPLY:
                if rid == number:
                    return reply
                continue  # an older call's, given up on
            self.held.append(frame)  # for the loop, after this cell

    # ---- checkpoints ------------------------------------------------------------------------------
    # After each reply (and after a resumed copy's READY) the worker forks a copy of itself that
    # waits, paused, on a socket of its own (the zygote gets the other end): the state then is
    # exactly the state the next request starts from, and the worker would otherwise wait for that
    # request. If the next cell ends this process, the zygote (the copy's parent from then on: it is
    # a child subreaper) moves the copy out of the dead worker's process group before killing that
    # group, and on the host's request hands it a new socket and pipes: the session goes on with its
    # state from before the cell. The previous copy goes once the new one exists.
    #
    # Why every interleaving is safe: the zygote resumes only the last pid announced. Before the
    # fork the worker announces 0 (the previous copy holds the state from before the request just
    # answered, stale now), and the new pid only once the copy exists; requests are served one at a
    # time after this returns. So a cell runs either with the announced copy of the state from just
    # before it, or with none announced, and then it says so (NO_CHECKPOINT) before it runs.
    # A new worker announces nothing before its first request: the zygote then forks a new worker
    # from the same spawn request as its copy, and the 0 announced after that request retracts it.

    def _checkpoint(self) -> None:
        """Replace the copy with one of the state as it is now, or record why there is none."""
        channel = self.channel
        if channel is None:
            return
        old, self.copy_pid = self.copy_pid, 0
        self._reap_dropped()
        if self.fresh:
            # The zygote must not stand a new worker for this state any more; waited for, since
            # unlike a stale copy (killed below), its stand-in cannot be taken back from here.
            self.fresh = False
            with contextlib.suppress(OSError):  # the zygote is gone: nothing is resumed either way
                channel.send(P.CHECKPOINT_PID.pack(0))
        elif old:
            try:
                channel.send(P.CHECKPOINT_PID.pack(0), socket.MSG_DONTWAIT)
            except OSError:  # the zygote might still resume it: it must not exist any more
                _end_process(old)
                old = 0
        gc.unfreeze()  # the objects frozen for the last request, collected now and then
        self._collect_now_and_then()
        # A copy has only the forking thread: a thread the session started would be cut off in it,
        # and a lock it held would stay held there.
        if thread_count() > 1 + (watchdog.thread_id is not None):
            why: str | None = "the session's code started threads, which a copy of the process would not have"
        else:
            why, full = self._fork()
            if full and old:  # at the process limit the stale copy makes room
                _end_process(old)
                old = 0
                why, _ = self._fork()
        self.no_copy = why or ""
        if old:
            with contextlib.suppress(OSError):
                os.kill(old, signal.SIGKILL)
            self.dropped.append(old)

    def _fork(self) -> tuple[str | None, bool]:
        """Fork and announce the copy (self.copy_pid). Returns why none was taken (None: taken)
        and whether the process limit refused the fork."""
        channel = self.channel
        assert channel is not None
        # The copy waits on a socket of its own, whose other end goes to the zygote with the pid, so
        # its resume request reaches it and no other process. Every process forked from this worker
        # holds the channel, and a message there goes to whichever holder reads first: possibly an
        # older copy killed a moment ago that has not run since (the kernel hands a waiting message
        # to a killed reader before it acts on the kill), which would die with the new worker's
        # socket and pipes.
        try:
            inbox, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        except OSError as exc:
            return f"the worker could not make a socket for its copy ({exc.strerror or exc})", False
        # Frozen while the next request runs, so a collection in the worker does not write to every
        # page it shares with the copy.
        gc.freeze()
        try:
            with warnings.catch_warnings():
                # 3.12+ warns about forking with threads: the watchdog's is accounted for, below.
                warnings.simplefilter("ignore", DeprecationWarning)
                # Held across the fork, so the watchdog thread holds no lock the copy would inherit
                # locked (the copy starts its watchdog over: see Watchdog._after_fork).
                with watchdog._lock:
                    pid = os.fork()
        except OSError as exc:
            gc.unfreeze()
            inbox.close()
            zygote_end.close()
            full = exc.errno == errno.EAGAIN
            why = "the process limit is reached" if full else exc.strerror or str(exc)
            return f"the worker could not fork a copy of itself ({why})", full
        if pid == 0:  # pragma: no cover - runs in the copy
            zygote_end.close()
            self._wait_as_checkpoint(inbox)
        inbox.close()
        try:
            channel.sendmsg(
                [P.CHECKPOINT_PID.pack(pid)],
                [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", zygote_end.fileno()))],
                socket.MSG_DONTWAIT,
            )
        except OSError as exc:  # the zygote did not keep up: without its knowing, the copy is useless
            _end_process(pid)
            gc.unfreeze()
            return f"the worker could not register its copy with the zygote ({exc})", False
        finally:
            zygote_end.close()  # in flight to the zygote now, or useless
        self.copy_pid = pid
        return None, False

    def _reap_dropped(self) -> None:
        """Reap the copies killed earlier that have exited (a large one's exit takes a while)."""
        for pid in list(self.dropped):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except OSError:  # ChildProcessError too: session code may have reaped it
                done = pid
            if done:
                self.dropped.remove(pid)

    def _collect_now_and_then(self) -> None:
        self._cells_since_collect += 1
        now = time.monotonic()
        if (
            self._cells_since_collect >= _COLLECT_EVERY
            and now - self._collected_at >= _COLLECT_SHARE * self._collect_cost
        ):
            gc.collect()
            self._collected_at = done = time.monotonic()
            self._collect_cost = done - now
            self._cells_since_collect = 0

    def _wait_as_checkpoint(self, inbox: socket.socket) -> None:  # pragma: no cover - runs in the copy
        """In the copy: let go of the worker's socket and pipes (the host sees them close when the
        worker dies), wait on `inbox` for the zygote, then serve the new socket it hands over.
        Exits if the zygote goes away or lets the copy go (it closes its end of `inbox`)."""
        try:
            self.dropped = []  # the worker's children, not ours
            self.sock.close()
            os.close(self.interrupt_fd)
            os.dup2(0, 1)  # /dev/null, read-only: the copy writes nothing while it waits
            os.dup2(0, 2)
            data, ancdata, flags, _ = inbox.recvmsg(1 << 16, socket.CMSG_SPACE(4 * 4))
            inbox.close()
            fds = P.passed_fds(ancdata)
            if not data:
                os._exit(0)
            frames = P.FrameBuffer()
            frames.feed(data)
            frame = frames.next()
            if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or frame is None or frame[0] != P.RESUME:
                raise P.ProtocolError("the copy got something other than one whole resume request")
            if len(fds) != 4:
                raise P.ProtocolError(f"the copy got {len(fds)} descriptors, not 4")
            request = json.loads(frame[1])
            sock_fd, out_fd, err_fd, interrupt_fd = fds
            os.dup2(out_fd, 1)
            os.dup2(err_fd, 2)
            os.close(out_fd)
            os.close(err_fd)
            if _sandbox.LINUX:  # as every worker: dies with the zygote
                _sandbox._prctl(_sandbox._PR_SET_PDEATHSIG, signal.SIGKILL)
                if os.getppid() != self.zygote_pid:
                    os._exit(0)
            os.set_inheritable(sock_fd, False)
            os.set_inheritable(interrupt_fd, False)
            os.set_blocking(interrupt_fd, False)
            self.sock = socket.socket(fileno=sock_fd)
            self.interrupt_fd = interrupt_fd
            self.session.execution_count = int(request["execution_count"])
            self.cancelled.clear()  # request ids start over with the new socket
            self.started = self.current = 0
            self._parts.clear()
            gc.unfreeze()
        except BaseException:
            with contextlib.suppress(OSError):
                _write_all(2, f"the checkpoint copy could not resume: {traceback_text()}".encode())
            os._exit(70)
        raise _Resumed

    def _limits_for(self, timeout_s: float) -> Limits:
        limits = self._limits_by_timeout.get(timeout_s)
        if limits is None:
            if len(self._limits_by_timeout) > 64:
                self._limits_by_timeout.clear()
            limits = self.limits.model_copy(update={"timeout_s": timeout_s})
            self._limits_by_timeout[timeout_s] = limits
        return limits

    def _query(self, kind: int, payload: bytes) -> tuple[int, bytes]:
        session = self.session
        if kind in (P.SNAPSHOT, P.LOAD, P.FORK_OUT, P.FORK_IN):
            return self._snapshot_request(kind, payload)
        request = json.loads(payload) if payload else {}
        with session.lock:
            if kind == P.VARIABLES:
                infos = session.variables(self.limits, bool(request.get("hidden")))
                return P.VARIABLE_LIST, b"[" + b",".join(i.model_dump_json().encode() for i in infos) + b"]"
            if kind == P.INSPECT:
                try:
                    info = session.inspect(request["name"], self.limits)
                except VariableNotFound:
                    return P.NOT_FOUND, b""  # the host words it
                return P.VARIABLE, info.model_dump_json().encode()
            if kind == P.RESET:
                session.reset()
                return P.ACK, b""
        raise P.ProtocolError(f"unknown request kind {kind!r}")

    def _snapshot_request(self, kind: int, payload: bytes) -> tuple[int, bytes]:
        """Take or load a snapshot here, inside the sandbox, with the code in-process uses. (The
        zygote imported that code: the target of engine.fork is always a new worker.)"""
        key = P.WORKER_SNAPSHOT_KEY
        try:
            with self.session.lock:
                if kind == P.FORK_OUT:
                    return self._hand_out()
                if kind == P.SNAPSHOT:
                    snapshot = take_snapshot(self.session, self.runtime, self.limits, key)
                    data = memoryview(snapshot.to_bytes())
                    del snapshot
                    while len(data) > P.PART_BYTES:  # leading parts now, the last one as the reply
                        P.send_frame(
                            self.sock, P.SNAPSHOT_PART, bytes(data[: P.PART_BYTES]), rid=self.current
                        )
                        data = data[P.PART_BYTES :]
                    return P.SNAPSHOT_DATA, bytes(data)
                if kind == P.FORK_IN:
                    blob = self._handed_in(payload)
                else:
                    if self._parts:
                        self._parts.append(payload)
                        payload = b"".join(self._parts)
                        self._parts.clear()
                    # the host checked it
                    blob = _checked_snapshot_class().from_bytes(payload, max_bytes=None)
                    del payload
                info = restore_snapshot(self.session, self.runtime, self.limits, blob, key)
                return P.RESTORED, info.model_dump_json().encode()
        except SnapshotError as exc:
            reason = exc.reason if isinstance(exc, SnapshotRefused) else str(exc)
            refusal = {"type": type(exc).__name__, "message": str(exc), "reason": reason}
            return P.REFUSED, json.dumps(refusal).encode()

    # ---- engine.fork, worker to worker (snapshot/_handoff.py) --------------------------------------

    def _hand_out(self) -> tuple[int, bytes]:
        """The session's state in a sealed memory file, which goes with the reply. An OSError (no
        memfd here, RLIMIT_FSIZE) is a FAILED reply: the host then forks through a snapshot."""
        fd = make_file()
        try:
            index = write_handoff(self.session, self.runtime, self.limits, fd)
        except BaseException:
            os.close(fd)
            raise
        self.reply_fds = [fd]
        return P.FORK_DATA, index

    def _handed_in(self, index: bytes) -> SessionSnapshot:
        """Ask the host for the memory file of a FORK_IN and map it. Read here, frame by frame with
        recvmsg: nothing else is in flight (the host waits for FORK_READY before it sends the file)."""
        if self.frames.pending() or self.held:
            raise P.ProtocolError("a request arrived with the copy's index")
        P.send_frame(self.sock, P.FORK_READY, rid=self.current)
        data, fds = b"", []
        while len(data) < P.HEADER.size:
            more, ancdata, _, _ = self.sock.recvmsg(P.HEADER.size - len(data), socket.CMSG_SPACE(4))
            fds += P.passed_fds(ancdata)
            if not more:
                break
            data += more
        try:
            if len(data) < P.HEADER.size or len(fds) != 1:
                raise P.ProtocolError(f"the copy came as {len(data)} bytes with {len(fds)} descriptors")
            length, kind, _ = P.HEADER.unpack(data)
            if (kind, length) != (P.FORK_FD, 0):
                raise P.ProtocolError(f"the copy came in a frame of kind {kind!r}")
            return read_handoff(fds[0], index, _checked_snapshot_class())
        finally:
            for fd in fds:
                os.close(fd)


def _tool_offer(payload: bytes) -> tuple[tuple[str, str], ...]:
    """The (name, doc) pairs of a TOOLS frame (the host's, so only its shape is checked)."""
    offer = json.loads(payload)
    return tuple((str(name), str(doc)) for name, doc in offer)


@functools.cache
def _checked_snapshot_class() -> type[SessionSnapshot]:
    class Checked(SessionSnapshot):
        """A blob the host authenticated with the engine's key before sending it here, or a copy
        of another worker's session the host handed over (this process does not hold that key, and
        anything in it could forge a blob anyway: the sandbox and the policy's loader are what bound
        a restore here)."""

        __slots__ = ()

        def verify(self, key: bytes) -> None:
            del key

    return Checked


def _end_process(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):  # ChildProcessError too: session code may have reaped it
        os.waitpid(pid, 0)


def traceback_text() -> str:
    import traceback

    return traceback.format_exc()


def thread_count() -> int:
    """Threads of this process, those started by C code included."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return threading.active_count()


def _rusage() -> tuple[resource.struct_rusage, resource.struct_rusage]:
    return resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)


def _peak_memory_mb(own: resource.struct_rusage) -> float:
    peak = own.ru_maxrss  # KiB on Linux, bytes on macOS
    return round(peak / (1 << 20 if sys.platform == "darwin" else 1 << 10), 1)


# A spare's warm-up cell: a first table where pandas is preloaded, else a plain value.
_WARM_TABLE = (
    "import pandas as pd\n"
    "frame = pd.DataFrame({'a': [1, 2, 3], 'b': [4.0, 5.0, 6.0], 'c': ['x', 'y', 'z']})\n"
    "frame.describe()"
)
_WARM_PLAIN = "values = [1, 2.5, 'x']\nvalues"


def warm_up(runtime: PolicyRuntime, limits: Limits, boundary: str, workspace: str) -> None:
    """In a spare, before its request: a first call's one-time work, done on a session of its own
    that is then dropped. Each zygote page the call writes (reference counts) is copied now, at its
    first write, and the paths run once: the compile, the policy's first entry for a workspace
    (`workspace`, an existing directory: the workspace root), the cell, the value's description and
    the reply's encoding. Unarmed: the watchdog's thread starts in the worker, after its sandbox
    (a thread started before would stay outside it). Our own constant code, never the agent's; a
    failure is left to the first call."""
    _line_buffer_c_stdio()
    try:
        if isinstance(runtime, RestrictedRuntime):
            runtime = runtime.with_workspace(workspace)  # as _zygote._become_worker does
        session = Session("warm-up", runtime)
        code = _WARM_TABLE if "pandas" in sys.modules else _WARM_PLAIN
        run_cell(
            session,
            code,
            runtime,
            limits,
            boundary,
            capture_factory=_capture_for_call,
            measure_cpu=False,
            armed=False,
        ).model_dump_json()
    except Exception:
        pass


def prepare(
    sock: socket.socket,
    interrupt_fd: int,
    session_name: str,
    runtime: PolicyRuntime,
    limits: Limits,
    boundary: str,
    *,
    restarted: bool,
    execution_count: int = 0,
    channel_fd: int = -1,
    listener: socket.socket | None = None,
) -> Callable[[], None]:
    """Set up the session in a sandboxed, forked worker; returns its loop, which serves requests
    until the host closes the socket.

    The worker was forked inside the zygote's own loop: the caller runs this one once it has left
    that code (_zygote.main), so none of the zygote's handlers stay on the worker's stack.
    """
    _install_streams()
    session = Session(session_name, runtime)
    session.restarted = restarted
    session.execution_count = execution_count
    channel = None
    if channel_fd >= 0:
        os.set_inheritable(channel_fd, False)
        channel = socket.socket(fileno=channel_fd)
    worker = _Worker(sock, interrupt_fd, session, runtime, limits, boundary, channel)
    worker.listener = listener
    # engine.interrupt and abandoned calls: the host writes the request id to the interrupt pipe and
    # the zygote sends SIGUSR1. The watchdog raises in the code at its next pass, with the same
    # race-free machinery as a timeout.
    os.set_blocking(interrupt_fd, False)
    signal.signal(signal.SIGUSR1, worker.on_interrupt)
    return worker.loop
