"""Network by name on the container boundary: a session's container has no network (--network none),
and its only way out is the engine's egress proxy on the host, for the names its NetworkPolicy lists.

The worker binds the proxy's port on its container's loopback and passes the listening socket to the
host; the proxy's resolver maps the test names to a server on the host's loopback.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _pki import make_pki

from genpark_repl_tools import Limits
from genpark_repl_tools.egress import ConnectionRecord, EgressProxy, NetworkPolicy, Secret

VALUE = "tok-container-value-5521"


class _Echo(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path.startswith("/redirect?to="):
            self.send_response(302)
            self.send_header("Location", self.path.split("=", 1)[1])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = json.dumps({"path": self.path, "token": self.headers.get("X-Token", "")}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[int]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


_NAMES = {
    "api.test": ["127.0.0.1"],
    "evil.test": ["127.0.0.1"],
    "internal.test": ["10.1.2.3"],
    "metadata.test": ["169.254.169.254"],
}


def _resolve(name: str) -> list[str]:
    if name in _NAMES:
        return _NAMES[name]
    raise socket.gaierror(socket.EAI_NONAME, "unknown test name")


@pytest.fixture
def records() -> list[ConnectionRecord]:
    return []


@pytest.fixture
def engine(make_engine: Callable[..., Any], server: int, records: list[ConnectionRecord]) -> Iterator[Any]:
    proxy = EgressProxy(resolver=_resolve, on_record=records.append, header_timeout=2.0)
    policy = NetworkPolicy(
        allow=[f"api.test:{server}", f"127.0.0.1:{server}", "internal.test", "metadata.test"],
        secrets={"API_TOKEN": Secret(value=VALUE, hosts=[f"api.test:{server}"])},
    )
    yield make_engine(policy="trusted", network=policy, egress_proxy=proxy, limits=Limits(timeout_s=20))
    proxy.close()


def _get(engine: Any, url: str, session: str = "s", token: bool = True) -> Any:
    headers = "{'X-Token': os.environ['API_TOKEN']}" if token else "{}"
    result = engine.run(
        "import os, urllib.request, urllib.error\n"
        f"request = urllib.request.Request({url!r}, headers={headers})\n"
        "try:\n"
        "    with urllib.request.urlopen(request, timeout=10) as r:\n"
        "        out = (r.status, r.read().decode())\n"
        "except urllib.error.HTTPError as e:\n"
        "    out = (e.code, e.reason)\n"
        "out",
        session=session,
    )
    assert result.status == "ok", result
    return result


def test_a_listed_name_is_reached_and_the_secret_only_there(
    engine: Any, server: int, records: list[ConnectionRecord]
) -> None:
    result = _get(engine, f"http://api.test:{server}/in")
    status, body = eval(result.value)
    assert status == 200 and json.loads(body) == {"path": "/in", "token": VALUE}
    assert result.notes == ["network: 1 connection to api.test"]
    env = engine.run("import os; os.environ['API_TOKEN'], os.environ['HTTP_PROXY']", session="s")
    assert eval(env.value) == (eval(env.value)[0], "http://127.0.0.1:3128")
    assert eval(env.value)[0].startswith("genpark-secret-")
    described = engine.describe()
    assert "egress proxy" in described["enforced"]["network_isolation"]
    # The container's namespace is the session's own: nothing is missing that the CLI should warn of.
    assert "network_namespace" not in described["unavailable"]


def test_a_name_not_listed_is_refused_and_there_is_no_other_way_out(
    engine: Any, server: int, records: list[ConnectionRecord]
) -> None:
    result = _get(engine, f"http://evil.test:{server}/")
    assert eval(result.value)[0] == 403
    assert result.notes == ["network: 1 refused: evil.test"]
    direct = engine.run(
        "import socket\ns = socket.socket(); s.settimeout(3)\n"
        f"try:\n    s.connect(('127.0.0.1', {server})); out = 'connected'\n"
        "except OSError as e:\n    out = type(e).__name__\nout",
        session="s",
    )
    assert direct.value in ("'ConnectionRefusedError'", "'PermissionError'"), direct
    assert [(r.session, r.host, r.verdict) for r in records] == [("s", "evil.test", "refused")]


def test_the_proxy_still_serves_a_session_rolled_back_and_a_second_session(engine: Any, server: int) -> None:
    assert eval(_get(engine, f"http://api.test:{server}/a").value)[0] == 200
    engine.run("x = 7", session="s")
    crashed = engine.run("import os; os._exit(1)", session="s")
    assert crashed.rolled_back, crashed
    assert engine.run("x", session="s").value == "7"
    assert eval(_get(engine, f"http://api.test:{server}/b").value)[0] == 200
    assert eval(_get(engine, f"http://api.test:{server}/c", session="t").value)[0] == 200


@pytest.fixture(scope="module")
def https_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path, list[str]]]:
    """An HTTPS server on the host's loopback with a certificate for api.test from a test authority
    (made with the openssl CLI); yields its port, the authority's file and the tokens it received."""
    import ssl

    authority, certificate, key = make_pki(tmp_path_factory.mktemp("pki"), ["api.test"])
    tokens: list[str] = []

    class Handler(_Echo):
        def do_GET(self) -> None:
            tokens.append(self.headers.get("X-Token", ""))
            self.send_response(204)
            self.end_headers()

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificate, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1], authority, tokens
    httpd.shutdown()
    httpd.server_close()


