"""The worker client: the host's end of one live worker, through which every request goes.

A request goes down a straight line: the boundary's session table (subprocess.py) picks the session's
worker and does the accounting, this client sends the request and reads the frames back (output, host
tool calls, the reply, snapshot parts) until the reply, a crash or the deadline, and the wire
(_protocol) encodes the frames. The launcher (_spawn, or the container boundary's) is called only when
a worker starts (its READY) or an interrupt must be rung. Nothing here runs the agent's code.
"""

from __future__ import annotations

import codecs
import contextlib
import itertools
import json
import os
import select
import socket
import stat
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from ..._capture import BoundedText, StreamingText
from ..._limits import Limits
from ..._models import ExecutionResult
from ..._text import BYTES_ERRORS
from . import _claims
from . import _protocol as P

if TYPE_CHECKING:
    from ..._boundary import ExecutionRequest
    from ..._host_tools import ToolRun
    from ...snapshot._format import SnapshotParts

__all__ = ["Died", "Invalid", "Launcher", "Lost", "OutputSink", "TimedOut", "WorkerClient", "attach_output"]

_READ_CHUNK = 1 << 16
# After a reply, output the worker keeps producing (a thread printing forever) is left for later.
_DRAIN_AFTER_REPLY_BYTES = 4 << 20
# The worker writes each line at once (so output survives a crash); the host reads it in batches:
# after reading, it stops watching the pipes this long and lets their buffers fill, so a print loop
# does not cost a host wake-up per line.
_OUTPUT_BATCH_S = 0.002
_RID = struct.Struct("!I")
# A thread waiting for a reply wakes at least this often, so an exception raised into it (a
# framework abandoning the call) takes effect and the call is abandoned cleanly (see WorkerClient.abandon).
_POLL_CAP_S = 0.25
# The worker's words (a failure, why a cell has no checkpoint) end up before a model or in a log: bounded.
FAILED_BYTES = 2000


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


@dataclass(frozen=True)
class Lost:
    """A call that ended without a valid result (the worker died, broke the protocol or missed its
    deadline), with what it printed until then; the session table retires the worker and says so."""

    reply: Died | Invalid | TimedOut
    out: OutputSink
    err: OutputSink
    started: float  # when the cell started (monotonic)
    why: str | None  # a result refused as implausible: why


class Launcher(Protocol):
    """What a worker client asks of the launcher that started its worker: the worker's READY, and
    the bell that interrupts its request."""

    def await_ready(
        self, session: str, worker: WorkerClient, out: OutputSink | None = None, err: OutputSink | None = None
    ) -> None: ...

    def interrupt(self, worker: WorkerClient) -> None: ...


