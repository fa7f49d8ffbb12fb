"""run_python's output reaches an MCP client while the code runs, as progress notifications.

In-process (the SDK's in-memory client) and over a real stdio pipe with the subprocess boundary.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")

from _mcp_stdio import stdio_session
from mcp import Client

from genpark_repl_tools import Limits, ReplEngine
from genpark_repl_tools.mcp_server import create_server

TICKS = "import time\nfor i in range(3):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.2)\n'done'"
BOUND_S = 60


class Progress:
    """What the client saw: (seconds since the call, progress, message), in order."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.seen: list[tuple[float, float, str | None]] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((time.monotonic() - self.started, progress, message))


def check(progress: Progress, took_s: float, reply_text: str) -> None:
    messages = "".join(message or "" for _, _, message in progress.seen)
    assert messages == "tick 0\ntick 1\ntick 2\n", progress.seen
    values = [value for _, value, _ in progress.seen]
    assert values == sorted(values) and len(set(values)) == len(values)  # progress only increases
    assert progress.seen[0][0] < took_s, "the first chunk came only with the reply"
    assert "Out: 'done'" in reply_text


def test_progress_in_process() -> None:
    engine = ReplEngine(boundary="inprocess", policy="trusted", limits=Limits(timeout_s=30))

    async def main() -> None:
        with anyio.fail_after(BOUND_S):
            async with Client(create_server(engine)) as client:
                progress = Progress()
                result = await client.call_tool("run_python", {"code": TICKS}, progress_callback=progress)
                took = time.monotonic() - progress.started
                check(progress, took, result.content[0].text)  # type: ignore[union-attr]
                # A client that asks for no progress gets the same reply.
                plain = await client.call_tool("run_python", {"code": TICKS})
                assert plain.structured_content is not None and result.structured_content is not None
                assert plain.structured_content["result"]["stdout"] == "tick 0\ntick 1\ntick 2\n"

    try:
        anyio.run(main)
    finally:
        engine.close()


def test_progress_over_stdio_with_the_subprocess_boundary(tmp_path: Path) -> None:
    async def main() -> None:
        with anyio.fail_after(BOUND_S):
            async with stdio_session(tmp_path, "--policy", "trusted", "--boundary", "subprocess") as s:
                await s.call_tool("run_python", {"code": "1"})  # the worker starts: not part of the check
                progress = Progress()
                result = await s.call_tool("run_python", {"code": TICKS}, progress_callback=progress)
                check(progress, time.monotonic() - progress.started, result.content[0].text)  # type: ignore[union-attr]

    anyio.run(main)
