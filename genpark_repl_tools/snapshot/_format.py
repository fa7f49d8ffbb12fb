"""The snapshot container: sections, their byte layout, and their authentication.

    MAGIC                      b"GPRSNAP1", or b"GPRSNAP2" when the files section is there
    u32  header length, header JSON (manifest, imports, cell sources, bookkeeping)
    u64  payload length, payload (one pickle record per saved variable, protocol 5)
    u64  files length, files (GPRSNAP2 only): the session's workspace files, as a store save keeps
         them: u32 index length, index JSON, then the files' bytes back to back in its order
    u32  buffer count, then per buffer: u64 length, bytes (protocol-5 out-of-band buffers)
    32 bytes HMAC-SHA256 over everything before it

Nothing in a blob is parsed beyond these lengths before its HMAC has been checked (constant-time),
and reading it allocates in proportion to its bytes: the buffer table is split only when a restore
asks for a buffer (`BufferTable`), so a declared count costs nothing. Every blob is bounded in size
(`max_bytes`, by default `MAX_SNAPSHOT_BYTES`) where it is read, made and assembled from parts.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import mimetypes
import struct
from array import array
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from typing import Any

from .._exceptions import ReplError
from .._models import FileInfo, SnapshotManifest

__all__ = [
    "MAX_SNAPSHOT_BYTES",
    "BufferTable",
    "SessionSnapshot",
    "SnapshotAuthError",
    "SnapshotError",
    "SnapshotParts",
    "SnapshotRefused",
    "SnapshotTooLarge",
    "files_index",
    "files_section",
    "listed_files",
    "read_manifest",
    "snapshot_limit",
]

FileEntry = tuple[str, int, int]  # a file in a files section: name, size, mtime_ns
MAGIC = b"GPRSNAP1"
# A blob with a files section. Only the host adds one (Durability, saving to a store), signing the
# whole: a worker's blob is signed without any files section it may carry (`sign` takes none).
MAGIC_FILES = b"GPRSNAP2"
FORMAT = 1
# header["origin"] of a snapshot whose payload a sandboxed subprocess worker wrote (the host signed it)
SANDBOXED_ORIGIN = "sandboxed-worker"
_MAC_SIZE = 32
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
# The largest snapshot made, read, assembled from a worker's parts or restored, unless the engine's
# Limits say otherwise (max_snapshot_bytes). What the host accepts from a worker it holds in memory,
# so this is also what a worker can make the host hold.
MAX_SNAPSHOT_BYTES = 128 * 1024 * 1024


def snapshot_limit(limits: Any) -> int | None:
    """The snapshot size limit in force: Limits.max_snapshot_bytes where Limits has it, else the default."""
    limit = getattr(limits, "max_snapshot_bytes", MAX_SNAPSHOT_BYTES)
    return None if limit is None else int(limit)


def _mb(size: int) -> str:
    return f"{size / 1e6:,.1f} MB"


class SnapshotError(ReplError):
    """A snapshot could not be made, read or restored."""


class SnapshotAuthError(SnapshotError):
    """The blob failed authentication: altered, truncated, or signed with another key. Never loaded."""


class SnapshotTooLarge(SnapshotError):
    """The snapshot is larger than the limit in force (`Limits.max_snapshot_bytes`, a store's
    `max_entry_bytes`); it was not made, read or kept."""


class SnapshotRefused(SnapshotError):
    """The snapshot asks for something the policy does not let a restore rebuild. Nothing was kept."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message


