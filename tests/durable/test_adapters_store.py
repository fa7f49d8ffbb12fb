"""The framework adapters over an engine with a store: a thread resumed in another process finds its
variables (two real processes, one SQLite file)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
SCRIPT = HERE / "_adapter_proc.py"
pytestmark = pytest.mark.slow


def call(adapter: str, db: Path, thread: str, code: str) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, str(SCRIPT), adapter, str(db), thread, code],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.parametrize("adapter", ["langchain", "llamaindex"])
def test_a_thread_resumed_in_another_process_finds_its_variables(adapter: str, tmp_path: Path) -> None:
    pytest.importorskip(
        "langchain_genpark_repl" if adapter == "langchain" else "llama_index.tools.genpark_repl"
    )
    db = tmp_path / "sessions.db"
    first = call(adapter, db, "thread-7", "def total(xs):\n    return sum(xs)\nprices = [3, 4, 5]")
    assert "ok" in first.lower() and "prices" in first
    second = call(adapter, db, "thread-7", "total(prices)")
    assert "12" in second
    assert "restored from its snapshot" in second and "total, prices" in second
    other = call(adapter, db, "thread-8", "prices")
    assert "NameError" in other  # another thread is another session
