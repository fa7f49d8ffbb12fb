"""The host-tools benchmark runs and reports a figure per boundary, policy and tool, against its goal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parents[2] / "benchmarks" / "host_tools.py"


def test_the_benchmark_reports_each_case_and_its_goal(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--calls", "40", "--rounds", "1", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())["rows"]
    cases = {(r["boundary"], r["policy"], r["tool"]) for r in rows}
    assert ("inprocess", "standard", "search") in cases and ("inprocess", "trusted", "ping") in cases
    if sys.platform.startswith("linux"):
        assert ("subprocess", "standard", "search") in cases
    assert all(r["goal_us"] in (50.0, 300.0) and isinstance(r["per_call_us"], float) for r in rows)
    assert "| inprocess | standard | `search` |" in done.stdout
