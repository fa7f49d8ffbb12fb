"""examples/llamaindex_agent.py runs offline, as a user would run it, and shows what it promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "llamaindex_agent.py"


@pytest.mark.slow
def test_example_runs_offline_and_keeps_sessions_per_conversation() -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    alice, rest = out.split("[bob] user:", 1)
    bob, restored = rest.split("[alice, restored] user:", 1)
    # Turn 2 uses the variable from turn 1; the error of turn 3 comes back and is fixed.
    assert "Out: 14.0" in alice
    assert "Out: 4" in alice
    assert "IndexError: list index out of range" in alice
    assert "Out: [12.0, -5.4, 17.0, -4.8]" in alice
    # Another conversation does not see it; the restored one does.
    assert "NameError: name 'prices' is not defined" in bob
    assert "Out: 14.0" in restored
    assert out.rstrip().endswith("sessions: 2; closing bob's: True\nsessions: 1")
    assert proc.stderr == ""


@pytest.mark.slow
def test_code_mode_example_runs_offline() -> None:
    example = EXAMPLE.with_name("code_mode_llamaindex.py")
    proc = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=240, check=False
    )
    assert proc.returncode == 0, proc.stderr
    # The tool ran once, on the host; step 2 used step 1's variable.
    assert proc.stdout.count("[host] find_orders('open')") == 1
    assert "answer: From the orders: big: [3, 4] open total: 325.5\n" in proc.stdout
    assert proc.stdout.endswith("session variables: open_orders, big\n")
