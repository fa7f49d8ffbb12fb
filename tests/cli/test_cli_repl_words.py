"""What a Python user types at a REPL does what they expect: exit, quit, help; --help lists the commands."""

from __future__ import annotations

import io

import pytest

from genpark_repl_tools import ReplEngine
from genpark_repl_tools.cli import build_parser, repl


def drive(lines: str) -> tuple[str, int]:
    stdout = io.StringIO()
    code = repl(ReplEngine(boundary="inprocess", policy="standard"), stdin=io.StringIO(lines), stdout=stdout)
    return stdout.getvalue(), code


@pytest.mark.parametrize("word", ["exit", "exit()", "quit", "quit()", "  quit()  "])
def test_exit_and_quit_leave_instead_of_being_refused(word: str) -> None:
    out, code = drive(f"x = 1\n{word}\nprint('still here')\n")
    assert code == 0
    assert "still here" not in out
    assert "Blocked" not in out


@pytest.mark.parametrize("word", ["help", "help()"])
def test_help_shows_the_repl_help(word: str) -> None:
    out, code = drive(f"{word}\n")
    assert code == 0
    assert ":vars            the session's variables" in out
    assert "Blocked" not in out


def test_inside_a_block_the_words_are_code() -> None:
    out, _ = drive("if True:\n    quit = 5\n\nquit\n")
    # `quit` alone at the prompt leaves; inside the block it was an assignment that ran.
    assert "Variables: created quit (int)" in out


def test_help_option_lists_the_repl_commands_and_the_default_policy() -> None:
    text = build_parser().format_help()
    for command in (":vars", ":inspect NAME", ":reset", ":policy [NAME]", ":quit"):
        assert command in text
    assert "default: standard" in " ".join(text.split())  # argparse wraps option help
    assert "6 cancelled" in text
