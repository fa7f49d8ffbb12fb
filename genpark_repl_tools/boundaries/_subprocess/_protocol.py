"""Frames on the host <-> zygote and host <-> worker sockets: 4-byte length, 1-byte kind, 4-byte
request id, payload.

Payloads are JSON, except where a call is hot: an EXEC request is its time limit as an 8-byte
double followed by the code in UTF-8 (`encode_exec`), and a result that holds no nested data (most
do not: no error, variable changes, findings, figures or notes) is a LEAN_RESULT, its scalars
packed and its strings in UTF-8 (`encode_lean_result`), so neither side builds or parses JSON for
them. Every other result is a RESULT: ExecutionResult JSON, validated in full by the host.

The worker echoes the id of the request it answers, so the host can tell the reply it waits for from
the late reply of a call it abandoned (a KeyboardInterrupt or a cancelled task while it waited):
a reply is never delivered to the wrong call. Frames that answer no request carry id 0.

Stream sockets (not SEQPACKET) so the same code works on macOS. File descriptors travel with
SCM_RIGHTS on the frame that needs them; the zygote queues them in arrival order.
"""

from __future__ import annotations

import socket
import struct
from typing import Any, TypeVar, get_args

from pydantic import BaseModel

from ..._models import ExecutionResult, Status, Usage, VariableChanges

M = TypeVar("M", bound=BaseModel)

__all__ = [
    "MAX_FRAME",
    "FrameBuffer",
    "ProtocolError",
    "decode_exec",
    "decode_lean_result",
    "encode",
    "encode_exec",
    "encode_lean_result",
    "recv_frame",
    "send_frame",
]

HEADER = struct.Struct("!IBI")
_EXEC_HEAD = struct.Struct("!d")
# A result is bounded by Limits (output, reprs), but a session with very many variables can still
# produce a large change list; beyond this the peer is broken or hostile.
MAX_FRAME = 256 * 1024 * 1024

# host -> worker
EXEC = ord("X")
VARIABLES = ord("V")
INSPECT = ord("I")
RESET = ord("Z")
SNAPSHOT = ord("P")  # take a snapshot of the session (issue 13)
LOAD = ord("U")  # payload: a snapshot blob to restore (already checked by the host)
LOAD_PART = ord("A")  # a leading part of the next LOAD's blob (no reply): blobs may exceed MAX_FRAME
# worker -> host
READY = ord("Y")
RESULT = ord("R")  # payload: ExecutionResult JSON
LEAN_RESULT = ord("r")  # payload: encode_lean_result(...)
VARIABLE_LIST = ord("L")
VARIABLE = ord("O")
NOT_FOUND = ord("N")
ACK = ord("K")
FAILED = ord("E")
SNAPSHOT_DATA = ord("D")  # payload: an unsigned snapshot blob (its last part)
SNAPSHOT_PART = ord("G")  # a leading part of the SNAPSHOT_DATA that follows
RESTORED = ord("T")  # payload: SessionRestore JSON
REFUSED = ord("W")  # payload: {"type", "message", "reason"} of a SnapshotError
# host -> zygote
CONFIG = ord("C")
SPAWN = ord("S")
KILL = ord("K")
INTERRUPT = ord("I")
QUIT = ord("Q")
# zygote -> host
HELLO = ord("H")
EXITED = ord("X")
SPAWN_FAILED = ord("F")

# Payloads from this size on are copied out of the receive buffer through a memoryview.
_VIEW_COPY_BYTES = 64 * 1024
# Snapshot blobs travel in parts of at most this many bytes.
PART_BYTES = 64 * 1024 * 1024

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


