"""Secrets over HTTPS: for a secret's hosts the proxy terminates TLS with a certificate of its own
authority (which the session trusts through the bundle it writes), writes the value in and forwards the
request over TLS it verifies; every other CONNECT stays an end-to-end tunnel it cannot see into."""

from __future__ import annotations

import json
import os
import socket
import ssl
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from _network import fetch
from _servers import Certificates, Recorder, Server, resolve

from genpark_repl_tools.egress import EgressProxy, NetworkPolicy, Secret, SessionEndpoint
from genpark_repl_tools.egress._authority import system_ca_pem

try:  # neither is a dependency of the package; the tests use each one that is installed
    import requests
except ImportError:
    requests = None  # type: ignore[assignment]
try:
    import httpx
except ImportError:
    httpx = None  # type: ignore[assignment]

pytest.importorskip("cryptography", reason="secrets over HTTPS need the network-secrets extra")

VALUE = "tok-7d41c0e2b9"


def _resolve(name: str) -> list[str]:
    # A name the test server's certificate does not cover, on the same server.
    return ["127.0.0.1"] if name == "uncovered.test" else resolve(name)


@pytest.fixture
def tls_proxy(recorder: Recorder, certificates: Certificates) -> Iterator[EgressProxy]:
    with EgressProxy(
        resolver=_resolve,
        on_record=recorder,
        header_timeout=2.0,
        idle_timeout=10,
        upstream_ca=certificates.ca,
    ) as p:
        yield p


@pytest.fixture
def secret_policy(policy: NetworkPolicy, https_server: Server) -> NetworkPolicy:
    s = https_server.port
    secret = Secret(value=VALUE, hosts=[f"api.test:{s}", f"127.0.0.1:{s}", f"uncovered.test:{s}"])
    return policy.model_copy(
        update={
            "allow": (*policy.allow, f"uncovered.test:{s}"),
            "secrets": {"API_TOKEN": secret},
        }
    )


@pytest.fixture
def endpoint(tls_proxy: EgressProxy, secret_policy: NetworkPolicy) -> SessionEndpoint:
    return tls_proxy.open_session("s1", secret_policy)


@pytest.fixture
def bundle(tls_proxy: EgressProxy, tmp_path) -> str:
    path = str(tmp_path / "ca-bundle.pem")
    tls_proxy.write_ca_bundle(path)
    return path


def _get(
    url: str,
    endpoint: SessionEndpoint,
    trust: ssl.SSLContext,
    headers: dict[str, str],
    data: bytes | None = None,
) -> tuple[int, bytes]:
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({"https": endpoint.url}), urllib.request.HTTPSHandler(context=trust)
    )
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read()


@pytest.mark.parametrize(
    "client",
    [
        "urllib",
        pytest.param("requests", marks=pytest.mark.skipif(requests is None, reason="no requests")),
        pytest.param("httpx", marks=pytest.mark.skipif(httpx is None, reason="no httpx")),
    ],
)
def test_the_value_reaches_the_secret_s_https_host(client, endpoint, bundle, https_server, recorder) -> None:
    placeholder = endpoint.environment()["API_TOKEN"]
    url = f"https://api.test:{https_server.port}/v1?key={placeholder}"
    headers = {"Authorization": f"Bearer {placeholder}"}
    if client == "urllib":
        status, body = _get(url, endpoint, ssl.create_default_context(cafile=bundle), headers)
    elif client == "requests":
        response = requests.get(
            url, headers=headers, proxies={"https": endpoint.url}, verify=bundle, timeout=10
        )
        status, body = response.status_code, response.content
    else:
        with httpx.Client(proxy=endpoint.url, verify=ssl.create_default_context(cafile=bundle)) as http:
            response = http.get(url, headers=headers, timeout=10)
            status, body = response.status_code, response.content
    assert status == 200
    seen = json.loads(body)
    assert seen["headers"]["Authorization"] == f"Bearer {VALUE}"
    assert seen["path"] == f"/v1?key={VALUE}"
    recorder.wait_for(lambda rs: len(rs) == 1)
    (record,) = recorder.records
    assert (record.method, record.verdict, record.host) == ("CONNECT+TLS", "allowed", "api.test")
    assert record.bytes_up > 0 and record.bytes_down > len(body)
    assert VALUE not in record.model_dump_json()


