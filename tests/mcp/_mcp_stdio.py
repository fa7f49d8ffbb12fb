"""Helpers for MCP over stdio: `genpark-repl mcp` as a real process, driven by the SDK's stdio client
(which stops the process tree when the block exits, also on failure), and reading its replies."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from mcp.client.session import ClientSession
    from mcp_types import CallToolResult

ROOT = Path(__file__).resolve().parents[2]
CLI = ("-m", "genpark_repl_tools.cli")

Scenario = Callable[["ClientSession"], Awaitable[None]]


@contextlib.asynccontextmanager
async def stdio_session(
    tmp_path: Path, *options: str, start: Sequence[str] = CLI, env: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    """An initialized client of `python START mcp OPTIONS`, run in `tmp_path` with `env` added; the
    server's stderr is appended to tmp_path/server-stderr.log."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=[*start, "mcp", *options],
        env={"PYTHONPATH": str(ROOT), **(env or {})},
        cwd=tmp_path,
    )
    with (tmp_path / "server-stderr.log").open("a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


def serve(
    tmp_path: Path,
    scenario: Scenario,
    *options: str,
    bound_s: float,
    start: Sequence[str] = CLI,
    env: dict[str, str] | None = None,
) -> str:
    """Run `scenario` against a spawned server within `bound_s`; returns what this server wrote to stderr."""
    log = tmp_path / "server-stderr.log"
    before = log.stat().st_size if log.exists() else 0

    async def main() -> None:
        with anyio.fail_after(bound_s):
            async with stdio_session(tmp_path, *options, start=start, env=env) as session:
                await scenario(session)

    anyio.run(main)
    with log.open("rb") as handle:
        handle.seek(before)
        return handle.read().decode(errors="backslashreplace")


def text_of(result: CallToolResult) -> str:
    from mcp_types import TextContent

    first = result.content[0]
    assert isinstance(first, TextContent)
    return first.text


def session_of(result: CallToolResult) -> str:
    assert result.structured_content is not None
    sid = result.structured_content["session_id"]
    assert isinstance(sid, str)
    return sid
