"""A session's state handed from one sandboxed worker to another on the same host (engine.fork).

The source worker pickles its session as for a snapshot, but writes the out-of-band buffers (array
data: nearly all of a large session) straight into a memory file (memfd), then the header and the
payload after them, and seals the file against any change. The host passes the file on without
reading it; the target worker maps it copy-on-write and unpickles with the buffers as views of that
mapping. So 110 MB of arrays cost one copy by the kernel in the source, and nothing per byte after
it: no blob on the host, no signature, no parts over the wire, no copy in the target (pages are
copied only where the copy writes them).

    the file: buffers, each at a 64-byte boundary (arrays stay aligned), then header JSON, payload
    the index (the reply's payload, passed on by the host): {"header": [offset, length],
        "payload": [offset, length], "buffers": [[offset, length], ...]}

Linux only (memfd and its seals).
"""

from __future__ import annotations

import fcntl
import json
import mmap
import os
import sys
from typing import Any

from .._limits import Limits
from .._session import Session
from ..policy._runtime import PolicyRuntime
from ._format import SessionSnapshot, SnapshotError, SnapshotTooLarge, snapshot_limit
from ._save import SinkFailed, check_size, save_guarded

__all__ = ["SEALS", "make_file", "read_handoff", "write_handoff"]

_ALIGN = 64
# Sealed this way, the file can no longer change in any way: the source cannot reach into the
# target's memory after the handoff, and the target's mapping cannot lose pages under it (SIGBUS).
# (Elsewhere than on Linux there are no seals, and no handoff: the boundary never asks for one.)
SEALS = (
    fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
    if sys.platform.startswith("linux")
    else 0
)


def make_file() -> int:
    """A new memory file for a handoff (close-on-exec, sealable)."""
    return os.memfd_create("genpark-repl-fork", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)


def _aligned(at: int) -> int:
    return -(-at // _ALIGN) * _ALIGN


def _write_at(fd: int, data: bytes | memoryview, at: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, at)
        view, at = view[written:], at + written


class _FileBuffers:
    """The pickler's buffers written into the file as they come, stopping at the snapshot limit
    before anything past it is written."""

    def __init__(self, fd: int, limit: int | None) -> None:
        self.fd = fd
        self.limit = limit
        self.places: list[tuple[int, int]] = []
        self.end = 0
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self.places)

    def add(self, buffer: memoryview) -> None:
        at = _aligned(self.end)
        size = buffer.nbytes
        if self.limit is not None and at + size > self.limit:
            raise SnapshotTooLarge(
                f"the session's snapshot would be more than {self.limit / 1e6:,.1f} MB, the limit "
                "(Limits.max_snapshot_bytes). Delete what is not needed (del name) to make it fit"
            )
        try:
            _write_at(self.fd, buffer, at)
        except OSError as exc:
            raise SinkFailed(exc.errno, exc.strerror) from None
        self.places.append((at, size))
        self.end = at + size
        self.nbytes += size

    def clear(self) -> None:  # a dump that starts again writes over what it wrote
        self.places.clear()
        self.end = 0
        self.nbytes = 0


def write_handoff(session: Session, runtime: PolicyRuntime, limits: Limits, fd: int) -> bytes:
    """Write the session's state into the memory file `fd` and seal it; the index (see above).
    SnapshotError as for a snapshot (refused, too large, too slow); OSError if the file could not
    be written (e.g. RLIMIT_FSIZE: Limits.max_file_size_mb)."""
    buffers = _FileBuffers(fd, snapshot_limit(limits))
    header, payload = save_guarded(session, runtime, limits, buffers)
    raw = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    header_at = _aligned(buffers.end)
    payload_at = header_at + len(raw)
    end = payload_at + len(payload)
    check_size(end, limits, header)  # with the alignment: what the target maps
    _write_at(fd, raw, header_at)
    _write_at(fd, payload, payload_at)
    os.ftruncate(fd, end)  # a dump that started again may have written past this
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    index = {
        "header": [header_at, len(raw)],
        "payload": [payload_at, len(payload)],
        "buffers": buffers.places,
    }
    return json.dumps(index, separators=(",", ":")).encode()


def read_handoff(fd: int, index: bytes, snapshot_class: type[SessionSnapshot]) -> SessionSnapshot:
    """The handed-off state as a snapshot of `snapshot_class` (one that does not check a signature:
    there is none), its buffers writable copy-on-write views of the file. SnapshotError if the index
    does not fit the file."""
    size = os.fstat(fd).st_size
    try:
        places: Any = json.loads(index)
        header = _place(places["header"], size)
        payload = _place(places["payload"], size)
        buffers = [_place(p, size) for p in places["buffers"]]
    except (ValueError, KeyError, TypeError):  # json's errors are ValueErrors
        raise SnapshotError("the copy's index does not match its data; nothing was loaded") from None
    # Private: the target's writes go to its own pages, never to the file (sealed anyway).
    view = memoryview(mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE))
    return snapshot_class(
        bytes(view[header[0] : header[1]]),
        bytes(view[payload[0] : payload[1]]),
        [view[start:end] for start, end in buffers],
        b"",
    )


def _place(entry: Any, size: int) -> tuple[int, int]:
    start, length = entry
    if not (type(start) is int and type(length) is int and start >= 0 and 0 <= length <= size - start):
        raise ValueError("out of the file")
    return start, start + length