# ---- lean results --------------------------------------------------------------------------------
# status, flags, execution_count, duration_ms, usage (wall_ms, cpu_ms, peak_memory_mb), then the
# UTF-8 byte lengths of stdout, stderr, value and value_type, whose bytes follow in that order.
# `session`, `policy` and `boundary` are not sent: the host sets them itself whatever a worker says.
_LEAN = struct.Struct("!BBqddddIIII")
_STATUSES: tuple[str, ...] = get_args(Status)
_STATUS_CODES = {status: code for code, status in enumerate(_STATUSES)}
_STDOUT_TRUNCATED = 1
_STDERR_TRUNCATED = 2
_VALUE_TRUNCATED = 4
_SESSION_RESTARTED = 8
_NO_VALUE = 16
_NO_VALUE_TYPE = 32
_NO_CPU_MS = 64
_NO_PEAK_MEMORY_MB = 128
_TRUE_FLAGS = _STDOUT_TRUNCATED | _STDERR_TRUNCATED | _VALUE_TRUNCATED | _SESSION_RESTARTED

# A decoded result is built as pydantic's validation builds one from the worker's JSON, which names
# every field: the same __dict__ (declaration order, fresh lists and nested models), every field
# counted as set, no extra or private values. Built directly: these values are checked already,
# and validating them again (or pydantic's model_construct) costs twice as much.
_new = object.__new__
_set_dict = object.__setattr__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__
_RESULT_FIELDS = frozenset(ExecutionResult.model_fields)
_USAGE_FIELDS = frozenset(Usage.model_fields)
_CHANGES_FIELDS = frozenset(VariableChanges.model_fields)
# Every field in declaration order; the placeholders (None) of the mutable ones are replaced per result.
_RESULT_TEMPLATE = {
    name: None if field.default_factory is not None else field.default
    for name, field in ExecutionResult.model_fields.items()
}


def _build(cls: type[M], data: dict[str, Any], fields: frozenset[str]) -> M:
    obj = _new(cls)
    _set_dict(obj, "__dict__", data)
    _set_fields_set(obj, set(fields))
    _set_extra(obj, None)
    _set_private(obj, None)
    return obj


def encode_lean_result(result: ExecutionResult) -> bytes | None:
    """`result` as a LEAN_RESULT payload, or None if it holds nested data (send it as JSON then)."""
    d = result.__dict__
    changes = d["changes"].__dict__
    if (
        d["error"] is not None
        or d["findings"]
        or d["attachments"]
        or d["notes"]
        or d["files"]
        or d["session_restored"] is not None
        or d["rolled_back"]
        or changes["created"]
        or changes["rebound"]
        or changes["deleted"]
    ):
        return None
    usage = d["usage"].__dict__
    stdout, stderr, value, value_type = d["stdout"], d["stderr"], d["value"], d["value_type"]
    cpu_ms, peak = usage["cpu_ms"], usage["peak_memory_mb"]
    flags = (
        (_STDOUT_TRUNCATED if d["stdout_truncated"] else 0)
        | (_STDERR_TRUNCATED if d["stderr_truncated"] else 0)
        | (_VALUE_TRUNCATED if d["value_truncated"] else 0)
        | (_SESSION_RESTARTED if d["session_restarted"] else 0)
        | (_NO_VALUE if value is None else 0)
        | (_NO_VALUE_TYPE if value_type is None else 0)
        | (_NO_CPU_MS if cpu_ms is None else 0)
        | (_NO_PEAK_MEMORY_MB if peak is None else 0)
    )
    try:
        # Strict UTF-8: the runner's strings are clean (_text), so this fails only for a string the
        # JSON path has to judge, which it then does as it always did.
        out = stdout.encode() if stdout else b""
        err = stderr.encode() if stderr else b""
        value_bytes = value.encode() if value else b""
        type_bytes = value_type.encode() if value_type else b""
        head = _LEAN.pack(
            _STATUS_CODES[d["status"]],
            flags,
            d["execution_count"],
            d["duration_ms"],
            usage["wall_ms"],
            0.0 if cpu_ms is None else cpu_ms,
            0.0 if peak is None else peak,
            len(out),
            len(err),
            len(value_bytes),
            len(type_bytes),
        )
    except (UnicodeEncodeError, struct.error, KeyError, TypeError, AttributeError):
        return None
    if out or err or value_bytes or type_bytes:
        return b"".join((head, out, err, value_bytes, type_bytes))
    return head


