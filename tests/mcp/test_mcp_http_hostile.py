"""The HTTP server against clients that do not play along: requests sent slowly, floods of
connections, the server's open-file limit, and a client that wakes hibernated sessions to hold more
than its share. The server is the real one (`serve_http` in its own process on loopback); the flood
is plain sockets, bounded in count and time. An authenticated client is answered throughout."""

from __future__ import annotations

import contextlib
import os
import re
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anyio

from genpark_repl_tools import ReplEngine
from genpark_repl_tools.mcp_server import _CLIENT, _ReplTools
from genpark_repl_tools.stores import open_store

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "alice-token-0123456789abcdef"
START_S = 60
SERVER = """
import resource, sys
from genpark_repl_tools import ReplEngine
from genpark_repl_tools.mcp_server import HttpLimits, serve_http
if {files}:
    resource.setrlimit(resource.RLIMIT_NOFILE, ({files}, {files}))
limits = HttpLimits(header_timeout_s=1.0, connections_per_peer={per_peer})
with ReplEngine() as engine:
    serve_http(engine, port=0, tokens={{{token!r}: "alice"}}, limits=limits)
"""


@contextlib.contextmanager
def server(*, files: int = 0, per_peer: int = 8) -> Iterator[tuple[int, subprocess.Popen[str]]]:
    code = SERVER.format(files=files, per_peer=per_peer, token=TOKEN)
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    drain = None
    try:
        assert process.stderr is not None
        deadline = time.monotonic() + START_S
        port = None
        while port is None and time.monotonic() < deadline:
            line = process.stderr.readline()
            if not line:
                break
            found = re.search(r"http://127\.0\.0\.1:(\d+)/mcp", line)
            port = int(found.group(1)) if found else None
        assert port is not None, "the server did not start"
        # Drained, so the server never blocks writing to a full pipe.
        drain = threading.Thread(target=process.stderr.read, daemon=True)
        drain.start()
        yield port, process
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if drain is not None:
            drain.join(10)  # at the end of the stream, now the process is gone
        if process.stderr is not None:
            process.stderr.close()


def initialize(port: int) -> bytes:
    """An authenticated client's first request; its status line."""
    body = (
        b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26",'
        b'"capabilities":{},"clientInfo":{"name":"probe","version":"1"}}}'
    )
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(head.encode() + body)
        return sock.recv(64).split(b"\r\n", 1)[0]


def slow_client(port: int, source: str) -> socket.socket:
    """A connection that starts a request without a token and never finishes its headers."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    return sock


def closed_by_server(sock: socket.socket, within_s: float) -> bool:
    sock.settimeout(within_s)
    try:
        return sock.recv(64) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_slow_clients_are_capped_timed_out_and_do_not_starve_others() -> None:
    with server(per_peer=8) as (port, process):
        flood = [slow_client(port, "127.0.0.2") for _ in range(30)]
        try:
            time.sleep(0.3)
            closed = select.select(flood, [], [], 0)[0]  # readable: end of stream or reset
            held = [s for s in flood if s not in closed]
            assert len(held) == 8  # the rest of that address's connections were closed at once
            assert all(closed_by_server(s, 0.1) for s in closed)
            assert initialize(port) == b"HTTP/1.1 200 OK"  # another address is answered during
            started = time.monotonic()
            assert all(closed_by_server(s, 5) for s in held)  # headers not in after 1 s: closed
            assert time.monotonic() - started < 3
            assert initialize(port) == b"HTTP/1.1 200 OK"
            assert process.poll() is None
        finally:
            for sock in flood:
                sock.close()


def test_the_server_keeps_serving_at_its_open_file_limit() -> None:
    # 64 descriptors: more connections than that, from many addresses, reach past the limit.
    with server(files=64, per_peer=16) as (port, process):
        flood: list[socket.socket] = []
        try:
            for i in range(160):
                with contextlib.suppress(OSError):
                    flood.append(slow_client(port, f"127.0.0.{2 + i % 10}"))
            time.sleep(0.5)
            assert process.poll() is None
        finally:
            for sock in flood:
                sock.close()
        deadline = time.monotonic() + 10
        status = b""
        while status != b"HTTP/1.1 200 OK" and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                status = initialize(port)  # accepting resumes within a second of the limit
            time.sleep(0.2)
        assert status == b"HTTP/1.1 200 OK" and process.poll() is None


def test_hibernated_sessions_count_toward_the_client_limit(tmp_path: Path) -> None:
    key = "hostile-mcp-key-0123456789abcdef"
    spec = f"sqlite:{tmp_path / 'sessions.db'}"

    async def run(tools: _ReplTools, session: str | None) -> tuple[bool, str]:
        token = _CLIENT.set("alice/")
        try:
            result = await tools.run_python("x = 1", session)
        except Exception as exc:  # the SDK's ToolError: the refusal
            return False, str(exc)
        finally:
            _CLIENT.reset(token)
        assert result.structured_content is not None
        return True, str(result.structured_content["session_id"])

    handles: list[str] = []
    with ReplEngine(
        boundary="inprocess", policy="standard", store=open_store(spec), snapshot_key=key
    ) as engine:
        tools = _ReplTools(engine, max_sessions_per_client=2)
        for _ in range(2):
            ok, handle = anyio.run(run, tools, None)
            assert ok
            handles.append(handle)
    # The sessions sleep in the store (a restart, or hibernation); a new server holds none live.
    with ReplEngine(
        boundary="inprocess", policy="standard", store=open_store(spec), snapshot_key=key
    ) as engine:
        tools = _ReplTools(engine, max_sessions_per_client=2)
        ok, message = anyio.run(run, tools, None)
        assert not ok and "already has 2 sessions" in message
        assert anyio.run(run, tools, handles[0]) == (True, handles[0])  # its own wake up
        assert anyio.run(run, tools, handles[1]) == (True, handles[1])
        assert not anyio.run(run, tools, None)[0]
