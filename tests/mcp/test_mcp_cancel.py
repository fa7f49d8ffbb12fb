"""A cancelled `run_python` stops its code, over stdio and over streamable HTTP.

The client cancels the call (the SDK sends `notifications/cancelled`) once the code has started; the code
would write a marker after a pause, and must not. Proof without timing: a session runs one call at a
time, so the next call in the same session returns only once the cancelled code has ended; if the code
had gone on, the marker would be there by then.
"""

from __future__ import annotations

import ast
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")

from _mcp_http import TOKENS, connect, run_http_server
from _mcp_stdio import stdio_session, text_of
from mcp.client.session import ClientSession

BOUND_S = 90
OPTIONS = ("--policy", "trusted", "--timeout", "60")


async def cancel_and_check(client: ClientSession) -> None:
    # The markers live in the code's working directory: the subprocess boundary confines files to its
    # workspace, which the test (same machine) can read.
    first = await client.call_tool(
        "run_python", {"code": "import pathlib\nkept = 'still here'\nstr(pathlib.Path.cwd())"}
    )
    assert first.structured_content is not None
    sid = first.structured_content["session_id"]
    workspace = Path(ast.literal_eval(first.structured_content["result"]["value"]))
    started, done = workspace / "started", workspace / "done"
    code = (
        "import pathlib, time\npathlib.Path('started').touch()\ntime.sleep(8)\npathlib.Path('done').touch()\n"
    )
    async with anyio.create_task_group() as group:
        group.start_soon(client.call_tool, "run_python", {"code": code, "session_id": sid})
        while not started.exists():
            await anyio.sleep(0.02)
        group.cancel_scope.cancel()  # the SDK client sends notifications/cancelled for the call

    after = await client.call_tool("run_python", {"code": "kept", "session_id": sid})
    assert not done.exists(), "the cancelled code ran on"
    assert "Out: 'still here'" in text_of(after), text_of(after)
    assert after.structured_content is not None
    assert after.structured_content["result"]["session_restarted"] is False


@pytest.mark.parametrize("boundary", ["inprocess", "subprocess"])
def test_cancelling_a_call_stops_its_code_over_stdio(tmp_path: Path, boundary: str) -> None:
    async def main() -> None:
        with anyio.fail_after(BOUND_S):
            async with stdio_session(tmp_path, *OPTIONS, "--boundary", boundary) as client:
                await cancel_and_check(client)

    anyio.run(main)


@pytest.mark.parametrize("boundary", ["inprocess", "subprocess"])
def test_cancelling_a_call_stops_its_code_over_http(tmp_path: Path, boundary: str) -> None:
    with run_http_server(tmp_path, *OPTIONS, "--boundary", boundary) as server:

        async def main() -> None:
            with anyio.fail_after(BOUND_S):
                async with connect(server.url, TOKENS["alice"]) as client:
                    await cancel_and_check(client)

        anyio.run(main)
