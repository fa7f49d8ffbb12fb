"""One rule for the text a run puts in its result, whatever the code printed, returned or named.

Every string of an `ExecutionResult` is an exact `str` that encodes to UTF-8, so any transport
(JSON-RPC over a pipe, a terminal, a LangChain artifact) can carry it, and both boundaries give the
same text: what is not text becomes a Python backslash escape, as the subprocess worker writes it.

- lone surrogates (`'\\udcff'`, from bytes decoded with `surrogateescape`) become `\\udcff`;
- bytes that are not UTF-8 (`sys.stdout.buffer.write(b'\\xff')`) become `\\xff`;
- a `str` subclass (from a `__repr__`) becomes a plain `str`, read without calling its methods.

Control characters (NUL, ANSI escape sequences) are valid text: the result keeps them as written.
The observation for a model shows them as escapes (`escape_controls`), so a model sees `\\x1b[31m`
and a terminal showing the observation is not driven by the code's output.

Also the small text pieces the models and the observation renderer share (`caret`, `finding_text`):
both import this module; it imports neither.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._models import AuditFinding

__all__ = ["BYTES_ERRORS", "caret", "clean", "escape_controls", "escape_name", "finding_text"]

# How bytes that are not UTF-8 are decoded, everywhere output is read as bytes.
BYTES_ERRORS = "backslashreplace"


def clean(text: str) -> str:
    """`text` as a plain str that encodes to UTF-8 (lone surrogates as backslash escapes)."""
    if type(text) is not str:
        text = str.__str__(text)  # a copy as a plain str; the subclass's own methods never run
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


# C0 controls except tab and newline (a carriage return only when it does not end a line), DEL, and
# C1 controls (U+0080-U+009F: a terminal may read U+009B as the start of an escape sequence).
_CONTROLS = re.compile("\r(?!\n)|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def _escape(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


# Every character _CONTROLS may escape, \r included: one character class, which the regex engine
# scans about three times as fast as the alternation with a lookahead (every observation is checked).
_ANY_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def escape_controls(text: str) -> str:
    """Control characters as `\\xNN` escapes (tab, newline and CRLF line ends stay as they are)."""
    if _ANY_CONTROL.search(text) is None or _CONTROLS.search(text) is None:
        return text
    return _CONTROLS.sub(_escape, text)


# In a name every control character is escaped, newline and tab too, and the Unicode line and
# paragraph separators: a name the session chose is one line wherever it is shown, so it cannot
# forge the lines after it (a file named "x\nNote: ..." in the observation's Files: line).
_NAME_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _escape_any(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def escape_name(name: str) -> str:
    """A name (of a file, variable or figure) on one line: its control characters as escapes."""
    if _NAME_CONTROLS.search(name) is None:
        return name
    return _NAME_CONTROLS.sub(_escape_any, name)


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
