#!/usr/bin/env python3
"""Snapshot and restore times for durable sessions: a durable session saves one after every cell.

    .venv/bin/python benchmarks/snapshots.py [--repeat 5] [--boundary subprocess]

Rows: 1,000 small variables (goal <= 20 ms each way) and a 100 MB DataFrame (goal <= 1 s each way),
under the `standard` policy, in-process or (--boundary subprocess) taken and loaded inside the
sandboxed worker, the blob crossing its socket and the host checking or signing it.
"snapshot" is `engine.snapshot()` (pickle + copy of the out-of-band buffers + HMAC); "to bytes"
and "restore from bytes" add what a store round trip costs.
Times are medians on this machine; it is shared, so read them as orders of magnitude.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from genpark_repl_tools import ReplEngine
from genpark_repl_tools.snapshot import SessionSnapshot

KEY = b"benchmark-key-0123456789abcdef"

SMALL = "\n".join(
    f"n{i} = {i}\ns{i} = 'value {i}'\nl{i} = [{i}, {i + 1}, {i + 2}]\nd{i} = {{'k': {i}, 'v': '{i}'}}"
    for i in range(250)
)
FRAME = """
import numpy as np
import pandas as pd
rows = 100 * 2**20 // (4 * 8)
df = pd.DataFrame({c: np.random.default_rng(0).random(rows) for c in "abcd"})
"""


def median_ms(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, value = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), value


def measure(label: str, code: str, repeat: int, boundary: str = "inprocess") -> None:
    with (
        ReplEngine(policy="standard", boundary=boundary, snapshot_key=KEY) as source,
        ReplEngine(policy="standard", boundary=boundary, snapshot_key=KEY) as target,
    ):
        result = source.run(code)
        assert result.status == "ok", result.to_observation()
        names = len(source.variables())
        snap_ms, snapshot = median_ms(source.snapshot, repeat)
        bytes_ms, blob = median_ms(snapshot.to_bytes, repeat)
        restore_ms, _ = median_ms(lambda: target.restore("default", snapshot), repeat)
        from_bytes_ms, _ = median_ms(
            lambda: target.restore("default", SessionSnapshot.from_bytes(blob)), repeat
        )
        assert len(target.variables()) == names
    print(
        f"| {label} ({names} variables, {boundary}, {len(blob) / 2**20:.1f} MiB) | {snap_ms:.1f} ms "
        f"| {bytes_ms:.1f} ms | {restore_ms:.1f} ms | {from_bytes_ms:.1f} ms |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--boundary", choices=["inprocess", "subprocess"], default="inprocess")
    args = parser.parse_args()
    print("| session | snapshot | to bytes | restore | restore from bytes |")
    print("| --- | --- | --- | --- | --- |")
    measure("1,000 small variables", SMALL, args.repeat, args.boundary)
    measure("100 MB DataFrame", FRAME, max(1, args.repeat // 2), args.boundary)


if __name__ == "__main__":
    main()
