"""Limits hold, and a hostile client (malformed, slow, too large, a flood) costs only its own session:
the proxy goes on serving everyone else."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import select
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator

import pytest
from _network import fetch

from genpark_repl_tools.egress import EgressProxy, NetworkPolicy, SessionEndpoint


def _address(endpoint: SessionEndpoint) -> tuple[str, int]:
    assert not isinstance(endpoint.address, str)
    return endpoint.address


def _answer(sock: socket.socket) -> bytes:
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


def _ok(endpoint: SessionEndpoint, port: int) -> bool:
    status, body = fetch(f"http://api.test:{port}/ok", endpoint.url)
    return status == 200 and json.loads(body)["path"] == "/ok"


def _arrived(url: str, proxy: str) -> int:
    """Bytes of the body that arrived: a cut body is short, however the client reports the cut."""
    try:
        return len(fetch(url, proxy)[1])
    except http.client.IncompleteRead as cut:
        return len(cut.partial)
    except OSError:
        return 0


def test_connections_at_once_are_limited(proxy, policy, https_server, recorder) -> None:
    endpoint = proxy.open_session("s1", policy.model_copy(update={"max_connections": 2}))
    connect = f"CONNECT api.test:{https_server.port} HTTP/1.1\r\n\r\n".encode()
    held = [socket.create_connection(_address(endpoint), timeout=5) for _ in range(2)]
    for sock in held:
        sock.sendall(connect)
        assert sock.recv(100).startswith(b"HTTP/1.1 200")
    with socket.create_connection(_address(endpoint), timeout=5) as third:
        third.sendall(connect)
        assert _answer(third) == b""  # cut at once, no reply
    recorder.wait_for(lambda rs: len(rs) >= 1)
    assert recorder.records[0].verdict == "refused"
    assert recorder.records[0].reason == "too many connections at once (limit 2)"
    held.pop().close()
    recorder.wait_for(lambda rs: len(rs) >= 2)
    with socket.create_connection(_address(endpoint), timeout=5) as again:
        again.sendall(connect)
        assert again.recv(100).startswith(b"HTTP/1.1 200")
    for sock in held:
        sock.close()


def test_bytes_are_limited_per_session(proxy, policy, http_server, recorder) -> None:
    endpoint = proxy.open_session("s1", policy.model_copy(update={"max_bytes": 50_000}))
    other = proxy.open_session("s2", policy)
    url = f"http://api.test:{http_server.port}/big?n=200000"
    assert _arrived(url, endpoint.url) < 200_000
    recorder.wait_for(lambda rs: len(rs) >= 1)
    (record,) = recorder.records
    assert record.verdict == "allowed" and "byte limit (50000)" in record.reason
    assert record.bytes_up + record.bytes_down <= 50_000
    # The limit is the session's: another session is not touched by it.
    assert _arrived(url, other.url) == 200_000


def test_a_large_head_is_refused(proxy, policy, http_server, recorder) -> None:
    endpoint = proxy.open_session("s1", policy)
    head = f"GET http://api.test:{http_server.port}/ HTTP/1.1\r\nHost: api.test:{http_server.port}\r\n"
    with socket.create_connection(_address(endpoint), timeout=5) as sock:
        sock.sendall(head.encode() + b"X-Pad: " + b"a" * 20_000 + b"\r\n\r\n")
        assert _answer(sock).startswith(b"HTTP/1.1 431")
    recorder.wait_for(lambda rs: len(rs) >= 1)
    assert recorder.records[0].reason == "request head larger than 16384 bytes"
    assert _ok(endpoint, http_server.port)


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",  # TLS sent to a plain proxy
        b"GET\r\n\r\n",
        b"GET http://api.test/ HTTP/2\r\nHost: api.test\r\n\r\n",
        b"GET http://api.test/ HTTP/1.1\r\n Host: api.test\r\n\r\n",  # folded header line
        b"GET http://api.test/\x00 HTTP/1.1\r\nHost: api.test\r\n\r\n",
        b"GET http://api.test/ HTTP/1.1\r\nHost: api.test\x01\r\n\r\n",
        b"CONNECT [::1 HTTP/1.1\r\n\r\n",
    ],
)
def test_a_malformed_request_is_refused_and_the_next_one_served(
    garbage, proxy, policy, http_server, recorder
) -> None:
    endpoint = proxy.open_session("s1", policy)
    with socket.create_connection(_address(endpoint), timeout=5) as sock:
        sock.sendall(garbage)
        assert _answer(sock).startswith(b"HTTP/1.1 400")
    recorder.wait_for(lambda rs: len(rs) >= 1)
    assert recorder.records[0].verdict == "refused"
    assert _ok(endpoint, http_server.port)


@pytest.fixture
def patient_proxy(resolver, recorder) -> Iterator[EgressProxy]:
    """Header timeouts long enough that a loaded machine cannot make "served before the hostile
    client timed out" happen by luck of timing."""
    with EgressProxy(resolver=resolver, on_record=recorder, header_timeout=3.0) as proxy:
        yield proxy


def _silent(sock: socket.socket) -> bool:
    """Nothing to read yet: the proxy has not answered or closed this connection."""
    return not select.select([sock], [], [], 0)[0]


def test_a_slow_client_does_not_stall_another(patient_proxy, policy, http_server, recorder) -> None:
    endpoint = patient_proxy.open_session("s1", policy)
    with socket.create_connection(_address(endpoint), timeout=5) as slow:
        slow.sendall(b"GET http://api.test:")  # and nothing more
        assert _ok(endpoint, http_server.port)
        assert _silent(slow)  # served while the slow one still waits for its header timeout
        assert _answer(slow).startswith(b"HTTP/1.1 408")
    recorder.wait_for(lambda rs: any(r.reason == "no complete request head within 3 s" for r in rs))


