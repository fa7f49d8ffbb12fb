"""Render an ExecutionResult as the text a model reads: short, exact, actionable.

Control characters the code printed or returned (ANSI escape sequences, NUL, a bare carriage
return) are shown as `\\xNN` escapes: the result's data keeps them as written, the model reads
`\\x1b[31m` instead of invisible bytes, and a terminal showing the text is not driven by them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._text import caret as _caret
from ._text import escape_controls, escape_name
from ._text import finding_text as _finding_text

if TYPE_CHECKING:  # annotations only: the models import this module to render themselves
    from ._models import ExecutionResult, FileChange, VariableInfo

__all__ = [
    "format_size",
    "render_file_changes",
    "render_observation",
    "render_variable",
    "render_variables",
    "variable_label",
]

DEFAULT_MAX_CHARS = 12_000
_MAX_LISTED_CHANGES = 12


def render_observation(result: ExecutionResult, max_chars: int | None = None) -> str:
    # Run on every tool call: each section is looked at only when the result has it.
    budget = max(200, max_chars or DEFAULT_MAX_CHARS)
    error = result.error
    fixed = [_RESTARTED, _status_line(result)] if result.session_restarted else [_status_line(result)]
    if result.rolled_back:
        fixed.append(_ROLLED_BACK)
    if error is not None or result.status == "blocked":
        fixed.extend(_location(result))
    tail: list[str] = []
    changes = result.changes
    if changes.created or changes.rebound or changes.deleted:
        tail.append(_changes_line(result))
    if result.files:
        tail.append(render_file_changes(result.files))
    for attachment in result.attachments:
        size = f" {attachment.width}x{attachment.height}" if attachment.width and attachment.height else ""
        label = escape_name(attachment.description or "figure")
        tail.append(f"Attached {attachment.mime_type}{size}: {label}")
    if result.notes:
        tail.extend(f"Note: {escape_name(note)}" for note in result.notes)  # notes quote names
    if error is not None and error.hint:
        tail.append(f"Hint: {error.hint}")

    # Variable-size sections, cut to fit what the fixed ones leave.
    sections: list[tuple[str, str]] = []
    if error is not None:
        traceback = _traceback_section(result)
        if traceback:
            sections.append(("Traceback (your code only):", traceback))
    if result.stdout:
        sections.append(("stdout:", result.stdout.rstrip("\n")))
    if result.stderr:
        sections.append(("stderr:", result.stderr.rstrip("\n")))
    if result.value is not None:
        sections.append(("Out:", result.value))

    if sections:
        used = sum(len(p) + 1 for p in fixed + tail) + sum(len(h) + 2 for h, _ in sections)
        bodies = _fit([body for _, body in sections], max(0, budget - used))
        for (header, _), body in zip(sections, bodies, strict=True):
            if header == "Out:" and "\n" not in body:
                fixed.append(f"Out: {body}")
            else:
                fixed.append(f"{header}\n{body}")
    if tail:
        fixed.extend(tail)
    text = escape_controls("\n".join(fixed))
    return text if len(text) <= budget else _cut(text, budget)


_RESTARTED = "Note: this session was restarted before this run; variables from earlier runs are gone."
# Whichever way the session went back (a checkpoint, or the store's last snapshot), in one wording.
_ROLLED_BACK = (
    "Rolled back: the variables from before this cell are intact; this cell's changes to them are "
    "gone. Files it wrote in the workspace stay."
)


def _status_line(result: ExecutionResult) -> str:
    error = result.error
    if result.status == "ok":
        if result.stdout or result.stderr or result.value is not None or result.attachments:
            return "OK"
        return "OK (no output; end the code with an expression or print() to see a value)"
    if result.status == "blocked":
        if error is not None and error.refused_by is not None:  # a runtime guard, as the code ran
            return f"Blocked by policy '{result.policy}' while running; the lines before it ran."
        return f"Blocked by policy '{result.policy}': nothing ran and no variable changed."
    assert error is not None
    label = {"error": "Error", "timeout": "Timeout", "cancelled": "Cancelled", "crashed": "Crashed"}[
        result.status
    ]
    if result.status == "error":
        return f"{label}: {error.type}: {error.message}" if error.message else f"{label}: {error.type}"
    return f"{label}: {error.message}"


def _location(result: ExecutionResult) -> list[str]:
    if result.status == "blocked":
        return [_finding_text(f) for f in result.findings]
    error = result.error
    if error is None or error.line is None:
        return []
    lines = [f"At line {error.line}:"]
    if error.source_line is not None:
        lines.append(f"    {error.source_line}")
        if error.column is not None:
            caret = _caret(error.source_line, error.column)
            width = (error.end_column - error.column) if error.end_column else 1
            lines.append("    " + caret[:-1] + "^" * max(1, width))
    return ["\n".join(lines)]


def _traceback_section(result: ExecutionResult) -> str:
    # One frame says nothing the location line did not; show the chain only when it has depth.
    error = result.error
    if (
        error is None
        or result.status not in ("error", "blocked", "timeout", "cancelled")
        or error.traceback.count('  File "') < 2
    ):
        return ""
    return "\n".join(line for line in error.traceback.splitlines()[1:] if line.startswith("  "))


def variable_label(info: VariableInfo) -> str:
    """'list, len 3', 'numpy.ndarray, shape 2x3, float64', 'function'."""
    parts = [info.type if info.kind == "value" else info.kind]
    if info.shape is not None:
        parts.append("shape " + "x".join(str(d) for d in info.shape))
    elif info.len is not None:
        parts.append(f"len {info.len}")
    if info.dtype:
        parts.append(info.dtype)
    return ", ".join(parts)


def _describe(info: VariableInfo) -> str:
    return f"{escape_name(info.name)} ({variable_label(info)})"


def render_variable(info: VariableInfo) -> str:
    """One variable in detail, for a model: name and type, summary, bounded repr."""
    lines = [f"{escape_name(info.name)}: {variable_label(info)}"]
    if info.summary:
        lines.append(info.summary)
    lines.append(info.repr)  # a cut repr carries its own marker ("[shortened; len N]", "more characters")
    return escape_controls("\n".join(lines))


_LISTED_REPR_CHARS = 60
_MORE_LINE_ROOM = 60


def render_variables(infos: list[VariableInfo], max_chars: int | None = None) -> str:
    """A listing of variables, one line each, within `max_chars`; says how many were left out."""
    if not infos:
        return "No variables defined yet."
    budget = max(200, max_chars or DEFAULT_MAX_CHARS)
    lines = [f"Variables ({len(infos)}):"]
    used = len(lines[0])
    for shown, info in enumerate(infos):
        name = escape_name(info.name)
        line = f"{name}: {variable_label(info)}"
        if info.kind in ("function", "class"):
            line = f"{name}: {info.repr}"  # 'def area(r)' says more than 'function'
        elif info.kind == "value":
            first = info.repr.split("\n", 1)[0][:_LISTED_REPR_CHARS]
            line += f" = {first}" + ("" if first == info.repr else "...")
        if used + len(line) + 1 > budget - _MORE_LINE_ROOM:
            lines.append(f"... and {len(infos) - shown} more; inspect one by name.")
            break
        lines.append(line)
        used += len(line) + 1
    return escape_controls("\n".join(lines))


def _changes_line(result: ExecutionResult) -> str:
    changes = result.changes
    groups = []
    for label, items in (
        ("created", [_describe(v) for v in changes.created]),
        ("rebound", [_describe(v) for v in changes.rebound]),
        ("deleted", [escape_name(name) for name in changes.deleted]),
    ):
        if items:
            shown = items[:_MAX_LISTED_CHANGES]
            more = f" and {len(items) - len(shown)} more" if len(items) > len(shown) else ""
            groups.append(f"{label} {', '.join(shown)}{more}")
    return f"Variables: {'; '.join(groups)}" if groups else ""


def _fit(bodies: list[str], room: int) -> list[str]:
    """Cut the longest bodies first until all fit in `room` characters."""
    total = sum(len(b) for b in bodies)
    if total <= room:
        return bodies
    share = room // max(1, len(bodies))
    small = [b for b in bodies if len(b) <= share]
    spare = room - sum(len(b) for b in small)
    big = [i for i, b in enumerate(bodies) if len(b) > share]
    each = spare // max(1, len(big))
    return [b if len(b) <= share else _cut(b, each) for b in bodies]


def _cut(text: str, size: int) -> str:
    if len(text) <= size:
        return text
    marker = "\n[... {:,} characters omitted ...]\n"
    keep = max(0, size - len(marker.format(len(text))))
    head = keep // 2
    tail = keep - head
    omitted = len(text) - head - tail
    return text[:head] + marker.format(omitted) + (text[-tail:] if tail else "")


def format_size(n: int) -> str:
    """Bytes for a reader: '812 B', '3.2 KB', '41.0 MB' (decimal units)."""
    if n < 1000:
        return f"{n} B"
    size = n / 1000
    for unit in ("KB", "MB"):
        if size < 1000:
            return f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"


def render_file_changes(changes: list[FileChange], max_listed: int = _MAX_LISTED_CHANGES) -> str:
    """One line for a model: 'Files: wrote clean.csv (3.2 KB), chart.png (41.0 KB); deleted old.csv'."""
    written = [f"{escape_name(c.name)} ({format_size(c.size)})" for c in changes if c.change != "deleted"]
    deleted = [escape_name(c.name) for c in changes if c.change == "deleted"]
    groups = []
    for label, items in (("wrote", written), ("deleted", deleted)):
        if items:
            shown = items[:max_listed]
            more = f" and {len(items) - len(shown)} more" if len(items) > len(shown) else ""
            groups.append(f"{label} {', '.join(shown)}{more}")
    return f"Files: {'; '.join(groups)}" if groups else ""
