"""Real servers on loopback for the egress proxy's tests, and names mapped to them.

Nothing leaves this machine: every name resolves, through the proxy's resolver option, to a loopback
server started here or to a non-public address the proxy must refuse before connecting.
"""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from genpark_repl_tools.egress import ConnectionRecord, EgressProxy, NetworkPolicy

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


def _serve(context: ssl.SSLContext | None) -> Iterator[Server]:
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


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    """A test CA and a server certificate for the test names and 127.0.0.1, made with the openssl CLI."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    d = tmp_path_factory.mktemp("pki")

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], cwd=d, check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=genpark test CA", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=api.test")  # fmt: skip
    (d / "ext.cnf").write_text(
        "subjectAltName=DNS:api.test,DNS:other.test,DNS:evil.test,IP:127.0.0.1\n"
        "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
    )
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf")  # fmt: skip
    return Certificates(d / "ca.pem", d / "server.pem", d / "server.key")


@pytest.fixture(scope="session")
def http_server() -> Iterator[Server]:
    yield from _serve(None)


@pytest.fixture(scope="session")
def https_server(certificates: Certificates) -> Iterator[Server]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificates.cert, certificates.key)
    yield from _serve(context)


@pytest.fixture
def client_tls(certificates: Certificates) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certificates.ca))


def resolve(name: str) -> list[str]:
    try:
        return NAMES[name]
    except KeyError:
        raise socket.gaierror(socket.EAI_NONAME, "unknown test name") from None


@pytest.fixture
def resolver() -> Callable[[str], list[str]]:
    return resolve


@pytest.fixture
def policy(http_server: Server, https_server: Server) -> NetworkPolicy:
    """api.test on both servers' ports; 127.0.0.1 on those ports too, since the test servers are on
    loopback and the proxy refuses loopback unless the exact address is listed."""
    h, s = http_server.port, https_server.port
    return NetworkPolicy(
        allow=[
            f"api.test:{h}",
            f"api.test:{s}",
            f"127.0.0.1:{h}",
            f"127.0.0.1:{s}",
            f"other.test:{h}",
            f"other.test:{s}",
            "loop.test:8080",
            "internal.test",
            "metadata.test",
            f"mixed.test:{h}",
        ]
    )


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


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def proxy(recorder: Recorder) -> Iterator[EgressProxy]:
    with EgressProxy(resolver=resolve, on_record=recorder, header_timeout=1.0, idle_timeout=10) as p:
        yield p