def test_a_request_body_and_an_address_host_go_through(endpoint, bundle, https_server, recorder) -> None:
    # An IP literal: no SNI from the client, a certificate naming the address, the server's verified
    # for the address.
    placeholder = endpoint.environment()["API_TOKEN"]
    status, body = _get(
        f"https://127.0.0.1:{https_server.port}/post",
        endpoint,
        ssl.create_default_context(cafile=bundle),
        {"X-Api-Key": placeholder, "Content-Type": "application/json"},
        data=b'{"a": 1}',
    )
    seen = json.loads(body)
    assert (status, seen["method"], seen["body"]) == (200, "POST", '{"a": 1}')
    assert seen["headers"]["X-Api-Key"] == VALUE
    recorder.wait_for(lambda rs: len(rs) == 1)
    assert (recorder.records[0].method, recorder.records[0].verdict) == ("CONNECT+TLS", "allowed")


def test_other_hosts_stay_an_end_to_end_tunnel(endpoint, bundle, https_server, recorder) -> None:
    # other.test is allowed but not the secret's: the proxy never sees inside, so the placeholder
    # reaches the server as itself, which is worth nothing to it.
    placeholder = endpoint.environment()["API_TOKEN"]
    before = len(https_server.received)
    status, body = _get(
        f"https://other.test:{https_server.port}/",
        endpoint,
        ssl.create_default_context(cafile=bundle),
        {"Authorization": f"Bearer {placeholder}"},
    )
    assert status == 200
    assert json.loads(body)["headers"]["Authorization"] == f"Bearer {placeholder}"
    assert VALUE not in json.dumps(https_server.received[before:])
    recorder.wait_for(lambda rs: len(rs) == 1)
    assert (recorder.records[0].method, recorder.records[0].verdict) == ("CONNECT", "allowed")


def test_the_tunnel_is_end_to_end(endpoint, certificates, https_server) -> None:
    # The server's own certificate arrives at the client through a tunnel: trusting only the test CA
    # (not the proxy's) works for other.test and fails for the secret's host, which the proxy serves.
    only_the_server_s = ssl.create_default_context(cafile=str(certificates.ca))
    assert _get(f"https://other.test:{https_server.port}/", endpoint, only_the_server_s, {})[0] == 200
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        _get(f"https://api.test:{https_server.port}/", endpoint, only_the_server_s, {})


@pytest.mark.parametrize(
    ("where", "url"),
    [
        ("body", "https://api.test:{s}/"),  # the secret's host, but bodies are not rewritten
        ("header", "http://api.test:{h}/"),  # the secret's name on another port, over plain HTTP
        ("header", "http://other.test:{h}/"),  # another host, over plain HTTP
    ],
)
def test_the_placeholder_anywhere_the_proxy_sees_but_the_secret_s_hosts_is_refused(
    endpoint, bundle, http_server, https_server, recorder, where, url
) -> None:
    placeholder = endpoint.environment()["API_TOKEN"]
    url = url.format(s=https_server.port, h=http_server.port)
    before = len(http_server.received) + len(https_server.received)
    headers, data = (
        ({}, f"token={placeholder}".encode()) if where == "body" else ({"X-Token": placeholder}, None)
    )
    if url.startswith("https"):
        status, body = _get(url, endpoint, ssl.create_default_context(cafile=bundle), headers, data)
    else:
        status, body = fetch(url, endpoint.url, headers=headers, data=data)
    assert status == 403 and b"placeholder" in body
    recorder.wait_for(lambda rs: len(rs) == 1)
    (record,) = recorder.records
    assert record.verdict == "refused" and "secret API_TOKEN's placeholder" in record.reason
    assert len(http_server.received) + len(https_server.received) == before


def test_the_server_s_certificate_is_verified(
    recorder, certificates, secret_policy, https_server, tmp_path
) -> None:
    before = len(https_server.received)
    # Two ways a server's certificate fails: an authority the proxy does not trust (no upstream_ca, so
    # the system's only), and a trusted one that does not cover the name asked for.
    with EgressProxy(resolver=_resolve, on_record=recorder, header_timeout=2.0) as untrusting:
        endpoint = untrusting.open_session("s1", secret_policy)
        untrusting.write_ca_bundle(tmp_path / "bundle.pem")
        trust = ssl.create_default_context(cafile=str(tmp_path / "bundle.pem"))
        placeholder = endpoint.environment()["API_TOKEN"]
        status, body = _get(
            f"https://api.test:{https_server.port}/", endpoint, trust, {"X-Token": placeholder}
        )
        assert status == 502 and b"certificate is not trusted" in body
    with EgressProxy(
        resolver=_resolve, on_record=recorder, header_timeout=2.0, upstream_ca=certificates.ca
    ) as proxy:
        endpoint = proxy.open_session("s1", secret_policy)
        proxy.write_ca_bundle(tmp_path / "bundle.pem")
        trust = ssl.create_default_context(cafile=str(tmp_path / "bundle.pem"))
        status, body = _get(f"https://uncovered.test:{https_server.port}/", endpoint, trust, {})
        assert status == 502 and b"certificate is not trusted" in body
    recorder.wait_for(lambda rs: len(rs) == 2)
    for record in recorder.records:
        assert (record.method, record.verdict) == ("CONNECT+TLS", "failed")
        assert "certificate is not trusted" in record.reason and VALUE not in record.reason
    assert "unable to get local issuer certificate" in recorder.records[0].reason
    assert "Hostname mismatch" in recorder.records[1].reason
    assert len(https_server.received) == before


