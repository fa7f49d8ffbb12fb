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
