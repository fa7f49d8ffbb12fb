"""The proxy against real loopback servers: allowed names work through urllib, requests and httpx;
everything else is refused before it reaches a server, and every connection is recorded."""

from __future__ import annotations

import gc
import json
import os
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
import warnings

import pytest
from _network import fetch

from genpark_repl_tools.egress import EgressProxy, NetworkPolicy, SessionEndpoint, summarise

try:  # neither is a dependency of the package; the tests use each one that is installed
    import requests
except ImportError:
    requests = None  # type: ignore[assignment]
try:
    import httpx
except ImportError:
    httpx = None  # type: ignore[assignment]

CLIENTS = [
    "urllib",
    pytest.param("requests", marks=pytest.mark.skipif(requests is None, reason="requests is not installed")),
    pytest.param("httpx", marks=pytest.mark.skipif(httpx is None, reason="httpx is not installed")),
]


@pytest.fixture
def endpoint(proxy: EgressProxy, policy: NetworkPolicy) -> SessionEndpoint:
    return proxy.open_session("s1", policy)


def _urllib(endpoint: SessionEndpoint, tls: ssl.SSLContext) -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(
        urllib.request.ProxyHandler({"http": endpoint.url, "https": endpoint.url}),
        urllib.request.HTTPSHandler(context=tls),
    )


def _get(client: str, url: str, endpoint: SessionEndpoint, tls: ssl.SSLContext, ca: str) -> tuple[int, bytes]:
    """(status, body) of a GET through the proxy with one of the three client libraries."""
    if client == "urllib":
        try:
            with _urllib(endpoint, tls).open(url, timeout=10) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            with error:
                return error.code, error.read()
        except urllib.error.URLError as error:
            message = str(error.reason)
        # Python 3.10's http.client leaves a refused tunnel's socket open until it is collected (3.11
        # closes it): collect it here, with the error's frames gone, rather than warn in a later test.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
        raise urllib.error.URLError(message)
    if client == "requests":
        proxies = {"http": endpoint.url, "https": endpoint.url}
        response = requests.get(url, proxies=proxies, verify=ca, timeout=10)
        return response.status_code, response.content
    with httpx.Client(proxy=endpoint.url, verify=tls, timeout=10, follow_redirects=True) as http:
        response = http.get(url)
        return response.status_code, response.content


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("scheme", ["http", "https"])
def test_an_allowed_name_works(
    client, scheme, endpoint, client_tls, certificates, http_server, https_server, recorder
) -> None:
    server = http_server if scheme == "http" else https_server
    url = f"{scheme}://api.test:{server.port}/hello?x=1"
    status, body = _get(client, url, endpoint, client_tls, str(certificates.ca))
    assert status == 200
    seen = json.loads(body)
    assert seen["path"] == "/hello?x=1"
    assert seen["headers"]["Host"] in (f"api.test:{server.port}", "api.test")
    assert not any(h.lower().startswith("proxy-") for h in seen["headers"])
    recorder.wait_for(lambda rs: any(r.verdict == "allowed" for r in rs))
    record = next(r for r in recorder.records if r.verdict == "allowed")
    assert (record.session, record.host, record.port, record.address) == (
        "s1",
        "api.test",
        server.port,
        "127.0.0.1",
    )
    assert record.method == ("CONNECT" if scheme == "https" else "GET")
    assert record.bytes_up > 0 and record.bytes_down > len(body)