def decode_lean_result(payload: bytes, session: str, policy: str, boundary: str) -> ExecutionResult:
    """The ExecutionResult a LEAN_RESULT payload holds, with the host's own `session`, `policy` and
    `boundary`; ProtocolError unless the payload is exactly one well-formed result.

    The payload comes from a worker that may be compromised. What it can say is what the JSON path
    admits for the same fields: a status of the model's, an int, floats (any, as JSON's NaN and
    Infinity are), bools and strict UTF-8 strings whose lengths account for every byte.
    """
    head = _LEAN.size
    if len(payload) < head:
        raise ProtocolError("a lean result shorter than its header")
    code, flags, count, took, wall, cpu, peak, n_out, n_err, n_value, n_type = _LEAN.unpack_from(payload)
    if (
        code >= len(_STATUSES)
        or head + n_out + n_err + n_value + n_type != len(payload)
        or (flags & _NO_VALUE and n_value)
        or (flags & _NO_VALUE_TYPE and n_type)
    ):
        raise ProtocolError("a malformed lean result")
    data = _RESULT_TEMPLATE.copy()
    data["status"] = _STATUSES[code]
    data["session"] = session
    data["execution_count"] = count
    data["duration_ms"] = took
    data["policy"] = policy
    data["boundary"] = boundary
    if len(payload) > head:
        try:
            at = head + n_out
            data["stdout"] = payload[head:at].decode()
            data["stderr"] = payload[at : at + n_err].decode()
            at += n_err
            data["value"] = payload[at : at + n_value].decode()
            data["value_type"] = payload[at + n_value :].decode()
        except UnicodeDecodeError:
            raise ProtocolError("a lean result with text that is not UTF-8") from None
    if flags:
        if flags & _TRUE_FLAGS:  # the template holds False for each
            data["stdout_truncated"] = bool(flags & _STDOUT_TRUNCATED)
            data["stderr_truncated"] = bool(flags & _STDERR_TRUNCATED)
            data["value_truncated"] = bool(flags & _VALUE_TRUNCATED)
            data["session_restarted"] = bool(flags & _SESSION_RESTARTED)
        if flags & _NO_VALUE:
            data["value"] = None
        if flags & _NO_VALUE_TYPE:
            data["value_type"] = None
        if flags & _NO_CPU_MS:
            cpu = None
        if flags & _NO_PEAK_MEMORY_MB:
            peak = None
    data["findings"] = []
    data["changes"] = _build(VariableChanges, {"created": [], "rebound": [], "deleted": []}, _CHANGES_FIELDS)
    data["attachments"] = []
    data["notes"] = []
    data["usage"] = _build(Usage, {"wall_ms": wall, "cpu_ms": cpu, "peak_memory_mb": peak}, _USAGE_FIELDS)
    data["files"] = []
    return _build(ExecutionResult, data, _RESULT_FIELDS)


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
    if length > MAX_FRAME:
        raise ProtocolError(f"frame of {length:,} bytes exceeds the {MAX_FRAME:,}-byte limit")
    return kind, _recv_exact(sock, length) if length else b""


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
        if length > MAX_FRAME:
            raise ProtocolError(f"frame of {length:,} bytes exceeds the {MAX_FRAME:,}-byte limit")
        end = HEADER.size + length
        if len(buf) < end:
            return None
        if length < _VIEW_COPY_BYTES:
            payload = bytes(buf[HEADER.size : end])
        else:  # one copy instead of two (a bytearray slice, then bytes): snapshot parts are 64 MiB
            payload = bytes(memoryview(buf)[HEADER.size : end])
        del buf[:end]
        return kind, rid, payload
