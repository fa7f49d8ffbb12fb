#!/usr/bin/env python3
"""Host tools: what one call of a host tool from session code costs, there and back.

    .venv/bin/python benchmarks/host_tools.py [--calls 2000] [--rounds 7]
    .venv/bin/python benchmarks/host_tools.py --json out.json   # the figures, for benchmarks/run.py

Per boundary and policy: a cell that makes --calls tool calls in a loop, timed against a cell of the
same loop calling a function the session defined itself, in alternating rounds; the median over
rounds of the difference, divided by the calls, is what a tool call adds. Two tools: `ping(x)`
(unannotated: the signature is checked, nothing validated) and `search(q: str, limit: int = 10)`
(both arguments validated by pydantic, a list of str returned). The goals: 50 us in-process, 300 us
on the subprocess boundary (`search`, the usual shape of a tool).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from genpark_repl_tools import Limits, ReplEngine

GOALS_US = {"inprocess": 50.0, "subprocess": 300.0}
_LIMITS = Limits(timeout_s=120)


def ping(x: Any) -> Any:
    return x


def search(q: str, limit: int = 10) -> list[str]:
    return [q] * limit


def _per_call_us(engine: ReplEngine, tool: str, calls: int, rounds: int) -> float:
    arguments = "i" if tool == "ping" else "'owls', limit=1"
    engine.run(f"def local(*args, **kwargs):\n    return args\n{tool}({arguments})", session=tool)
    with_tools = f"for i in range({calls}):\n    {tool}({arguments})"
    without = f"for i in range({calls}):\n    local({arguments})"
    differences = []
    for _ in range(rounds):
        timed = []
        for code in (with_tools, without):
            result = engine.run(code, session=tool)
            assert result.status == "ok", result.to_observation()
            timed.append(result.duration_ms)
        differences.append((timed[0] - timed[1]) * 1000 / calls)
    return statistics.median(differences)


def rows(calls: int, rounds: int) -> list[dict[str, Any]]:
    cases = [("inprocess", "standard"), ("inprocess", "trusted")]
    if sys.platform.startswith("linux"):
        cases.append(("subprocess", "standard"))
    found = []
    for boundary, policy in cases:
        tools: dict[str, Callable[..., Any]] = {"ping": ping, "search": search}
        with ReplEngine(policy=policy, boundary=boundary, limits=_LIMITS, tools=tools) as engine:
            for tool in ("ping", "search"):
                n = calls if boundary == "inprocess" else max(1, calls // 4)
                found.append(
                    {
                        "boundary": boundary,
                        "policy": policy,
                        "tool": tool,
                        "calls": n,
                        "per_call_us": round(_per_call_us(engine, tool, n, rounds), 1),
                        "goal_us": GOALS_US[boundary],
                    }
                )
    return found


def markdown(figures: dict[str, Any]) -> str:
    lines = [
        "| boundary | policy | tool | per call, there and back | goal | verdict |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in figures["rows"]:
        goal = row["goal_us"] if row["tool"] == "search" else None
        verdict = "" if goal is None else ("met" if row["per_call_us"] <= goal else "missed")
        lines.append(
            f"| {row['boundary']} | {row['policy']} | `{row['tool']}` | {row['per_call_us']:.1f} us "
            f"| {'' if goal is None else f'{goal:.0f} us'} | {verdict} |"
        )
    lines += [
        "",
        "A cell of N tool calls against a cell of N calls of a function of its own, in alternating rounds "
        "(median of the differences). In-process a call is handed to a host thread and back, so it also "
        "pays the operating system's thread wake-ups; on the subprocess boundary it is a frame each way "
        "on the worker's socket.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="tool calls per timed cell (in-process)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    args = parser.parse_args(argv)
    figures = {"rows": rows(args.calls, args.rounds)}
    print(markdown(figures))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