def test_a_server_name_other_than_the_connect_host_is_refused(
    endpoint, bundle, https_server, recorder
) -> None:
    # CONNECT to the secret's host, then TLS for another name: refused before any certificate is shown.
    assert not isinstance(endpoint.address, str)
    with socket.create_connection(endpoint.address, timeout=5) as sock:
        target = f"api.test:{https_server.port}"
        sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        assert sock.recv(1024).startswith(b"HTTP/1.1 200")
        trust = ssl.create_default_context(cafile=bundle)
        with pytest.raises(ssl.SSLError, match="ACCESS_DENIED"):
            trust.wrap_socket(sock, server_hostname="evil.test")
    recorder.wait_for(lambda rs: len(rs) == 1)
    (record,) = recorder.records
    assert (record.method, record.verdict) == ("CONNECT+TLS", "refused")
    assert "TLS server name 'evil.test' is not the CONNECT host" in record.reason


def test_a_client_that_does_not_trust_the_proxy_s_authority_is_recorded(
    endpoint, certificates, https_server, recorder
) -> None:
    before = len(https_server.received)
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        _get(f"https://api.test:{https_server.port}/", endpoint, ssl.create_default_context(), {})
    recorder.wait_for(lambda rs: len(rs) == 1)
    (record,) = recorder.records
    assert (record.method, record.verdict) == ("CONNECT+TLS", "refused")
    assert "does it trust the proxy's CA?" in record.reason
    assert len(https_server.received) == before


@pytest.mark.parametrize(
    "request_head",
    [
        b"GET https://api.test:{s}/ HTTP/1.1\r\nHost: api.test:{s}\r\n\r\n",  # not origin form
        b"GET / HTTP/1.1\r\nHost: other.test:{s}\r\n\r\n",  # another host inside
        b"GET / HTTP/1.1\r\n\r\n",  # no host
        b"GET / HTTP/1.1\r\nHost: api.test:{s}\r\n" + b"X: y\r\n" * 4000 + b"\r\n",  # too large
    ],
)
def test_what_is_not_one_request_for_the_connect_host_is_refused_inside(
    endpoint, bundle, https_server, recorder, request_head
) -> None:
    assert not isinstance(endpoint.address, str)
    target = f"api.test:{https_server.port}"
    before = len(https_server.received)
    with socket.create_connection(endpoint.address, timeout=5) as raw:
        raw.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        assert raw.recv(1024).startswith(b"HTTP/1.1 200")
        with ssl.create_default_context(cafile=bundle).wrap_socket(raw, server_hostname="api.test") as tls:
            tls.sendall(request_head.replace(b"{s}", str(https_server.port).encode()))
            answer = tls.recv(1024)
    assert answer.startswith((b"HTTP/1.1 400", b"HTTP/1.1 431"))
    recorder.wait_for(lambda rs: len(rs) == 1)
    assert (recorder.records[0].method, recorder.records[0].verdict) == ("CONNECT+TLS", "refused")
    assert len(https_server.received) == before


def test_the_session_gets_the_bundle_and_never_the_value(tls_proxy, endpoint, bundle, certificates) -> None:
    env = endpoint.environment("http://127.0.0.1:3128", ca_file="/proxy/ca-bundle.pem")
    for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT"):
        assert env[name] == "/proxy/ca-bundle.pem"
    assert "SSL_CERT_FILE" not in endpoint.environment()
    assert VALUE not in json.dumps(env)
    with open(bundle, "rb") as file:
        written = file.read()
    assert stat.S_IMODE(os.stat(bundle).st_mode) == 0o644
    assert VALUE.encode() not in written
    # The system's certificates, the upstream authority's and the proxy's.
    assert written.startswith(system_ca_pem())
    assert certificates.ca.read_bytes().strip() in written
    assert written.endswith(tls_proxy.ca_pem())
    assert written.count(b"BEGIN CERTIFICATE") == system_ca_pem().count(b"BEGIN CERTIFICATE") + 2
    trust = ssl.create_default_context(cafile=bundle)
    assert len(trust.get_ca_certs()) == written.count(b"BEGIN CERTIFICATE")