class SessionSnapshot:
    """A session's variables by value, its imports by name, its execution count and a manifest;
    in a store save, its workspace files too (`files`).

    Security model: a snapshot is data written by untrusted code. It carries an HMAC-SHA256 made
    with the engine's `snapshot_key`, over the files as well; `ReplEngine.restore` checks it
    (constant-time) before reading anything, and then loads it only through a loader limited by the
    restoring session's policy, and writes files back only inside the session's workspace.
    `manifest` parses the header without checking it: use it for display only.
    """

    __slots__ = ("_manifest", "_verified", "buffers", "files", "header", "mac", "payload")

    def __init__(
        self,
        header: bytes,
        payload: bytes,
        buffers: Sequence[Any],
        mac: bytes,
        files: bytes | memoryview | None = None,
    ) -> None:
        self.header = header
        self.payload = payload
        self.buffers = buffers
        self.mac = mac
        self.files = files  # the workspace files section (None: the snapshot has none)
        self._manifest: SnapshotManifest | None = None
        self._verified: bytes | None = None  # a digest of the key this object was last checked with

    @classmethod
    def sign(
        cls, header: dict[str, Any], payload: bytes, buffers: Sequence[Any], key: bytes
    ) -> SessionSnapshot:
        """A snapshot of these sections signed with `key`. `buffers` may be another snapshot's
        `BufferTable`: its bytes are kept as they are, never split (a worker's blob, signed here)."""
        raw = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
        snapshot = cls(raw, payload, buffers, b"")
        # An empty key makes an unsigned snapshot (a sandboxed worker's: the host signs what it
        # returns). Its zero MAC never verifies: keys have at least 16 bytes (resolve_key).
        snapshot.mac = snapshot._digest(key) if key else bytes(_MAC_SIZE)
        return snapshot

    def with_files(self, files: bytes | None, key: bytes) -> SessionSnapshot:
        """This snapshot's sections plus a workspace files section (`files_section`; None:
        none), signed with `key`."""
        snapshot = SessionSnapshot(self.header, self.payload, self.buffers, b"", files)
        snapshot.mac = snapshot._digest(key)
        return snapshot

    # ---- authentication -------------------------------------------------------------------------

    def _digest(self, key: bytes) -> bytes:
        mac = hmac.new(key, digestmod=hashlib.sha256)
        for part in self._sections():
            mac.update(part)
        return mac.digest()

    def verify(self, key: bytes) -> None:
        """Raise SnapshotAuthError unless the snapshot was made with `key` and is unaltered."""
        if not hmac.compare_digest(self._digest(key), self.mac):
            raise SnapshotAuthError(
                "the snapshot failed authentication (it was altered, or made with another snapshot_key); "
                "it was not loaded"
            )
        self._verified = hashlib.sha256(key).digest()  # not the key: a snapshot may be kept around

    def verified_with(self, key: bytes) -> bool:
        """Whether this object passed `verify(key)` already (for a caller that has not changed its
        sections since, and that does not want to pay for the HMAC twice)."""
        return self._verified is not None and hmac.compare_digest(
            self._verified, hashlib.sha256(key).digest()
        )

    def header_data(self, key: bytes) -> dict[str, Any]:
        """The header, after checking the HMAC."""
        self.verify(key)
        data: dict[str, Any] = json.loads(self.header)
        if data.get("format") != FORMAT:
            raise SnapshotError(
                f"snapshot format {data.get('format')!r} is not supported (expected {FORMAT})"
            )
        return data

    @property
    def manifest(self) -> SnapshotManifest:
        """What the snapshot holds (unauthenticated: for display)."""
        if self._manifest is None:
            data = json.loads(self.header)["manifest"]
            # The files come from the files section, which only the host writes, never from the
            # header, which a sandboxed worker wrote.
            data["files"], data["files_not_saved"] = [], None
            if self.files is not None:
                data["files"], data["files_not_saved"] = listed_files(self.files)
            self._manifest = SnapshotManifest.model_validate(data)
        return self._manifest

    @property
    def size_bytes(self) -> int:
        return sum(len(part) for part in self._sections()) + _MAC_SIZE

    def __repr__(self) -> str:
        m = self.manifest
        return (
            f"<SessionSnapshot session={m.session!r} variables={len(m.saved)} "
            f"not_saved={len(m.not_saved)} bytes={self.size_bytes:,}>"
        )

    # ---- bytes ----------------------------------------------------------------------------------

    def _sections(self) -> Iterator[bytes | memoryview]:
        files = self.files
        yield MAGIC if files is None else MAGIC_FILES
        yield _U32.pack(len(self.header))
        yield self.header
        yield _U64.pack(len(self.payload))
        yield self.payload
        if files is not None:
            yield _U64.pack(len(files))
            yield files
        buffers = self.buffers
        if isinstance(buffers, BufferTable):
            yield buffers.raw
            return
        yield _U32.pack(len(buffers))
        for buffer in buffers:
            yield _U64.pack(len(buffer))
            yield buffer

    def to_bytes(self) -> bytes:
        return b"".join([*self._sections(), self.mac])

    @classmethod
    def from_bytes(
        cls, blob: bytes | bytearray | memoryview, max_bytes: int | None = MAX_SNAPSHOT_BYTES
    ) -> SessionSnapshot:
        """Split a blob into its sections (no parsing, no authentication: `restore` does that).

        Refuses a blob over `max_bytes` (None: no limit) before copying it. The buffers are a
        `BufferTable` over one writable copy of the blob, so restored arrays are writable.
        """
        if max_bytes is not None and len(blob) > max_bytes:
            raise SnapshotTooLarge(
                f"the snapshot is {_mb(len(blob))}, over the limit of {_mb(max_bytes)} "
                "(Limits.max_snapshot_bytes); it was not loaded"
            )
        data = memoryview(bytearray(blob))
        end = len(data) - _MAC_SIZE
        try:
            magic = bytes(data[: len(MAGIC)])
            if end < len(MAGIC) or magic not in (MAGIC, MAGIC_FILES):
                raise SnapshotAuthError("not a session snapshot (bad magic bytes); it was not loaded")
            at = len(MAGIC)
            (size,) = _U32.unpack_from(data, at)
            at += _U32.size
            header = bytes(data[at : at + size])
            at += size
            (size,) = _U64.unpack_from(data, at)
            at += _U64.size
            if at + size > end:
                raise struct.error
            payload = bytes(data[at : at + size])
            at += size
            files = None
            if magic == MAGIC_FILES:
                (size,) = _U64.unpack_from(data, at)
                at += _U64.size
                if at + size > end:
                    raise struct.error
                files = data[at : at + size]
                at += size
            buffers = BufferTable(data[at:end])
        except struct.error:
            raise SnapshotAuthError("the snapshot is truncated; it was not loaded") from None
        return cls(header, payload, buffers, bytes(data[end:]), files)