def test_a_flood_costs_only_its_own_session(patient_proxy, policy, http_server, recorder) -> None:
    flooded = patient_proxy.open_session("flood", policy.model_copy(update={"max_connections": 4}))
    endpoint = patient_proxy.open_session("s1", policy)
    flood = [socket.create_connection(_address(flooded), timeout=5) for _ in range(200)]
    try:
        assert _ok(endpoint, http_server.port)
        assert all(_silent(sock) for sock in flood[:4])  # the four let in still hold their places
    finally:
        for sock in flood:
            sock.close()
    recorder.wait_for(lambda rs: sum(r.session == "flood" for r in rs) == 200)
    reasons = {r.reason for r in recorder.records if r.session == "flood"}
    # Four at a time were let in to send a head and timed out or closed; the rest were cut at once.
    assert reasons <= {
        "too many connections at once (limit 4)",
        "no complete request head within 3 s",
        "the client closed before a complete request head",
    }
    assert sum(r.reason.startswith("too many") for r in recorder.records) >= 150
    assert _ok(flooded, http_server.port) or _ok(flooded, http_server.port)  # once its four are gone


def test_a_closed_session_is_cut_and_others_go_on(proxy, policy, https_server, http_server) -> None:
    endpoint = proxy.open_session("s1", policy)
    other = proxy.open_session("s2", policy)
    with socket.create_connection(_address(endpoint), timeout=5) as sock:
        sock.sendall(f"CONNECT api.test:{https_server.port} HTTP/1.1\r\n\r\n".encode())
        assert sock.recv(100).startswith(b"HTTP/1.1 200")
        proxy.close_session("s1")
        assert _answer(sock) == b""
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(_address(endpoint), timeout=5).close()
    assert _ok(other, http_server.port)
    assert proxy.records("s1") == []  # the session's records went with it; the callback had them


def test_running_out_of_file_descriptors_is_survived(http_server, tmp_path) -> None:
    # In a child: a low descriptor limit and a flood past it; the proxy serves again once it ends.
    code = textwrap.dedent(
        f"""
        import resource, sys
        from genpark_repl_tools.egress import EgressProxy, NetworkPolicy
        proxy = EgressProxy(resolver=lambda name: ["127.0.0.1"], header_timeout=60)
        policy = NetworkPolicy(allow=["api.test:{http_server.port}", "127.0.0.1:{http_server.port}"],
                               max_connections=10_000)
        endpoint = proxy.open_session("s", policy)
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        print(endpoint.address[1], flush=True)
        sys.stdin.read()
        proxy.close()
        """
    )
    # A file, not a pipe, for its log: asyncio logs every failed accept, and a full pipe would stall it.
    with (tmp_path / "stderr").open("w+") as log:
        child = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            env={**os.environ, "PYTHONPATH": os.getcwd()},
            text=True,
        )
        try:
            assert child.stdout is not None
            endpoint = SessionEndpoint("s", ("127.0.0.1", int(child.stdout.readline())), {})
            flood = [socket.create_connection(_address(endpoint), timeout=5) for _ in range(90)]
            deadline = time.monotonic() + 10
            while "Too many open files" not in (tmp_path / "stderr").read_text():
                assert time.monotonic() < deadline, "the flood never ran the proxy out of descriptors"
                time.sleep(0.1)
            for sock in flood:
                sock.close()
            deadline = time.monotonic() + 15
            while True:
                with contextlib.suppress(OSError):
                    if _ok(endpoint, http_server.port):
                        break
                assert time.monotonic() < deadline, "the proxy did not come back after the flood"
                time.sleep(0.2)
            assert child.poll() is None
        finally:
            child.communicate("", timeout=30)
    assert child.returncode == 0


def test_records_survive_a_callback_that_raises(policy, resolver, http_server, caplog) -> None:
    def broken(record: object) -> None:
        raise RuntimeError("the audit sink is down")

    with EgressProxy(resolver=resolver, on_record=broken) as proxy:
        endpoint = proxy.open_session("s1", policy)
        assert _ok(endpoint, http_server.port) and _ok(endpoint, http_server.port)
        deadline = time.monotonic() + 5
        while len(proxy.records("s1")) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    assert "the on_record callback failed" in caplog.text


def test_slow_lookups_of_one_session_do_not_hold_up_another(policy, resolver, http_server, recorder) -> None:
    release = threading.Event()

    def slow_for_some(name: str) -> list[str]:
        if name == "slow.test":
            release.wait(10)  # a name server that does not answer
        return resolver(name)

    slow_policy = NetworkPolicy(allow=["slow.test:80"])
    with EgressProxy(resolver=slow_for_some, on_record=recorder, connect_timeout=10) as proxy:
        stuck = proxy.open_session("stuck", slow_policy)
        endpoint = proxy.open_session("s1", policy)
        clients = []
        for _ in range(16):  # the session's every place, each waiting on a lookup
            sock = socket.create_connection(_address(stuck), timeout=5)
            sock.sendall(b"GET http://slow.test/ HTTP/1.1\r\nHost: slow.test\r\n\r\n")
            clients.append(sock)
        try:
            assert _ok(endpoint, http_server.port)
            assert not release.is_set() and all(_silent(sock) for sock in clients)
        finally:
            release.set()
            for sock in clients:
                sock.close()
