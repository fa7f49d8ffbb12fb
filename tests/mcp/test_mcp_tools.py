"""The MCP tools in-process (the SDK's in-memory client): contract, rendering, images, refusals.

The same server over a real stdio pipe is tested in test_mcp_stdio.py.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolResult, ImageContent, TextContent

from genpark_repl_tools import (
    Attachment,
    ExecutionRequest,
    ExecutionResult,
    Limits,
    MockBoundary,
    ReplEngine,
    cli,
)
from genpark_repl_tools.mcp_server import RunOutput, create_server, result_to_mcp

TOOLS = {"run_python", "list_variables", "inspect_variable", "reset_session", "list_files", "upload_file"}
# A real 1x1 PNG, so what a client decodes is an image and not just bytes with a label.
PNG_1X1 = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
        "0000000d49444154789c6360f8cfc0f01f0005000201e2d5c5d80000000049454e44ae426082"
    )
).decode()

Scenario = Callable[[Client], Awaitable[None]]


def serve(engine: ReplEngine, scenario: Scenario) -> None:
    """Run `scenario` against a server on `engine`, bounded in time; closes the engine."""

    async def main() -> None:
        with anyio.fail_after(30):
            async with Client(create_server(engine)) as client:
                await scenario(client)

    try:
        anyio.run(main)
    finally:
        engine.close()


def text_of(result: CallToolResult) -> str:
    first = result.content[0]
    assert isinstance(first, TextContent)
    return first.text


def figure_engine() -> ReplEngine:
    def handler(request: ExecutionRequest) -> ExecutionResult:
        return ExecutionResult(
            status="ok",
            session=request.session,
            execution_count=1,
            stdout="plotted\n",
            attachments=[
                Attachment(data_base64=PNG_1X1, description="line plot", width=1, height=1),
                Attachment(data_base64=PNG_1X1, description="histogram", width=1, height=1),
            ],
        )

    return ReplEngine(boundary=MockBoundary(handler))


# ---- the contract a client sees ----------------------------------------------------------------


def test_tools_are_listed_with_input_and_output_schemas() -> None:
    async def scenario(client: Client) -> None:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(listed) == TOOLS
        run = listed["run_python"]
        assert run.input_schema["required"] == ["code"]
        assert set(run.input_schema["properties"]) == {"code", "session_id"}
        assert run.output_schema is not None
        assert {"session_id", "new_session", "result", "images"} <= set(run.output_schema["properties"])
        # The description tells the model what it runs under, from the engine's own settings.
        assert run.description is not None
        assert "Policy 'trusted'" in run.description
        assert "at most 2.5 s" in run.description
        assert "Pass the session_id from a result" in run.description
        for name in ("list_variables", "inspect_variable", "reset_session"):
            assert "session_id" in listed[name].input_schema["required"]
            assert listed[name].output_schema is not None
        assert listed["list_variables"].annotations is not None
        assert listed["list_variables"].annotations.read_only_hint is True
        assert listed["reset_session"].annotations is not None
        assert listed["reset_session"].annotations.destructive_hint is True

    serve(ReplEngine(boundary="inprocess", policy="trusted", limits=Limits(timeout_s=2.5)), scenario)


def test_structured_output_matches_the_advertised_schema() -> None:
    async def scenario(client: Client) -> None:
        schemas = {tool.name: tool.output_schema for tool in (await client.list_tools()).tools}
        run = await client.call_tool("run_python", {"code": "x = [1, 2, 3]\nsum(x)"})
        sid = run.structured_content["session_id"] if run.structured_content else ""
        calls = {
            "run_python": run,
            "list_variables": await client.call_tool("list_variables", {"session_id": sid}),
            "inspect_variable": await client.call_tool("inspect_variable", {"session_id": sid, "name": "x"}),
            "reset_session": await client.call_tool("reset_session", {"session_id": sid}),
        }
        for name, result in calls.items():
            assert not result.is_error, text_of(result)
            jsonschema.validate(result.structured_content, schemas[name])
        assert calls["inspect_variable"].structured_content is not None
        assert calls["inspect_variable"].structured_content["variable"]["len"] == 3

    serve(ReplEngine(boundary="inprocess", policy="trusted"), scenario)


# ---- running code ------------------------------------------------------------------------------


def test_session_id_is_generated_returned_and_reused() -> None:
    async def scenario(client: Client) -> None:
        first = await client.call_tool("run_python", {"code": "total = 40"})
        data = RunOutput.model_validate(first.structured_content)
        assert data.new_session is True
        assert data.session_id.startswith("s-")
        assert data.result.session == data.session_id
        assert f'pass session_id="{data.session_id}"' in text_of(first)

        second = await client.call_tool("run_python", {"code": "total + 2", "session_id": data.session_id})
        again = RunOutput.model_validate(second.structured_content)
        assert again.new_session is False
        assert again.session_id == data.session_id
        assert again.result.value == "42"
        assert again.result.execution_count == 2
        assert "Out: 42" in text_of(second)

        other = await client.call_tool("run_python", {"code": "x = 1"})
        assert RunOutput.model_validate(other.structured_content).session_id != data.session_id

    serve(ReplEngine(boundary="inprocess", policy="trusted"), scenario)


def test_an_error_in_the_code_is_an_error_result_with_its_telemetry() -> None:
    async def scenario(client: Client) -> None:
        result = await client.call_tool("run_python", {"code": "values = [1, 0]\n1 / values[1]"})
        assert result.is_error is True  # one rule in every frontend: the code did not run cleanly
        assert text_of(result).startswith("Error: ZeroDivisionError: division by zero")
        data = RunOutput.model_validate(result.structured_content)
        assert data.result.status == "error"
        assert data.result.error is not None
        assert data.result.error.line == 2

    serve(ReplEngine(boundary="inprocess", policy="trusted"), scenario)


def test_variables_inspect_and_reset() -> None:
    async def scenario(client: Client) -> None:
        run = await client.call_tool("run_python", {"code": "name = 'Ada'\nscores = [3, 4]"})
        sid = RunOutput.model_validate(run.structured_content).session_id

        listing = await client.call_tool("list_variables", {"session_id": sid})
        assert text_of(listing).splitlines() == [
            "Variables (2):",
            "name: str, len 3 = 'Ada'",
            "scores: list, len 2 = [3, 4]",
        ]

        inspected = await client.call_tool("inspect_variable", {"session_id": sid, "name": "scores"})
        assert text_of(inspected) == "scores: list, len 2\n[3, 4]"

        reset = await client.call_tool("reset_session", {"session_id": sid})
        assert text_of(reset) == "Session reset: every variable is gone."
        listing = await client.call_tool("list_variables", {"session_id": sid})
        assert text_of(listing) == "No variables defined yet."
        # The handle stays valid after a reset.
        after = await client.call_tool("run_python", {"code": "'name' in dir()", "session_id": sid})
        assert RunOutput.model_validate(after.structured_content).result.value == "False"

    serve(ReplEngine(boundary="inprocess", policy="trusted"), scenario)


# ---- images ------------------------------------------------------------------------------------


def test_attachments_become_image_blocks_through_the_server() -> None:
    async def scenario(client: Client) -> None:
        result = await client.call_tool("run_python", {"code": "plot()"})
        assert not result.is_error
        kinds = [type(block) for block in result.content]
        assert kinds == [TextContent, ImageContent, ImageContent]
        image = result.content[1]
        assert isinstance(image, ImageContent)
        assert image.mime_type == "image/png"
        assert base64.b64decode(image.data).startswith(b"\x89PNG\r\n\x1a\n")
        assert "Attached image/png 1x1: line plot" in text_of(result)
        data = RunOutput.model_validate(result.structured_content)
        assert [(i.content_index, i.description) for i in data.images] == [(1, "line plot"), (2, "histogram")]
        # The bytes travel once: the telemetry points at the blocks instead of repeating them.
        assert data.result.attachments == []

    serve(figure_engine(), scenario)


def test_result_to_mcp_renders_one_result() -> None:
    result = ExecutionResult(
        status="ok",
        session="s-1",
        value="3",
        attachments=[Attachment(mime_type="image/jpeg", data_base64=PNG_1X1, description="photo")],
    )
    new = result_to_mcp(result, "s-1", new_session=True)
    old = result_to_mcp(result, "s-1")
    assert text_of(new).endswith('Session: s-1 (new; pass session_id="s-1" to keep these variables)')
    assert text_of(old).endswith("\nSession: s-1")
    image = old.content[1]
    assert isinstance(image, ImageContent)
    assert (image.mime_type, image.data) == ("image/jpeg", PNG_1X1)
    assert old.structured_content is not None
    assert old.structured_content["images"][0]["mime_type"] == "image/jpeg"
    assert old.is_error is False
    # The caller's result is not modified by rendering.
    assert len(result.attachments) == 1


def test_result_to_mcp_respects_the_observation_budget() -> None:
    result = ExecutionResult(status="ok", session="s", stdout="x" * 50_000)
    text = text_of(result_to_mcp(result, "s", max_chars=1_000))
    assert len(text) < 1_100
    assert "characters omitted" in text


# ---- refusals: clear messages, and the server keeps serving -------------------------------------


def call_error(result: CallToolResult) -> str:
    assert result.is_error is True
    return text_of(result)


def test_unknown_tool_is_a_protocol_error_naming_the_tools() -> None:
    async def scenario(client: Client) -> None:
        with pytest.raises(MCPError) as caught:
            await client.call_tool("exec_python", {"code": "1"})
        assert caught.value.code == INVALID_PARAMS
        assert caught.value.message == (
            "Unknown tool 'exec_python'. Tools: inspect_variable, list_files, list_variables, reset_session, "
            "run_python, upload_file."
        )
        assert not (await client.call_tool("run_python", {"code": "1"})).is_error

    serve(ReplEngine(boundary="inprocess", policy="trusted"), scenario)


@pytest.mark.parametrize(
    ("tool", "arguments", "expected"),
    [
        (
            "run_python",
            {},
            "run_python: invalid arguments (code: Field required); "
            "it takes code (string), session_id (string, optional).",
        ),
        (
            "run_python",
            {"code": 42},
            "run_python: invalid arguments (code: Input should be a valid string); "
            "it takes code (string), session_id (string, optional).",
        ),
        (
            "run_python",
            {"code": "1", "session": "abc"},
            "run_python: unknown argument(s) 'session'; "
            "it takes code (string), session_id (string, optional).",
        ),
        (
            "inspect_variable",
            {"session_id": "s-x"},
            "inspect_variable: invalid arguments (name: Field required); "
            "it takes name (string), session_id (string).",
        ),
    ],
)
def test_bad_arguments_say_what_is_expected(tool: str, arguments: dict[str, Any], expected: str) -> None:
    async def scenario(client: Client) -> None:
        assert call_error(await client.call_tool(tool, arguments)) == expected

    serve(ReplEngine(boundary="inprocess", policy="trusted"), scenario)


@pytest.mark.parametrize(
    ("tool", "extra"),
    [
        ("run_python", {"code": "1"}),
        ("list_variables", {}),
        ("inspect_variable", {"name": "x"}),
        ("reset_session", {}),
    ],
)
def test_unknown_session_id_is_refused_by_every_tool(tool: str, extra: dict[str, Any]) -> None:
    async def scenario(client: Client) -> None:
        message = call_error(await client.call_tool(tool, {"session_id": "s-never-issued", **extra}))
        assert message == (
            f"{tool}: unknown session_id 's-never-issued': no such session on this server (it may have "
            "restarted). Call run_python without session_id to start a new session."
        )

    serve(ReplEngine(boundary="inprocess", policy="trusted"), scenario)


def test_unknown_variable_is_refused() -> None:
    async def scenario(client: Client) -> None:
        run = await client.call_tool("run_python", {"code": "a = 1"})
        sid = RunOutput.model_validate(run.structured_content).session_id
        result = await client.call_tool("inspect_variable", {"session_id": sid, "name": "b"})
        assert result.is_error is True
        assert text_of(result) == "Not defined: 'b'. Defined: a."

    serve(ReplEngine(boundary="inprocess", policy="trusted"), scenario)


def test_huge_code_is_refused_before_it_runs() -> None:
    async def scenario(client: Client) -> None:
        code = "x = 1\n" + "#" * 500
        result = await client.call_tool("run_python", {"code": code})
        assert result.is_error is True
        assert text_of(result).startswith(
            f"Error: InputTooLarge: code has {len(code)} characters; the limit is 200\n"
            "Hint: Send smaller pieces of code; keep data in files or variables, not in the code."
        )
        assert (await client.call_tool("run_python", {"code": "1 + 1"})).is_error is False

    engine = ReplEngine(boundary="inprocess", policy="trusted", limits=Limits(max_code_chars=200))
    serve(engine, scenario)
    assert engine.boundary.name == "inprocess"


def test_session_cap_is_reported() -> None:
    async def scenario(client: Client) -> None:
        assert not (await client.call_tool("run_python", {"code": "1"})).is_error
        result = await client.call_tool("run_python", {"code": "2"})
        assert result.is_error is True
        assert text_of(result).startswith(
            "Tool failure, not an error in your code: CapacityError: "
            "1 sessions are live (Limits.max_sessions)"
        )

    serve(ReplEngine(boundary="inprocess", policy="trusted", limits=Limits(max_sessions=1)), scenario)


def test_a_slow_run_does_not_block_other_calls(tmp_path: Path) -> None:
    order: list[str] = []
    started, done = tmp_path / "slow-started", tmp_path / "fast-done"
    # The slow run waits for a file only the fast run creates: run one at a time, it would time out.
    slow_code = (
        f"import os, time\nopen({str(started)!r}, 'w').close()\n"
        f"while not os.path.exists({str(done)!r}):\n    time.sleep(0.01)\n'slow'"
    )

    async def scenario(client: Client) -> None:
        async def slow() -> None:
            result = await client.call_tool("run_python", {"code": slow_code})
            assert RunOutput.model_validate(result.structured_content).result.value == "'slow'"
            order.append("slow")

        async def fast() -> None:
            while not started.exists():
                await anyio.sleep(0.01)  # bounded by serve()'s fail_after
            result = await client.call_tool(
                "run_python", {"code": f"open({str(done)!r}, 'w').close()\n6 * 7"}
            )
            assert RunOutput.model_validate(result.structured_content).result.value == "42"
            order.append("fast")

        async with anyio.create_task_group() as group:
            group.start_soon(slow)
            group.start_soon(fast)

    serve(ReplEngine(boundary="inprocess", policy="trusted", limits=Limits(timeout_s=10)), scenario)
    # Overlap is shown by the slow run returning its value; the order of the two replies is a race.
    assert sorted(order) == ["fast", "slow"]


def test_a_session_the_boundary_closed_can_be_started_again() -> None:
    # The subprocess boundary closes idle sessions on its own; closing one by hand is the same event.
    engine = ReplEngine(boundary="inprocess", policy="trusted")

    async def scenario(client: Client) -> None:
        run = await client.call_tool("run_python", {"code": "kept = 1"})
        sid = RunOutput.model_validate(run.structured_content).session_id
        await anyio.to_thread.run_sync(engine.close, sid)

        message = call_error(await client.call_tool("list_variables", {"session_id": sid}))
        assert message == (
            f"list_variables: session '{sid}' was closed (idle too long, or by the host) and its variables "
            "are gone. run_python with this session_id starts it again, empty."
        )
        again = await client.call_tool("run_python", {"code": "'kept' in dir()", "session_id": sid})
        data = RunOutput.model_validate(again.structured_content)
        assert (data.session_id, data.new_session, data.result.value) == (sid, False, "False")
        assert data.result.session_restarted is True
        assert text_of(again).startswith("Note: this session was restarted before this run")
        assert not (await client.call_tool("list_variables", {"session_id": sid})).is_error

    serve(engine, scenario)


@pytest.mark.parametrize("preset", ["strict", "standard"])
def test_a_policy_refusal_is_a_result_with_the_findings(preset: str) -> None:
    assert preset in cli._known_policies()

    async def scenario(client: Client) -> None:
        result = await client.call_tool("run_python", {"code": "import socket"})
        assert result.is_error is True
        assert text_of(result).startswith(f"Blocked by policy '{preset}'")
        data = RunOutput.model_validate(result.structured_content)
        assert data.result.status == "blocked"
        assert [f.rule for f in data.result.findings] == ["import"]

    serve(ReplEngine(boundary="inprocess", policy=preset), scenario)


@pytest.mark.parametrize(
    ("installed", "expected"),
    [
        (None, "the MCP server needs the MCP SDK; install genpark-repl-tools[mcp]"),
        ("1.20.0", "the MCP server needs mcp>=2.3 (MCPServer), found mcp 1.20.0; install genpark-repl-tools"),
    ],
)
def test_missing_or_old_sdk_message(
    installed: str | None, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.metadata

    from genpark_repl_tools import mcp_server

    def version(name: str) -> str:
        assert name == "mcp"
        if installed is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return installed

    monkeypatch.setattr(importlib.metadata, "version", version)
    message = mcp_server._missing_sdk_message(ImportError("No module named 'mcp.server.mcpserver'"))
    assert message.startswith(expected)
    assert message.endswith("(from a checkout: pip install -e '.[mcp]')")


def test_an_invalid_limit_is_a_one_line_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    # Here and not in tests/cli: the mcp command checks for the SDK before it reads the limits.
    assert cli.main(["mcp", "--max-code-chars", "5"]) == cli.EXIT_USAGE == 2
    err = capsys.readouterr().err
    assert "invalid limit (max_code_chars: Input should be greater than" in err
    assert len(err.strip().splitlines()) == 1


# ---- fork_session (opt-in) ----------------------------------------------------------------------


def serve_with_fork(engine: ReplEngine, scenario: Scenario) -> None:
    async def main() -> None:
        with anyio.fail_after(60):
            async with Client(create_server(engine, fork=True)) as client:
                await scenario(client)

    try:
        anyio.run(main)
    finally:
        engine.close()


async def value_in(client: Client, sid: str, code: str) -> str | None:
    run = await client.call_tool("run_python", {"code": code, "session_id": sid})
    assert not run.is_error, text_of(run)
    return RunOutput.model_validate(run.structured_content).result.value


@pytest.mark.parametrize("boundary", ["inprocess", "subprocess"])
def test_fork_session_copies_a_session_the_model_can_then_address(boundary: str) -> None:
    async def scenario(client: Client) -> None:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(listed) == TOOLS | {"fork_session"}
        fork_tool = listed["fork_session"]
        assert fork_tool.input_schema["required"] == ["session_id"]
        assert fork_tool.annotations is not None and fork_tool.annotations.idempotent_hint is False

        run = await client.call_tool(
            "run_python",
            {"code": "import math\nkept = [1, 2]\nwith open('notes.txt', 'w') as f:\n    f.write('hi')"},
        )
        sid = RunOutput.model_validate(run.structured_content).session_id
        await value_in(client, sid, "def read(name):\n    with open(name) as f:\n        return f.read()")
        forked = await client.call_tool("fork_session", {"session_id": sid})
        assert not forked.is_error, text_of(forked)
        jsonschema.validate(forked.structured_content, fork_tool.output_schema)
        data = forked.structured_content or {}
        copy = data["session_id"]
        assert copy != sid and data["source_session_id"] == sid
        assert {"kept", "math", "read"} <= set(data["copied"])
        assert text_of(forked).startswith("Forked: the new session holds a copy of this one")
        assert f'pass session_id="{copy}" to work there' in text_of(forked)

        # Same state and files in the copy; changes in either do not show in the other.
        assert await value_in(client, copy, "kept, math.floor(2.5), read('notes.txt')") == (
            "([1, 2], 2, 'hi')"
        )
        await value_in(client, copy, "kept.append(3)\nwith open('notes.txt', 'w') as f:\n    f.write('copy')")
        await value_in(client, sid, "kept.append(9)")
        assert await value_in(client, sid, "kept, read('notes.txt')") == "([1, 2, 9], 'hi')"
        assert await value_in(client, copy, "kept, read('notes.txt')") == "([1, 2, 3], 'copy')"
        # Emptying one leaves the other.
        assert not (await client.call_tool("reset_session", {"session_id": copy})).is_error
        assert await value_in(client, sid, "kept") == "[1, 2, 9]"

    # standard: in-process, its relative paths are the session's workspace (trusted's are the host's)
    serve_with_fork(ReplEngine(policy="standard", boundary=boundary), scenario)


def test_fork_session_of_an_unknown_session_is_refused_and_changes_nothing() -> None:
    engine = ReplEngine(boundary="inprocess", policy="trusted")

    async def scenario(client: Client) -> None:
        message = call_error(await client.call_tool("fork_session", {"session_id": "s-never-issued"}))
        assert message.startswith("fork_session: unknown session_id 's-never-issued'")
        assert await anyio.to_thread.run_sync(engine.sessions) == []

    serve_with_fork(engine, scenario)


def test_fork_session_is_off_by_default() -> None:
    async def scenario(client: Client) -> None:
        assert "fork_session" not in {tool.name for tool in (await client.list_tools()).tools}
        run = await client.call_tool("run_python", {"code": "x = 1"})
        sid = RunOutput.model_validate(run.structured_content).session_id
        with pytest.raises(MCPError):
            await client.call_tool("fork_session", {"session_id": sid})

    serve(ReplEngine(boundary="inprocess", policy="trusted"), scenario)
