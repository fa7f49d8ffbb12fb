#!/usr/bin/env python3
"""Many conversations on one machine: workers as a cache over the session store.

    nice .venv/bin/python benchmarks/load.py                      # 10,000 conversations, SQLite and Redis
    .venv/bin/python benchmarks/load.py --conversations 1000      # a quick try (about a minute per store)
    .venv/bin/python benchmarks/load.py --store sqlite --json out.json

One `ReplEngine(boundary="subprocess", store=..., max_workers=32)` per store. Each conversation runs
one cell defining a few variables (callers at once: --callers); beyond 32, the least recently used
idle conversation hibernates to the store to free its worker. Then every conversation is called
again, one caller, in creation order, so each returns from the store (hibernating another to make
room), and its variables are checked. Figures:

- creation: wall time for all conversations (goal: 10,000 in at most 10 minutes);
- memory after creation and after the check: the host's RSS plus the USS, and plus the PSS, of its
  child processes (zygote, workers and their checkpoint copies; goal: under 4 GB);
- return to a hibernated conversation: median and 95th percentile of those calls (goals 20 / 60 ms);
- lost: conversations whose variables did not come back intact (goal: none);
- the store: bytes per conversation (one snapshot blob, and the store's own growth per conversation).

Redis: --redis-url, else a redis-server on PATH is started on a free loopback port for the run.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _proc import descendants, rss_kb, uss_kb

from genpark_repl_tools import ReplEngine
from genpark_repl_tools.stores import SessionStore, SQLiteStore

KEY = b"load-benchmark-key-0123456789abcdef"
GOALS = {"create_s_per_10k": 600.0, "memory_mb": 4096.0, "return_median_ms": 20.0, "return_p95_ms": 60.0}


def define(i: int) -> str:
    return (
        f"a = {i}\nb = 'conversation-{i}'\nc = list(range({i % 10}))\n"
        f"d = {{'id': {i}, 'tags': ['x', 'y'], 'score': {i / 7:.4f}}}\n"
    )


def expected(i: int) -> str:
    return repr(
        (i, f"conversation-{i}", list(range(i % 10)), {"id": i, "tags": ["x", "y"], "score": round(i / 7, 4)})
    )


def pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return next((int(line.split()[1]) for line in f if line.startswith("Pss:")), 0)
    except OSError:
        return 0


def memory_mb() -> tuple[float, float]:
    """The host's RSS plus its children's memory: their USS (pages one process alone maps) and
    their PSS (each shared page split among its sharers). A worker and its checkpoint copy share
    most pages, which USS counts for neither: PSS is the total to trust."""
    gc.collect()
    children = descendants(os.getpid())
    host = rss_kb() or 0
    uss = sum(uss_kb(pid) for pid in children)
    pss = sum(pss_kb(pid) for pid in children)
    return (host + uss) / 1024, (host + pss) / 1024


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_load(store: SessionStore, conversations: int, workers: int, callers: int) -> dict[str, Any]:
    with ReplEngine(boundary="subprocess", store=store, snapshot_key=KEY, max_workers=workers) as engine:
        engine.run("1", session="warm-up")  # the zygote's start is not a conversation's
        engine.close("warm-up")

        def create(i: int) -> None:
            result = engine.run(define(i), session=f"c{i}")
            if result.status != "ok":
                raise RuntimeError(f"conversation {i}: {result.to_observation()}")

        start = time.perf_counter()
        with ThreadPoolExecutor(callers) as pool:
            list(pool.map(create, range(conversations)))
        create_s = time.perf_counter() - start
        memory, memory_pss = memory_mb()
        live = engine.describe()["workers"]["live"]
        processes = len(descendants(os.getpid()))  # zygote, workers, their checkpoint copies

        returns: list[float] = []
        lost: list[int] = []
        start = time.perf_counter()
        for i in range(conversations):
            began = time.perf_counter()
            result = engine.run("a, b, c, d", session=f"c{i}")
            elapsed = (time.perf_counter() - began) * 1000
            if result.session_restored is not None:
                returns.append(elapsed)
            if result.status != "ok" or result.value != expected(i):
                lost.append(i)
        check_s = time.perf_counter() - start
        after = memory_mb()
    return {
        "conversations": conversations,
        "max_workers": workers,
        "callers": callers,
        "create_s": round(create_s, 1),
        "create_ms_each": round(create_s * 1000 / conversations, 1),
        "memory_mb_after_create": round(memory, 1),
        "memory_mb_pss_after_create": round(memory_pss, 1),
        "memory_mb_after_check": round(after[0], 1),
        "memory_mb_pss_after_check": round(after[1], 1),
        "live_workers_after_create": live,
        "child_processes_after_create": processes,
        "returns_measured": len(returns),
        "return_median_ms": round(statistics.median(returns), 1) if returns else None,
        "return_p95_ms": round(percentile(returns, 0.95), 1) if returns else None,
        "check_all_s": round(check_s, 1),
        "lost": len(lost),
        "lost_examples": lost[:10],
    }


def blob_bytes(store: SessionStore, conversations: int) -> float:
    sample = range(0, conversations, max(1, conversations // 50))
    sizes = [len(stored.data) for i in sample if (stored := store.get(f"c{i}")) is not None]
    return statistics.mean(sizes) if sizes else 0.0


def bench_sqlite(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sessions.db"
        with SQLiteStore.from_path(path, lease_wait_s=60) as store:
            figures = run_load(store, args.conversations, args.workers, args.callers)
            figures["blob_bytes_each"] = round(blob_bytes(store, args.conversations))
        size = sum(p.stat().st_size for p in Path(tmp).iterdir())
        figures["store_bytes_each"] = round(size / args.conversations)
    return {"store": "sqlite", **figures}


@contextmanager
def redis_server(url: str | None) -> Iterator[str]:
    if url is not None:
        yield url
        return
    server = shutil.which("redis-server")
    if server is None:
        raise SystemExit("redis-server is not on PATH: pass --redis-url or --store sqlite")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        argv = [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        proc = subprocess.Popen([*argv, "--dir", tmp], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.3)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait(10)


def bench_redis(args: argparse.Namespace) -> dict[str, Any]:
    import redis

    from genpark_repl_tools.stores import RedisStore

    with redis_server(args.redis_url) as url:
        client = redis.Redis.from_url(url)
        for _ in range(100):  # the server we started may take a moment
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        prefix = f"load{os.getpid()}:"
        before = int(client.info("memory")["used_memory"])
        with RedisStore(url, prefix=prefix, lease_wait_s=60) as store:
            figures = run_load(store, args.conversations, args.workers, args.callers)
            figures["blob_bytes_each"] = round(blob_bytes(store, args.conversations))
            grown = int(client.info("memory")["used_memory"]) - before
            figures["store_bytes_each"] = round(grown / args.conversations)
            for key in client.scan_iter(match=prefix + "*", count=1000):
                client.delete(key)
        client.close()
    return {"store": "redis", **figures}


def markdown(figures: dict[str, Any]) -> str:
    """The figures of one run (`--json`) as the table docs/benchmarks.md shows."""
    goals = figures["goals"]
    lines = [
        "| store | conversations (max_workers) | created in | host + workers memory | return to a hibernated "
        "one: median / p95 | lost | store per conversation |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in figures["results"]:
        memory = f"{row['memory_mb_after_create']:.0f} MB (RSS + USS)"
        if "memory_mb_pss_after_create" in row:
            memory += f", {row['memory_mb_pss_after_create']:.0f} MB (RSS + PSS)"
        lines.append(
            f"| {row['store']} | {row['conversations']:,} ({row['max_workers']}) | {row['create_s']:.0f} s "
            f"| {memory} | {row['return_median_ms']:.1f} / {row['return_p95_ms']:.1f} ms | {row['lost']} "
            f"| {row['store_bytes_each']:,} B |"
        )
    lines += [
        "",
        f"Goals: 10,000 conversations created in at most {goals['create_s_per_10k'] / 60:.0f} minutes, "
        f"host and workers under {goals['memory_mb'] / 1024:.0f} GB, a return at most "
        f"{goals['return_median_ms']:.0f} ms median and {goals['return_p95_ms']:.0f} ms at the 95th "
        "percentile, nothing lost. Every conversation's variables are checked after, each check a return "
        "from the store that hibernates another conversation to make room. USS leaves out the pages a "
        "worker shares with its checkpoint copy; PSS counts them once.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--conversations", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=32, help="max_workers")
    parser.add_argument("--callers", type=int, default=4, help="threads creating conversations at once")
    parser.add_argument("--store", choices=("sqlite", "redis", "both"), default="both")
    parser.add_argument("--redis-url", default=None)
    parser.add_argument("--json", type=Path, default=None, help="write the figures here too")
    args = parser.parse_args()
    results = []
    if args.store in ("sqlite", "both"):
        results.append(bench_sqlite(args))
        print(json.dumps(results[-1]), flush=True)
    if args.store in ("redis", "both"):
        results.append(bench_redis(args))
        print(json.dumps(results[-1]), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps({"goals": GOALS, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
