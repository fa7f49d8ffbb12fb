"""The interactive REPL prints a cell's output as the cell runs, not when it ends."""

from __future__ import annotations

import re
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
        # The gate is in the test's directory in-process, and in the worker's workspace on the subprocess
        # boundary: a sandboxed worker need not see the test's own directories.
        where = repr(str(tmp_path)) if boundary == "inprocess" else "os.getcwd()"
        term.send(f"import os, pathlib, time; gate = pathlib.Path({where}, 'gate'); str(gate)")
        term.expect(">>> ")
        found = re.findall(r"Out: '([^']+)'", term.seen.decode())
        assert found, term.seen[-600:]
        gate = Path(found[-1])
        # The cell prints, then waits until the test creates a file: the output can only be on the
        # screen before the file exists if it was printed live.
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
