"""A compromised subprocess worker, on the wire: crafted frames from a real worker to a real host.

The subprocess boundary's host trusts nothing a worker sends beyond the frame format and the
result schema; this module is how its tests show it. Code that runs in a worker under the
`trusted` policy has the worker's full rights (what a sandbox escape inside the worker's own
process would have), so it can write any frame on the worker's socket and change what the worker
replies. Each function here does one such thing from session code:

    engine = ReplEngine(policy="trusted", boundary="subprocess")
    engine.run("from genpark_repl_tools.testing import hostile_worker as hw\\n"
               "hw.edit_result(execution_count=-5)")
    # the reply to that very run carries execution_count -5; the host must stop the worker

Nothing here runs on the host: importing it outside a worker is harmless, calling it fails.
"""

from __future__ import annotations

import json
import signal
import struct
from collections.abc import Callable, Iterator
from typing import Any

from ..boundaries._subprocess import _protocol as P

__all__ = [
    "edit_result",
    "empty_buffers_blob",
    "flood_snapshot",
    "replace_reply",
    "send",
    "send_raw",
    "snapshot_reply",
    "worker",
]


def worker() -> Any:
    """This process's worker loop object (its SIGUSR1 handler is a method of it)."""
    handler = signal.getsignal(signal.SIGUSR1)
    owner = getattr(handler, "__self__", None)
    if owner is None or not hasattr(owner, "sock"):
        raise RuntimeError("not inside a subprocess worker: run this as session code under policy='trusted'")
    return owner


def send(kind: int, payload: bytes = b"", rid: int | None = None) -> None:
    """Write one well-formed frame now, for the request being served unless `rid` says otherwise."""
    w = worker()
    P.send_frame(w.sock, kind, payload, rid=w.current if rid is None else rid)


def send_raw(data: bytes) -> None:
    """Write bytes on the worker's socket as they are (a frame header that lies, half a frame)."""
    worker().sock.sendall(data)


def replace_reply(make: Callable[[int, bytes], tuple[int, bytes]]) -> None:
    """The reply to the request being served goes out as `make(kind, payload)` of the real one.
    Once: later replies are the worker's own."""
    w = worker()
    target = w.current
    encode = P.encode

    def hostile_encode(kind: int, payload: bytes = b"", rid: int = 0) -> bytes:
        if rid == target and kind != P.NO_CHECKPOINT:
            P.encode = encode
            kind, payload = make(kind, payload)
        return encode(kind, payload, rid)

    P.encode = hostile_encode


def edit_result(**fields: Any) -> None:
    """This run's result goes out with `fields` changed (dotted names reach nested ones:
    `**{"usage.cpu_ms": -1.0}`). Values go through json.dumps as they are, so NaN is sent as NaN."""

    def make(kind: int, payload: bytes) -> tuple[int, bytes]:
        data = json.loads(payload)
        for name, value in fields.items():
            *path, last = name.split(".")
            target = data
            for part in path:
                target = target[part]
            target[last] = value
        return kind, json.dumps(data).encode()

    replace_reply(make)


def _serve_next_snapshot(reply: Callable[[Any], tuple[int, bytes]]) -> None:
    """The worker's next SNAPSHOT request is answered by `reply(worker)` instead. Once."""
    w = worker()
    real = w._snapshot_request

    def hostile(kind: int, payload: bytes) -> tuple[int, bytes]:
        if kind != P.SNAPSHOT:
            return real(kind, payload)  # type: ignore[no-any-return]
        del w._snapshot_request
        return reply(w)

    w._snapshot_request = hostile


def flood_snapshot(part_bytes: int = 8 << 20, total_bytes: int = 384 << 20, finish: bool = True) -> None:
    """The next snapshot is one buffer of `part_bytes` sent again and again as SNAPSHOT_PART frames,
    `total_bytes` in all (the worker holds one buffer), then a last part if `finish`. A host that
    closes the socket ends the flood (and this worker)."""

    def reply(w: Any) -> tuple[int, bytes]:
        part = bytes(part_bytes)
        for _ in _parts(total_bytes, part_bytes):
            P.send_frame(w.sock, P.SNAPSHOT_PART, part, rid=w.current)
        return (P.SNAPSHOT_DATA, b"") if finish else (P.FAILED, b"flood over")

    _serve_next_snapshot(reply)


def _parts(total: int, size: int) -> Iterator[int]:
    sent = 0
    while sent < total:
        yield sent
        sent += size


def snapshot_reply(blob: bytes) -> None:
    """The next snapshot is `blob`, whatever it holds (sent in parts as the worker sends a large one)."""

    def reply(w: Any) -> tuple[int, bytes]:
        view = memoryview(blob)
        while len(view) > P.PART_BYTES:
            P.send_frame(w.sock, P.SNAPSHOT_PART, bytes(view[: P.PART_BYTES]), rid=w.current)
            view = view[P.PART_BYTES :]
        return P.SNAPSHOT_DATA, bytes(view)

    _serve_next_snapshot(reply)


def empty_buffers_blob(count: int, header: dict[str, Any]) -> bytes:
    """An unsigned snapshot whose buffer table declares `count` buffers of no bytes (8 bytes each)."""
    from ..snapshot._format import MAGIC

    head = json.dumps(header).encode()
    return b"".join(
        [
            MAGIC,
            struct.pack("<I", len(head)),
            head,
            struct.pack("<Q", 0),
            struct.pack("<I", count),
            bytes(8 * count),
            bytes(32),
        ]
    )
