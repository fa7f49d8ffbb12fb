"""`genpark-repl mcp --transport http` as a real process on a free loopback port, driven by the SDK's
streamable HTTP client.

One server per module (conftest `http_server`: at most 1 call running and 3 sessions per client, 64 KiB
bodies); each test is its own client (token), so sessions and limits do not leak between tests. Every
scenario is bounded by `fail_after`.
"""

from __future__ import annotations

import base64
import importlib.util
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")

import httpx
from _mcp_http import TOKENS, HttpServer, connect, raised, run_http_server
from _mcp_stdio import session_of, text_of
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ImageContent

BOUND_S = 60


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        with anyio.fail_after(BOUND_S):
            await scenario()

    anyio.run(bounded)


async def wait_for(path: Path) -> None:
    """Poll for a file the server's code writes (bounded by the scenario's fail_after)."""
    while not path.exists():
        await anyio.sleep(0.02)


def initialize_body() -> bytes:
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        }
    ).encode()


def post(url: str, body: bytes, token: str | None = None) -> httpx.Response:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.post(url, content=body, headers=headers, timeout=30)


# ---- state and isolation -------------------------------------------------------------------------


def test_state_is_kept_per_handle_and_handles_are_isolated(http_server: HttpServer) -> None:
    async def scenario() -> None:
        async with connect(http_server.url, TOKENS["alice"]) as client:
            first = await client.call_tool(
                "run_python", {"code": "def double(n):\n    return 2 * n\nbase = 21"}
            )
            assert first.is_error is False, text_of(first)
            one = session_of(first)
            other = await client.call_tool("run_python", {"code": "base = 'other'"})
            two = session_of(other)
            assert two != one

            again = await client.call_tool("run_python", {"code": "double(base)", "session_id": one})
            assert "Out: 42" in text_of(again)
            assert again.structured_content is not None
            result = again.structured_content["result"]
            assert (result["execution_count"], result["session"]) == (2, one)
            assert "Out: 'other'" in text_of(
                await client.call_tool("run_python", {"code": "base", "session_id": two})
            )

            listing = text_of(await client.call_tool("list_variables", {"session_id": one}))
            assert listing.splitlines() == ["Variables (2):", "double: def double(n)", "base: int = 21"]
            inspected = await client.call_tool("inspect_variable", {"name": "base", "session_id": two})
            assert inspected.structured_content is not None
            assert inspected.structured_content["variable"]["repr"] == "'other'"

            reset = await client.call_tool("reset_session", {"session_id": two})
            assert reset.is_error is False
            gone = await client.call_tool("run_python", {"code": "base", "session_id": two})
            assert "NameError" in text_of(gone)
            kept = await client.call_tool("run_python", {"code": "base", "session_id": one})
            assert "Out: 21" in text_of(kept)

        # A handle is the client's, not the connection's: a new connection with the same token uses it.
        async with connect(http_server.url, TOKENS["alice"]) as client:
            later = await client.call_tool("run_python", {"code": "double(base)", "session_id": one})
            assert "Out: 42" in text_of(later)

    run(scenario)


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib is not installed")
def test_figures_come_back_as_image_blocks(http_server: HttpServer) -> None:
    code = (
        "import matplotlib.pyplot as plt\nfig, ax = plt.subplots(figsize=(4, 3))\nax.plot([1, 4, 9])\n"
        "ax.set_title('squares')\nplt.show()"
    )

    async def scenario() -> None:
        async with connect(http_server.url, TOKENS["bob"]) as client:
            result = await client.call_tool("run_python", {"code": code})
            assert result.is_error is False, text_of(result)
            images = [block for block in result.content if isinstance(block, ImageContent)]
            assert len(images) == 1
            assert images[0].mime_type == "image/png"
            assert base64.b64decode(images[0].data).startswith(b"\x89PNG\r\n\x1a\n")
            assert result.structured_content is not None
            [info] = result.structured_content["images"]
            assert (info["content_index"], info["width"], info["height"]) == (1, 400, 300)
            assert "squares" in info["description"]

    run(scenario)


# ---- authentication ------------------------------------------------------------------------------


@pytest.mark.parametrize("token", [None, "wrong-token-0123456789abcdef", TOKENS["alice"] + "x"])
def test_a_missing_or_wrong_token_is_refused_with_401(http_server: HttpServer, token: str | None) -> None:
    response = post(http_server.url, initialize_body(), token)
    assert response.status_code == 401
    challenge = response.headers["WWW-Authenticate"]
    assert challenge.startswith("Bearer ")
    assert 'error="invalid_token"' in challenge
    # How to pass one, in the challenge and the body: the server has fixed tokens, not OAuth.
    assert "Authorization: Bearer TOKEN" in challenge
    assert response.json()["error"] == "invalid_token"
    assert "Authorization: Bearer TOKEN" in response.json()["error_description"]
    assert "mcp-session-id" not in response.headers

    async def scenario() -> None:
        with pytest.raises(BaseException) as refused:  # noqa: PT011  # an MCPError, maybe in a group
            async with connect(http_server.url, token):
                pass
        assert raised(refused.value, MCPError), refused.value

    run(scenario)


