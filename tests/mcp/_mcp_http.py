"""Helpers for MCP over streamable HTTP: `genpark-repl mcp --transport http` as a real process on a free
loopback port, and the SDK's streamable HTTP client connected to it with a bearer token."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from mcp.client.session import ClientSession

ROOT = Path(__file__).resolve().parents[2]
# Startup imports the SDK and uvicorn (seconds on a loaded machine).
START_S = 60
# Tokens of the test clients; each test uses its own client, so limits and sessions do not leak.
TOKENS = {
    "alice": "alice-token-0123456789abcdef",
    "bob": "bob-token-0123456789abcdef",
    "carol": "carol-token-0123456789abcdef",
    "dave": "dave-token-0123456789abcdef",
    "erin": "erin-token-0123456789abcdef",
    "frank": "frank-token-0123456789abcdef",
    "grace": "grace-token-0123456789abcdef",
    "heidi": "heidi-token-0123456789abcdef",
}


@dataclass
class HttpServer:
    url: str
    process: subprocess.Popen[str]
    stderr: list[str] = field(default_factory=list)


def _read_stderr(process: subprocess.Popen[str], lines: list[str], ready: threading.Event) -> None:
    assert process.stderr is not None
    for line in process.stderr:  # keeps draining, so the server never blocks on a full pipe
        lines.append(line)
        if "MCP over HTTP at " in line:
            ready.set()
    ready.set()  # the server ended without listening


@contextlib.contextmanager
def run_http_server(tmp_path: Path, *options: str, env: dict[str, str] | None = None) -> Iterator[HttpServer]:
    """`genpark-repl mcp --transport http --port 0 ...` with TOKENS in a token file; stopped afterwards."""
    token_file = tmp_path / "tokens.txt"
    token_file.write_text("".join(f"{name} {token}\n" for name, token in TOKENS.items()))
    command = [
        sys.executable,
        "-m",
        "genpark_repl_tools.cli",
        "mcp",
        "--transport",
        "http",
        "--port",
        "0",
        "--token-file",
        str(token_file),
        *options,
    ]
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", **(env or {})},
    )
    lines: list[str] = []
    ready = threading.Event()
    reader = threading.Thread(target=_read_stderr, args=(process, lines, ready), daemon=True)
    reader.start()
    try:
        if not ready.wait(START_S) or process.poll() is not None:
            pytest.fail(f"the HTTP server did not start:\n{''.join(lines)}")
        [address] = [line for line in lines if "MCP over HTTP at " in line]
        yield HttpServer(url=address.split(" at ", 1)[1].strip(), process=process, stderr=lines)
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(15)
        reader.join(15)
        assert process.stderr is not None
        process.stderr.close()


def raised(error: BaseException, kind: type[BaseException]) -> bool:
    """Whether `error` is a `kind`, or a group (the SDK's task groups) holding one."""
    if isinstance(error, kind):
        return True
    return any(raised(inner, kind) for inner in getattr(error, "exceptions", ()))


@contextlib.asynccontextmanager
async def connect(url: str, token: str | None) -> AsyncIterator[ClientSession]:
    """A ClientSession over the SDK's streamable HTTP client, initialized, with `token` as bearer."""
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers = {"Authorization": f"Bearer {token}"} if token is not None else None
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session
