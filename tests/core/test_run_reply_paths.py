"""run_python's reply takes shortcuts on every call: the observation looks only at the
sections a result has, and the JSON data skips `model_dump`'s wrapper. Both must give what the
general way gave, byte for byte and value for value: the previous renderer is kept here as the
reference, and `model_dump(mode="json")` is the reference for the data."""

from __future__ import annotations

from typing import Any

import pytest

from genpark_repl_tools import ExecutionResult, Limits, ReplEngine, tools
from genpark_repl_tools._models import (
    Attachment,
    AuditFinding,
    ErrorInfo,
    FileChange,
    VariableChanges,
    VariableInfo,
)
from genpark_repl_tools._observation import (
    DEFAULT_MAX_CHARS,
    _changes_line,
    _cut,
    _fit,
    _location,
    _status_line,
    _traceback_section,
    escape_controls,
    render_file_changes,
)

CODES = [
    "x = 1",
    "x = 1",  # nothing changed
    "print('hi')",
    "import sys\nsys.stderr.write('warn\\n')",
    "y = [1, 2, 3]\ny",
    "del y",
    "x = 2\nz = 'abc'\nprint('a\\x1b[31mred\\r')\nz",
    "def f(n):\n    return g(n)\n\ndef g(n):\n    return n[5]\n\nf([1])",
    "1/0",
    "for i in range(3)\n    print(i)",
    "print('x' * 30000)",
    "print('\\n'.join(str(i) for i in range(5000)))\n'v' * 20000",
    "raise ValueError('')",
    "with open('out.txt', 'w') as f:\n    f.write('data')",
    "n = 0\nwhile True:\n    n += 1",
    "import os\nos.remove('out.txt')",
    "big = list(range(100000))\nbig",
    "print('\\udcff')",
    *[f"v{i} = {i}" for i in range(3)],
    "\n".join(f"w{i} = {i}" for i in range(20)),
]


def previous_render(result: ExecutionResult, max_chars: int | None = None) -> str:
    """render_observation as it was before the shortcuts."""
    budget = max(200, max_chars or DEFAULT_MAX_CHARS)
    fixed: list[str] = []
    if result.session_restarted:
        fixed.append(
            "Note: this session was restarted before this run; variables from earlier runs are gone."
        )
    fixed.append(_status_line(result))
    fixed.extend(_location(result))
    tail: list[str] = []
    changes = _changes_line(result)
    if changes:
        tail.append(changes)
    if result.files:
        tail.append(render_file_changes(result.files))
    for attachment in result.attachments:
        size = f" {attachment.width}x{attachment.height}" if attachment.width and attachment.height else ""
        label = attachment.description or "figure"
        tail.append(f"Attached {attachment.mime_type}{size}: {label}")
    tail.extend(f"Note: {note}" for note in result.notes)
    if result.error is not None and result.error.hint:
        tail.append(f"Hint: {result.error.hint}")
    sections: list[tuple[str, str]] = []
    traceback = _traceback_section(result)
    if traceback:
        sections.append(("Traceback (your code only):", traceback))
    if result.stdout:
        sections.append(("stdout:", result.stdout.rstrip("\n")))
    if result.stderr:
        sections.append(("stderr:", result.stderr.rstrip("\n")))
    if result.value is not None:
        sections.append(("Out:", result.value))
    used = sum(len(p) + 1 for p in fixed + tail) + sum(len(h) + 2 for h, _ in sections)
    room = max(0, budget - used)
    bodies = _fit([body for _, body in sections], room)
    parts = list(fixed)
    for (header, _), body in zip(sections, bodies, strict=True):
        if header == "Out:" and "\n" not in body:
            parts.append(f"Out: {body}")
        else:
            parts.append(f"{header}\n{body}")
    parts.extend(tail)
    text = escape_controls("\n".join(parts))
    return text if len(text) <= budget else _cut(text, budget)


def engine_results() -> list[ExecutionResult]:
    results = []
    with ReplEngine(boundary="inprocess", policy="trusted", limits=Limits(timeout_s=0.3)) as engine:
        results += [engine.run(code, "s") for code in CODES]
    with ReplEngine(boundary="inprocess", policy="standard") as engine:
        results.append(engine.run("import os\nos.system('ls')\nopen('/etc/passwd')", "s"))
        results.append(engine.run("x = 1\nx._y", "s"))
    return results


def made_results() -> list[ExecutionResult]:
    """What the engine rarely gives: figures, notes, a restarted session, a hint, many files."""
    info = VariableInfo(name="df", type="pandas.DataFrame", repr="a\nb", shape=[2, 3], dtype="int64")
    error = ErrorInfo(type="KeyError", message="'c'", line=2, source_line="df['c']", column=0, hint="Use a.")
    return [
        ExecutionResult(
            status="ok",
            session="s",
            attachments=[
                Attachment(data_base64="aGk=", width=640, height=480, description="a plot"),
                Attachment(data_base64="aGk=", mime_type="image/svg+xml"),
            ],
            notes=["one", "two"],
            session_restarted=True,
            changes=VariableChanges(created=[info], rebound=[info] * 14, deleted=["a", "b"]),
            files=[FileChange(name=f"f{i}.csv", change="created", size=1500 * i) for i in range(15)]
            + [FileChange(name="old.csv", change="deleted")],
        ),
        ExecutionResult(status="error", session="s", error=error, stdout="x" * 50_000, value="v" * 9000),
        ExecutionResult(status="timeout", session="s", error=ErrorInfo(type="Timeout", message="0.3 s")),
        ExecutionResult(
            status="blocked",
            session="s",
            policy="standard",
            findings=[
                AuditFinding(rule="import", message="no os", line=1, column=0, source_line="import os")
            ],
        ),
        ExecutionResult(status="crashed", session="s", error=ErrorInfo(type="WorkerLost", message="gone")),
        ExecutionResult(status="ok", session="s", stdout="\n", value=""),
    ]


@pytest.fixture(scope="module")
def results() -> list[ExecutionResult]:
    return engine_results() + made_results()


@pytest.mark.parametrize("max_chars", [None, 200, 1000, 12_000])
def test_the_observation_is_what_the_general_renderer_wrote(
    results: list[ExecutionResult], max_chars: int | None
) -> None:
    for result in results:
        assert result.to_observation(max_chars) == previous_render(result, max_chars), result.status


def test_the_reply_data_is_model_dump_in_json_mode(results: list[ExecutionResult]) -> None:
    assert {r.status for r in results} >= {"ok", "error", "timeout", "blocked", "crashed"}
    for result in results:
        reply = tools.run_reply(result, "s", 4000)
        expected = result.model_dump(mode="json")
        assert reply.data == expected
        assert list(reply.data) == list(expected)  # the same key order, so the same JSON text
        assert reply.text == previous_render(result, 4000)
        assert reply.is_error == (not result.ok)
        assert reply.images == [a for a in result.attachments if a.kind == "image"]
        assert reply.images is not result.attachments


def test_the_data_of_a_subclass_is_its_own_dump() -> None:
    class Tagged(ExecutionResult):
        tag: str = "t"

    data: dict[str, Any] = tools.run_reply(Tagged(status="ok", session="s"), "s").data
    assert data["tag"] == "t"
