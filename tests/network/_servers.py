"""The egress tests' loopback servers, test names and record collector, imported by conftest.py and by
tests that name these types (a module of its own: every test folder has a module named conftest)."""

from __future__ import annotations

import http.server
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from genpark_repl_tools.egress import ConnectionRecord

# What each test name resolves to. Only api.test and the address entries reach a server.
NAMES = {
    "api.test": ["127.0.0.1"],
    "other.test": ["127.0.0.1"],
    "evil.test": ["127.0.0.1"],
    "loop.test": ["127.0.0.1"],
    "internal.test": ["10.1.2.3"],
    "metadata.test": ["169.254.169.254"],
    "mixed.test": ["127.0.0.1", "192.168.0.7"],
}


@dataclass
class Server:
    """A loopback HTTP or HTTPS server that answers with what it received, as JSON."""

    port: int
    received: list[dict[str, object]] = field(default_factory=list)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_record: Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                body += self.rfile.read(size)
                self.rfile.readline()
                if size == 0:
                    break
        seen = {
            "method": self.command,
            "path": self.path,
            "headers": dict(self.headers),
            "body": body.decode(),
        }
        self.server_record.received.append(seen)
        query = parse_qs(urlsplit(self.path).query)
        if self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", query["to"][0])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        big = self.path.startswith("/big")
        payload = b"x" * int(query["n"][0]) if big else json.dumps(seen).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _answer


class _Quiet(http.server.ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # the proxy cuts connections on purpose in some tests; the tests check what arrived


def serve(context: ssl.SSLContext | None) -> Iterator[Server]:
    record = Server(port=0)
    handler = type("Handler", (_Handler,), {"server_record": record})
    httpd = _Quiet(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    if context is not None:
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    record.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield record
    finally:
        httpd.shutdown()
        httpd.server_close()


@dataclass(frozen=True)
class Certificates:
    ca: Path
    cert: Path
    key: Path


def resolve(name: str) -> list[str]:
    try:
        return NAMES[name]
    except KeyError:
        raise socket.gaierror(socket.EAI_NONAME, "unknown test name") from None


@dataclass
class Recorder:
    records: list[ConnectionRecord] = field(default_factory=list)

    def __call__(self, record: ConnectionRecord) -> None:
        self.records.append(record)

    def wait_for(self, check: Callable[[list[ConnectionRecord]], bool], timeout: float = 10) -> None:
        """Records arrive when a connection ends, on the proxy's thread."""
        deadline = time.monotonic() + timeout
        while not check(list(self.records)):
            if time.monotonic() > deadline:
                raise AssertionError(f"records never satisfied the check: {self.records}")
            time.sleep(0.02)
