#!/usr/bin/env python3
"""Start-up of the container boundary: a new session's first call, cold and from a warm container.

    .venv/bin/python benchmarks/container.py [--image TAG] [--sessions 10] [--json out.json]

Without --image the test image of scripts/docker_env.py is used (built if needed). For each mode an
engine is made, then `--sessions` new sessions each run `1 + 1` once, one after another; the figure is
the wall time of that first call (container start, zygote ready, worker forked, the call answered),
median and worst. "cold": no warm containers, so each new session starts its container. "warm": the
engine keeps one container started ahead (warm_containers=1); between sessions the benchmark waits
for the replacement to be ready, as a service with spare capacity would. Then the same session's
next call (the warm round trip). Goals: 400 ms cold, 50 ms warm. For comparison, the hosted sandboxes'
published time to interactive: Daytona 110 ms median, E2B 440 ms median.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
GOALS_MS = {"cold": 400.0, "warm": 50.0}


def _test_image() -> str:
    done = subprocess.run(
        [sys.executable, str(HERE.parent / "scripts" / "docker_env.py")],
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    return str(json.loads(done.stdout.strip().splitlines()[-1])["test_image"])


def _wait_warm(engine: Any, count: int, timeout: float = 30.0) -> None:
    pool = engine.boundary._pool
    deadline = time.monotonic() + timeout
    while len(pool._warm) < count and time.monotonic() < deadline:
        time.sleep(0.01)


def measure(image: str, mode: str, sessions: int) -> dict[str, Any]:
    from genpark_repl_tools import ReplEngine

    warm = 1 if mode == "warm" else 0
    first, again = [], []
    engine = ReplEngine(boundary="docker", image=image, warm_containers=warm)
    try:
        for i in range(sessions):
            if warm:
                _wait_warm(engine, warm)
            started = time.perf_counter()
            result = engine.run("1 + 1", session=f"s{i}")
            first.append((time.perf_counter() - started) * 1000)
            assert result.status == "ok", result.error
            started = time.perf_counter()
            result = engine.run("2 + 2", session=f"s{i}")
            again.append((time.perf_counter() - started) * 1000)
            engine.close(f"s{i}")
    finally:
        engine.close()
    return {
        "mode": mode,
        "sessions": sessions,
        "first_call_ms": {"median": round(statistics.median(first), 1), "max": round(max(first), 1)},
        "next_call_ms": {"median": round(statistics.median(again), 2), "max": round(max(again), 2)},
        "goal_ms": GOALS_MS[mode],
        "met": statistics.median(first) <= GOALS_MS[mode],
    }


def markdown(figures: dict[str, Any]) -> str:
    lines = [
        "| container boundary | first call of a new session (median / max) | next call (median) | goal "
        "| met |",
        "|---|---|---|---|---|",
    ]
    for row in figures["modes"]:
        first, nxt = row["first_call_ms"], row["next_call_ms"]
        lines.append(
            f"| {row['mode']} | {first['median']:.0f} / {first['max']:.0f} ms | {nxt['median']:.1f} ms "
            f"| {row['goal_ms']:.0f} ms | {'yes' if row['met'] else 'no'} |"
        )
    lines.append("")
    lines.append(
        "Published time to interactive of hosted sandboxes: Daytona 110 ms median, E2B 440 ms median."
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--image", help="image to run (default: scripts/docker_env.py's test image)")
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    image = args.image or _test_image()
    figures = {"image": image, "modes": [measure(image, mode, args.sessions) for mode in ("cold", "warm")]}
    print(markdown(figures), end="")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
