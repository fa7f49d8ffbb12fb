"""Benchmark of the Ray boundary against the local subprocess boundary, on one machine.

    .venv/bin/python benchmarks/ray_bench.py            # full run (~1-2 min on a quiet machine)
    .venv/bin/python benchmarks/ray_bench.py --quick --json out.json

Rows (medians unless said otherwise):
    call_ms            a trivial call (`1`) on a warm session: subprocess, ray, and the difference
    new_session_ms     the first call of a new session (placement + worker start): subprocess, ray
    pss_mb_per_session proportional memory of one idle session's worker (after `import json`)
    sessions_per_node  how many such sessions fit in a fixed memory budget per node (--budget-mb)
    throughput         calls/s of independent sessions run in parallel, with 1 and with 2 nodes

All nodes of the local cluster share this machine's cores, so the 2-node throughput row shows the
cost of spreading, not the gain of a second machine. Needs the `ray` extra.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import ray
from ray.cluster_utils import Cluster

from genpark_repl_tools import Limits, ReplEngine

NODE_ARGS: dict[str, Any] = {"num_cpus": 1, "object_store_memory": 100 * 1024 * 1024}
CELL = "sum(range(20_000))"


def _median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 3)


def _call_ms(engine: ReplEngine, n: int) -> float:
    engine.run("1", session="warm")
    for _ in range(10):
        engine.run("1", session="warm")
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        engine.run("1", session="warm")
        samples.append(time.perf_counter() - started)
    return _median_ms(samples)


def _new_session_ms(engine: ReplEngine, n: int, prefix: str) -> float:
    samples = []
    for i in range(n):
        started = time.perf_counter()
        engine.run("1", session=f"{prefix}-{i}")
        samples.append(time.perf_counter() - started)
        engine.close(f"{prefix}-{i}")
    return _median_ms(samples)


def _pss_mb(engine: ReplEngine, n: int) -> float:
    values = []
    for i in range(n):
        pid = engine.run("import json, os\nos.getpid()", session=f"mem-{i}").value
        assert pid is not None
        text = Path(f"/proc/{int(pid)}/smaps_rollup").read_text()
        pss_kb = next(int(line.split()[1]) for line in text.splitlines() if line.startswith("Pss:"))
        values.append(pss_kb / 1024)
    for i in range(n):
        engine.close(f"mem-{i}")
    return round(statistics.median(values), 2)


def _throughput(engine: ReplEngine, sessions: int, calls: int) -> float:
    for s in range(sessions):
        engine.run("1", session=f"tp-{s}")
    barrier = threading.Barrier(sessions + 1)

    def work(s: int) -> None:
        barrier.wait()
        for _ in range(calls):
            result = engine.run(CELL, session=f"tp-{s}")
            assert result.status == "ok", result

    threads = [threading.Thread(target=work, args=(s,)) for s in range(sessions)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    return round(sessions * calls / elapsed, 1)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument("--json", type=Path, help="write the rows here too")
    parser.add_argument("--budget-mb", type=int, default=4096, help="memory budget per node for sessions")
    args = parser.parse_args()
    n_calls, n_new, n_mem = (50, 5, 3) if args.quick else (300, 15, 6)
    tp_sessions, tp_calls = (4, 10) if args.quick else (8, 40)
    limits = Limits(timeout_s=30)
    rows: dict[str, Any] = {"quick": args.quick}

    with ReplEngine(boundary="subprocess", policy="trusted", limits=limits) as local:
        sub_call = _call_ms(local, n_calls)
        sub_new = _new_session_ms(local, n_new, "new")
        sub_pss = _pss_mb(local, n_mem)
        rows["throughput_subprocess_calls_s"] = _throughput(local, tp_sessions, tp_calls)

    cluster = Cluster(initialize_head=True, head_node_args={**NODE_ARGS, "include_dashboard": False})
    try:
        ray.init(address=cluster.address, namespace="genpark-repl", log_to_driver=False)
        with ReplEngine(boundary="ray", policy="trusted", limits=limits, sessions_per_node=None) as one:
            rows["throughput_ray_1_node_calls_s"] = _throughput(one, tp_sessions, tp_calls)
        cluster.add_node(**NODE_ARGS)
        cluster.wait_for_nodes(timeout=60)
        with ReplEngine(boundary="ray", policy="trusted", limits=limits, sessions_per_node=None) as two:
            ray_call = _call_ms(two, n_calls)
            ray_new = _new_session_ms(two, n_new, "new")
            ray_pss = _pss_mb(two, n_mem)
            rows["throughput_ray_2_nodes_calls_s"] = _throughput(two, tp_sessions, tp_calls)
    finally:
        ray.shutdown()
        cluster.shutdown()

    rows.update(
        {
            "call_ms_subprocess": sub_call,
            "call_ms_ray": ray_call,
            "call_ms_added_by_ray": round(ray_call - sub_call, 3),
            "new_session_ms_subprocess": sub_new,
            "new_session_ms_ray": ray_new,
            "pss_mb_per_session_subprocess": sub_pss,
            "pss_mb_per_session_ray": ray_pss,
            "budget_mb_per_node": args.budget_mb,
            "sessions_per_node_at_budget": int(args.budget_mb // max(ray_pss, 0.1)),
            "throughput_sessions": tp_sessions,
            "throughput_cell": CELL,
        }
    )
    width = max(len(k) for k in rows)
    for key, value in rows.items():
        print(f"{key:<{width}}  {value}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
