"""`genpark-repl mcp --fork`: the fork_session tool is opt-in on the command line too."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from genpark_repl_tools import cli

pytest.importorskip("mcp")
anyio = pytest.importorskip("anyio")  # the MCP SDK's own dependency

ROOT = Path(__file__).resolve().parents[2]


async def fork_in_server(tmp_path: Path, *options: str) -> tuple[set[str], tuple[str, str] | None]:
    """The tools a `genpark-repl mcp OPTIONS` process offers, and with fork_session, the value of x in
    a session and in its copy after each changed it."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "genpark_repl_tools.cli",
            "mcp",
            "--policy",
            "trusted",
            "--boundary",
            "inprocess",
            *options,
        ],
        env={"PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
    )
    with anyio.fail_after(60), (tmp_path / "server-stderr.log").open("a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            names = {tool.name for tool in (await client.list_tools()).tools}
            if "fork_session" not in names:
                return names, None
            run = await client.call_tool("run_python", {"code": "x = 1"})
            sid = (run.structured_content or {})["session_id"]
            forked = await client.call_tool("fork_session", {"session_id": sid})
            copy = (forked.structured_content or {})["session_id"]
            await client.call_tool("run_python", {"code": "x = 2", "session_id": copy})

            async def value(session: str) -> str:
                ran = await client.call_tool("run_python", {"code": "x", "session_id": session})
                return str((ran.structured_content or {})["result"]["value"])

            return names, (await value(sid), await value(copy))


def test_fork_is_off_unless_asked_for(tmp_path: Path) -> None:
    assert cli.build_parser().parse_args(["mcp"]).fork is False
    names, _ = anyio.run(fork_in_server, tmp_path)
    assert "run_python" in names and "fork_session" not in names


def test_with_fork_the_model_copies_a_session_and_works_in_either(tmp_path: Path) -> None:
    names, values = anyio.run(fork_in_server, tmp_path, "--fork")
    assert "fork_session" in names
    assert values == ("1", "2")
