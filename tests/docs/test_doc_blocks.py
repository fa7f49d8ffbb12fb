"""Every Python block in README.md and docs/*.md runs, so what the docs show is what a user gets.

Each ```python block runs on its own in a fresh interpreter, in an empty directory, with a time limit; it
passes when it exits 0. A block that cannot run here on its own says why in the line before it,
`<!-- no-run: reason -->` (it needs a chat model, a Ray cluster, a Redis host): the test reports it as
skipped with that reason, so the list stays visible. docs/benchmarks.md is left out: it is the report of
a benchmark run, and its blocks are the workloads that run executed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted(p for p in (REPO / "docs").glob("*.md") if p.name != "benchmarks.md")]
BLOCK = re.compile(r"(?:<!-- no-run: (?P<why>[^>]*?) -->\n)?```python\n(?P<code>.*?)```", re.DOTALL)
TIME_LIMIT_S = 120


def _blocks() -> list[pytest.ParameterSet]:
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start("code"))
            name = f"{path.relative_to(REPO)}:{line}"
            marks = [pytest.mark.skip(reason=f"no-run: {match['why']}")] if match["why"] else []
            found.append(pytest.param(match["code"], id=name, marks=marks))
    return found


BLOCKS = _blocks()


def test_the_docs_have_blocks_that_run() -> None:
    runnable = [block for block in BLOCKS if not block.marks]
    assert len(runnable) >= 8, [block.id for block in BLOCKS]


@pytest.mark.parametrize("code", BLOCKS)
def test_block_runs(code: str, tmp_path: Path) -> None:
    # The key a durable-sessions block reads from the environment, as the docs tell a user to set it.
    env = {**os.environ, "GENPARK_REPL_SNAPSHOT_KEY": "a key for the doc test, 32 bytes long!"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIME_LIMIT_S,
        check=False,
    )
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
