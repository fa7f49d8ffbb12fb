"""`genpark-repl mcp` options for HTTP: tokens (environment or file, never a command-line value), the
loopback rule, and the default boundary (subprocess, or in-process said on stderr)."""

from __future__ import annotations

import ast
import signal
import sys
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")

from _mcp_http import TOKENS, connect, run_http_server
from mcp_types import TextContent

from genpark_repl_tools import cli
from genpark_repl_tools.mcp_server import is_loopback, load_tokens

TOKEN = "a-token-for-the-cli-tests-0123"
ENV = "GENPARK_REPL_MCP_TOKENS"


@pytest.fixture(autouse=True)
def _no_tokens_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)


# ---- tokens --------------------------------------------------------------------------------------


def test_load_tokens_reads_names_comments_and_unnamed_tokens() -> None:
    text = f"# team tokens\n\nalice {TOKEN}\n  {TOKEN}-2  \nalice {TOKEN}-rotated\n"
    tokens = load_tokens(text)
    assert tokens[TOKEN] == "alice"
    assert tokens[f"{TOKEN}-rotated"] == "alice"  # one client, two tokens: rotation keeps sessions
    assert tokens[f"{TOKEN}-2"].startswith("token-")
    assert len(tokens) == 3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("short", "tokens, line 1: a token needs at least 16 printable ASCII characters"),
        (f"a b {TOKEN}", "tokens, line 1: expected TOKEN or NAME TOKEN, found 3 fields"),
        (f"bad/name {TOKEN}", "tokens, line 1: a client name is 1-64 of A-Z a-z 0-9 _ . - @"),
        (f"alice {TOKEN}\nbob {TOKEN}", "tokens, line 2: this token is already listed for 'alice'"),
        ("# nothing\n", "tokens: no token found"),
    ],
)
def test_load_tokens_refuses_bad_lines_without_echoing_them(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=r"^tokens") as refused:
        load_tokens(text)
    assert str(refused.value).startswith(message)
    assert TOKEN not in str(refused.value)


def test_a_token_is_never_a_command_line_value(capsys: pytest.CaptureFixture[str]) -> None:
    # Not even as an abbreviation of --token-file.
    with pytest.raises(SystemExit) as exited:
        cli.main(["mcp", "--transport", "http", "--token", TOKEN])
    assert exited.value.code == cli.EXIT_USAGE
    assert "unrecognized arguments: --token" in capsys.readouterr().err


def test_a_bad_token_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    secret = tmp_path / "tokens"
    secret.write_text("x" * 10 + "\n")
    assert cli.main(["mcp", "--transport", "http", "--token-file", str(secret)]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert f"{secret}, line 1: a token needs at least 16" in err
    assert "x" * 10 not in err
    missing = tmp_path / "missing"
    assert cli.main(["mcp", "--transport", "http", "--token-file", str(missing)]) == cli.EXIT_USAGE
    assert f"cannot read --token-file {missing}" in capsys.readouterr().err


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10", "example.com"])
def test_binding_beyond_loopback_needs_tokens(host: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert not is_loopback(host)
    assert cli.main(["mcp", "--transport", "http", "--host", host]) == cli.EXIT_USAGE
    assert f"--host {host} is not loopback: anyone who can reach it could run code" in capsys.readouterr().err


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)


def test_tokens_from_the_environment(tmp_path: Path) -> None:
    async def scenario(url: str) -> None:
        with anyio.fail_after(60):
            async with connect(url, TOKEN) as client:
                result = await client.call_tool("run_python", {"code": "6 * 7"})
                block = result.content[0]
                assert isinstance(block, TextContent)
                assert "Out: 42" in block.text

    options = ("--policy", "trusted", "--boundary", "inprocess")
    with run_http_server(tmp_path, *options, env={ENV: f"from-env {TOKEN}"}) as server:
        anyio.run(scenario, server.url)


def test_a_foreign_host_header_is_refused_unless_allowed(tmp_path: Path) -> None:
    # DNS-rebinding protection on loopback; a reverse proxy's public name is let in with --accept-host.
    import httpx

    body = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {TOKENS['alice']}",
        "Host": "mcp.example.com",
    }
    options = ("--policy", "trusted", "--boundary", "inprocess")
    with run_http_server(tmp_path, *options) as server:
        refused = httpx.post(server.url, content=body, headers=headers, timeout=30)
        assert refused.status_code == 421, refused.text
    with run_http_server(tmp_path, *options, "--accept-host", "mcp.example.com") as server:
        allowed = httpx.post(server.url, content=body, headers=headers, timeout=30)
        assert allowed.status_code != 421, allowed.text
        assert "Invalid Host header" not in allowed.text


# ---- the default boundary ------------------------------------------------------------------------


def mcp_args(*options: str) -> object:
    return cli.build_parser().parse_args(["mcp", "--policy", "trusted", *options])


@pytest.mark.skipif(sys.platform == "win32", reason="no subprocess boundary on Windows")
def test_mcp_runs_code_in_subprocesses_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    with cli._make_engine(mcp_args()) as engine:
        assert engine.boundary.name == "subprocess"
        assert engine.run("1 + 1").value == "2"
    assert capsys.readouterr().err == ""


@pytest.mark.skipif(sys.platform == "win32", reason="no subprocess boundary on Windows")
def test_the_http_server_runs_code_in_subprocesses_and_cleans_up_on_sigterm(tmp_path: Path) -> None:
    async def scenario(url: str) -> Path:
        with anyio.fail_after(60):
            async with connect(url, TOKENS["alice"]) as client:
                result = await client.call_tool("run_python", {"code": "import os\nos.getcwd()"})
                assert result.structured_content is not None
                telemetry = result.structured_content["result"]
                assert telemetry["boundary"] == "subprocess"
                return Path(ast.literal_eval(telemetry["value"]))

    with run_http_server(tmp_path, "--policy", "trusted") as server:
        workspace = anyio.run(scenario, server.url)
        assert workspace.is_dir()
        server.process.terminate()
        assert server.process.wait(30) == 128 + signal.SIGTERM
    assert not workspace.exists()
    assert "Traceback" not in "".join(server.stderr)
    assert "in-process" not in "".join(server.stderr)


def test_mcp_falls_back_to_in_process_and_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # What an OS without fork and fcntl sees: the module does not import.
    monkeypatch.setitem(sys.modules, "genpark_repl_tools.boundaries.subprocess", None)
    with cli._make_engine(mcp_args()) as engine:
        assert engine.boundary.name == "inprocess"
        assert engine.run("1 + 1").value == "2"
    err = capsys.readouterr().err
    assert err.startswith("genpark-repl: the subprocess boundary is not available on this OS (")
    assert "running code in-process instead: the policy's guards without an OS sandbox" in err


def test_no_fallback_when_asked_for_limits_only_subprocesses_enforce(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "genpark_repl_tools.boundaries.subprocess", None)
    with pytest.raises(cli.UsageError, match="--memory-mb and --cpu-s need it"):
        cli._make_engine(mcp_args("--memory-mb", "512"))


def test_an_explicit_boundary_is_used_silently(capsys: pytest.CaptureFixture[str]) -> None:
    with cli._make_engine(mcp_args("--boundary", "inprocess")) as engine:
        assert engine.boundary.name == "inprocess"
    assert capsys.readouterr().err == ""
