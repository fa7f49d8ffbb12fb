"""Real processes: a session restored in a fresh process (SQLite, Redis); two processes racing for one
session through Redis run one at a time and lose no update."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
WORKER = HERE / "_proc_worker.py"

DEFINE = """
import math
def fact(n):
    return 1 if n < 2 else n * fact(n - 1)
class Circle:
    def __init__(self, r):
        self.r = r
    def area(self):
        return round(math.pi * self.r ** 2, 3)
shapes = [Circle(1), Circle(2)]
counter = lambda xs: {x: xs.count(x) for x in set(xs)}
"""
USE = "fact(6), [s.area() for s in shapes], counter('abca')['a'], math.floor(2.5)"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    return env


def run_worker(spec: str, policy: str, session: str, *cells: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, str(WORKER), spec, policy, session, *cells],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results: list[dict[str, Any]] = json.loads(done.stdout)
    return results


@pytest.fixture(params=["sqlite", "redis"])
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:{tmp_path / 'sessions.db'}"
    url = request.getfixturevalue("redis_url")
    prefix = request.getfixturevalue("redis_prefix")
    return f"redis:{url}#{prefix}"


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["standard", "trusted"])
def test_a_fresh_process_restores_the_session(store_spec: str, policy: str) -> None:
    (defined,) = run_worker(store_spec, policy, "conv-1", DEFINE)
    assert defined["status"] == "ok"
    (used,) = run_worker(store_spec, policy, "conv-1", USE)
    assert used["status"] == "ok", used
    assert used["value"] == "(720, [3.142, 12.566], 2, 2)"
    restored = used["session_restored"]
    assert restored is not None and {"fact", "Circle", "shapes", "counter", "math"} <= set(
        restored["restored"]
    )
    assert used["execution_count"] == 2
    assert any("restored from its snapshot" in note for note in used["notes"])


@pytest.mark.slow
def test_two_processes_racing_through_redis_take_turns(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    spec = f"redis:{redis_url}#{redis_prefix}"
    log = tmp_path / "log.txt"
    (setup,) = run_worker(spec, "trusted", "shared", "counter = 0\nseen = []")
    assert setup["status"] == "ok"

    def cell(tag: str) -> str:
        return (
            f"with open({str(log)!r}, 'a') as f:\n    f.write('start {tag}\\n')\n"
            "import time\ntime.sleep(0.05)\n"
            f"counter += 1\nseen.append({tag!r})\n"
            f"with open({str(log)!r}, 'a') as f:\n    f.write('end {tag}\\n')\n"
        )

    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), spec, "trusted", "shared", *[cell(tag)] * 5],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        for tag in ("A", "B")
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        assert all(r["status"] == "ok" for r in json.loads(out))
    words = log.read_text().split()  # "start A end A start B end B ..."
    runs = [words[i : i + 4] for i in range(0, len(words), 4)]
    assert len(runs) == 10
    for start, tag, end, same_tag in runs:
        assert (start, end, same_tag) == ("start", "end", tag), words  # never two runs at once
    (final,) = run_worker(spec, "trusted", "shared", "counter, sorted(seen)")
    assert final["value"] == "(10, ['A', 'A', 'A', 'A', 'A', 'B', 'B', 'B', 'B', 'B'])"  # no update lost
