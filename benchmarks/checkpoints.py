#!/usr/bin/env python3
"""Checkpoints on the subprocess boundary: what a cell's copy-on-write checkpoint costs, and fork.

    .venv/bin/python benchmarks/checkpoints.py [--sizes 0,10,100,900] [--cells 30] [--pause-ms 100]
        [--fork-mb 110]
    .venv/bin/python benchmarks/checkpoints.py --json out.json   # the figures, for benchmarks/run.py

Per session size (one numpy array of that many MB, touched so it is resident): the median time of a
trivial cell (`counter += 1`) with checkpoints and without (checkpoints=False), the difference
being what the checkpoint adds. The worker forks the copy right after each reply, so a cell that
comes --pause-ms after the last reply (an agent's call comes seconds after) finds it ready and pays
only the copy-on-write faults of the pages it writes; a cell sent back to back waits for the rest
of that fork, also shown. And the unique memory (USS: private clean + dirty pages, from
/proc/<pid>/smaps_rollup) of the copy while a trivial cell runs, which is what the checkpoint costs
in memory (the pages the cell changed). Fork: engine.fork of a session holding --fork-mb MB, --pause-ms
after the last reply (the source's worker hands its state to the copy's through a memory file), with
numpy preloaded in the zygote (preload=("numpy",), as a deployment for data work would have it) and
without (the copy's worker imports numpy first).
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

from genpark_repl_tools import Limits, ReplEngine

_LIMITS = Limits(timeout_s=120, memory_mb=8192)


def _uss_kb(pid: int) -> int:
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[0].endswith(":"):
                fields[parts[0][:-1]] = parts[1]
    return int(fields.get("Private_Clean", 0)) + int(fields.get("Private_Dirty", 0))


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def _engine(checkpoints: bool, preload: tuple[str, ...] = ()) -> ReplEngine:
    return ReplEngine(
        policy="trusted", boundary="subprocess", limits=_LIMITS, checkpoints=checkpoints, preload=preload
    )


def _setup(engine: ReplEngine, mb: int) -> int:
    code = f"import numpy as np\nblock = np.ones({mb} * 2**20 // 8)\ncounter = 0\nimport os\nos.getpid()"
    result = engine.run(code)
    assert result.status == "ok", result.to_observation()
    return int(result.value or 0)


def _cell_ms(engine: ReplEngine, cells: int, pause_s: float) -> float:
    times = []
    for _ in range(cells):
        time.sleep(pause_s)
        start = time.perf_counter()
        result = engine.run("counter += 1")
        times.append((time.perf_counter() - start) * 1000)
        assert result.status == "ok", result.to_observation()
    return statistics.median(times)


def _copy_uss_mb(engine: ReplEngine, worker: int) -> float:
    """USS of the copy while a cell that changes a little (and waits) runs."""
    found: list[float] = []
    time.sleep(0.5)  # the copy forked after the last reply is ready, the one before it gone
    copies = [pid for pid in _children(worker) if _running(pid)]

    def watch() -> None:
        time.sleep(0.2)  # the cell has made its change by now
        found.append(_uss_kb(copies[-1]) / 1024)

    watcher = threading.Thread(target=watch)
    watcher.start()
    assert engine.run("counter += 1\nimport time\ntime.sleep(0.4)").status == "ok"
    watcher.join()
    return found[0] if found else float("nan")


def size_row(mb: int, cells: int, pause_s: float) -> dict[str, Any]:
    with _engine(checkpoints=False) as plain:
        _setup(plain, mb)
        without = _cell_ms(plain, cells, pause_s)
        back_to_back_without = _cell_ms(plain, cells, 0.0)
    with _engine(checkpoints=True) as engine:
        worker = _setup(engine, mb)
        with_checkpoint = _cell_ms(engine, cells, pause_s)
        back_to_back = _cell_ms(engine, cells, 0.0)
        copy_mb = _copy_uss_mb(engine, worker)
        worker_mb = _uss_kb(worker) / 1024
    return {
        "mb": mb,
        "pause_ms": round(pause_s * 1000),
        "cell_ms_without": round(without, 3),
        "cell_ms_with": round(with_checkpoint, 3),
        "added_ms": round(with_checkpoint - without, 3),
        "back_to_back_ms": round(back_to_back, 3),
        "back_to_back_ms_without": round(back_to_back_without, 3),
        "copy_uss_mb": round(copy_mb, 2),
        "worker_uss_mb": round(worker_mb, 1),
    }


def _fork_ms(mb: int, repeat: int, pause_s: float, preload: tuple[str, ...]) -> float:
    times = []
    with _engine(checkpoints=True, preload=preload) as engine:
        _setup(engine, mb)
        for i in range(repeat):
            time.sleep(pause_s)
            start = time.perf_counter()
            engine.fork("default", f"copy-{i}")
            times.append((time.perf_counter() - start) * 1000)
            assert engine.run("float(block[0]) + counter", session=f"copy-{i}").value == "1.0"
            engine.close(f"copy-{i}")
    return statistics.median(times)


def fork_row(mb: int, pause_s: float, repeat: int = 7) -> dict[str, Any]:
    return {
        "mb": mb,
        "fork_ms": round(_fork_ms(mb, repeat, pause_s, ("numpy",)), 1),
        "fork_ms_cold": round(_fork_ms(mb, repeat, pause_s, ()), 1),
    }


def markdown(figures: dict[str, Any]) -> str:
    lines = [
        "| session state | trivial cell, no checkpoint | with checkpoint | added | back to back, with | "
        "USS of the copy | USS of the worker |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in figures["sizes"]:
        lines.append(
            f"| {row['mb']} MB | {row['cell_ms_without']:.2f} ms | {row['cell_ms_with']:.2f} ms "
            f"| {row['added_ms']:+.2f} ms | {row.get('back_to_back_ms', float('nan')):.2f} ms "
            f"| {row['copy_uss_mb']:.2f} MB | {row['worker_uss_mb']:.1f} MB |"
        )
    pause = figures["sizes"][0].get("pause_ms") if figures["sizes"] else None
    if pause is not None:
        lines += [
            "",
            f"Cells {pause} ms after the last reply (the copy forked after it is ready); back to back, "
            "a cell waits for the rest of that fork.",
        ]
    fork = figures.get("fork")
    if fork:
        lines += [
            "",
            f"engine.fork of a session holding {fork['mb']} MB: {fork['fork_ms']:.1f} ms with numpy "
            f"preloaded in the zygote, {fork['fork_ms_cold']:.1f} ms without (the copy imports it first); "
            "the source's worker hands its state to the copy's through a memory file",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="0,10,100,900", help="session sizes in MB, comma-separated")
    parser.add_argument("--cells", type=int, default=30)
    parser.add_argument("--pause-ms", type=float, default=100.0, help="from a reply to the next cell")
    parser.add_argument("--fork-mb", type=int, default=110)
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    args = parser.parse_args(argv)
    if not sys.platform.startswith("linux"):
        print("checkpoints need Linux", file=sys.stderr)
        return 1
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    figures: dict[str, Any] = {"sizes": [size_row(mb, args.cells, args.pause_ms / 1000) for mb in sizes]}
    if args.fork_mb > 0:
        figures["fork"] = fork_row(args.fork_mb, args.pause_ms / 1000)
    print(markdown(figures))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
