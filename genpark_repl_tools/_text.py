"""Text pieces the models and the observation renderer share (both import this; it imports neither)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._models import AuditFinding

__all__ = ["caret", "finding_text"]


def finding_text(finding: AuditFinding) -> str:
    """'line 2:5: <message>' with the source line and a caret under the refused code."""
    where = f"line {finding.line}" if finding.line else "code"
    if finding.line and finding.column is not None:
        where = f"line {finding.line}:{finding.column + 1}"
    text = f"{where}: {finding.message}"
    if finding.source_line is not None:
        text += f"\n    {finding.source_line}"
        if finding.column is not None:
            text += "\n    " + caret(finding.source_line, finding.column)
    return text


def caret(source_line: str, column: int) -> str:
    # Keep tabs so the caret lines up under the same glyphs.
    prefix = "".join(ch if ch == "\t" else " " for ch in source_line[:column])
    return prefix + "^"