def test_the_usual_environment_variables_are_enough(
    endpoint, certificates, https_server, http_server
) -> None:
    # Code that knows nothing of the proxy: the three libraries read HTTP(S)_PROXY from the environment.
    code = """if True:
        import sys, urllib.request
        https_url, http_url = sys.argv[1], sys.argv[2]
        print(urllib.request.urlopen(https_url, timeout=10).status)
        try:
            import requests
        except ImportError:
            print(200)  # not installed here: the parent's CLIENTS skip it likewise
        else:
            print(requests.get(http_url, timeout=10).status_code)
        try:
            import httpx
        except ImportError:
            print(200)
        else:
            print(httpx.get(https_url, timeout=10).status_code)
    """
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.update(endpoint.environment())
    env.update({"SSL_CERT_FILE": str(certificates.ca), "REQUESTS_CA_BUNDLE": str(certificates.ca)})
    https_url = f"https://api.test:{https_server.port}/"
    http_url = f"http://api.test:{http_server.port}/"
    out = subprocess.run(
        [sys.executable, "-c", code, https_url, http_url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["200", "200", "200"]


def test_an_ip_literal_works_only_when_listed(
    endpoint, client_tls, certificates, http_server, https_server
) -> None:
    ca = str(certificates.ca)
    assert _get("urllib", f"https://127.0.0.1:{https_server.port}/", endpoint, client_tls, ca)[0] == 200
    assert _get("urllib", f"http://127.0.0.1:{http_server.port}/", endpoint, client_tls, ca)[0] == 200


REFUSED = [
    # (url, the host the record names, words of the reason)
    ("http://evil.test:{h}/", "evil.test", "evil.test:{h} is not in the allow list"),
    ("http://api.test:9/", "api.test", "api.test:9 is not in the allow list"),
    ("http://127.0.0.2:{h}/", "127.0.0.2", "IP address 127.0.0.2 port {h} is not in the allow list"),
    ("http://93.184.216.34/", "93.184.216.34", "IP address 93.184.216.34 port 80 is not in the allow list"),
    ("http://[::1]:{h}/", "::1", "IP address ::1 port {h} is not in the allow list"),
    ("http://loop.test:8080/", "loop.test", "loop.test resolves to a loopback address (127.0.0.1)"),
    ("http://internal.test/", "internal.test", "internal.test resolves to a private address (10.1.2.3)"),
    ("http://metadata.test/", "metadata.test", "resolves to a metadata address (169.254.169.254)"),
    ("http://mixed.test:{h}/", "mixed.test", "mixed.test resolves to a private address (192.168.0.7)"),
    ("https://evil.test:{s}/", "evil.test", "evil.test:{s} is not in the allow list"),
    ("https://metadata.test/", "metadata.test", "resolves to a metadata address (169.254.169.254)"),
]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("url", "host", "reason"), REFUSED)
def test_refused_and_recorded(
    client, url, host, reason, endpoint, client_tls, certificates, http_server, https_server, recorder
) -> None:
    before = len(http_server.received) + len(https_server.received)
    url = url.format(h=http_server.port, s=https_server.port)
    reason = reason.format(h=http_server.port, s=https_server.port)
    if url.startswith("https"):
        # The tunnel is refused: each library raises its own proxy error, with the proxy's reason in it.
        errors = {"urllib": urllib.error.URLError}
        errors["requests"] = requests.exceptions.ProxyError if requests else OSError
        errors["httpx"] = httpx.ProxyError if httpx else OSError
        with pytest.raises(errors[client]) as caught:
            _get(client, url, endpoint, client_tls, str(certificates.ca))
        assert "403" in str(caught.value)
    else:
        status, body = _get(client, url, endpoint, client_tls, str(certificates.ca))
        assert status == 403
        assert reason in body.decode()
    recorder.wait_for(lambda rs: len(rs) >= 1)
    (record,) = recorder.records
    assert (record.verdict, record.host, record.address) == ("refused", host, None)
    assert reason in record.reason
    assert len(http_server.received) + len(https_server.received) == before  # no server heard of it


@pytest.mark.parametrize("client", CLIENTS)
def test_a_redirect_to_a_name_not_listed_is_refused(
    client, endpoint, client_tls, certificates, http_server, recorder
):
    target = f"http://evil.test:{http_server.port}/stolen"
    url = f"http://api.test:{http_server.port}/redirect?to={target}"
    status, _ = _get(client, url, endpoint, client_tls, str(certificates.ca))
    assert status == 403
    recorder.wait_for(lambda rs: len(rs) >= 2)
    # Records come as connections end, which is not always the order they began in.
    assert sorted((r.host, r.verdict) for r in recorder.records) == [
        ("api.test", "allowed"),
        ("evil.test", "refused"),
    ]
    assert not any(seen["path"] == "/stolen" for seen in http_server.received)
    assert summarise(recorder.records) == "network: 1 connection to api.test; 1 refused: evil.test"


def _raw(endpoint: SessionEndpoint, data: bytes) -> bytes:
    assert not isinstance(endpoint.address, str)
    with socket.create_connection(endpoint.address, timeout=10) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


@pytest.mark.parametrize(
    ("request_head", "reason"),
    [
        ("GET http://api.test:{h}/ HTTP/1.1\r\nHost: evil.test:{h}\r\n\r\n", "Host header does not match"),
        ("GET http://api.test:{h}/ HTTP/1.1\r\nHost: api.test\r\n\r\n", "Host header does not match"),
        ("GET http://api.test:{h}/ HTTP/1.1\r\n\r\n", "no Host header"),
        (
            "GET http://api.test:{h}/ HTTP/1.1\r\nHost: api.test:{h}\r\nHost: evil.test\r\n\r\n",
            "more than one Host header",
        ),
        ("GET / HTTP/1.1\r\nHost: api.test:{h}\r\n\r\n", "expected an absolute http:// URI"),
        ("GET http://x@api.test:{h}/ HTTP/1.1\r\nHost: api.test:{h}\r\n\r\n", "user information"),
        (
            "CONNECT api.test:{s} HTTP/1.1\r\nHost: evil.test:{s}\r\n\r\n",
            "Host header does not match CONNECT",
        ),
        ("CONNECT api.test HTTP/1.1\r\n\r\n", "no port"),
        (
            "POST http://api.test:{h}/ HTTP/1.1\r\nHost: api.test:{h}\r\nContent-Length: 3\r\n"
            "Transfer-Encoding: chunked\r\n\r\n",
            "only Transfer-Encoding: chunked, alone",
        ),
        (
            "POST http://api.test:{h}/ HTTP/1.1\r\nHost: api.test:{h}\r\nContent-Length: 3\r\n"
            "Content-Length: 4\r\n\r\n",
            "bad Content-Length",
        ),
    ],
)
def test_a_request_that_disagrees_with_itself_is_refused(
    request_head, reason, endpoint, http_server, https_server, recorder
) -> None:
    head = request_head.format(h=http_server.port, s=https_server.port)
    before = len(http_server.received)
    answer = _raw(endpoint, head.encode())
    assert answer.startswith(b"HTTP/1.1 40") and reason.encode() in answer
    recorder.wait_for(lambda rs: len(rs) >= 1)
    assert recorder.records[0].verdict == "refused" and reason in recorder.records[0].reason
    assert len(http_server.received) == before


def _tunnel(endpoint: SessionEndpoint, host: str, port: int) -> socket.socket:
    assert not isinstance(endpoint.address, str)
    sock = socket.create_connection(endpoint.address, timeout=10)
    sock.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    answer = b""
    while not answer.endswith(b"\r\n\r\n"):
        chunk = sock.recv(1)
        assert chunk, answer
        answer += chunk
    assert answer.startswith(b"HTTP/1.1 200"), answer
    return sock


def _https_get(sock: socket.socket, tls: ssl.SSLContext, name: str) -> bytes:
    """The first bytes of the answer to a GET over TLS on a tunnel, asking TLS for `name`."""
    with tls.wrap_socket(sock, server_hostname=name) as wrapped:
        wrapped.sendall(f"GET / HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n".encode())
        answer = wrapped.recv(100)
    if not answer:
        raise ConnectionResetError("closed without an answer")
    return answer


def test_a_server_name_other_than_the_connect_host_is_refused(
    endpoint, certificates, https_server, recorder
) -> None:
    # Domain fronting: CONNECT to the allowed name, then ask TLS for another one on the same address.
    tls = ssl.create_default_context(cafile=str(certificates.ca))
    before = len(https_server.received)
    with (
        _tunnel(endpoint, "api.test", https_server.port) as sock,
        pytest.raises(ssl.SSLError, match="ACCESS_DENIED"),
    ):
        _https_get(sock, tls, "evil.test")
    recorder.wait_for(lambda rs: len(rs) >= 1)
    record = recorder.records[0]
    assert (record.verdict, record.host) == ("refused", "api.test")
    assert "TLS server name 'evil.test' is not the CONNECT host" in record.reason
    assert len(https_server.received) == before


def test_a_matching_server_name_in_another_case_passes(endpoint, certificates, https_server) -> None:
    tls = ssl.create_default_context(cafile=str(certificates.ca))
    with _tunnel(endpoint, "api.test", https_server.port) as sock:
        assert _https_get(sock, tls, "API.Test").startswith(b"HTTP/1.1 200")


def test_a_tunnel_that_does_not_carry_tls_is_refused(endpoint, http_server, recorder) -> None:
    # CONNECT to a plain-HTTP port would let the Host header inside go unchecked.
    with _tunnel(endpoint, "api.test", http_server.port) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n")
        assert sock.recv(100) == b""
    recorder.wait_for(lambda rs: len(rs) >= 1)
    assert recorder.records[0].verdict == "refused"
    assert "did not start with a TLS handshake" in recorder.records[0].reason


def test_a_name_that_does_not_resolve_fails_and_is_recorded(proxy, recorder) -> None:
    endpoint = proxy.open_session("s2", NetworkPolicy(allow=["nowhere.test"]))
    status, body = fetch("http://nowhere.test/", endpoint.url)
    assert status == 502 and b"nowhere.test does not resolve" in body
    recorder.wait_for(lambda rs: len(rs) >= 1)
    assert (recorder.records[0].verdict, recorder.records[0].session) == ("failed", "s2")
    assert summarise(recorder.records) == "network: 1 failed: nowhere.test"


def test_a_post_body_is_forwarded(endpoint, http_server) -> None:
    url = f"http://api.test:{http_server.port}/post"
    sent = json.loads(fetch(url, endpoint.url, data=b"a=1&b=2")[1])
    assert sent["body"] == "a=1&b=2"
    chunked = json.loads(fetch(url, endpoint.url, data=iter([b"one,", b"two"]))[1])  # type: ignore[arg-type]
    assert chunked["body"] == "one,two" and chunked["headers"]["Transfer-Encoding"] == "chunked"


def test_a_connection_counts_as_open_until_it_is_recorded(proxy, endpoint, client_tls, certificates) -> None:
    # settle() waits while a session has connections open, so a run's report includes every connection
    # whose reply its code has read: a connection must still count as open when it is recorded.
    open_when_recorded: list[int] = []
    record = proxy._record

    def spy(state, conn) -> None:
        open_when_recorded.append(state.active)
        record(state, conn)

    proxy._record = spy
    status, _ = _get("urllib", "http://not-listed.test/", endpoint, client_tls, str(certificates.ca))
    assert status == 403
    proxy.settle("s1", 5.0)
    records, _ = proxy.records_since("s1", 0)
    assert [r.host for r in records] == ["not-listed.test"]
    assert open_when_recorded == [1]
