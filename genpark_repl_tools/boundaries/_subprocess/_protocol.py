"""Frames on the host <-> zygote and host <-> worker sockets: 4-byte length, 1-byte kind, 4-byte
request id, payload.

Payloads are JSON, except snapshot blobs, host tool calls and an EXEC request: its time limit as an
8-byte double followed by the code in UTF-8 (`encode_exec`). A result is a RESULT: ExecutionResult
JSON, validated in full by the host.

Host tools: before an EXEC whose session has tools, a TOOLS frame (no reply) names them; while the
cell runs, each call is a TOOL_CALL (with the EXEC's id: a 4-byte call number, then the call packed
by `_host_tools.pack`) and the host answers it with a TOOL_REPLY whose id is that call number. The
host unpacks the call with `_host_tools.unpack`, which makes only plain data: nothing from the
worker is ever unpickled.

The worker echoes the id of the request it answers, so the host can tell the reply it waits for from
the late reply of a call it abandoned (a KeyboardInterrupt or a cancelled task while it waited):
a reply is never delivered to the wrong call. Frames that answer no request carry id 0.

Stream sockets (not SEQPACKET) so the same code works on macOS. File descriptors travel with
SCM_RIGHTS on the frame that needs them; the zygote queues them in arrival order.
"""

from __future__ import annotations

import socket
import struct
import sys

__all__ = [
    "MAX_FRAME",
    "FrameBuffer",
    "ProtocolError",
    "decode_exec",
    "encode",
    "encode_exec",
    "passed_fds",
    "recv_frame",
    "send_frame",
]

HEADER = struct.Struct("!IBI")
_EXEC_HEAD = struct.Struct("!d")
TOOL_CALL_HEAD = struct.Struct("!I")
# A result is bounded by Limits (output, reprs), but a session with very many variables can still
# produce a large change list; beyond this the peer is broken or hostile.
MAX_FRAME = 256 * 1024 * 1024

# host -> worker
EXEC = ord("X")
VARIABLES = ord("V")
INSPECT = ord("I")
RESET = ord("Z")
SNAPSHOT = ord("P")  # take a snapshot of the session
LOAD = ord("U")  # payload: a snapshot blob to restore (already checked by the host)
LOAD_PART = ord("A")  # a leading part of the next LOAD's blob (no reply): blobs may exceed MAX_FRAME
TOOLS = ord("t")  # payload: JSON [[name, doc], ...], the host tools of the EXEC that follows (no reply)
TOOL_REPLY = ord("r")  # id: the call number; payload: b"R" + the packed result, or b"E" + the message
# engine.fork, straight from worker to worker (snapshot/_handoff.py): FORK_OUT asks the source for its
# state in a sealed memory file (the FORK_DATA reply carries it, SCM_RIGHTS); FORK_IN (payload: that
# reply's index) asks the target to load one: it answers FORK_READY, then reads the FORK_FD frame that
# carries the file (a frame with descriptors is read on its own: the loop's plain reads drop them)
FORK_OUT = ord("F")
FORK_IN = ord("H")
FORK_FD = ord("J")
# worker -> host
READY = ord("Y")
RESULT = ord("R")  # payload: ExecutionResult JSON
VARIABLE_LIST = ord("L")
VARIABLE = ord("O")
NOT_FOUND = ord("N")
ACK = ord("K")
FAILED = ord("E")
SNAPSHOT_DATA = ord("D")  # payload: an unsigned snapshot blob (its last part)
SNAPSHOT_PART = ord("G")  # a leading part of the SNAPSHOT_DATA that follows
RESTORED = ord("T")  # payload: SessionRestore JSON
REFUSED = ord("W")  # payload: {"type", "message", "reason"} of a SnapshotError
NO_CHECKPOINT = ord("B")  # before the cell runs: why no checkpoint was taken (UTF-8 text)
FORK_DATA = ord("M")  # payload: the handoff's index; with it (SCM_RIGHTS) the sealed memory file
FORK_READY = ord("Q")  # the target waits for the FORK_FD frame
TOOL_CALL = ord("c")  # id: the EXEC's; payload: a 4-byte call number, then the packed (name, args, kwargs)
# host -> zygote
CONFIG = ord("C")
SPAWN = ord("S")
KILL = ord("K")
INTERRUPT = ord("I")
QUIT = ord("Q")
RESUME = ord("R")  # make a dead worker's checkpoint the worker of a new token (also zygote -> copy)
DISCARD = ord("D")  # drop a dead worker's checkpoint
TAKEN = ord("T")  # the host sent the spare (its pid) the request of a worker (its token)
# zygote -> host
HELLO = ord("H")
EXITED = ord("X")
SPAWN_FAILED = ord("F")
SPARE = ord("P")  # a new spare (its pid), with (SCM_RIGHTS) the socket it waits on for its request

# worker -> zygote, on the checkpoint channel: the pid of the copy kept before the cell, with (SCM_RIGHTS)
# the zygote's end of the socket that copy waits on
CHECKPOINT_PID = struct.Struct("!i")

