"""Benchmark of the Ray boundary against the local subprocess boundary, on one machine.

    .venv/bin/python benchmarks/ray_bench.py            # full run (~1-2 min on a quiet machine)
    .venv/bin/python benchmarks/ray_bench.py --quick --json out.json

Rows (medians unless said otherwise):
    call_ms            a trivial call (`1`) on a warm session: subprocess, ray, and what Ray adds (the
                       median over rounds of the difference of the two, timed in alternating batches so
                       that load from other processes hits both alike; the goal is at most 1 ms). The
                       local cluster's hosts are on this machine: calls take their lanes (docs/ray.md)
    ray_actor_round_trip_ms  a no-op actor call in the same rounds: what a call through Ray pays
    call_ms_*_no_checkpoints the same with checkpoints=False on both sides
    call_ms_*_through_ray    the same with lane=False: every call through Ray, as to a host on
                       another machine (checkpoints on)
    new_session_ms     the first call of a new session (placement + worker start): subprocess, ray
    pss_mb_per_session proportional memory of one idle session's worker (after `import json`)
    sessions_per_node  how many such sessions fit in a fixed memory budget per node (--budget-mb)
    throughput         calls/s of independent sessions run in parallel, with 1 and with 2 nodes

All nodes of the local cluster share this machine's cores, so the 2-node throughput row shows the
cost of spreading, not the gain of a second machine. Needs the `ray` extra (without it: exit status 2
and a message, so benchmarks/run.py skips these figures).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from genpark_repl_tools import Limits, ReplEngine

NODE_ARGS: dict[str, Any] = {"num_cpus": 1, "object_store_memory": 100 * 1024 * 1024}
CELL = "sum(range(20_000))"
CALL_GOAL_MS = 1.0  # what Ray may add to a warm call over the local subprocess boundary


def _median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 3)


class Noop:
    """An actor that does nothing: its round trip is Ray's own share of a call, the floor of what the
    boundary can add."""

    def ping(self) -> None:
        return None


def _call_ms(local: ReplEngine, remote: ReplEngine, noop: Any, rounds: int, n: int) -> dict[str, float]:
    """A warm call on each engine, in alternating batches of `n`: the medians of the batch medians,
    and the median over rounds of the difference (so a burst of load hits both sides of a round);
    and the round trip of a no-op actor call, timed in the same rounds."""
    import ray

    def actor_call() -> None:
        ray.get(noop.ping.remote())

    def batch(run: Any) -> float:
        samples = []
        for _ in range(n):
            started = time.perf_counter()
            run()
            samples.append(time.perf_counter() - started)
        return statistics.median(samples)

    steps = {
        "local": lambda: local.run("1", session="warm"),
        "ray": lambda: remote.run("1", session="warm"),
        "actor": actor_call,
    }
    for step in steps.values():
        for _ in range(10):
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for i in range(rounds):
        for name in list(steps)[:: 1 if i % 2 == 0 else -1]:
            times[name].append(batch(steps[name]))
    added = [b - a for a, b in zip(times["local"], times["ray"], strict=True)]
    return {
        "call_ms_subprocess": _median_ms(times["local"]),
        "call_ms_ray": _median_ms(times["ray"]),
        "call_ms_added_by_ray": _median_ms(added),
        "ray_actor_round_trip_ms": _median_ms(times["actor"]),
    }


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
    try:
        import ray
        from ray.cluster_utils import Cluster
    except ImportError:
        print("ray_bench needs the ray extra: pip install genpark-repl-tools[ray]", file=sys.stderr)
        return 2
    (rounds, n_calls), n_new, n_mem = ((6, 30), 5, 3) if args.quick else ((20, 50), 15, 6)
    tp_sessions, tp_calls = (4, 10) if args.quick else (8, 40)
    limits = Limits(timeout_s=30)
    rows: dict[str, Any] = {"quick": args.quick, "loadavg_start": _load()}

    with ReplEngine(boundary="subprocess", policy="trusted", limits=limits) as local:
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
        with (
            ReplEngine(boundary="ray", policy="trusted", limits=limits, sessions_per_node=None) as two,
            ReplEngine(boundary="subprocess", policy="trusted", limits=limits) as local,
        ):
            noop = ray.remote(Noop).options(num_cpus=0).remote()
            calls = _call_ms(local, two, noop, rounds, n_calls)
            ray_new = _new_session_ms(two, n_new, "new")
            ray_pss = _pss_mb(two, n_mem)
            rows["throughput_ray_2_nodes_calls_s"] = _throughput(two, tp_sessions, tp_calls)
            # The same without checkpoints: a worker forks its checkpoint after each reply, and on a
            # loaded machine that fork competes for the CPU with Ray's handling of the reply.
            plain: dict[str, Any] = {"policy": "trusted", "limits": limits, "checkpoints": False}
            with (
                ReplEngine(boundary="ray", sessions_per_node=None, **plain) as two_plain,
                ReplEngine(boundary="subprocess", **plain) as local_plain,
            ):
                no_checkpoints = _call_ms(local_plain, two_plain, noop, rounds, n_calls)
            # Without lanes: what a call to a host on another machine pays (Ray's round trip).
            with ReplEngine(
                boundary="ray", policy="trusted", limits=limits, sessions_per_node=None, lane=False
            ) as two_ray:
                through_ray = _call_ms(local, two_ray, noop, rounds, n_calls)
    finally:
        ray.shutdown()
        cluster.shutdown()

    rows.update(
        {
            **calls,
            **{f"{k}_no_checkpoints": v for k, v in no_checkpoints.items() if k.startswith("call_ms")},
            **{f"{k}_through_ray": v for k, v in through_ray.items() if k.startswith("call_ms")},
            "call_goal_ms": CALL_GOAL_MS,
            "call_rounds": rounds,
            "new_session_ms_subprocess": sub_new,
            "new_session_ms_ray": ray_new,
            "pss_mb_per_session_subprocess": sub_pss,
            "pss_mb_per_session_ray": ray_pss,
            "budget_mb_per_node": args.budget_mb,
            "sessions_per_node_at_budget": int(args.budget_mb // max(ray_pss, 0.1)),
            "throughput_sessions": tp_sessions,
            "throughput_cell": CELL,
            "loadavg_end": _load(),
            "cores": os.cpu_count(),
        }
    )
    width = max(len(k) for k in rows)
    for key, value in rows.items():
        print(f"{key:<{width}}  {value}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


def _load() -> float | None:
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def markdown(rows: dict[str, Any]) -> str:
    """The figures as the section of docs/benchmarks.md (benchmarks/_report.py)."""
    added, goal = rows["call_ms_added_by_ray"], rows["call_goal_ms"]
    sessions = rows["throughput_sessions"]
    lines = [
        "| figure | subprocess (local) | ray | goal |",
        "|---|---|---|---|",
        f"| warm call (`1`), median | {rows['call_ms_subprocess']:.2f} ms | {rows['call_ms_ray']:.2f} ms | |",
        f"| what Ray adds to a warm call | | {added:.2f} ms | at most {goal:g} ms: "
        f"{'met' if added <= goal else 'missed'} |",
        f"| the same without checkpoints | {rows['call_ms_subprocess_no_checkpoints']:.2f} ms "
        f"| {rows['call_ms_ray_no_checkpoints']:.2f} ms "
        f"(adds {rows['call_ms_added_by_ray_no_checkpoints']:.2f} ms) | |",
        f"| the same through Ray (`lane=False`, as to a host on another machine) "
        f"| {rows['call_ms_subprocess_through_ray']:.2f} ms | {rows['call_ms_ray_through_ray']:.2f} ms "
        f"(adds {rows['call_ms_added_by_ray_through_ray']:.2f} ms) | |",
        f"| Ray's own round trip (a no-op actor call), median "
        f"| | {rows['ray_actor_round_trip_ms']:.2f} ms | |",
        f"| new session's first call, median | {rows['new_session_ms_subprocess']:.1f} ms "
        f"| {rows['new_session_ms_ray']:.1f} ms | |",
        f"| idle session's worker (PSS, after `import json`) "
        f"| {rows['pss_mb_per_session_subprocess']:.1f} MB | {rows['pss_mb_per_session_ray']:.1f} MB | |",
        f"| idle sessions in {rows['budget_mb_per_node']:,} MB per node | "
        f"| {rows['sessions_per_node_at_budget']:,} | |",
        f"| throughput, {sessions} sessions in parallel (`{rows['throughput_cell']}`) "
        f"| {rows['throughput_subprocess_calls_s']:.0f} calls/s "
        f"| {rows['throughput_ray_1_node_calls_s']:.0f} calls/s (1 node), "
        f"{rows['throughput_ray_2_nodes_calls_s']:.0f} calls/s (2 nodes) | |",
        "",
        "A local Ray cluster (`ray.cluster_utils.Cluster`, one CPU per node) on this machine. What Ray adds "
        f"is the median over {rows['call_rounds']} rounds of the difference between the two boundaries' "
        "warm calls, timed in alternating batches so that load from other processes hits both alike. "
        "Every host of this cluster is on the driver's machine, so plain calls take the hosts' lanes (a "
        "Unix socket each) and skip Ray's round trip; with `lane=False` every call pays that round "
        "trip, as a call to a host on another machine does (plus the network). "
        "Without checkpoints, the worker's fork of a checkpoint after each reply does not compete with "
        "Ray's handling of that reply for the CPU (on a loaded machine that competition counts as Ray's "
        "cost). The "
        "2-node throughput shares this machine's cores: it shows the cost of spreading, not the gain of a "
        "second machine.",
    ]
    load = (rows.get("loadavg_start"), rows.get("loadavg_end"))
    if None not in load:
        lines[-1] += f" 1-minute load average {load[0]:.2f} \N{RIGHTWARDS ARROW} {load[1]:.2f}"
        lines[-1] += f" on {rows['cores']} cores." if rows.get("cores") else "."
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
