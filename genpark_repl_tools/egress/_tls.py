"""The server name (SNI) a TLS ClientHello asks for, read without terminating TLS.

The proxy reads the client's first handshake message out of its TLS records before any byte reaches the
server; anything that is not a well-formed ClientHello is refused rather than guessed at.
"""

from __future__ import annotations

import asyncio

_HANDSHAKE = 22
_CLIENT_HELLO = 1
_SERVER_NAME = 0
_HOST_NAME = 0
MAX_HELLO = 1 << 16  # a ClientHello with post-quantum key shares is a few KiB; this is plenty


class NotClientHello(ValueError):
    """The bytes are not a TLS ClientHello the proxy can read."""


async def read_client_hello(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """Read TLS records until the first handshake message is complete.

    Returns (the raw records, to forward unchanged; the ClientHello message body).
    """
    raw = bytearray()
    message = bytearray()
    while True:
        header = await reader.readexactly(5)
        raw += header
        kind, major, length = header[0], header[1], int.from_bytes(header[3:5], "big")
        if kind != _HANDSHAKE or major != 3 or not 0 < length <= (1 << 14) + 2048:
            raise NotClientHello("the tunnel did not start with a TLS handshake")
        fragment = await reader.readexactly(length)
        raw += fragment
        message += fragment
        if len(message) >= 4:
            if message[0] != _CLIENT_HELLO:
                raise NotClientHello("the first TLS handshake message is not a ClientHello")
            needed = 4 + int.from_bytes(message[1:4], "big")
            if needed > MAX_HELLO:
                raise NotClientHello("the ClientHello is too large")
            if len(message) >= needed:
                return bytes(raw), bytes(message[4:needed])
        if len(raw) > MAX_HELLO:
            raise NotClientHello("the ClientHello is too large")


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise NotClientHello("the ClientHello is truncated")
        chunk = self.data[self.at : self.at + n]
        self.at += n
        return chunk

    def number(self, n: int) -> int:
        return int.from_bytes(self.take(n), "big")

    def vector(self, length_bytes: int) -> bytes:
        return self.take(self.number(length_bytes))


def server_name(hello: bytes) -> str | None:
    """The host name in the ClientHello's server_name extension, or None when it sends none."""
    cursor = _Cursor(hello)
    cursor.take(2 + 32)  # legacy_version, random
    cursor.vector(1)  # legacy_session_id
    cursor.vector(2)  # cipher_suites
    cursor.vector(1)  # legacy_compression_methods
    if cursor.at == len(hello):
        return None  # no extensions at all
    extensions = _Cursor(cursor.vector(2))
    found: str | None = None
    seen: set[int] = set()
    while extensions.at < len(extensions.data):
        kind = extensions.number(2)
        body = extensions.vector(2)
        if kind in seen:
            raise NotClientHello("the ClientHello repeats an extension")
        seen.add(kind)
        if kind != _SERVER_NAME:
            continue
        names = _Cursor(_Cursor(body).vector(2))
        hosts = []
        while names.at < len(names.data):
            name_type = names.number(1)
            name = names.vector(2)
            if name_type == _HOST_NAME:
                hosts.append(name)
        if len(hosts) != 1:
            raise NotClientHello("the ClientHello must name exactly one host")
        try:
            found = hosts[0].decode("ascii")
        except UnicodeDecodeError:
            raise NotClientHello("the server name is not ASCII") from None
    return found
