#!/usr/bin/env python3
"""Durable sessions on the subprocess boundary: rollback cost per cell, hibernation memory.

    .venv/bin/python benchmarks/durable.py [--cells 20] [--sessions 1000] [--big-mb 500]

Rollback: with a store, every cell that ran is saved (a snapshot taken in the worker, signed by the
host, written to SQLite), and a cell whose worker dies rolls back to that saved state. So the cost
of rollback protection per cell is the cost of that save: the median time of a trivial cell with a
store minus without one, for a session holding 10 MB and 500 MB (one numpy array each).

Hibernation: N sessions each run one cell and are hibernated (worker stopped, state in the store);
the host's memory for them is measured with tracemalloc (Python allocations) and as the change of
the host process's RSS.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from genpark_repl_tools import Limits, ReplEngine
from genpark_repl_tools.stores import SQLiteStore

KEY = b"benchmark-key-0123456789abcdef"


def _rss_kb() -> int:
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cell_ms(engine: ReplEngine, cells: int) -> float:
    times = []
    for _ in range(cells):
        start = time.perf_counter()
        result = engine.run("counter += 1")
        times.append((time.perf_counter() - start) * 1000)
        assert result.status == "ok", result.to_observation()
    return statistics.median(times)


def rollback_cost(mb: int, cells: int, directory: Path) -> None:
    setup = f"import numpy as np\nblock = np.ones({mb} * 2**20 // 8)\ncounter = 0"
    limits = Limits(timeout_s=120)
    with ReplEngine(policy="trusted", boundary="subprocess", limits=limits) as plain:
        assert plain.run(setup).status == "ok"
        without = cell_ms(plain, cells)
    with (
        SQLiteStore.from_path(directory / f"rollback-{mb}.db") as store,
        ReplEngine(
            policy="trusted", boundary="subprocess", limits=limits, store=store, snapshot_key=KEY
        ) as e,
    ):
        assert e.run(setup).status == "ok"
        with_store = cell_ms(e, cells)
        crash = e.run("counter = -1\nimport ctypes\nctypes.string_at(0)")  # worker dies: SIGSEGV
        assert crash.rolled_back, crash.to_observation()
        start = time.perf_counter()
        assert e.run("counter").value == str(cells)
        back_ms = (time.perf_counter() - start) * 1000
    print(
        f"| rollback protection, {mb} MB session | {without:.2f} ms | {with_store:.2f} ms "
        f"| {with_store - without:+.2f} ms | (the crash's rollback itself: restore before the next cell; "
        f"next cell {back_ms:.1f} ms) |"
    )


def hibernation_memory(sessions: int, directory: Path) -> None:
    with (
        SQLiteStore.from_path(directory / "hibernate.db") as store,
        ReplEngine(policy="standard", boundary="subprocess", store=store, snapshot_key=KEY) as engine,
    ):
        engine.run("warm = 1", session="warm-up")
        engine.hibernate("warm-up")
        gc.collect()
        rss_before = _rss_kb()
        tracemalloc.start()
        base, _ = tracemalloc.get_traced_memory()
        start = time.perf_counter()
        for i in range(sessions):
            name = f"conv-{i:05d}"
            result = engine.run(f"x = {i}\nname = 'session {i}'", session=name)
            assert result.status == "ok", result.to_observation()
            assert engine.hibernate(name), name
        elapsed = time.perf_counter() - start
        gc.collect()
        traced, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        rss_after = _rss_kb()
        assert engine.sessions() == []
        assert engine.run("x", session="conv-00007").value == "7"  # one comes back
    print(
        f"| {sessions:,} hibernated sessions | host Python memory +{(traced - base) / 2**20:.2f} MB "
        f"(tracemalloc) | host RSS +{(rss_after - rss_before) / 1024:.1f} MB | "
        f"{elapsed / sessions * 1000:.1f} ms per session to run + hibernate |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=20)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--big-mb", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        print("| case | cell without store | cell with store | rollback cost | note |")
        print("| --- | --- | --- | --- | --- |")
        rollback_cost(10, args.cells, directory)
        rollback_cost(args.big_mb, max(3, args.cells // 4), directory)
        print()
        hibernation_memory(args.sessions, directory)


if __name__ == "__main__":
    main()
