"""The snapshot container: sections, their byte layout, and their authentication.

    MAGIC                      b"GPRSNAP1"
    u32  header length, header JSON (manifest, imports, cell sources, bookkeeping)
    u64  payload length, payload (one pickle record per saved variable, protocol 5)
    u32  buffer count, then per buffer: u64 length, bytes (protocol-5 out-of-band buffers)
    32 bytes HMAC-SHA256 over everything before it

Nothing in a blob is parsed beyond these lengths before its HMAC has been checked (constant-time).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
from collections.abc import Iterator
from typing import Any

from .._exceptions import ReplError
from .._models import SnapshotManifest

__all__ = [
    "SessionSnapshot",
    "SnapshotAuthError",
    "SnapshotError",
    "SnapshotRefused",
    "read_manifest",
]

MAGIC = b"GPRSNAP1"
FORMAT = 1
# header["origin"] of a snapshot whose payload a sandboxed subprocess worker wrote (the host signed it)
SANDBOXED_ORIGIN = "sandboxed-worker"
_MAC_SIZE = 32
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class SnapshotError(ReplError):
    """A snapshot could not be made, read or restored."""


class SnapshotAuthError(SnapshotError):
    """The blob failed authentication: altered, truncated, or signed with another key. Never loaded."""


class SnapshotRefused(SnapshotError):
    """The snapshot asks for something the policy does not let a restore rebuild. Nothing was kept."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message


class SessionSnapshot:
    """A session's variables by value, its imports by name, its execution count and a manifest.

    Security model: a snapshot is data written by untrusted code. It carries an HMAC-SHA256 made
    with the engine's `snapshot_key`; `ReplEngine.restore` checks it (constant-time) before reading
    anything, and then loads it only through a loader limited by the restoring session's policy.
    `manifest` parses the header without checking it: use it for display only.
    """

    __slots__ = ("_manifest", "buffers", "header", "mac", "payload")

    def __init__(self, header: bytes, payload: bytes, buffers: list[bytes], mac: bytes) -> None:
        self.header = header
        self.payload = payload
        self.buffers = buffers
        self.mac = mac
        self._manifest: SnapshotManifest | None = None

    @classmethod
    def sign(
        cls, header: dict[str, Any], payload: bytes, buffers: list[bytes], key: bytes
    ) -> SessionSnapshot:
        raw = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
        snapshot = cls(raw, payload, buffers, b"")
        # An empty key makes an unsigned snapshot (a sandboxed worker's: the host signs what it
        # returns). Its zero MAC never verifies: keys have at least 16 bytes (resolve_key).
        snapshot.mac = snapshot._digest(key) if key else bytes(_MAC_SIZE)
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
            self._manifest = SnapshotManifest.model_validate(json.loads(self.header)["manifest"])
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

    def _sections(self) -> Iterator[bytes]:
        yield MAGIC
        yield _U32.pack(len(self.header))
        yield self.header
        yield _U64.pack(len(self.payload))
        yield self.payload
        yield _U32.pack(len(self.buffers))
        for buffer in self.buffers:
            yield _U64.pack(len(buffer))
            yield buffer

    def to_bytes(self) -> bytes:
        return b"".join([*self._sections(), self.mac])

    @classmethod
    def from_bytes(cls, blob: bytes | bytearray | memoryview) -> SessionSnapshot:
        """Split a blob into its sections (no parsing, no authentication: `restore` does that).

        Buffers come back writable (slices of one bytearray) so restored arrays are writable.
        """
        data = memoryview(bytearray(blob))
        try:
            if bytes(data[: len(MAGIC)]) != MAGIC:
                raise SnapshotAuthError("not a session snapshot (bad magic bytes); it was not loaded")
            at = len(MAGIC)
            (size,) = _U32.unpack_from(data, at)
            at += _U32.size
            header = bytes(data[at : at + size])
            at += size
            (size,) = _U64.unpack_from(data, at)
            at += _U64.size
            payload = bytes(data[at : at + size])
            at += size
            (count,) = _U32.unpack_from(data, at)
            at += _U32.size
            buffers: list[Any] = []
            for _ in range(count):
                (size,) = _U64.unpack_from(data, at)
                at += _U64.size
                buffers.append(data[at : at + size])
                at += size
            mac = bytes(data[at:])
        except struct.error:
            raise SnapshotAuthError("the snapshot is truncated; it was not loaded") from None
        if len(mac) != _MAC_SIZE or len(header) + len(payload) > len(data):
            raise SnapshotAuthError("the snapshot is truncated or has trailing bytes; it was not loaded")
        return cls(header, payload, buffers, mac)


def read_manifest(blob: bytes) -> SnapshotManifest:
    """The manifest of a stored blob, unauthenticated (for listings and `show`)."""
    return SessionSnapshot.from_bytes(blob).manifest