def test_a_secret_for_an_https_host_reaches_it_from_a_container(
    make_engine: Callable[..., Any], https_server: tuple[int, Path, list[str]]
) -> None:
    pytest.importorskip("cryptography", reason="secrets over HTTPS need the network-secrets extra")
    port, authority, tokens = https_server
    proxy = EgressProxy(resolver=_resolve, upstream_ca=authority)
    policy = NetworkPolicy(
        allow=[f"api.test:{port}", f"127.0.0.1:{port}"],
        secrets={"API_TOKEN": Secret(value=VALUE, hosts=[f"api.test:{port}"])},
    )
    try:
        limits = Limits(timeout_s=20)
        engine = make_engine(policy="trusted", network=policy, egress_proxy=proxy, limits=limits)
        result = engine.run(
            "import os, urllib.request\n"
            f"request = urllib.request.Request('https://api.test:{port}/x')\n"
            "request.add_header('X-Token', os.environ['API_TOKEN'])\n"
            "with urllib.request.urlopen(request, timeout=10) as r:\n"
            "    status = r.status\n"
            "status, os.environ['SSL_CERT_FILE']",
            session="s",
        )
        assert result.status == "ok", result
        assert eval(result.value) == (204, "/run/genpark-egress/ca-bundle.pem")
        assert tokens == [VALUE]
        assert VALUE.encode() not in engine.snapshot("s").to_bytes()
    finally:
        proxy.close()


def test_each_kind_of_refusal_holds_from_a_container(
    engine: Any, server: int, records: list[ConnectionRecord]
) -> None:
    """An IP literal not listed, listed names resolving to private and metadata addresses, and a
    redirect to a name not listed: each refused, recorded and in its run's note."""
    cases = [
        (f"http://127.0.0.2:{server}/", "127.0.0.2", "not in the allow list"),
        ("http://internal.test/", "internal.test", "private"),
        ("http://metadata.test/", "metadata.test", "metadata"),
    ]
    for url, host, why in cases:
        result = _get(engine, url, token=False)
        assert eval(result.value)[0] == 403, (url, result.value)
        assert result.notes == [f"network: 1 refused: {host}"]
        assert records[-1].host == host and records[-1].verdict == "refused"
        assert why in records[-1].reason, records[-1]
    redirected = _get(engine, f"http://api.test:{server}/redirect?to=http://evil.test:{server}/", token=False)
    assert eval(redirected.value)[0] == 403
    assert redirected.notes == ["network: 1 connection to api.test; 1 refused: evil.test"]