# Payloads from this size on are copied out of the receive buffer through a memoryview.
_VIEW_COPY_BYTES = 64 * 1024
# Snapshot blobs travel in parts of at most this many bytes, and a snapshot frame longer than that is
# refused from its header: a host assembling a snapshot holds the parts so far (within the snapshot
# limit) plus one frame, however a worker floods it.
PART_BYTES = 8 * 1024 * 1024

# The worker never holds the engine's snapshot key. What it produces is unsigned (an empty key:
# a zero MAC) and the host signs it with the real key; a blob the host sends it was checked with
# the real key first, and the worker loads it without checking again.
WORKER_SNAPSHOT_KEY = b""


class ProtocolError(Exception):
    """The peer sent something that is not a valid frame (or closed mid-frame)."""


def encode(kind: int, payload: bytes = b"", rid: int = 0) -> bytes:
    return HEADER.pack(len(payload), kind, rid) + payload


def encode_exec(code: str, timeout_s: float) -> bytes:
    """An EXEC payload. `surrogatepass`: code holding a lone surrogate reaches the worker as written
    (the runner reports it there, as in-process), as it did when it travelled as JSON."""
    return _EXEC_HEAD.pack(timeout_s) + code.encode("utf-8", "surrogatepass")


def decode_exec(payload: bytes) -> tuple[str, float]:
    """(code, timeout_s) of an EXEC payload; ProtocolError if it is too short to be one."""
    if len(payload) < _EXEC_HEAD.size:
        raise ProtocolError("an EXEC request without its time limit")
    (timeout_s,) = _EXEC_HEAD.unpack_from(payload)
    return payload[_EXEC_HEAD.size :].decode("utf-8", "surrogatepass"), timeout_s


def passed_fds(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    """The descriptors a recvmsg received (SCM_RIGHTS), in order."""
    fds: list[int] = []
    for level, kind, cdata in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(cdata) - len(cdata) % 4
            fds.extend(int.from_bytes(cdata[i : i + 4], sys.byteorder) for i in range(0, usable, 4))
    return fds


def send_frame(
    sock: socket.socket, kind: int, payload: bytes = b"", fds: list[int] | None = None, rid: int = 0
) -> None:
    data = encode(kind, payload, rid)
    if fds:
        sent = sock.sendmsg(
            [data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))]
        )
        if sent < len(data):
            sock.sendall(data[sent:])
    else:
        sock.sendall(data)


def _recv_exact(sock: socket.socket, n: int, *, at_boundary: bool = False) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            if got == 0 and at_boundary:
                raise EOFError
            raise ProtocolError("connection closed mid-frame")
        got += k
    return bytes(buf)


def recv_frame(sock: socket.socket) -> tuple[int, bytes]:
    """Blocking read of one frame (kind, payload); EOFError on a clean close between frames."""
    length, kind, _ = HEADER.unpack(_recv_exact(sock, HEADER.size, at_boundary=True))
    _check_length(length, kind)
    return kind, _recv_exact(sock, length) if length else b""


_PART_KINDS = frozenset({LOAD, LOAD_PART, SNAPSHOT_DATA, SNAPSHOT_PART})


def _check_length(length: int, kind: int) -> None:
    limit = PART_BYTES if kind in _PART_KINDS else MAX_FRAME
    if length > limit:
        raise ProtocolError(f"frame of {length:,} bytes exceeds the {limit:,}-byte limit")


class FrameBuffer:
    """Incremental parser for non-blocking readers."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self._buf += data

    def pending(self) -> bool:
        return bool(self._buf)

    def next(self) -> tuple[int, bytes] | None:
        """The next whole frame as (kind, payload), or None."""
        frame = self.next_tagged()
        return None if frame is None else (frame[0], frame[2])

    def next_from(self, data: bytes) -> tuple[int, int, bytes] | None:
        """`feed(data)`, then `next_tagged()`; `data` that is exactly one whole frame (a request, a
        reply: what one read of a quiet socket returns) is taken apart without buffering it."""
        if not self._buf and len(data) >= HEADER.size:
            length, kind, rid = HEADER.unpack_from(data)
            if len(data) == HEADER.size + length:
                return kind, rid, data[HEADER.size :]
        self._buf += data
        return self.next_tagged()

    def next_tagged(self) -> tuple[int, int, bytes] | None:
        """The next whole frame as (kind, request id, payload), or None."""
        buf = self._buf
        if len(buf) < HEADER.size:
            return None
        length, kind, rid = HEADER.unpack_from(buf)
        _check_length(length, kind)
        end = HEADER.size + length
        if len(buf) < end:
            return None
        if length < _VIEW_COPY_BYTES:
            payload = bytes(buf[HEADER.size : end])
        else:  # one copy instead of two (a bytearray slice, then bytes): snapshot parts are 64 MiB
            payload = bytes(memoryview(buf)[HEADER.size : end])
        del buf[:end]
        return kind, rid, payload
