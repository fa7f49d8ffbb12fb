"""The REPL's :fork and :session: a person copies the session, tries something in the copy, goes back."""

from __future__ import annotations

import io

from genpark_repl_tools import ReplEngine
from genpark_repl_tools.cli import repl


def drive(lines: str) -> str:
    stdout = io.StringIO()
    engine = ReplEngine(boundary="inprocess", policy="trusted")
    assert repl(engine, stdin=io.StringIO(lines), stdout=stdout) == 0
    return stdout.getvalue()


def test_fork_goes_on_in_a_copy_and_session_goes_back() -> None:
    out = drive(
        "x = 1\n"
        ":fork\n"
        "x = 2\n"
        "print('in copy', x)\n"
        ":session\n"
        ":session repl\n"
        "print('in original', x)\n"
        ":fork trial\n"
        ":fork trial\n"
        ":session nowhere\n"
    )
    assert "Forked: the new session holds a copy of this one" in out
    assert "Now in session 'repl-2' (:session repl goes back)." in out
    assert "in copy 2" in out and "in original 1" in out
    assert "Sessions: repl, repl-2 (current)." in out
    assert "Now in session 'trial'" in out
    assert "Session 'trial' exists; :fork with another name." in out
    assert "No session 'nowhere'; :session lists them, :fork makes one." in out


def test_fork_before_any_code_says_why_and_stays() -> None:
    out = drive(":fork\nx = 3\nprint('still', x)\n:session\n")
    assert "Tool failure" in out and "Now in session" not in out
    assert "still 3" in out and "Sessions: repl (current)." in out
