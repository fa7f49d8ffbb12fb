#!/usr/bin/env python3
"""What the sandboxed default costs, against choosing `boundary="inprocess"`.

    .venv/bin/python benchmarks/default_boundary.py                  # README example and 1,000 idle sessions
    .venv/bin/python benchmarks/default_boundary.py --sessions 200   # a quick try
    .venv/bin/python benchmarks/default_boundary.py --json out.json

- The README example (`ReplEngine(limits=...)`, two cells, the observation) in a fresh interpreter: the
  wall time of the whole process, median of --repeats, for the default ("auto": the subprocess
  boundary on Linux) and for `boundary="inprocess"`; and a warm trivial call on each.
- --sessions idle sessions (each ran `x = 1`) on each: the memory they take (the host's RSS growth
  plus the USS of every child process: zygote, live workers and their checkpoint copies), the wall time
  to create them, and on the default (32 live workers; the rest hibernated to the engine's own
  temporary store) the median time to call a hibernated one again.
- A new conversation's first table (`import pandas as pd; pd.DataFrame(...).describe()`) on the
  default, with numpy and pandas preloaded in the zygote (as `genpark-repl mcp` does) and without:
  the median over 25 fresh sessions, measured first (in a host process that served nothing yet).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _proc import descendants, rss_kb, uss_kb

from genpark_repl_tools import ReplEngine

README_EXAMPLE = """
from genpark_repl_tools import Limits, ReplEngine
with ReplEngine(limits=Limits(timeout_s=5){extra}) as engine:
    engine.run("import statistics\\nprices = [12.5, 14.0, 13.25]", session="user-42")
    result = engine.run("statistics.mean(prices)", session="user-42")
    assert result.value == "13.25", result
    result.to_observation()
"""
BOUNDARIES = {"default": "", "inprocess": ', boundary="inprocess"'}


def readme_seconds(extra: str, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", README_EXAMPLE.format(extra=extra)], check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def warm_call_us(engine: ReplEngine, calls: int = 300) -> float:
    engine.run("x = 1", session="warm")
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        engine.run("x = 1", session="warm")
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def memory_mb(base_rss_kb: int) -> float:
    children = sum(uss_kb(pid) or 0 for pid in descendants(os.getpid()))
    return ((rss_kb() or 0) - base_rss_kb + children) / 1024


def idle_sessions(name: str, sessions: int) -> dict[str, Any]:
    base = rss_kb() or 0
    kwargs: dict[str, Any] = {} if name == "default" else {"boundary": "inprocess"}
    with ReplEngine(**kwargs) as engine:
        warm = warm_call_us(engine)
        started = time.perf_counter()
        for i in range(sessions):
            assert engine.run(f"x = {i}", session=f"s{i}").status == "ok"
        created = time.perf_counter() - started
        figures: dict[str, Any] = {
            "boundary": engine.boundary.name,
            "warm_call_us": round(warm),
            "create_s": round(created, 2),
            "memory_mb": round(memory_mb(base), 1),
        }
        if name == "default":
            back = []
            for i in range(0, sessions, max(1, sessions // 100)):  # oldest first: hibernated ones
                started = time.perf_counter()
                value = engine.run("x", session=f"s{i}").value
                back.append(time.perf_counter() - started)
                assert value == str(i), (i, value)
            figures["return_median_ms"] = round(statistics.median(back) * 1e3, 2)
            figures["live_workers"] = getattr(engine.boundary, "max_workers", None)
    return figures


FIRST_TABLE = "import pandas as pd\npd.DataFrame({'a': [1, 2, 3], 'b': [4.0, 5.0, 6.0]}).describe()"


def first_table_ms(preload: tuple[str, ...], sessions: int = 25, pause_s: float = 0.3) -> float:
    """A new conversation's first pandas call on the default boundary: the median over fresh
    sessions, each started --pause after the last reply (as a new user's would: the zygote has forked
    its next spare meanwhile)."""
    times = []
    with ReplEngine(preload=preload, max_workers=sessions + 2) as engine:
        engine.run("1", session="warm")
        for i in range(sessions):
            time.sleep(pause_s)
            started = time.perf_counter()
            result = engine.run(FIRST_TABLE, session=f"t{i}")
            times.append(time.perf_counter() - started)
            assert result.status == "ok" and "mean" in (result.value or ""), result
    return round(statistics.median(times) * 1e3, 1)


def main(argv: list[str] | None = None) -> int:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    figures: dict[str, Any] = {"readme_s": {}, "idle": {}}
    try:
        import pandas  # noqa: F401
    except ImportError:
        pass
    else:  # first, as in a host process that served nothing yet (not after the idle sessions below)
        figures["first_table_ms"] = {
            "preloaded": first_table_ms(("numpy", "pandas")),
            "not_preloaded": first_table_ms(()),
        }
    for name, extra in BOUNDARIES.items():
        figures["readme_s"][name] = round(readme_seconds(extra, args.repeats), 3)
    for name in BOUNDARIES:
        figures["idle"][name] = idle_sessions(name, args.sessions)
    figures["sessions"] = args.sessions
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