class WorkerClient:
    """The host's end of one worker: its socket and the read ends of its stdout/stderr pipes.

    Security model: host code only; the worker runs the agent's code, so every byte read from it is
    untrusted: frames are bounded by the wire, results validated in full, and the fields the host's
    accounting keys on (session, policy, boundary, tool usage) are the host's to set.
    """

    def __init__(
        self,
        token: str,
        sock: socket.socket,
        out_r: int,
        err_r: int,
        interrupt_w: int,
        launcher: Launcher,
        *,
        checkpoints: bool = False,
    ) -> None:
        self.token = token
        self.launcher = launcher
        self.checkpoints = checkpoints  # whether the zygote takes a checkpoint before each cell
        self.sock = sock
        self.out_r = out_r
        self.err_r = err_r
        self.interrupt_w = interrupt_w  # request ids to stop, for the worker's SIGUSR1 handler
        self.pid: int | None = None
        self.dead = False
        self.checkpoint = False  # once retired: the zygote holds its checkpoint copy (see resume)
        self.ended_by: str | None = None  # once retired: what ended it beside its code, if known
        self.no_checkpoint: str | None = None  # why the running cell has no checkpoint, if it said
        # A network policy: the worker passes its egress listener with READY (its first bytes), so
        # the first read takes descriptors; every later one drops any it is sent.
        self.wants_listener = False
        self.listener: socket.socket | None = None
        self.passed: list[int] | None = None  # while a FORK_OUT waits: descriptors that came (<= 2)
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
        self.cut_deadline = float("inf")  # before `pending`: an interrupt seeing the request keeps its cut
        self.abandoned = False
        self.pending = rid
        return rid

    def send_tools(self, offer: tuple[tuple[str, str], ...]) -> None:
        """Name the host tools of the EXEC sent next (no reply; a gone worker shows at that EXEC)."""
        payload = json.dumps(offer, separators=(",", ":")).encode()
        with contextlib.suppress(OSError):
            self.sock.sendall(P.encode(P.TOOLS, payload))

    def send_json(self, kind: int, obj: Any) -> int:
        return self.send(kind, json.dumps(obj, separators=(",", ":")).encode())

    # ---- requests: each one call from the session table ------------------------------------------

    def execute(
        self,
        request: ExecutionRequest,
        timeout: float,
        limits: Limits,
        *,
        kill_grace_s: float,
        interrupt_grace_s: float,
        stamp: tuple[str, str, str],
    ) -> ExecutionResult | Lost:
        """Run one cell: the result, its output attached, or what was lost. `stamp` is the (session,
        policy, boundary) the result is reported under."""
        session = stamp[0]
        out = OutputSink(limits.max_output_chars, request.on_output, "stdout")
        err = OutputSink(limits.max_output_chars, request.on_output, "stderr")
        tools = request.tools
        if tools is not None:
            tools.begin(timeout)
            self.send_tools(tools.offer())
        sent = time.monotonic()
        rid = self.send(P.EXEC, P.encode_exec(request.code, timeout))
        try:
            if self.pid is None:  # a fresh worker: the cell's first output may come with READY
                self.launcher.await_ready(session, self, out, err)
            if request.cancelled:  # cancelled after the session table looked, before it was running
                self.interrupt(interrupt_grace_s + kill_grace_s)
            started = time.monotonic()
            deadline = started + timeout + kill_grace_s
            reply = self.wait(deadline, out, err, rid, tools) if rid else Died()
            if isinstance(reply, tuple) and reply[0] == P.NO_CHECKPOINT:  # said before the cell runs
                self.no_checkpoint = reply[1][:FAILED_BYTES].decode("utf-8", "replace")
                self.pending = rid
                reply = self.wait(deadline, out, err, rid, tools)
        except BaseException:
            self.abandon()
            raise
        why: str | None = None
        if isinstance(reply, tuple):
            result = checked_result(reply[1], stamp) if reply[0] == P.RESULT else None
            if result is not None:
                why = _claims.implausible(result, limits, time.monotonic() - sent)
                if why is None:
                    attach_output(result, out, err)
                    return result
            reply = Invalid()
        return Lost(reply, out, err, started, why)

    def query(
        self, kind: int, request: dict[str, Any], deadline: float
    ) -> tuple[int, bytes] | Died | Invalid | TimedOut:
        """Send a query (variables, inspect, reset) and wait for its reply until `deadline`."""
        rid = self.send_json(kind, request)
        if not rid:
            return Died()
        try:
            return self.wait(deadline, rid=rid)
        except BaseException:
            self.abandon()
            raise

    def transfer(
        self, session: str, kind: int, payload: bytes, budget_s: float, parts: SnapshotParts
    ) -> tuple[int, bytes] | Died | Invalid | TimedOut:
        """Send SNAPSHOT or LOAD (a large blob in parts: frames are bounded) and wait `budget_s` for
        the reply, joining the parts it comes in (`parts` raises past the snapshot limit)."""
        view = memoryview(payload)
        while len(view) > P.PART_BYTES:
            if not self.send(P.LOAD_PART, bytes(view[: P.PART_BYTES])):
                break
            view = view[P.PART_BYTES :]
        rid = self.send(kind, bytes(view))
        del view
        if not rid:
            return Died()
        try:
            if self.pid is None:  # a fresh worker: the request waits in its socket until READY
                self.launcher.await_ready(session, self)
            deadline = time.monotonic() + budget_s
            while True:
                reply = self.wait(deadline, rid=rid)
                if not (isinstance(reply, tuple) and reply[0] == P.SNAPSHOT_PART):
                    break
                parts.add(reply[1])
                self.pending = rid  # more of the reply is on its way
            if parts.size and isinstance(reply, tuple):
                reply = (reply[0], parts.finish(reply[1]))
        except BaseException:
            self.abandon()
            raise
        return reply

    def hand_out(
        self, session: str, budget_s: float
    ) -> tuple[tuple[int, bytes] | Died | Invalid | TimedOut, int]:
        """Send FORK_OUT and wait `budget_s` for the reply; with it, the one descriptor that came
        with a FORK_DATA reply (-1: none; any other is closed)."""
        fds: list[int] = []
        self.passed = fds
        reply: tuple[int, bytes] | Died | Invalid | TimedOut = Died()
        try:
            rid = self.send(P.FORK_OUT)
            if rid:
                if self.pid is None:  # a fresh worker: the request waits in its socket until READY
                    self.launcher.await_ready(session, self)
                reply = self.wait(time.monotonic() + budget_s, rid=rid)
        except BaseException:
            self.abandon()
            reply = Died()  # for the descriptors below: none is kept
            raise
        finally:
            self.passed = None
            fd = fds[0] if isinstance(reply, tuple) and reply[0] == P.FORK_DATA and len(fds) == 1 else -1
            for other in fds:
                if other != fd:
                    os.close(other)
        return reply, fd

    def hand_in(
        self, session: str, index: bytes, fd: int, budget_s: float
    ) -> tuple[int, bytes] | Died | Invalid | TimedOut:
        """Send FORK_IN with `index`, then, once the worker asks for it, the memory file `fd`; wait
        `budget_s` in all for the reply."""
        rid = self.send(P.FORK_IN, index)
        if not rid:
            return Died()
        try:
            if self.pid is None:
                self.launcher.await_ready(session, self)
            deadline = time.monotonic() + budget_s
            reply = self.wait(deadline, rid=rid)
            if isinstance(reply, tuple) and reply[0] == P.FORK_READY:
                try:
                    P.send_frame(self.sock, P.FORK_FD, b"", [fd], rid)
                except OSError:
                    return Died()
                self.pending = rid
                reply = self.wait(deadline, rid=rid)
        except BaseException:
            self.abandon()
            raise
        return reply

    def settle(self, deadline: float) -> bool:
        """Wait (until `deadline`) for the late reply of an abandoned call and drop it with its
        output; whether it came (False: the worker must go)."""
        rid = self.pending
        if rid and not self.dead and isinstance(self.wait(deadline, rid=rid), tuple):
            self.abandoned = False
            return True
        return False

    def interrupt(self, grace_s: float) -> bool:
        """Stop the request in flight; a cell that ignores it (C code, a handler of its own) makes
        the wait give up `grace_s` from now, and the worker is killed then. False if none is in
        flight (not sent yet, or answered)."""
        if not self.pending:
            return False
        self.launcher.interrupt(self)
        self.cut_short(grace_s)
        return True

    def abandon(self) -> None:
        """The caller stopped waiting mid-call (KeyboardInterrupt, a cancelled task, an exception
        raised into its thread): stop the work it started; the next call settles it first."""
        if self.dead or not self.pending:
            return  # the reply was read; nothing is in flight
        self.abandoned = True
        self.launcher.interrupt(self)

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
                            if self.wants_listener:
                                data = self._recv_listener()
                            elif self.passed is not None:
                                data = self._recv_passed()
                            else:
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

    def _recv_listener(self) -> bytes:
        data, ancdata, _, _ = self.sock.recvmsg(_READ_CHUNK, socket.CMSG_SPACE(4 * 4))
        self.wants_listener = False
        for fd in P.passed_fds(ancdata):
            if self.listener is None:
                self.listener = _checked_listener(fd)
            else:
                os.close(fd)
        return data

    def _recv_passed(self) -> bytes:
        """A read that keeps the descriptors passed with it: two at most in all (one is what a
        handoff brings, a second makes it invalid), so a worker that keeps sending them cannot
        fill the host's descriptor table."""
        data, ancdata, _, _ = self.sock.recvmsg(_READ_CHUNK, socket.CMSG_SPACE(4 * 4))
        passed = self.passed
        assert passed is not None
        for fd in P.passed_fds(ancdata):
            if len(passed) < 2:
                passed.append(fd)
            else:
                os.close(fd)
        return data

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
        if self.listener is not None:
            self.listener.close()
        for fd in (self.out_r, self.err_r, self._wake_r, self._wake_w, self.interrupt_w):
            with contextlib.suppress(OSError):
                os.close(fd)


