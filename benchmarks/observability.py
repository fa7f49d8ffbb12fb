#!/usr/bin/env python3
"""What observability adds to a trivial call: `engine.run("x = 1")`, in-process, `standard`.

    .venv/bin/python benchmarks/observability.py [--seconds 3]

Each row runs in a fresh process (a global tracer provider can be set only once per process) and
times the configuration against an engine with `tracing=False` in the same process, in alternating
rounds of process CPU time, so load from other processes hits both sides alike. "added" is the median
over rounds of (row - baseline) per call. Goal: <= 5 us added when no exporter is configured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any

ROWS = {
    "default (auto; OpenTelemetry not imported)": "auto",
    "auto; API imported, no provider set": "api-only",
    "SDK provider, no exporter": "sdk",
    "SDK provider + in-memory exporter": "sdk-export",
    "history on (max_history_cells=100)": "history",
}


def _engine_for(kind: str) -> Any:
    from genpark_repl_tools import Limits, ReplEngine

    if kind == "history":
        return ReplEngine(boundary="inprocess", tracing=False, limits=Limits(max_history_cells=100))
    if kind == "auto":
        return ReplEngine(boundary="inprocess")
    from opentelemetry import trace

    if kind == "api-only":
        return ReplEngine(boundary="inprocess")
    from opentelemetry.sdk.trace import TracerProvider

    provider = TracerProvider()
    if kind == "sdk-export":
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exporter = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return ReplEngine(boundary="inprocess")


def _batch(engine: Any, n: int) -> float:
    run = engine.run
    start = time.process_time()
    for _ in range(n):
        run("x = 1")
    return (time.process_time() - start) / n


def measure(kind: str, seconds: float) -> dict[str, float]:
    from genpark_repl_tools import ReplEngine

    base = ReplEngine(boundary="inprocess", tracing=False)  # what observing costs the host alone
    other = _engine_for(kind)
    for engine in (base, other):
        engine.run("x = 1")
        _batch(engine, 200)
    n = 500
    deltas, base_times, other_times = [], [], []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        b = _batch(base, n)
        o = _batch(other, n)
        base_times.append(b)
        other_times.append(o)
        deltas.append(o - b)
        # Sessions keep their history: start over so the two sides stay alike.
        base.close("default")
        other.close("default")
    if kind in ("sdk", "sdk-export"):
        assert other._observer.tracing.tracer() is not None, "the SDK provider was not picked up"
    elif kind != "history":
        assert other._observer.tracing.tracer() is None
    return {
        "baseline_us": min(base_times) * 1e6,
        "row_us": min(other_times) * 1e6,
        "added_us": statistics.median(deltas) * 1e6,
        "rounds": len(deltas),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--row", help=argparse.SUPPRESS)
    parser.add_argument("--only", help="run only the rows whose label contains this text")
    args = parser.parse_args()
    if args.row:
        print(json.dumps(measure(args.row, args.seconds)))
        return
    print("| configuration | x = 1, baseline (us) | x = 1, this row (us) | added, median (us) | rounds |")
    print("|---|---|---|---|---|")
    for label, kind in ROWS.items():
        if args.only and args.only not in label:
            continue
        out = subprocess.run(
            [sys.executable, __file__, "--row", kind, "--seconds", str(args.seconds)],
            capture_output=True,
            text=True,
            check=True,
            timeout=120 + 4 * args.seconds,
        ).stdout
        row = json.loads(out)
        print(
            f"| {label} | {row['baseline_us']:.1f} | {row['row_us']:.1f} | {row['added_us']:+.2f} | "
            f"{row['rounds']} |"
        )


if __name__ == "__main__":
    main()
