"""Connections that reach the proxy other than through a TCP listener: a Unix socket, and sockets handed
over one by one (how a forwarder inside a sandbox with no route to the host passes its clients out)."""

from __future__ import annotations

import os
import socket
import stat

import pytest

from genpark_repl_tools.egress import NetworkPolicy


def _get_over(sock: socket.socket, port: int, host: str = "api.test") -> bytes:
    with sock:
        sock.sendall(f"GET http://{host}:{port}/x HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_a_unix_socket_listener_is_its_owner_s_only(proxy, policy, http_server, tmp_path, recorder) -> None:
    path = str(tmp_path / "s1.sock")
    endpoint = proxy.open_session("s1", policy, unix_path=path)
    assert endpoint.address == path
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(path)
    assert _get_over(client, http_server.port).startswith(b"HTTP/1.1 200")
    recorder.wait_for(lambda rs: len(rs) == 1)
    assert (recorder.records[0].session, recorder.records[0].verdict) == ("s1", "allowed")


def test_handed_over_sockets_are_served_as_their_session(proxy, policy, http_server, recorder) -> None:
    endpoint = proxy.open_session("s1", policy, tcp=False)
    assert endpoint.address is None
    inside, outside = socket.socketpair()
    proxy.serve_socket("s1", outside)
    assert _get_over(inside, http_server.port).startswith(b"HTTP/1.1 200")
    inside, outside = socket.socketpair()
    proxy.serve_socket("s1", outside)
    assert _get_over(inside, http_server.port, host="evil.test").startswith(b"HTTP/1.1 403")
    recorder.wait_for(lambda rs: len(rs) == 2)
    assert sorted((r.session, r.host, r.verdict) for r in recorder.records) == [
        ("s1", "api.test", "allowed"),
        ("s1", "evil.test", "refused"),
    ]


def test_a_socket_for_a_session_not_open_is_closed(proxy) -> None:
    inside, outside = socket.socketpair()
    proxy.serve_socket("nobody", outside)
    inside.settimeout(5)
    with inside:
        assert inside.recv(10) == b""


def test_the_environment_names_the_proxy_as_the_sandbox_sees_it(proxy, http_server) -> None:
    endpoint = proxy.open_session("s1", NetworkPolicy(allow=["api.test"]), tcp=False)
    env = endpoint.environment("http://127.0.0.1:3128")
    assert env["HTTPS_PROXY"] == env["http_proxy"] == "http://127.0.0.1:3128"
    assert env["NO_PROXY"] == env["no_proxy"] == ""
    with pytest.raises(ValueError, match="forward a loopback port"):
        endpoint.environment()  # no TCP listener: no URL of its own
