"""The text a model reads is API: its exact shape is pinned here."""

from __future__ import annotations

import sys

import pytest

from genpark_repl_tools import ExecutionResult, Limits, ReplEngine
from genpark_repl_tools._models import Attachment, AuditFinding, ErrorInfo

OK_WITH_OUTPUT = "import statistics\nprices = [1.5, 2.5]\nprint('mean', statistics.mean(prices))\nlen(prices)"
NAME_ERROR = "total = 1\nprint('before')\ntotl + 1"
NESTED_ERROR = "def outer(x):\n    return inner(x)\n\ndef inner(x):\n    return x[3]\n\nouter([1, 2])"
SYNTAX_ERROR = "for i in range(3)\n    print(i)"
LOOP = "n = 0\nwhile True:\n    n += 1"


def caret(line: str) -> str | None:
    """A caret line under the failing expression: Python 3.11+ records columns (co_positions), 3.10
    does not, and then the observation shows the line alone, as Python 3.10's own tracebacks do."""
    return line if sys.version_info >= (3, 11) else None


def lines(*parts: str | None) -> str:
    return "\n".join(part for part in parts if part is not None)


@pytest.fixture
def engine() -> ReplEngine:
    with ReplEngine(boundary="inprocess", policy="trusted", limits=Limits(timeout_s=0.3)) as e:
        yield e


def test_ok_with_output_value_and_changes(engine: ReplEngine) -> None:
    text = engine.run(OK_WITH_OUTPUT).to_observation()
    assert text == (
        "OK\nstdout:\nmean 2.0\nOut: 2\nVariables: created prices (list, len 2), statistics (module)"
    )


def test_ok_without_anything_says_how_to_see_a_value(engine: ReplEngine) -> None:
    assert engine.run("pass").to_observation() == (
        "OK (no output; end the code with an expression or print() to see a value)"
    )


def test_name_error(engine: ReplEngine) -> None:
    text = engine.run(NAME_ERROR).to_observation()
    assert text == lines(
        "Error: NameError: name 'totl' is not defined. Did you mean: 'total'?",
        "At line 3:",
        "    totl + 1",
        caret("    ^^^^"),
        "stdout:",
        "before",
        "Variables: created total (int)",  # a typo: the suggestion alone, no "define it first"
    )


def test_nested_error_shows_user_frames(engine: ReplEngine) -> None:
    text = engine.run(NESTED_ERROR).to_observation()
    assert text == lines(
        "Error: IndexError: list index out of range",
        "At line 5:",
        "        return x[3]",
        caret("               ^^^^"),
        "Traceback (your code only):",
        '  File "<input>", line 7, in <module>',
        "    outer([1, 2])",  # no caret when it would underline the whole line, as in Python
        '  File "<input>", line 2, in outer',
        "    return inner(x)",
        caret("           ^^^^^^^^"),
        '  File "<input>", line 5, in inner',
        "    return x[3]",
        caret("           ^^^^"),
        "Variables: created inner (function), outer (function)",
    )


def test_syntax_error(engine: ReplEngine) -> None:
    text = engine.run(SYNTAX_ERROR).to_observation()
    assert (
        text == "Error: SyntaxError: expected ':'\nAt line 1:\n    for i in range(3)\n                     ^"
    )


def test_timeout(engine: ReplEngine) -> None:
    text = engine.run(LOOP).to_observation()
    head, _, rest = text.partition("\n")
    assert head.startswith("Timeout: execution stopped after 0.")
    assert head.endswith("(limit 0.3 s)")
    assert rest.startswith(("At line 3:\n        n += 1\n", "At line 2:\n    while True:\n"))
    assert rest.endswith(
        "Hint: Variables assigned before the stop are kept. Make the code faster, work on less data, "
        "or split the work into several calls."
    )


def _result(**fields: object) -> ExecutionResult:
    return ExecutionResult.model_validate({"session": "s", "policy": "strict", **fields})


def test_blocked_lists_each_finding_with_caret() -> None:
    finding = AuditFinding(
        rule="import",
        message="import of 'os' is not allowed under policy 'strict'; allowed: math, json",
        line=2,
        column=7,
        source_line="import os",
    )
    text = _result(status="blocked", findings=[finding]).to_observation()
    assert text == (
        "Blocked by policy 'strict': nothing ran and no variable changed.\n"
        "line 2:8: import of 'os' is not allowed under policy 'strict'; allowed: math, json\n"
        "    import os\n"
        "           ^"
    )


def test_crash_and_restart_note() -> None:
    text = _result(
        status="crashed",
        session_restarted=True,
        error=ErrorInfo(type="WorkerCrashed", message="the worker process died (signal 11)"),
    ).to_observation()
    assert text == (
        "Note: this session was restarted before this run; variables from earlier runs are gone.\n"
        "Crashed: the worker process died (signal 11)"
    )


def test_attachments_are_mentioned() -> None:
    image = Attachment(data_base64="AAAA", description="figure 1", width=640, height=480)
    text = _result(status="ok", attachments=[image]).to_observation()
    assert text.endswith("Attached image/png 640x480: figure 1")


def test_budget_cuts_output_but_keeps_status_and_hint(engine: ReplEngine) -> None:
    result = engine.run("for i in range(5000):\n    print(i)\nundefined")
    text = result.to_observation(max_chars=600)
    assert len(text) <= 600
    assert text.startswith("Error: NameError: name 'undefined' is not defined")
    assert "characters omitted" in text
    assert text.endswith("define it first.")
    assert "stdout:\n0\n1\n2\n" in text


def test_many_changes_are_summarised(engine: ReplEngine) -> None:
    code = "\n".join(f"v{i:02d} = {i}" for i in range(20))
    line = engine.run(code).to_observation().splitlines()[-1]
    assert line.startswith("Variables: created v00 (int), v01 (int)")
    assert line.endswith("v11 (int) and 8 more")