def test_the_right_token_is_accepted_at_the_http_level(http_server: HttpServer) -> None:
    # The counterpart of the refusals above: the same request with a valid token opens a session.
    response = post(http_server.url, initialize_body(), TOKENS["alice"])
    assert response.status_code == 200, response.text
    assert response.headers["mcp-session-id"]


def test_a_handle_of_one_token_is_refused_for_another(http_server: HttpServer) -> None:
    async def scenario() -> None:
        async with connect(http_server.url, TOKENS["carol"]) as carol:
            sid = session_of(await carol.call_tool("run_python", {"code": "secret = 'carol'"}))
            async with connect(http_server.url, TOKENS["dave"]) as dave:
                for tool, arguments in [
                    ("run_python", {"code": "secret", "session_id": sid}),
                    ("list_variables", {"session_id": sid}),
                    ("inspect_variable", {"name": "secret", "session_id": sid}),
                    ("reset_session", {"session_id": sid}),
                    # The engine's own name for carol's session is no way in either.
                    ("list_variables", {"session_id": f"carol/{sid}"}),
                ]:
                    refused = await dave.call_tool(tool, arguments)
                    assert refused.is_error is True
                    assert text_of(refused).startswith(f"{tool}: unknown session_id "), text_of(refused)
                    assert "carol'" not in text_of(refused).replace(f"carol/{sid}", "")
                # dave's own sessions do not see carol's variables either.
                own = await dave.call_tool("run_python", {"code": "secret"})
                assert "NameError" in text_of(own)
            # Nothing dave tried reached carol's session.
            kept = await carol.call_tool("run_python", {"code": "secret", "session_id": sid})
            assert "Out: 'carol'" in text_of(kept)
            assert kept.structured_content is not None
            assert kept.structured_content["result"]["execution_count"] == 2

    run(scenario)


def test_a_connection_of_one_token_is_refused_for_another(http_server: HttpServer) -> None:
    # The transport's own session (Mcp-Session-Id) is bound to its token by the SDK.
    opened = post(http_server.url, initialize_body(), TOKENS["alice"])
    transport_session = opened.headers["mcp-session-id"]
    ping = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"}).encode()
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Mcp-Session-Id": transport_session,
        "Mcp-Protocol-Version": "2025-06-18",
    }
    stolen = httpx.post(
        http_server.url, content=ping, headers={**headers, "Authorization": f"Bearer {TOKENS['bob']}"}
    )
    assert stolen.status_code == 404
    owned = httpx.post(
        http_server.url, content=ping, headers={**headers, "Authorization": f"Bearer {TOKENS['alice']}"}
    )
    assert owned.status_code == 200


# ---- per-client limits ---------------------------------------------------------------------------


def test_concurrent_calls_per_client_are_limited(http_server: HttpServer, tmp_path: Path) -> None:
    started, release = tmp_path / "started", tmp_path / "release"
    # Waits for the test's signal, bounded so a failing test cannot leave it running.
    blocker = (
        "import pathlib, time\n"
        f"pathlib.Path({str(started)!r}).touch()\n"
        "deadline = time.monotonic() + 30\n"
        f"while not pathlib.Path({str(release)!r}).exists() and time.monotonic() < deadline:\n"
        "    time.sleep(0.02)\n"
        "'released'"
    )

    async def scenario() -> None:
        async with (
            connect(http_server.url, TOKENS["erin"]) as erin,
            connect(http_server.url, TOKENS["frank"]) as frank,
        ):
            results: list[CallToolResult] = []

            async def first() -> None:
                results.append(await erin.call_tool("run_python", {"code": blocker}))

            async with anyio.create_task_group() as group:
                group.start_soon(first)
                await wait_for(started)
                refused = await erin.call_tool("run_python", {"code": "1 + 1"})
                assert refused.is_error is True
                assert text_of(refused) == (
                    "run_python: this client already has 1 calls running, the server's limit per client; "
                    "wait for one to finish, then call again."
                )
                # The limit is per client: another token is served meanwhile.
                other = await frank.call_tool("run_python", {"code": "1 + 1"})
                assert "Out: 2" in text_of(other)
                release.touch()
            assert "Out: 'released'" in text_of(results[0])
            # The slot is free again.
            assert "Out: 2" in text_of(await erin.call_tool("run_python", {"code": "1 + 1"}))

    run(scenario)


