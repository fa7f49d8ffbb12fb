"""Secrets over plain HTTP: the session holds a placeholder; the proxy writes the value into requests to
the secret's hosts only, and refuses the placeholder anywhere else."""

from __future__ import annotations

import json
import socket

import pytest
from _network import fetch
from pydantic import ValidationError

from genpark_repl_tools.egress import NetworkPolicy, Secret

VALUE = "tok-3f9a1c77e0"


@pytest.fixture
def endpoint(proxy, policy, http_server):
    secret = Secret(value=VALUE, hosts=[f"api.test:{http_server.port}"])
    return proxy.open_session("s1", policy.model_copy(update={"secrets": {"API_TOKEN": secret}}))


def test_the_session_sees_only_a_placeholder(endpoint) -> None:
    env = endpoint.environment()
    assert env["API_TOKEN"].startswith("genpark-secret-")
    assert VALUE not in json.dumps(env) and VALUE not in repr(endpoint)


def test_the_value_reaches_the_secret_s_host(endpoint, http_server, recorder) -> None:
    placeholder = endpoint.environment()["API_TOKEN"]
    status, body = fetch(
        f"http://api.test:{http_server.port}/v1?key={placeholder}",
        endpoint.url,
        headers={"Authorization": f"Bearer {placeholder}"},
    )
    seen = json.loads(body)
    assert status == 200
    assert seen["headers"]["Authorization"] == f"Bearer {VALUE}"
    assert seen["path"] == f"/v1?key={VALUE}"
    recorder.wait_for(lambda rs: len(rs) == 1)
    assert recorder.records[0].verdict == "allowed"
    assert VALUE not in recorder.records[0].model_dump_json()


@pytest.mark.parametrize(
    ("host", "where"),
    [
        ("other.test", "header"),  # listed, but not one of the secret's hosts
        ("evil.test", "header"),  # not listed at all
        ("api.test", "body"),  # the secret's host, but bodies are not rewritten
        ("other.test", "body"),
    ],
)
def test_the_placeholder_anywhere_else_is_refused(endpoint, http_server, recorder, host, where) -> None:
    placeholder = endpoint.environment()["API_TOKEN"]
    before = len(http_server.received)
    url = f"http://{host}:{http_server.port}/"
    if where == "header":
        status, body = fetch(url, endpoint.url, headers={"X-Token": placeholder})
    else:
        status, body = fetch(url, endpoint.url, data=f"token={placeholder}".encode())
    assert status == 403 and b"placeholder" in body
    recorder.wait_for(lambda rs: len(rs) == 1)
    (record,) = recorder.records
    assert (record.verdict, record.host) == ("refused", host)
    assert "secret API_TOKEN's placeholder" in record.reason
    assert len(http_server.received) == before


def test_a_placeholder_split_across_reads_in_a_long_body_is_refused(endpoint, http_server, recorder) -> None:
    placeholder = endpoint.environment()["API_TOKEN"].encode()
    body = b"a" * (65536 - 10) + placeholder + b"b" * 100  # crosses the proxy's 64 KiB reads
    head = (
        f"POST http://api.test:{http_server.port}/ HTTP/1.1\r\nHost: api.test:{http_server.port}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    assert not isinstance(endpoint.address, str)
    with socket.create_connection(endpoint.address, timeout=5) as sock:
        sock.sendall(head + body)
        assert sock.recv(100) == b""  # cut, no answer: the head had gone to the server already
    recorder.wait_for(lambda rs: len(rs) == 1)
    assert recorder.records[0].verdict == "refused"
    assert "placeholder in a request body" in recorder.records[0].reason
    assert not any(placeholder.decode() in str(seen) for seen in http_server.received)


@pytest.mark.parametrize("value", ["a\r\nX-Injected: 1", "", "caf\u00e9", "tab\there"])
def test_a_value_that_does_not_fit_a_header_is_refused(value: str) -> None:
    with pytest.raises(ValidationError, match="printable ASCII"):
        NetworkPolicy(secrets={"T": Secret(value=value, hosts=["api.example.com"])})
