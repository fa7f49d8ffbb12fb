"""`genpark-repl run`: output, exit codes, options, figures, and the real entry points."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from genpark_repl_tools import (
    Attachment,
    AuditFinding,
    ErrorInfo,
    ExecutionRequest,
    ExecutionResult,
    MockBoundary,
    ReplEngine,
    Status,
    cli,
)
from genpark_repl_tools.cli import main, save_figures

WriteScript = Callable[..., str]  # the write_script fixture (conftest.py)

ROOT = Path(__file__).resolve().parents[2]
SUBPROCESS_TIMEOUT_S = 60
PNG_1X1 = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
        "0000000d49444154789c6360f8cfc0f01f0005000201e2d5c5d80000000049454e44ae426082"
    )
).decode()


def use_stdin(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))


def use_mock_engine(
    monkeypatch: pytest.MonkeyPatch, handler: Callable[[ExecutionRequest], ExecutionResult]
) -> None:
    """Make the CLI build an engine whose every run returns `handler(request)`."""
    real = ReplEngine
    monkeypatch.setattr(cli, "ReplEngine", lambda **_: real(boundary=MockBoundary(handler)))


# ---- exit codes ----------------------------------------------------------------------------------


def test_ok_prints_the_observation_and_exits_0(
    write_script: WriteScript, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", "--policy", "trusted", write_script("print('hello')\nanswer = 6 * 7\nanswer")])
    out = capsys.readouterr().out
    assert code == cli.EXIT_OK == 0
    assert out == "OK\nstdout:\nhello\nOut: 42\nVariables: created answer (int)\n"


def test_error_exits_1_and_points_at_the_line(
    write_script: WriteScript, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", "--policy", "trusted", write_script("x = 1\nx / 0\n")])
    out = capsys.readouterr().out
    assert code == cli.EXIT_ERROR == 1
    assert out.startswith("Error: ZeroDivisionError: division by zero\nAt line 2:\n    x / 0\n")


def test_timeout_exits_4(write_script: WriteScript, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--policy", "trusted", "--timeout", "0.3", write_script("while True:\n    pass\n")])
    assert code == cli.EXIT_TIMEOUT == 4
    assert capsys.readouterr().out.startswith("Timeout: ")


def test_blocked_exits_3_with_a_real_restricting_policy(
    tmp_path: Path, write_script: WriteScript, restricting_policy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    preset = restricting_policy
    marker = tmp_path / "ran"
    code = main(["run", "--policy", preset, write_script(f"import socket\nopen({str(marker)!r}, 'w')")])
    assert code == cli.EXIT_BLOCKED == 3
    assert capsys.readouterr().out.startswith(f"Blocked by policy '{preset}'")
    assert not marker.exists()


def test_crashed_exits_5_on_the_subprocess_boundary(
    write_script: WriteScript, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["run", "--policy", "trusted", "--boundary", "subprocess", write_script("import os\nos._exit(9)")]
    )
    assert code == cli.EXIT_CRASHED == 5
    assert capsys.readouterr().out.startswith("Crashed")


def fixed_result(status: Status) -> Callable[[ExecutionRequest], ExecutionResult]:
    def handler(request: ExecutionRequest) -> ExecutionResult:
        fields: dict[str, Any] = {"status": status, "session": request.session, "policy": "demo"}
        if status == "blocked":
            fields["findings"] = [
                AuditFinding(rule="import", message="import of 'socket' is not allowed", line=1)
            ]
        elif status != "ok":
            fields["error"] = ErrorInfo(type="Stop", message=f"status {status}")
        return ExecutionResult(**fields)

    return handler


@pytest.mark.parametrize(
    ("status", "expected"),
    [("ok", 0), ("error", 1), ("blocked", 3), ("timeout", 4), ("crashed", 5)],
)
def test_every_status_has_its_exit_code(
    status: Status,
    expected: int,
    write_script: WriteScript,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    use_mock_engine(monkeypatch, fixed_result(status))
    assert main(["run", "--json", write_script("anything")]) == expected
    assert json.loads(capsys.readouterr().out)["status"] == status


# ---- options -------------------------------------------------------------------------------------


def test_json_prints_the_telemetry(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_stdin(monkeypatch, "values = [3, 4]\nprint(len(values))\nsum(values)\n")
    assert main(["run", "--policy", "trusted", "--json", "-"]) == 0
    result = ExecutionResult.model_validate_json(capsys.readouterr().out)
    assert (result.status, result.stdout, result.value) == ("ok", "2\n", "7")
    assert [v.name for v in result.changes.created] == ["values"]


def test_options_before_the_command_are_kept(
    write_script: WriteScript, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--json", "--timeout", "0.3", "run", "--policy", "trusted", write_script("while 1: pass")])
    assert code == 4
    assert json.loads(capsys.readouterr().out)["status"] == "timeout"


def test_script_reads_its_coding_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "latin.py"
    path.write_bytes("# -*- coding: latin-1 -*-\nname = 'Zoë'\nname\n".encode("latin-1"))
    assert main(["run", "--policy", "trusted", str(path)]) == 0
    assert "Out: 'Zoë'" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "/nonexistent/job.py"], "genpark-repl: error: no such file: /nonexistent/job.py"),
        (["run", "--policy", "no-such-policy", "-"], "unknown policy 'no-such-policy'; choose one of: "),
        (["run", "--boundary", "cloud", "-"], "unknown boundary 'cloud'"),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_stdin(monkeypatch, "1")
    assert main(argv) == cli.EXIT_USAGE == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "argv", [["run"], ["run", "-", "--timeout", "0"], ["run", "-", "--timeout", "soon"], ["nope"]]
)
def test_bad_command_lines_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    assert "usage: genpark-repl" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "-", "--timeout", "soon"], "argument --timeout: expected a number, got 'soon'"),
        (["run", "-", "--timeout", "nan"], "argument --timeout: must be > 0, got nan"),
        (["run", "-", "--cpu-s", "-1"], "argument --cpu-s: must be > 0, got -1"),
        (["run", "-", "--memory-mb", "1.5"], "argument --memory-mb: expected a whole number, got '1.5'"),
        (["run", "-", "--memory-mb", "0"], "argument --memory-mb: must be > 0, got 0"),
        (["mcp", "--port", "http"], "argument --port: expected a port number, got 'http'"),
        (["mcp", "--port", "65536"], "argument --port: must be 0-65535, got 65536"),
    ],
)
def test_numeric_options_say_what_they_expect(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    assert message in capsys.readouterr().err


def test_policy_help_lists_the_presets(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    assert (
        "exit code: 0 ok, 1 error, 2 usage, 3 blocked, 4 timeout, 5 crashed" in " ".join(out.split()).lower()
    )
    for name in cli._known_policies():
        assert name in out
    assert "trusted" in cli._known_policies()


@pytest.mark.parametrize(
    "command",
    [
        pytest.param([], id="repl"),
        pytest.param(["run"], id="run"),
        pytest.param(
            ["mcp"],
            id="mcp",
            marks=pytest.mark.skipif(
                not sys.platform.startswith("linux"), reason="mcp falls back to inprocess off Linux"
            ),
        ),
    ],
)
def test_boundary_help_names_the_default_the_command_uses(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps option help
    named = re.search(r"--boundary NAME where code runs: (\w+) \(the default", text)
    assert named is not None, text
    # The engine the command builds when --boundary is not given.
    args = cli.build_parser().parse_args([*command, "-"] if command == ["run"] else command)
    engine = cli._make_engine(args)
    with engine:
        assert engine.boundary.name == named.group(1)
    assert capsys.readouterr().err == ""  # no fallback note: the default itself was used


# ---- figures -------------------------------------------------------------------------------------


def figure_result(count: int = 2) -> ExecutionResult:
    attachments = [
        Attachment(data_base64=PNG_1X1, description="plot"),
        Attachment(mime_type="image/svg+xml", data_base64=base64.b64encode(b"<svg/>").decode()),
    ]
    return ExecutionResult(status="ok", session="s", execution_count=count, attachments=attachments)


def test_save_figures_writes_each_image_and_never_overwrites(tmp_path: Path) -> None:
    target = tmp_path / "figs"
    first = save_figures(figure_result(), target, prefix="job")
    assert [p.name for p in first] == ["job-2-1.png", "job-2-2.svg"]
    assert first[0].read_bytes() == base64.b64decode(PNG_1X1)
    assert first[1].read_bytes() == b"<svg/>"
    again = save_figures(figure_result(), target, prefix="job")
    assert [p.name for p in again] == ["job-2-1.2.png", "job-2-2.2.svg"]
    assert sorted(p.name for p in target.iterdir()) == sorted(p.name for p in first + again)


def test_save_figures_skips_invalid_data_with_a_warning(tmp_path: Path) -> None:
    broken = ExecutionResult(status="ok", session="s", attachments=[Attachment(data_base64="not base64!")])
    with pytest.warns(RuntimeWarning, match="not valid base64"):
        assert save_figures(broken, tmp_path) == []


def test_run_saves_figures(
    tmp_path: Path,
    write_script: WriteScript,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    use_mock_engine(monkeypatch, lambda request: figure_result(1))
    assert main(["run", "--save-figures", str(tmp_path / "out"), write_script("plot()", "chart.py")]) == 0
    captured = capsys.readouterr()
    assert "Attached image/png: plot" in captured.out
    assert f"Saved figure: {tmp_path / 'out' / 'chart-1-1.png'}" in captured.err
    assert (tmp_path / "out" / "chart-1-1.png").read_bytes().startswith(b"\x89PNG")


# ---- the real entry points -----------------------------------------------------------------------


def spawn(args: list[str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        args, input=stdin, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, env=env, check=False
    )


def test_python_dash_m_cli_reports_the_status_as_exit_code() -> None:
    done = spawn([sys.executable, "-m", "genpark_repl_tools.cli", "run", "--policy", "trusted", "-"], "1/0")
    assert done.returncode == 1
    assert done.stdout.startswith("Error: ZeroDivisionError")


def test_python_dash_m_package_runs_the_cli(write_script: WriteScript) -> None:
    path = write_script("import time\ntime.sleep(5)")
    done = spawn(
        [sys.executable, "-m", "genpark_repl_tools", "run", "--policy", "trusted", "--timeout", "0.5", path]
    )
    assert done.returncode == 4
    assert done.stdout.startswith("Timeout: ")


def test_run_saves_a_real_matplotlib_figure(tmp_path: Path, write_script: WriteScript) -> None:
    pytest.importorskip("matplotlib")
    code = "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.title('line')\nplt.show()\n"
    out = tmp_path / "figs"
    args = ["-m", "genpark_repl_tools.cli", "run", "--policy", "trusted", "--save-figures", str(out)]
    done = spawn([sys.executable, *args, write_script(code, "chart.py")])
    assert done.returncode == 0, done.stderr
    assert "Attached image/png 640x480" in done.stdout
    assert f"Saved figure: {out / 'chart-1-1.png'}" in done.stderr
    assert (out / "chart-1-1.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_console_script() -> None:
    # The suite runs against an installed package (scripts/dev.py installs it), so the script must exist.
    exe = Path(sys.executable).with_name("genpark-repl")
    assert exe.exists(), f"{exe} is missing: is the package installed (pip install -e .)?"
    done = spawn([str(exe), "run", "--policy", "trusted", "-"], "print('from the script')")
    assert (done.returncode, done.stdout) == (0, "OK\nstdout:\nfrom the script\n")


def test_mcp_without_the_extra_says_what_to_install() -> None:
    # Hide the SDK from a fresh interpreter: importing it then fails as on a core-only install.
    hide = "import sys; sys.modules.update(dict.fromkeys(['mcp', 'mcp_types', 'anyio'], None)); "
    run = "from genpark_repl_tools.cli import main; sys.exit(main(['mcp']))"
    done = spawn([sys.executable, "-c", hide + run])
    assert done.returncode == 2
    assert "install genpark-repl-tools[mcp]" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_unwritable_figure_directory_does_not_change_the_exit_code(
    tmp_path: Path,
    write_script: WriteScript,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    use_mock_engine(monkeypatch, lambda request: figure_result(1))
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    assert main(["run", "--save-figures", str(blocker / "sub"), write_script("plot()")]) == 0
    assert "genpark-repl: cannot save figures: " in capsys.readouterr().err
