"""`--allow-host`: the REPL, `run` and `mcp` give sandboxed code the listed names and nothing else.

The servers are real, on loopback, started by the tests; the code runs in real sandboxed workers whose
only way out is the engine's egress proxy. Nothing leaves this machine.
"""

from __future__ import annotations

import http.server
import io
import json
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from genpark_repl_tools.cli import main

WriteScript = Callable[..., str]  # the write_script fixture (conftest.py)

ROOT = Path(__file__).resolve().parents[2]
BODY = "hello from the test server"

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the sandboxed boundary is Linux's"
)


class Server:
    """A loopback HTTP server answering BODY to every GET, and the paths it was asked for."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        paths = self.paths

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                paths.append(self.path)
                data = BODY.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass  # the requests are in self.paths; stderr stays the CLI's

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


@pytest.fixture
def listed() -> Iterator[Server]:
    server = Server()
    yield server
    server.close()


@pytest.fixture
def unlisted() -> Iterator[Server]:
    """A server on the same address as `listed`, on a port no entry names."""
    server = Server()
    yield server
    server.close()


def fetch_code(*urls: str) -> str:
    """Code that GETs each URL with urllib and prints one line each: the body, or what went wrong."""
    lines = [
        "import urllib.error, urllib.request",
        "def get(url):",
        "    try:",
        "        return urllib.request.urlopen(url, timeout=10).read().decode()",
        "    except urllib.error.HTTPError as e:",
        "        return f'HTTP {e.code}: {e.reason}'",
        "    except OSError as e:",
        "        return f'failed: {e}'",
    ]
    lines += [f"print(get({url!r}))" for url in urls]
    return "\n".join(lines) + "\n"


# ---- run -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("boundary", ["subprocess", pytest.param("docker", marks=pytest.mark.docker)])
def test_run_reaches_a_listed_host_and_nothing_else(
    boundary: str,
    listed: Server,
    unlisted: Server,
    write_script: WriteScript,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    where = ["--boundary", boundary]
    if boundary == "docker":
        where += ["--image", request.getfixturevalue("docker_image")]
    script = write_script(fetch_code(listed.url("/data"), unlisted.url("/data"), "http://not-listed.test/"))
    code = main(["run", *where, "--policy", "trusted", "--allow-host", f"127.0.0.1:{listed.port}", script])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.splitlines()[:5] == [
        "OK",
        "stdout:",
        BODY,
        f"HTTP 403: Refused by the egress proxy: IP address 127.0.0.1 port {unlisted.port} is not in "
        "the allow list",
        "HTTP 403: Refused by the egress proxy: not-listed.test:80 is not in the allow list",
    ], out
    # What the model sees of the network, after the output.
    assert "Note: network: 1 connection to 127.0.0.1; 2 refused: 127.0.0.1, not-listed.test" in out
    assert listed.paths == ["/data"]
    assert unlisted.paths == []


def test_without_allow_host_the_sandbox_has_no_network(
    listed: Server, write_script: WriteScript, capsys: pytest.CaptureFixture[str]
) -> None:
    script = write_script(fetch_code(listed.url()))
    code = main(["run", "--policy", "trusted", "--boundary", "subprocess", script])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.splitlines()[2].startswith("failed: "), out
    assert "network:" not in out
    assert listed.paths == []


def test_run_json_carries_the_note(
    listed: Server, write_script: WriteScript, capsys: pytest.CaptureFixture[str]
) -> None:
    script = write_script(fetch_code(listed.url()))
    args = ["run", "--json", "--policy", "trusted", "--allow-host", f"127.0.0.1:{listed.port}", script]
    assert main(args) == 0
    telemetry = json.loads(capsys.readouterr().out)
    assert telemetry["stdout"] == BODY + "\n"
    assert telemetry["notes"] == ["network: 1 connection to 127.0.0.1"]


# ---- the REPL ------------------------------------------------------------------------------------


def test_repl_reaches_a_listed_host_and_keeps_its_engine_when_a_switch_would_cut_it_off(
    listed: Server, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fetch = fetch_code(listed.url("/one")) + "\n"
    again = f"print(get({listed.url('/two')!r}))\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(fetch + ":policy standard\n" + again))
    code = main(["--policy", "trusted", "--allow-host", f"127.0.0.1:{listed.port}"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.count(BODY) == 2, out
    assert "policy 'standard' refuses all network access in the code" in out
    assert listed.paths == ["/one", "/two"]


# ---- usage errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            ["--boundary", "inprocess", "--allow-host", "example.com"],
            "--allow-host needs a sandboxed boundary (subprocess or docker): in-process code has this "
            "process's whole network",
        ),
        (
            ["--boundary", "docker", "--network", "bridge", "--allow-host", "example.com"],
            "--allow-host and --network: choose one",
        ),
        (
            ["--allow-host", "https://example.com"],
            "--allow-host 'https://example.com': expected host[:port], not a URL",
        ),
        (["--allow-host", "example.com:0"], "'example.com:0': the port must be a number from 1 to 65535"),
        (["--allow-host", "*.com:443"], "'*.com:443': a wildcard needs a domain with a dot"),
        (["--allow-host", "ok.example", "--allow-host", "a b"], "'a b': expected host[:port]"),
    ],
)
@pytest.mark.parametrize("command", ["run", "mcp"])
def test_usage_errors_exit_2_and_say_why(
    command: str,
    options: list[str],
    message: str,
    write_script: WriteScript,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if command == "mcp":
        pytest.importorskip("mcp.server.mcpserver")  # not tests/mcp, a namespace package without the SDK
    target = [write_script("print('ran')")] if command == "run" else []
    assert main([command, "--policy", "trusted", *options, *target]) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert "ran" not in captured.out


def test_a_restricting_policy_is_refused_with_what_to_do(
    restricting_policy: str, write_script: WriteScript, capsys: pytest.CaptureFixture[str]
) -> None:
    script = write_script("print('ran')")
    assert main(["run", "--policy", restricting_policy, "--allow-host", "example.com", script]) == 2
    err = capsys.readouterr().err
    assert f"policy '{restricting_policy}' refuses all network access in the code" in err
    assert "add --policy trusted" in err


def test_the_default_policy_is_named_in_the_refusal(
    write_script: WriteScript, capsys: pytest.CaptureFixture[str]
) -> None:
    from genpark_repl_tools._engine import DEFAULT_POLICY

    assert main(["run", "--allow-host", "example.com", write_script("print('ran')")]) == 2
    assert f"policy '{DEFAULT_POLICY}' refuses all network access" in capsys.readouterr().err


# ---- the MCP server ------------------------------------------------------------------------------


def test_mcp_code_reaches_a_listed_host_and_the_model_sees_the_note(listed: Server, tmp_path: Path) -> None:
    pytest.importorskip("mcp.server.mcpserver")
    anyio = pytest.importorskip("anyio")  # the MCP SDK's own dependency
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.types import TextContent

    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "genpark_repl_tools.cli",
            "mcp",
            "--policy",
            "trusted",
            "--no-preload",
            "--allow-host",
            f"127.0.0.1:{listed.port}",
        ],
        env={"PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
    )

    async def scenario() -> tuple[bool, str]:
        with anyio.fail_after(90), (tmp_path / "server-stderr.log").open("a") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as client,
            ):
                await client.initialize()
                code = fetch_code(listed.url("/mcp"), "http://not-listed.test/")
                result = await client.call_tool("run_python", {"code": code})
                text = "\n".join(b.text for b in result.content if isinstance(b, TextContent))
                return result.is_error, text

    is_error, text = anyio.run(scenario)
    assert not is_error, text
    assert BODY in text
    assert "Refused by the egress proxy: not-listed.test:80 is not in the allow list" in text
    assert "Note: network: 1 connection to 127.0.0.1; 1 refused: not-listed.test" in text
    assert listed.paths == ["/mcp"]