def files_section(entries: list[FileEntry], reason: str | None, contents: list[bytes] | None = None) -> bytes:
    """A files section: u32 index length, index JSON `{"files": [[name, size, mtime_ns], ...],
    "not_saved": reason or null}`, then the files' bytes back to back in the index's order."""
    index = json.dumps({"files": entries, "not_saved": reason}, separators=(",", ":")).encode()
    return b"".join([_U32.pack(len(index)), index, *(contents or ())])


def files_index(section: bytes | memoryview) -> tuple[list[FileEntry], str | None, int]:
    """A files section's entries, why its files were left out (if they were), and where the files'
    bytes start. Authenticate the blob first, unless for display."""
    try:
        (size,) = _U32.unpack_from(section, 0)
        start = _U32.size + size
        if start > len(section):
            raise ValueError("index truncated")
        data = json.loads(bytes(section[_U32.size : start]))
        entries: list[FileEntry] = []
        for name, length, mtime in data["files"]:
            if not (isinstance(name, str) and type(length) is int and length >= 0 and type(mtime) is int):
                raise TypeError("entry")
            entries.append((name, length, mtime))
        reason = data["not_saved"]
        if not (reason is None or isinstance(reason, str)):
            raise TypeError("reason")
        if sum(length for _, length, _ in entries) != len(section) - start:
            raise ValueError("sizes")
    except (struct.error, ValueError, TypeError, KeyError):  # json's errors are ValueErrors
        raise SnapshotError("the snapshot's workspace files section is malformed") from None
    return entries, reason, start


