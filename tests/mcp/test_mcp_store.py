"""`genpark-repl mcp --store`: session handles survive a restart of the real server process."""

from __future__ import annotations

from pathlib import Path

import _mcp_stdio
import pytest
from _mcp_stdio import Scenario, session_of, text_of
from mcp.client.session import ClientSession
from test_mcp_stdio import BOUND_S

KEY = "mcp-store-tests-key-0123456789abcdef"

pytestmark = pytest.mark.slow


def serve(tmp_path: Path, scenario: Scenario, *options: str) -> None:
    env = {"GENPARK_REPL_SNAPSHOT_KEY": KEY}
    _mcp_stdio.serve(tmp_path, scenario, "--policy", "standard", *options, bound_s=BOUND_S, env=env)


@pytest.mark.parametrize("boundary", ["inprocess", "subprocess"])
def test_a_session_handle_survives_a_server_restart(tmp_path: Path, boundary: str) -> None:
    store = f"sqlite:{tmp_path / 'sessions.db'}"
    handle: list[str] = []

    async def first(client: ClientSession) -> None:
        result = await client.call_tool("run_python", {"code": "def f(v):\n    return v * 2\nn = 21"})
        assert result.is_error is False, text_of(result)
        handle.append(session_of(result))

    async def second(client: ClientSession) -> None:
        listed = await client.call_tool("list_variables", {"session_id": handle[0]})
        assert listed.is_error is False, text_of(listed)
        assert "n" in text_of(listed) and "f" in text_of(listed)
        result = await client.call_tool("run_python", {"code": "f(n)", "session_id": handle[0]})
        assert result.is_error is False, text_of(result)
        assert "42" in text_of(result)
        assert "restarted" not in text_of(result)
        missing = await client.call_tool("list_variables", {"session_id": "s-000000000000"})
        assert missing.is_error is True and "unknown session_id" in text_of(missing)

    serve(tmp_path, first, "--boundary", boundary, "--store", store)
    serve(tmp_path, second, "--boundary", boundary, "--store", store)


def test_without_a_store_the_handle_is_unknown_after_a_restart(tmp_path: Path) -> None:
    handle: list[str] = []

    async def first(client: ClientSession) -> None:
        handle.append(session_of(await client.call_tool("run_python", {"code": "n = 1"})))

    async def second(client: ClientSession) -> None:
        result = await client.call_tool("run_python", {"code": "n", "session_id": handle[0]})
        assert result.is_error is True and "unknown session_id" in text_of(result)

    serve(tmp_path, first, "--boundary", "inprocess")
    serve(tmp_path, second, "--boundary", "inprocess")
