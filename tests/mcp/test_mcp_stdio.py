"""`genpark-repl mcp` as a real process, driven by the SDK's stdio client.

Each test spawns `python -m genpark_repl_tools.cli mcp` and is bounded by `fail_after`; the SDK's
client stops the process tree when the block exits, also on failure.
"""

from __future__ import annotations

import base64
from pathlib import Path

import _mcp_stdio
import anyio
import pytest
from _mcp_stdio import Scenario, session_of, text_of
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, ImageContent

# Startup imports the SDK (seconds on a loaded machine); the calls themselves are fast.
BOUND_S = 90


def serve(tmp_path: Path, scenario: Scenario, *options: str) -> str:
    """Run `scenario` against a spawned server (trusted policy); returns what it wrote to stderr."""
    return _mcp_stdio.serve(tmp_path, scenario, "--policy", "trusted", *options, bound_s=BOUND_S)


FIGURE = """\
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(4, 3))
ax.plot([1, 4, 9])
ax.set_title("squares")
plt.show()
"""


async def check_figure(client: ClientSession) -> None:
    """A matplotlib figure comes back as an image block, described in the structured output."""
    result = await client.call_tool("run_python", {"code": FIGURE})
    assert result.is_error is False, text_of(result)
    images = [block for block in result.content if isinstance(block, ImageContent)]
    assert len(images) == 1, text_of(result)
    assert images[0].mime_type == "image/png"
    assert base64.b64decode(images[0].data).startswith(b"\x89PNG\r\n\x1a\n")
    assert result.structured_content is not None
    [info] = result.structured_content["images"]
    assert (info["content_index"], info["width"], info["height"]) == (1, 400, 300)
    assert "squares" in info["description"]
    assert "Attached image/png 400x300" in text_of(result)


@pytest.mark.parametrize("boundary", ["inprocess", "subprocess"])
def test_tools_state_figures_and_crashes(tmp_path: Path, boundary: str) -> None:
    async def scenario(client: ClientSession) -> None:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert tools == {
            "run_python",
            "list_variables",
            "inspect_variable",
            "reset_session",
            "list_files",
            "upload_file",
        }

        # ClientSession validates structured content against each tool's output schema on its own.
        first = await client.call_tool("run_python", {"code": "def double(n):\n    return 2 * n\nbase = 21"})
        assert first.is_error is False
        sid = session_of(first)
        second = await client.call_tool("run_python", {"code": "double(base)", "session_id": sid})
        assert session_of(second) == sid
        assert "Out: 42" in text_of(second)
        assert second.structured_content is not None
        assert second.structured_content["result"]["execution_count"] == 2

        listing = text_of(await client.call_tool("list_variables", {"session_id": sid}))
        assert listing.splitlines() == ["Variables (2):", "double: def double(n)", "base: int = 21"]

        await check_figure(client)

        if boundary == "subprocess":
            # A crash is a result too; the worker's checkpoint brings the session back as it was before
            # the cell, and the reply says so.
            code = "import os\nos._exit(1)"
            crash = await client.call_tool("run_python", {"code": code, "session_id": sid})
            assert crash.structured_content is not None
            assert crash.structured_content["result"]["status"] == "crashed"
            assert crash.structured_content["result"]["rolled_back"] is True
            assert "Rolled back" in text_of(crash)
            after = await client.call_tool("run_python", {"code": "'base' in dir()", "session_id": sid})
            assert "Out: True" in text_of(after)
            assert after.structured_content is not None
            assert after.structured_content["result"]["session_restarted"] is False

    stderr = serve(tmp_path, scenario, "--boundary", boundary)
    assert "Traceback" not in stderr


# The slow call waits for a file that only the fast call creates: if the server ran calls one at a
# time, the slow one would reach its time limit instead of answering.
SLOW = (
    "import os, time\nopen('slow-started', 'w').close()\n"
    "while not os.path.exists('fast-done'):\n    time.sleep(0.01)\nsecret"
)
FAST = "open('fast-done', 'w').close()\n'bob'"


async def wait_for_file(path: Path) -> None:
    with anyio.fail_after(BOUND_S):
        while not path.exists():
            await anyio.sleep(0.01)