def test_sessions_per_client_are_limited(http_server: HttpServer) -> None:
    async def scenario() -> None:
        async with connect(http_server.url, TOKENS["grace"]) as grace:
            live = [session_of(await grace.call_tool("run_python", {"code": "n = 1"})) for _ in range(3)]
            assert len(set(live)) == 3
            result = await grace.call_tool("run_python", {"code": "n = 1"})
            assert result.is_error is True
            assert text_of(result).startswith(
                "run_python: this client already has 3 sessions, the server's limit per client: "
                "pass the session_id of one of them"
            ), text_of(result)
            # Existing sessions keep working, and other clients are not affected.
            assert "Out: 1" in text_of(
                await grace.call_tool("run_python", {"code": "n", "session_id": live[0]})
            )
            async with connect(http_server.url, TOKENS["bob"]) as bob:
                assert (await bob.call_tool("run_python", {"code": "n = 2"})).is_error is False

    run(scenario)


def test_request_bodies_over_the_limit_are_refused(http_server: HttpServer) -> None:
    big = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x" * 70_000}}).encode()
    response = post(http_server.url, big, TOKENS["alice"])
    assert response.status_code == 413
    assert response.text == "Request body too large"

    async def scenario() -> None:
        async with connect(http_server.url, TOKENS["alice"]) as client:
            with pytest.raises(MCPError):
                await client.call_tool("run_python", {"code": "x = '" + "y" * 70_000 + "'"})
            # The connection survives the refusal; a call under the limit works.
            assert "Out: 3" in text_of(await client.call_tool("run_python", {"code": "1 + 2"}))

    run(scenario)


# ---- robustness ----------------------------------------------------------------------------------


def test_the_server_keeps_serving_after_a_client_disconnects_mid_call(
    http_server: HttpServer, tmp_path: Path
) -> None:
    # A dropped connection is not a cancellation (the spec lets a client resume the stream), so the
    # abandoned call runs on, bounded by its time limit, holding its client's call slot meanwhile.
    started, release = tmp_path / "started", tmp_path / "release"
    code = (
        "import pathlib, time\n"
        f"pathlib.Path({str(started)!r}).touch()\n"
        "deadline = time.monotonic() + 30\n"
        f"while not pathlib.Path({str(release)!r}).exists() and time.monotonic() < deadline:\n"
        "    time.sleep(0.02)\n"
    )

    async def scenario() -> None:
        with anyio.CancelScope() as scope:
            async with (
                connect(http_server.url, TOKENS["heidi"]) as client,
                anyio.create_task_group() as group,
            ):
                group.start_soon(client.call_tool, "run_python", {"code": code})
                await wait_for(started)
                scope.cancel()  # drop the connection while the call runs
        async with connect(http_server.url, TOKENS["carol"]) as other:
            assert "Out: 2" in text_of(await other.call_tool("run_python", {"code": "1 + 1"}))
        release.touch()
        async with connect(http_server.url, TOKENS["heidi"]) as client:
            while True:  # until the abandoned call has ended (bounded by fail_after)
                result = await client.call_tool("run_python", {"code": "1 + 1"})
                if not result.is_error:
                    break
                assert "calls running" in text_of(result)
                await anyio.sleep(0.05)
            assert "Out: 2" in text_of(result)

    run(scenario)
    assert http_server.process.poll() is None
    assert "Traceback" not in "".join(http_server.stderr)


def test_concurrent_new_sessions_respect_the_limit(tmp_path: Path) -> None:
    # Six overlapping first calls, two sessions allowed. (The window in which two checks could both
    # pass is a thread hop wide; this shows the limit holds under concurrency, it cannot force that race.)
    release = tmp_path / "release"
    calls = 6

    def blocker(index: int) -> str:
        return (
            "import pathlib, time\n"
            f"pathlib.Path({str(tmp_path / f'started-{index}')!r}).touch()\n"
            "deadline = time.monotonic() + 30\n"
            f"while not pathlib.Path({str(release)!r}).exists() and time.monotonic() < deadline:\n"
            "    time.sleep(0.02)\n"
        )

    options = ("--policy", "trusted", "--boundary", "inprocess", "--max-calls-per-client", "8")
    with run_http_server(tmp_path, *options, "--max-sessions-per-client", "2") as server:

        async def scenario() -> None:
            refused: list[str] = []
            accepted: list[CallToolResult] = []

            async def call(index: int) -> None:
                result = await client.call_tool("run_python", {"code": blocker(index)})
                if result.is_error:
                    refused.append(text_of(result))
                else:
                    accepted.append(result)

            async with connect(server.url, TOKENS["alice"]) as client, anyio.create_task_group() as group:
                for index in range(calls):
                    group.start_soon(call, index)
                # Every call has either started its code or been refused: all of them overlapped.
                while len(refused) + len(list(tmp_path.glob("started-*"))) < calls:
                    await anyio.sleep(0.02)
                release.touch()
            assert len(accepted) == 2, refused
            assert len(refused) == calls - 2
            assert all("already has 2 sessions, the server's limit per client" in text for text in refused)

        run(scenario)
