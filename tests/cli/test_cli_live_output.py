"""The interactive REPL prints a cell's output as the cell runs, not when it ends."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from test_cli_repl import repl_terminal


@pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")
@pytest.mark.parametrize("boundary", ["inprocess", "subprocess"])
def test_output_appears_while_the_cell_runs(tmp_path: Path, boundary: str) -> None:
    term = repl_terminal(tmp_path, "--policy", "trusted", "--timeout", "60", "--boundary", boundary)
    try:
        term.expect(">>> ")
        term.send("import pathlib, time")
        term.expect(">>> ")
        # The cell prints, then waits until the test creates a file: the output can only be on the
        # screen before the file exists if it was printed live.
        gate = tmp_path / "gate"
        term.send(f"gate = pathlib.Path({str(gate)!r})")
        term.expect(">>> ")
        for line in ("if True:", "    print('live', 1 + 1)", "    while not gate.exists(): time.sleep(0.02)"):
            term.send(line)
            term.expect("... ")
        term.send("    print('through')")
        term.expect("... ")
        term.send("")
        term.expect("live 2")  # printed while the cell is still waiting for the gate
        assert not gate.exists()
        gate.touch()
        term.expect("through")
        term.expect(">>> ")
        term.send(":quit")
    finally:
        code = term.close()
    assert code == 0


@pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")
def test_output_shown_live_is_not_called_no_output(tmp_path: Path) -> None:
    # On a terminal the output is printed as it comes and left out of the observation after it;
    # the status line must still say the cell had output.
    term = repl_terminal(tmp_path, "--policy", "trusted", "--boundary", "inprocess")
    failed = True
    try:
        term.expect(">>> ")
        term.send("print(6 * 7)")
        term.expect("42")
        term.expect(">>> ")
        after = term.seen.decode().rsplit("42", 1)[1]
        assert "no output" not in after, after
        assert "OK" in after, after
        # A cell with nothing to show still gets the hint.
        term.send("x = 1")
        term.expect("no output")
        term.expect(">>> ")
        term.send(":quit")
        failed = False
    finally:
        code = term.close(failed)
    assert code == 0
