#!/usr/bin/env python3
"""What streaming costs: a cell printing 100 KB, `engine.stream` against `engine.run`.

    .venv/bin/python benchmarks/streaming.py [--seconds 5] [--boundary inprocess]

For each boundary and output bound, the same engine and session run the cell with `run` and with
`stream` (every event consumed) in alternating rounds; "overhead" is the median over rounds of
stream / run - 1, in wall-clock time and in process CPU time (all threads). Goal: <= 10 %.
Streaming runs the code on a worker thread and hands the result back to the caller's: on a busy
machine the wall time includes the scheduler's latency for those two hand-offs (as `arun`'s does),
which CPU time leaves out. With the default bound (20,000 characters per stream) the stream goes
quiet after the first 20,000 characters, as the result does; with a 200,000-character bound all
100 KB are streamed.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

CELL = "for i in range(2000):\n    print(f'{i:6d} ' + 'x' * 42)\n"  # 2,000 lines of 50 characters
BOUNDS = {"default bound (20,000)": None, "bound 200,000 (all streamed)": 200_000}


def _time_run(engine: Any) -> tuple[float, float]:
    start, cpu = time.perf_counter(), time.process_time()
    result = engine.run(CELL)
    elapsed = time.perf_counter() - start, time.process_time() - cpu
    assert result.status == "ok", result.error
    return elapsed


def _time_stream(engine: Any) -> tuple[float, float]:
    start, cpu = time.perf_counter(), time.process_time()
    streamed = 0
    for event in engine.stream(CELL):
        if event.kind == "output":
            streamed += len(event.text)
        elif event.kind == "result":
            assert event.result.status == "ok", event.result.error
    elapsed = time.perf_counter() - start, time.process_time() - cpu
    assert streamed == min(100_000, engine.limits.max_output_chars), streamed
    return elapsed


def measure(boundary: str, bound: int | None, seconds: float) -> dict[str, float]:
    from genpark_repl_tools import Limits, ReplEngine

    limits = Limits() if bound is None else Limits(max_output_chars=bound)
    with ReplEngine(policy="standard", boundary=boundary, limits=limits) as engine:
        for _ in range(3):  # warm: a worker, the cell's compilation, the thread pool
            _time_run(engine)
            _time_stream(engine)
        runs, streams, ratios, cpu_ratios = [], [], [], []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline or len(ratios) < 5:
            r, r_cpu = _time_run(engine)
            s, s_cpu = _time_stream(engine)
            runs.append(r)
            streams.append(s)
            ratios.append(s / r)
            if r_cpu > 0:
                cpu_ratios.append(s_cpu / r_cpu)
    return {
        "run_ms": statistics.median(runs) * 1000,
        "stream_ms": statistics.median(streams) * 1000,
        "overhead_pct": (statistics.median(ratios) - 1) * 100,
        "cpu_overhead_pct": (statistics.median(cpu_ratios) - 1) * 100 if cpu_ratios else float("nan"),
        "rounds": len(ratios),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--boundary", action="append", choices=["inprocess", "subprocess"])
    args = parser.parse_args()
    print(
        "| boundary | output bound | run, median (ms) | stream, median (ms) | wall overhead, median "
        "| CPU overhead, median | rounds |"
    )
    print("|---|---|---|---|---|---|---|")
    for boundary in args.boundary or ["inprocess", "subprocess"]:
        for label, bound in BOUNDS.items():
            row = measure(boundary, bound, args.seconds)
            print(
                f"| {boundary} | {label} | {row['run_ms']:.2f} | {row['stream_ms']:.2f} | "
                f"{row['overhead_pct']:+.1f} % | {row['cpu_overhead_pct']:+.1f} % | {row['rounds']} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