def _checked_listener(fd: int) -> socket.socket | None:
    """A descriptor a worker passed with its READY as a socket, if it is what a worker's egress
    listener is (TCP, listening, on 127.0.0.1); otherwise it is closed and None returned."""
    try:
        is_socket = stat.S_ISSOCK(os.fstat(fd).st_mode)
    except OSError:
        is_socket = False
    if not is_socket:
        os.close(fd)
        return None
    sock = socket.socket(fileno=fd)
    try:
        if (
            sock.family == socket.AF_INET
            and sock.type == socket.SOCK_STREAM
            and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
            and sock.getsockname()[0] == "127.0.0.1"
        ):
            return sock
    except OSError:
        pass
    sock.close()
    return None


def checked_result(data: bytes, stamp: tuple[str, str, str]) -> ExecutionResult | None:
    """The worker's result (a RESULT payload) as an ExecutionResult, or None if it is not a valid one.

    The worker runs the agent's code, so these bytes may come from a compromised worker. The check is
    what stands between them and the host: pydantic validates the JSON in full, in one pass: types,
    required fields, no unknown fields, nested models, enum values (an unchecked construct would hand
    hostile shapes to code that assumes the schema). Size is bounded before this by the frame limit
    (P.MAX_FRAME), and what the result holds is the session's own data either way: a worker can only
    ever say things about its own session. So the fields that name a session or where it ran, which
    the host's accounting and history key on, are the host's to set (`stamp`: session, policy,
    boundary), never the worker's.
    """
    try:
        result = ExecutionResult.model_validate_json(data)
    except ValidationError:
        return None
    session, policy, boundary = stamp
    if result.session != session:
        result.session = session
    if result.policy != policy:
        result.policy = policy
    if result.boundary != boundary:
        result.boundary = boundary
    if result.usage.tool_calls or result.usage.tool_ms:  # the host counts its tools' calls itself
        result.usage.tool_calls, result.usage.tool_ms = 0, 0.0
    return result


def attach_output(result: ExecutionResult, out: OutputSink, err: OutputSink) -> None:
    """What the call printed, after what the result already holds."""
    stdout, stdout_cut = out.finish()
    if stdout or stdout_cut:  # most calls print nothing: no assignments then
        result.stdout = result.stdout + stdout if result.stdout else stdout
        result.stdout_truncated = result.stdout_truncated or stdout_cut
    stderr, stderr_cut = err.finish()
    if stderr or stderr_cut:
        result.stderr = result.stderr + stderr if result.stderr else stderr
        result.stderr_truncated = result.stderr_truncated or stderr_cut