def test_sessions_are_isolated_and_independent(tmp_path: Path) -> None:
    finished: list[str] = []

    async def scenario(client: ClientSession) -> None:
        alice = session_of(await client.call_tool("run_python", {"code": "secret = 'alice'"}))
        bob = await client.call_tool("run_python", {"code": "secret"})
        assert session_of(bob) != alice
        assert text_of(bob).startswith("Error: NameError: name 'secret' is not defined")

        # A slow call in one session does not hold up another session's call.
        async def slow() -> None:
            result = await client.call_tool("run_python", {"code": SLOW, "session_id": alice})
            assert "Out: 'alice'" in text_of(result)
            finished.append("slow")

        async def fast() -> None:
            await wait_for_file(tmp_path / "slow-started")
            result = await client.call_tool("run_python", {"code": FAST, "session_id": session_of(bob)})
            assert "Out: 'bob'" in text_of(result)
            finished.append("fast")

        async with anyio.create_task_group() as group:
            group.start_soon(slow)
            group.start_soon(fast)

    # In-process: the two sessions share the server's working directory, which the handshake files use
    # (`mcp` defaults to the subprocess boundary, where each session has its own workspace).
    serve(tmp_path, scenario, "--timeout", "20", "--boundary", "inprocess")
    # The slow call answered (not a timeout) only because the fast one ran meanwhile; which reply
    # is read first after that is a race, so only that both came back is asserted.
    assert sorted(finished) == ["fast", "slow"]


@pytest.mark.parametrize("boundary", ["inprocess", "subprocess"])
def test_a_megabyte_of_output_is_a_well_formed_bounded_reply(tmp_path: Path, boundary: str) -> None:
    async def scenario(client: ClientSession) -> None:
        code = "import sys\nprint('x' * 1_000_000)\nfor i in range(20_000):\n    print(i)\n'done'"
        result = await client.call_tool("run_python", {"code": code})
        assert result.is_error is False
        text = text_of(result)
        assert text.startswith("OK\nstdout:\nxxxx")
        assert "characters omitted" in text
        assert "Out: 'done'" in text
        assert len(text) <= 12_000 + 200  # Limits.max_observation_chars, plus the session line
        assert result.structured_content is not None
        telemetry = result.structured_content["result"]
        assert telemetry["stdout_truncated"] is True
        assert telemetry["stdout"].endswith("19998\n19999\n")
        assert len(telemetry["stdout"]) <= 20_200  # Limits.max_output_chars, plus the omission marker
        # The server is still there and answers the next call on the same session.
        after = await client.call_tool("run_python", {"code": "6 * 7", "session_id": session_of(result)})
        assert "Out: 42" in text_of(after)

    stderr = serve(tmp_path, scenario, "--boundary", boundary)
    assert "Traceback" not in stderr


def test_bad_input_is_answered_and_the_server_keeps_serving(tmp_path: Path) -> None:
    async def scenario(client: ClientSession) -> None:
        with pytest.raises(MCPError) as caught:
            await client.call_tool("no_such_tool", {})
        assert caught.value.code == INVALID_PARAMS
        assert "Unknown tool 'no_such_tool'" in caught.value.message

        refusals = {
            "missing code": await client.call_tool("run_python", {}),
            "wrong type": await client.call_tool("run_python", {"code": ["print(1)"]}),
            "huge code": await client.call_tool("run_python", {"code": "1\n" * 5_000}),
            "unknown session": await client.call_tool("list_variables", {"session_id": "s-gone"}),
            "unknown argument": await client.call_tool("run_python", {"code": "1", "timeout": 5}),
        }
        for label, result in refusals.items():
            assert result.is_error is True, label
        assert "code: Field required" in text_of(refusals["missing code"])
        assert "code: Input should be a valid string" in text_of(refusals["wrong type"])
        assert "code has 10,000 characters; the limit is 1,000" in text_of(refusals["huge code"])
        assert "unknown session_id 's-gone'" in text_of(refusals["unknown session"])
        assert "unknown argument(s) 'timeout'" in text_of(refusals["unknown argument"])

        # Code that misbehaves is a result, and the server still answers afterwards.
        stopped = await client.call_tool("run_python", {"code": "while True:\n    pass"})
        assert stopped.structured_content is not None
        assert stopped.structured_content["result"]["status"] == "timeout"
        alive = await client.call_tool("run_python", {"code": "import sys\nprint('still here')"})
        assert "still here" in text_of(alive)

    stderr = serve(tmp_path, scenario, "--max-code-chars", "1000", "--timeout", "1")
    assert "Traceback" not in stderr
