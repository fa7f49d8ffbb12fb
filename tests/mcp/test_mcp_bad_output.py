"""Bad output through `genpark-repl mcp` as a real process, driven by the SDK's stdio client.

Whatever the code prints, returns or names, the call gets a well-formed reply and the same server
answers the next call. Under the in-process boundary, bytes written straight to file descriptor 1
(os.write, C printf) go to the server's stderr, never into the JSON-RPC channel.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("mcp")

import _mcp_stdio
from _mcp_stdio import Scenario, text_of
from mcp.client.session import ClientSession
from mcp_types import CallToolResult

from genpark_repl_tools import ExecutionResult
from genpark_repl_tools.testing.bad_output import (
    BAD_OUTPUT_TIMEOUT_S,
    BAD_OUTPUTS,
    FD1_BYTES,
    FD1_STDOUT,
    assert_bad_output,
    assert_bad_text,
)

# Startup imports the SDK (seconds on a loaded machine); one endless __repr__ uses up its timeout.
BOUND_S = 120

# Written to fd 1 below Python's sys.stdout, by Python and by C.
FD1_GARBAGE = (
    "import ctypes, os\n"
    "os.write(1, b'garbage from os.write\\xff\\n')\n"
    "libc = ctypes.CDLL(None)\n"
    "libc.printf(b'garbage from printf\\n')\n"
    "flushed = libc.fflush(None)\n"
)


def serve(tmp_path: Path, scenario: Scenario, boundary: str, *, launcher: str | None = None) -> str:
    """Run `scenario` against a spawned server; returns what the server wrote to stderr.

    `launcher`: Python code run with `-c` that calls the CLI with the options in `sys.argv[1:]`
    (default: `python -m genpark_repl_tools.cli`).
    """
    options = ("--policy", "trusted", "--boundary", boundary, "--timeout", str(BAD_OUTPUT_TIMEOUT_S))
    start = _mcp_stdio.CLI if launcher is None else ("-c", launcher)
    return _mcp_stdio.serve(tmp_path, scenario, *options, bound_s=BOUND_S, start=start)


def run_result(result: CallToolResult) -> tuple[str, ExecutionResult]:
    assert result.structured_content is not None, text_of(result)
    return result.structured_content["session_id"], ExecutionResult.model_validate(
        result.structured_content["result"]
    )


async def still_serves(client: ClientSession, session_id: str) -> None:
    follow = await client.call_tool("run_python", {"code": "6 * 7", "session_id": session_id})
    assert follow.is_error is False, text_of(follow)
    assert "Out: 42" in text_of(follow)


@pytest.mark.parametrize("boundary", ["inprocess", "subprocess"])
def test_every_bad_output_gets_a_reply_and_the_server_keeps_serving(tmp_path: Path, boundary: str) -> None:
    """One server per boundary runs every kind (a server per kind would cost seconds each)."""
    done: list[str] = []

    async def scenario(client: ClientSession) -> None:
        for case in BAD_OUTPUTS:
            reply = await client.call_tool("run_python", {"code": case.code})
            session_id, result = run_result(reply)
            assert reply.is_error is (case.status != "ok"), case.kind
            assert_bad_output(result, case)
            assert_bad_text(text_of(reply), case)
            await still_serves(client, session_id)
            listing = await client.call_tool("list_variables", {"session_id": session_id})
            assert listing.is_error is False, (case.kind, text_of(listing))
            assert "\x1b" not in text_of(listing) and "\x00" not in text_of(listing)
            done.append(case.kind)

    serve(tmp_path, scenario, boundary)
    assert done == [case.kind for case in BAD_OUTPUTS]


def test_odd_names_are_listed_and_inspected(tmp_path: Path) -> None:
    [case] = [c for c in BAD_OUTPUTS if c.kind == "odd-variable-names"]
    assert case.created is not None

    async def scenario(client: ClientSession) -> None:
        session_id, _ = run_result(await client.call_tool("run_python", {"code": case.code}))
        listing = await client.call_tool("list_variables", {"session_id": session_id})
        assert listing.structured_content is not None
        names = [v["name"] for v in listing.structured_content["variables"]]
        # In the namespace's order; the key 1 is no variable anyone can name.
        assert names == ["caf\\udce9", "two words\n", "n" * 2000 + "... [3,000 more characters]"]
        found = await client.call_tool("inspect_variable", {"name": "two words\n", "session_id": session_id})
        assert found.is_error is False, text_of(found)
        # The name is the session's text: escaped, so it cannot forge lines of the reply.
        assert text_of(found) == "two words\\x0a: int\n2"

    serve(tmp_path, scenario, "inprocess")


def test_fd1_bytes_are_captured_by_the_subprocess_boundary(tmp_path: Path) -> None:
    async def scenario(client: ClientSession) -> None:
        reply = await client.call_tool("run_python", {"code": FD1_BYTES})
        session_id, result = run_result(reply)
        assert (result.status, result.stdout) == ("ok", FD1_STDOUT)
        await still_serves(client, session_id)

    serve(tmp_path, scenario, "subprocess")


# A host program that silenced print() by replacing sys.stdout before serving: the protocol is still
# the process's fd 1 (the SDK's own transport would serve the replacement), and fd 1 is still diverted.
SILENCED_HOST = (
    "import io, os, sys\n"
    "sys.stdout = io.TextIOWrapper(open(os.devnull, 'wb'))\n"
    "from genpark_repl_tools.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


@pytest.mark.parametrize("launcher", [None, SILENCED_HOST], ids=["cli", "host-replaced-sys-stdout"])
def test_fd1_writes_in_process_never_reach_the_protocol_channel(tmp_path: Path, launcher: str | None) -> None:
    async def scenario(client: ClientSession) -> None:
        reply = await client.call_tool("run_python", {"code": FD1_GARBAGE})
        session_id, result = run_result(reply)
        assert result.status == "ok", text_of(reply)
        await still_serves(client, session_id)
        reply = await client.call_tool("run_python", {"code": FD1_BYTES, "session_id": session_id})
        assert run_result(reply)[1].status == "ok", text_of(reply)
        await still_serves(client, session_id)

    stderr = serve(tmp_path, scenario, "inprocess", launcher=launcher)
    # They went to the server's stderr (the client's log), where a human can still see them.
    assert "garbage from os.write\\xff\n" in stderr
    assert "garbage from printf\n" in stderr
    assert "\\xff\\xfe fd\n" in stderr
