"""Frames on the host <-> zygote and host <-> worker sockets: 4-byte length, 1-byte kind, payload.

Stream sockets (not SEQPACKET) so the same code works on macOS. File descriptors travel with
SCM_RIGHTS on the frame that needs them; the zygote queues them in arrival order.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

__all__ = [
    "MAX_FRAME",
    "FrameBuffer",
    "ProtocolError",
    "encode",
    "encode_json",
    "recv_frame",
    "send_frame",
]

HEADER = struct.Struct("!IB")
# A result is bounded by Limits (output, reprs), but a session with very many variables can still
# produce a large change list; beyond this the peer is broken or hostile.
MAX_FRAME = 256 * 1024 * 1024

# host -> worker
EXEC = ord("X")
VARIABLES = ord("V")
INSPECT = ord("I")
RESET = ord("Z")
# worker -> host
READY = ord("Y")
RESULT = ord("R")
VARIABLE_LIST = ord("L")
VARIABLE = ord("O")
NOT_FOUND = ord("N")
ACK = ord("K")
FAILED = ord("E")
# host -> zygote
CONFIG = ord("C")
SPAWN = ord("S")
KILL = ord("K")
QUIT = ord("Q")
# zygote -> host
HELLO = ord("H")
EXITED = ord("X")
SPAWN_FAILED = ord("F")


class ProtocolError(Exception):
    """The peer sent something that is not a valid frame (or closed mid-frame)."""


def encode(kind: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(len(payload), kind) + payload


def encode_json(kind: int, obj: Any) -> bytes:
    return encode(kind, json.dumps(obj, separators=(",", ":")).encode())


def send_frame(sock: socket.socket, kind: int, payload: bytes = b"", fds: list[int] | None = None) -> None:
    data = encode(kind, payload)
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
    """Blocking read of one frame; EOFError on a clean close between frames."""
    length, kind = HEADER.unpack(_recv_exact(sock, HEADER.size, at_boundary=True))
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
        buf = self._buf
        if len(buf) < HEADER.size:
            return None
        length, kind = HEADER.unpack_from(buf)
        if length > MAX_FRAME:
            raise ProtocolError(f"frame of {length:,} bytes exceeds the {MAX_FRAME:,}-byte limit")
        end = HEADER.size + length
        if len(buf) < end:
            return None
        payload = bytes(buf[HEADER.size : end])
        del buf[:end]
        return kind, payload