CLIENT_CODE = """
import json, os, sys, urllib.request
url = sys.argv[1]
headers = {"Authorization": "Bearer " + os.environ["API_TOKEN"]}
seen = {}
with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as response:
    seen["urllib"] = json.loads(response.read())["headers"]["Authorization"]
try:
    import requests
except ImportError:
    pass
else:
    seen["requests"] = requests.get(url, headers=headers, timeout=10).json()["headers"]["Authorization"]
try:
    import httpx
except ImportError:
    pass
else:
    seen["httpx"] = httpx.get(url, headers=headers, timeout=10).json()["headers"]["Authorization"]
print(json.dumps(seen))
"""


def test_the_environment_alone_makes_clients_trust_the_proxy(endpoint, bundle, https_server) -> None:
    # What a session's code does: nothing but read its environment (proxy, placeholder, bundle).
    env = {
        k: v for k, v in os.environ.items() if not k.lower().endswith(("_proxy", "_ca_bundle", "cert_file"))
    }
    env.update(endpoint.environment(ca_file=bundle))
    out = subprocess.run(
        [sys.executable, "-c", CLIENT_CODE, f"https://api.test:{https_server.port}/"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    seen = json.loads(out.stdout)
    installed = {"urllib"} | {name for name, module in (("requests", requests), ("httpx", httpx)) if module}
    assert seen == dict.fromkeys(installed, f"Bearer {VALUE}")


def test_only_certificates_go_into_the_bundle(certificates, tmp_path) -> None:
    # An upstream_ca file that keeps a key beside its certificate: the sessions get the certificate.
    combined = tmp_path / "upstream.pem"
    combined.write_bytes(certificates.ca.read_bytes() + certificates.key.read_bytes())
    with EgressProxy(upstream_ca=combined) as proxy:
        proxy.write_ca_bundle(tmp_path / "bundle.pem")
    written = (tmp_path / "bundle.pem").read_bytes()
    assert b"PRIVATE KEY" in combined.read_bytes() and b"PRIVATE KEY" not in written
    assert certificates.ca.read_bytes().strip() in written


def test_one_authority_per_proxy(tls_proxy, certificates) -> None:
    pem = tls_proxy.ca_pem()
    assert pem == tls_proxy.ca_pem()
    with EgressProxy(upstream_ca=certificates.ca) as other:
        assert other.ca_pem() != pem


def test_without_cryptography_an_https_secret_is_refused_when_the_session_opens() -> None:
    code = (
        "import socket, sys\n"
        "sys.modules['cryptography'] = None\n"  # as if the extra were not installed
        "from genpark_repl_tools.egress import EgressProxy, NetworkPolicy, Secret\n"
        "def policy(host):\n"
        "    return NetworkPolicy(allow=[host], secrets={'T': Secret(value='v', hosts=[host])})\n"
        "with EgressProxy() as proxy:\n"
        "    proxy.open_session('plain', policy('api.example.com:80'))\n"
        "    try:\n"
        "        proxy.open_session('https', policy('api.example.com'))\n"
        "    except ImportError as error:\n"
        "        print('refused:', error)\n"
        # A port that may be either: plain HTTP works, a CONNECT there is refused, naming the extra.
        "    endpoint = proxy.open_session('either', policy('api.example.com:8443'))\n"
        "    with socket.create_connection(endpoint.address, timeout=5) as sock:\n"
        "        sock.sendall(b'CONNECT api.example.com:8443 HTTP/1.1\\r\\n\\r\\n')\n"
        "        print('connect:', sock.recv(1024).split(b'\\r\\n')[0].decode())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    refused, connect = out.stdout.splitlines()
    assert refused.startswith("refused: ") and "install genpark-repl-tools[network-secrets]" in refused
    assert connect.startswith("connect: HTTP/1.1 501 ") and "genpark-repl-tools[network-secrets]" in connect


def test_a_client_that_stalls_in_the_handshake_is_cut(endpoint, https_server, recorder) -> None:
    # Its ClientHello, then nothing: the proxy answers the hello and waits header_timeout (2 s) at most.
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="api.test")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    assert not isinstance(endpoint.address, str)
    with socket.create_connection(endpoint.address, timeout=10) as sock:
        target = f"api.test:{https_server.port}"
        sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        assert sock.recv(1024).startswith(b"HTTP/1.1 200")
        sock.sendall(outgoing.read())
        answered = b""
        while chunk := sock.recv(65536):
            answered += chunk
    assert answered[:1] == b"\x16"  # a handshake record (the ServerHello), then the cut
    recorder.wait_for(lambda rs: len(rs) == 1)
    assert (recorder.records[0].verdict, recorder.records[0].reason) == (
        "refused",
        "no TLS handshake within 2 s",
    )
