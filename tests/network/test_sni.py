"""The ClientHello reader, on real ClientHellos made by the `ssl` module, and on broken ones."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from genpark_repl_tools.egress._tls import NotClientHello, read_client_hello, server_name


def _client_hello(name: str | None) -> bytes:
    context = ssl.create_default_context()
    if name is None:
        context.check_hostname = False
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def _read(data: bytes) -> tuple[bytes, bytes]:
    async def go() -> tuple[bytes, bytes]:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return await read_client_hello(reader)

    return asyncio.run(go())


def test_the_server_name_is_read_from_a_real_client_hello() -> None:
    raw = _client_hello("api.example.com")
    records, hello = _read(raw + b"after")
    assert records == raw  # forwarded unchanged, and nothing past the hello is consumed
    assert server_name(hello) == "api.example.com"


def test_a_client_hello_without_a_name() -> None:
    # Clients send no SNI for an IP address: allowed, the CONNECT host is then what was checked.
    _, hello = _read(_client_hello(None))
    assert server_name(hello) is None


def test_a_hello_split_across_records_is_reassembled() -> None:
    raw = _client_hello("api.example.com")
    body = raw[5:]
    half = len(body) // 2
    split = b"".join(
        bytes([22, 3, 1]) + len(part).to_bytes(2, "big") + part for part in (body[:half], body[half:])
    )
    records, hello = _read(split)
    assert records == split
    assert server_name(hello) == "api.example.com"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n", "did not start with a TLS handshake"),
        (bytes([23, 3, 3, 0, 5]) + b"hello", "did not start with a TLS handshake"),
        (bytes([22, 3, 1, 0, 4, 2, 0, 0, 0]), "not a ClientHello"),
        (bytes([22, 3, 1, 0x48, 0x01]), "did not start with a TLS handshake"),  # a record too large
    ],
)
def test_what_is_not_a_client_hello_is_refused(data: bytes, message: str) -> None:
    with pytest.raises(NotClientHello, match=message):
        _read(data)


def test_a_truncated_hello_is_refused() -> None:
    raw = _client_hello("api.example.com")
    with pytest.raises(asyncio.IncompleteReadError):
        _read(raw[:-10])
    body = raw[5 + 4 :]
    with pytest.raises(NotClientHello, match="truncated"):
        server_name(body[:60])


def test_two_names_are_refused() -> None:
    _, hello = _read(_client_hello("api.example.com"))
    # Rebuild the server_name extension with two host names in it.
    name = b"api.example.com"
    entry = b"\x00" + len(name).to_bytes(2, "big") + name
    two = (2 * len(entry)).to_bytes(2, "big") + entry + entry
    extension = b"\x00\x00" + len(two).to_bytes(2, "big") + two
    one = len(name) + 3
    original = b"\x00\x00" + (one + 2).to_bytes(2, "big") + one.to_bytes(2, "big") + entry
    assert original in hello
    doctored = hello.replace(original, extension)
    at = 2 + 32
    at += 1 + doctored[at]
    at += 2 + int.from_bytes(doctored[at : at + 2], "big")
    at += 1 + doctored[at]
    length = int.from_bytes(doctored[at : at + 2], "big") + len(extension) - len(original)
    doctored = doctored[:at] + length.to_bytes(2, "big") + doctored[at + 2 :]
    with pytest.raises(NotClientHello, match="exactly one host"):
        server_name(doctored)
