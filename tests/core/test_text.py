"""The one rule for text in results (_text.py), and reserving stdout for a report (_capture.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from genpark_repl_tools import ReplEngine
from genpark_repl_tools._text import clean, escape_controls

ROOT = Path(__file__).resolve().parents[2]


class Hostile(str):
    def __str__(self) -> str:
        raise AssertionError("clean() called the subclass's __str__")

    def isascii(self) -> bool:
        raise AssertionError("clean() called the subclass's isascii")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("plain", "plain"),
        ("café ☕", "café ☕"),
        ("a\udcffb", "a\\udcffb"),
        ("\ud83d\ude00", "\\ud83d\\ude00"),  # a surrogate pair in a str is two lone surrogates
        ("nul\x00 and \x1b[0m stay", "nul\x00 and \x1b[0m stay"),
    ],
)
def test_clean_escapes_only_what_utf8_cannot_carry(text: str, expected: str) -> None:
    cleaned = clean(text)
    assert cleaned == expected
    cleaned.encode("utf-8")


def test_clean_reads_a_str_subclass_without_calling_it() -> None:
    cleaned = clean(Hostile("hi \udcff"))
    assert type(cleaned) is str
    assert cleaned == "hi \\udcff"


def test_escape_controls_keeps_tabs_and_line_ends() -> None:
    text = "\x1b[31mred\x1b[0m\tcol\r\nline\rover\x00\x7f\x9b"
    assert escape_controls(text) == "\\x1b[31mred\\x1b[0m\tcol\r\nline\\x0dover\\x00\\x7f\\x9b"
    assert escape_controls("plain\n") == "plain\n"


def test_escape_controls_is_the_one_regex_rule_for_every_character() -> None:
    # escape_controls first scans for any candidate character (a faster character class), then
    # applies _CONTROLS: the result must be what _CONTROLS alone gives, for every character up to
    # U+02FF alone, before a newline, after and before a carriage return.
    from genpark_repl_tools._text import _CONTROLS, _escape

    for code in range(0x300):
        c = chr(code)
        for text in (c, f"a{c}b\n", f"\r{c}", f"{c}\r\n", f"{c}\r", f"x\r\n{c}"):
            assert escape_controls(text) == _CONTROLS.sub(_escape, text), repr(text)


def test_captured_write_returns_what_was_written() -> None:
    with ReplEngine(boundary="inprocess", policy="trusted") as engine:
        result = engine.run("import sys\nsys.stdout.write('\\udcff'), sys.stdout.buffer.write(b'\\xff')")
    assert (result.stdout, result.value) == ("\\udcff\\xff", "(1, 1)")


RESERVE = """\
import os, sys
from genpark_repl_tools._capture import reserved_stdout
print("before", flush=True)
with reserved_stdout() as out:
    os.write(1, b"diverted\\n")
    print("printed")
    out.write(b"report\\n")
    out.flush()
os.write(1, b"after\\n")
"""


def test_reserved_stdout_sends_fd1_to_stderr_until_the_block_ends() -> None:
    done = subprocess.run(
        [sys.executable, "-c", RESERVE],
        capture_output=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT)},
        check=True,
    )
    assert done.stdout == b"before\nreport\nafter\n"
    assert done.stderr == b"diverted\nprinted\n"


@pytest.mark.parametrize("boundary", ["inprocess", "subprocess"])
def test_figure_notes_follow_the_rule(boundary: str) -> None:
    pytest.importorskip("matplotlib")
    code = "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.title('caf\\udce9')\nplt.show()"
    with ReplEngine(policy="trusted", boundary=boundary) as engine:
        result = engine.run(code)
    assert result.status == "ok"
    # matplotlib refuses to draw the title (a note says so); were it drawn, the description names it.
    texts = [*result.notes, *(a.description for a in result.attachments)]
    assert any('"caf\\udce9"' in text for text in texts), texts
    result.model_dump_json().encode("utf-8")
