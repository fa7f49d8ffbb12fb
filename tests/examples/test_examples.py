"""Every example runs, offline, and shows what it claims to show."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=240, check=False
    )


def test_quickstart() -> None:
    done = _run("examples/quickstart.py")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "mean: 13.8125\nOut: 15.5" in out
    assert "Error: NameError: name 'prices' is not defined" in out
    assert "Blocked by policy 'standard'" in out
    assert "Timeout: execution stopped after" in out
    assert "Out: (True, 4)" in out
    assert "big: list, len 1000000" in out
    assert ">>> import subprocess\n" in out  # each step shows the code it ran


def test_data_analysis_saves_a_png(tmp_path: Path) -> None:
    image = tmp_path / "plot.png"
    done = _run("examples/data_analysis.py", str(image))
    assert done.returncode == 0, done.stderr
    assert image.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert 'Attached image/png 700x400: figure 1 "Monthly revenue by region"' in done.stdout


def test_data_analysis_leaves_nothing_where_it_runs(tmp_path: Path) -> None:
    # Run as the README says, from the top of a clone: the plot goes to the temporary directory.
    clone, temp = tmp_path / "clone", tmp_path / "temp"
    clone.mkdir()
    temp.mkdir()
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples/data_analysis.py")],
        cwd=clone,
        env={**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert list(clone.iterdir()) == []
    image = temp / "genpark-repl-examples" / "data_analysis.png"
    assert f"to {image}\n" in done.stdout
    assert image.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_langchain_agent_offline() -> None:
    done = _run("examples/langchain_agent.py")
    assert done.returncode == 0, done.stderr
    assert "Out: 'Mar'" in done.stdout
    assert "Out: 31.7" in done.stdout
