"""`genpark-repl audit`: the policy's static verdict, without running anything."""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from genpark_repl_tools import AuditFinding, AuditReport, ReplEngine, cli
from genpark_repl_tools.cli import main

WriteScript = Callable[..., str]  # the write_script fixture (conftest.py)


class RefusingEngine(ReplEngine):
    """A real engine whose audit refuses every `import`, as a restricting policy would."""

    def audit(self, code: str) -> AuditReport:
        findings = [
            AuditFinding(
                rule="import",
                message="import of 'socket' is not allowed; allowed: math, json",
                line=2,
                column=0,
                source_line="import socket",
            )
        ]
        return AuditReport(
            policy="demo", allowed="import" not in code, findings=[] if "import" not in code else findings
        )


def refusing(monkeypatch: pytest.MonkeyPatch) -> None:
    def make(**kwargs: Any) -> ReplEngine:
        return RefusingEngine(policy="trusted")

    monkeypatch.setattr(cli, "ReplEngine", make)


def test_allowed_code_exits_0_and_runs_nothing(
    tmp_path: Path, write_script: WriteScript, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "ran"
    code = main(["audit", "--policy", "trusted", write_script(f"open({str(marker)!r}, 'w').write('x')")])
    assert code == 0
    assert capsys.readouterr().out == "Allowed under policy 'trusted' (it refuses nothing).\n"
    assert not marker.exists()


def test_blocked_code_exits_3_with_line_and_caret(
    write_script: WriteScript, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    refusing(monkeypatch)
    code = main(["audit", write_script("x = 1\nimport socket\n")])
    assert code == cli.EXIT_BLOCKED == 3
    assert capsys.readouterr().out == (
        "Blocked by policy 'demo':\n"
        "line 2:1: import of 'socket' is not allowed; allowed: math, json\n"
        "    import socket\n"
        "    ^\n"
    )


def test_json_report(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    refusing(monkeypatch)
    monkeypatch.setattr(sys, "stdin", io.StringIO("import socket\n"))
    assert main(["audit", "--json", "-"]) == 3
    report = AuditReport.model_validate_json(capsys.readouterr().out)
    assert report.allowed is False
    assert [f.rule for f in report.findings] == ["import"]


def test_syntax_error_exits_1(write_script: WriteScript, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", write_script("x = 1\nif x\n    pass\n")]) == cli.EXIT_ERROR == 1
    assert capsys.readouterr().out == "Syntax error at line 2: expected ':'\n"


def test_missing_file_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "/nonexistent/x.py"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_audit_takes_no_run_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["audit", "--timeout", "3", "-"])
    assert caught.value.code == 2
    assert "unrecognized arguments: --timeout" in capsys.readouterr().err


def test_blocked_with_a_real_restricting_policy(
    write_script: WriteScript, restricting_policy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    preset = restricting_policy
    assert main(["audit", "--policy", preset, write_script("import socket\n")]) == 3
    out = capsys.readouterr().out
    assert out.startswith(f"Blocked by policy '{preset}':\nline 1")


def test_allowed_by_the_audit_says_the_run_can_still_block_it(
    write_script: WriteScript, capsys: pytest.CaptureFixture[str]
) -> None:
    # The audit reads the text: a path is only known when the code runs, and the run refuses it.
    # (strict has no open() at all, so its audit refuses this already.)
    script = write_script("data = open('/etc/passwd').read()\n")
    assert main(["audit", "--policy", "standard", script]) == 0
    said = capsys.readouterr().out
    assert said.startswith("Allowed by the static audit of policy 'standard'.\n")
    assert "judges the text only" in said and "the files code opens" in said
    assert main(["run", "--policy", "standard", script]) == cli.EXIT_BLOCKED
    ran = capsys.readouterr().out
    assert ran.startswith("Blocked by policy 'standard' while running;"), ran
    # Python 3.10 knows no column of the failing expression: the line alone there.
    assert re.search(r"line 1(:8)?: opening '/etc/passwd' is not allowed", ran), ran
