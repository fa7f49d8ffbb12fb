"""TLS on a client's connection: the server name (SNI) its ClientHello asks for, and, for the hosts where
the proxy terminates TLS, the plaintext inside.

The proxy reads the client's first handshake message out of its TLS records before any byte reaches the
server; anything that is not a well-formed ClientHello is refused rather than guessed at.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl

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


class TLSStream:
    """The proxy's side of TLS on a client's connection: a reader and a writer of the plaintext inside.

    Driven through memory buffers over the connection's stream, so the ClientHello already read (to
    check its server name) is handed to the handshake rather than lost. Reads pull from the connection
    only when asked, so a client sending faster than the server takes costs no memory here.
    """

    def __init__(
        self,
        context: ssl.SSLContext,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        limit: int,
    ) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._reader = reader
        self._writer = writer
        self._limit = limit
        self._buffer = bytearray()
        self._ended = False

    @property
    def transport(self) -> asyncio.BaseTransport:
        return self._writer.transport

    def _flush(self) -> None:
        data = self._outgoing.read()
        if data:
            self._writer.write(data)

    async def _receive(self) -> None:
        data = await self._reader.read(1 << 16)
        if data:
            self._incoming.write(data)
        else:
            self._incoming.write_eof()

    async def handshake(self, hello: bytes) -> None:
        """Complete the server's handshake, starting from the client's records already read."""
        self._incoming.write(hello)
        while True:
            try:
                self._tls.do_handshake()
            except ssl.SSLWantReadError:
                self._flush()
                await self._writer.drain()
                await self._receive()
                continue
            self._flush()
            await self._writer.drain()
            return

    async def _fill(self) -> bool:
        """Decrypt more into the buffer; False once the client has ended its side."""
        while not self._ended:
            try:
                data = self._tls.read(1 << 16)
            except ssl.SSLWantReadError:
                self._flush()
                await self._receive()
                continue
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                data = b""
            if not data:
                self._ended = True
                break
            self._buffer += data
            return True
        return False

    def _take(self, n: int) -> bytes:
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data

    async def readuntil(self, separator: bytes) -> bytes:
        while True:
            at = self._buffer.find(separator)
            if 0 <= at <= self._limit:
                return self._take(at + len(separator))
            if at > self._limit or len(self._buffer) > self._limit:
                raise asyncio.LimitOverrunError("separator not found within the limit", len(self._buffer))
            if not await self._fill():
                raise asyncio.IncompleteReadError(self._take(len(self._buffer)), None)

    async def readexactly(self, n: int) -> bytes:
        while len(self._buffer) < n:
            if not await self._fill():
                raise asyncio.IncompleteReadError(self._take(len(self._buffer)), n)
        return self._take(n)

    async def read(self, n: int) -> bytes:
        if not self._buffer:
            await self._fill()
        return self._take(n)

    def write(self, data: bytes) -> None:
        self._tls.write(data)
        self._flush()

    async def drain(self) -> None:
        await self._writer.drain()

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        """Send TLS close_notify: a response that ends with the connection then reads as complete."""
        # The client's close_notify is not awaited: the connection closes after this.
        with contextlib.suppress(ssl.SSLWantReadError):
            self._tls.unwrap()
        self._flush()