def listed_files(section: bytes | memoryview) -> tuple[list[FileInfo], str | None]:
    """The files a section holds, for the manifest, and why they were left out, if they were."""
    entries, reason, _ = files_index(section)
    try:
        listed = [
            FileInfo(
                name=name,
                size=size,
                modified=datetime.fromtimestamp(mtime / 1e9, tz=timezone.utc),
                type=mimetypes.guess_type(name)[0] or "application/octet-stream",
            )
            for name, size, mtime in entries
        ]
    except (OverflowError, OSError, ValueError):  # a time no datetime holds
        raise SnapshotError("the snapshot's workspace files section is malformed") from None
    return listed, reason


class BufferTable(Sequence[memoryview]):
    """A blob's out-of-band buffers, split on demand: `u32 count`, then `u64 length, bytes` each.

    The count is only a claim until the blob is authenticated, so nothing is made per declared
    buffer: a buffer's place is found when it is asked for, walking the table that far once, and
    kept in an array (8 bytes a buffer, as many as the table's own bytes allow). A table that does
    not hold what it declares raises SnapshotError where it falls short.
    """

    __slots__ = ("_count", "_next", "_starts", "raw")

    def __init__(self, raw: memoryview) -> None:
        (count,) = _U32.unpack_from(raw, 0)
        if count * _U64.size > len(raw) - _U32.size:
            raise SnapshotAuthError("the snapshot's buffer table is truncated; it was not loaded")
        self.raw = raw
        self._count: int = count
        self._starts = array("Q")  # where each buffer found so far starts
        self._next = _U32.size  # where the next buffer's length is

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._count))]
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError("buffer index out of range")
        raw, starts = self.raw, self._starts
        while len(starts) <= index:
            at = self._next
            if at + _U64.size > len(raw):
                raise SnapshotError("the snapshot's buffer table is malformed; it was not loaded")
            (size,) = _U64.unpack_from(raw, at)
            at += _U64.size
            if size > len(raw) - at:
                raise SnapshotError("the snapshot's buffer table is malformed; it was not loaded")
            starts.append(at)
            self._next = at + size
        start = starts[index]
        (size,) = _U64.unpack_from(raw, start - _U64.size)
        return raw[start : start + size]


class SnapshotParts:
    """A snapshot that arrives in parts (a worker's SNAPSHOT_PART frames, then its last one),
    bounded by `max_bytes` as it arrives: the part that passes the limit raises SnapshotTooLarge
    and everything held so far is dropped, so a peer that keeps sending makes the host hold at most
    the limit. The parts are joined once, at the end."""

    __slots__ = ("_parts", "max_bytes", "size")

    def __init__(self, max_bytes: int | None = MAX_SNAPSHOT_BYTES) -> None:
        self.max_bytes = max_bytes
        self._parts: list[bytes] = []
        self.size = 0

    def add(self, part: bytes) -> None:
        self.size += len(part)
        if self.max_bytes is not None and self.size > self.max_bytes:
            self._parts.clear()
            raise SnapshotTooLarge(
                f"the worker sent a snapshot of more than {_mb(self.max_bytes)}, the limit "
                "(Limits.max_snapshot_bytes)"
            )
        self._parts.append(part)

    def finish(self, last: bytes) -> bytes:
        """The whole blob, `last` being its final part."""
        self.add(last)
        if len(self._parts) == 1:
            return self._parts.pop()
        blob = b"".join(self._parts)
        self._parts.clear()
        return blob


def read_manifest(blob: bytes, max_bytes: int | None = MAX_SNAPSHOT_BYTES) -> SnapshotManifest:
    """The manifest of a stored blob, unauthenticated (for listings and `show`)."""
    return SessionSnapshot.from_bytes(blob, max_bytes).manifest
