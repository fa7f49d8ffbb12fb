"""Turn the jobs' events into figures, goals and tables (plain text for the terminal, Markdown for docs)."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import _figures as F

if TYPE_CHECKING:
    from run import Job

__all__ = ["collect", "machine_info", "render", "render_document"]

ROOT = Path(__file__).resolve().parent.parent

_LATENCY_KEYS = ("trivial", "print", "cpu", "recursive", "comprehension")
_EXPECTED = {
    "latency": (*_LATENCY_KEYS, "namespace", "new_cell", "new_session", "host_toll", "caller_depth"),
    "memory": ("memory",),
    "concurrency": ("concurrency",),
    "adapter": ("adapter",),
}


# ---- machine ------------------------------------------------------------------------------------


def machine_info(python: str) -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    version = subprocess.run(
        [python, "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu": cpu,
        "cores": cores,
        "python": version or platform.python_version(),
        "os": platform.platform(terse=True),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit or None,
        "loadavg_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


# ---- collecting ---------------------------------------------------------------------------------


def _job_failure(job: Job) -> str:
    failed = job.event("failed")
    if failed is not None:
        return f"harness error: {failed['error']}"
    if job.killed:
        return f"job {job.killed}"
    return f"no result (exit code {job.returncode})"


def _probe_summary(job: Job, s: F.Settings) -> dict[str, Any]:
    ready, returned, survived = job.event("ready"), job.event("returned"), job.event("survived")
    if ready is None:
        return {"returned": None, "failure": _job_failure(job)}
    if returned is None:
        return {"returned": False, "detail": job.killed or _job_failure(job), "peak_rss_mb": job.peak_rss_mb}
    summary = {k: v for k, v in returned.items() if k not in ("event", "t")}
    summary["returned"] = True
    # Our boundaries promise control back within the timeout + 0.5 s: a call past that is late.
    summary["on_time"] = returned["elapsed_s"] <= s.probe_timeout_s + 0.5
    if survived is None:
        summary["survived"] = False
        summary["detail"] = job.killed or _job_failure(job)
    else:
        summary["survived"] = survived["survived"]
        summary["detail"] = survived.get("detail")
        peaks = [p for p in (returned.get("peak_rss_mb"), survived.get("peak_rss_mb"), job.peak_rss_mb) if p]
        summary["peak_rss_mb"] = max(peaks) if peaks else None
    return summary


def collect(
    found: dict[str, Any], keys: list[str], jobs: list[Job], s: F.Settings, machine: dict[str, Any]
) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for job in jobs:
        if job.kind == "probe":
            figures.setdefault("probes", {}).setdefault(job.probe, {})[job.executor] = _probe_summary(job, s)
            continue
        if job.kind not in _EXPECTED:
            continue
        for e in job.events:
            if e["event"] != "figure":
                continue
            data = {k: v for k, v in e.items() if k not in ("event", "t", "figure")}
            if e["figure"] == "namespace":
                size = str(data.pop("size", "?"))
                figures.setdefault("namespace", {}).setdefault(job.executor, {})[size] = data
            else:
                figures.setdefault(e["figure"], {})[job.executor] = data
        for figure in _EXPECTED[job.kind]:
            if job.executor not in figures.setdefault(figure, {}):
                figures[figure][job.executor] = {"failure": _job_failure(job)}
    return {
        "mode": "quick" if s.quick else "full",
        "machine": machine,
        "settings": s.as_dict(),
        "default_policy": found.get("default_policy"),
        "executors": {k: found["executors"][k] for k in keys},
        "skipped": found.get("skipped", {}),
        "figures": figures,
        "goals": evaluate_goals(figures, keys),
        "jobs": [j.summary() for j in jobs],
    }


# ---- formatting ---------------------------------------------------------------------------------

X = "\N{MULTIPLICATION SIGN}"
US = "\N{MICRO SIGN}s"


def fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.3g} µs"
    if s < 1:
        return f"{s * 1e3:.3g} ms"
    return f"{s:.3g} s"


def fmt_ratio(r: float | None) -> str:
    if r is None:
        return "-"
    if r >= 100:
        return f"{r:,.0f}{X}"
    if r >= 10:
        return f"{r:.1f}{X}"
    return f"{r:.2f}{X}"


def fmt_kb(kb: float) -> str:
    if abs(kb) >= 1024:
        return f"{kb / 1024:.2f} MiB"
    return f"{kb:.2f} KiB"


# ---- goals --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Goal:
    figure: str
    applies: Callable[[str], bool]
    target: str
    metric: Callable[[dict[str, Any]], float | None]
    limit: float | None  # None: reported, not judged
    higher_is_better: bool
    show: Callable[[float], str]

    def verdict(self, value: float) -> str:
        if self.limit is None:
            return "info"
        if self.higher_is_better:
            return "met" if value >= self.limit else f"missed: {value / self.limit:.0%} of the target"
        return "met" if value <= self.limit else f"missed: {value / self.limit:.2f}{X} the limit"


def _inprocess(key: str) -> bool:
    return key.startswith("inprocess-")


def _subprocess(key: str) -> bool:
    return key.startswith("subprocess-")


def _get(d: dict[str, Any], *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d


def _inverse(d: dict[str, Any]) -> float | None:
    r = d.get("ratio")
    return 1 / r if r else None


def _times(v: float) -> str:
    return f"{v:.2f}{X}"


GOALS = (
    Goal(
        "trivial",
        _inprocess,
        "trivial call (`x = 1`) \u2264 100 \u00b5s",
        lambda d: d.get("value_s"),
        100e-6,
        False,
        fmt_time,
    ),
    Goal(
        "new_cell",
        _inprocess,
        "new cell \u2264 300 \u00b5s",
        lambda d: d.get("value_s"),
        300e-6,
        False,
        fmt_time,
    ),
    Goal(
        "cpu",
        _inprocess,
        "CPU-heavy throughput \u2265 0.95 of bare exec",
        _inverse,
        0.95,
        True,
        lambda v: f"{v:.2f}",
    ),
    Goal(
        "namespace",
        _inprocess,
        f"`x = 1` with 10,000 variables \u2264 1.1{X} empty namespace",
        lambda d: _get(d, "10000", "growth"),
        1.1,
        False,
        _times,
    ),
    Goal(
        "memory",
        _inprocess,
        "1,000 idle sessions \u2264 8 MB",
        lambda d: d.get("per_1000_mb"),
        8.0,
        False,
        lambda v: f"{v:.1f} MB",
    ),
    Goal(
        "new_session",
        _subprocess,
        "cold start \u2264 10 ms",
        lambda d: d.get("value_s"),
        0.010,
        False,
        fmt_time,
    ),
    Goal(
        "trivial",
        _subprocess,
        "warm round trip (`x = 1`, with its checkpoint: the default) \u2264 250 \u00b5s",
        lambda d: d.get("value_s"),
        250e-6,
        False,
        fmt_time,
    ),
    Goal(
        "memory",
        _subprocess,
        "idle worker \u2264 5 MiB unique",
        lambda d: d.get("per_session_kb"),
        5 * 1024,
        False,
        fmt_kb,
    ),
    Goal(
        "adapter",
        lambda k: k == "langchain-tool",
        "LangChain tool adds \u2264 20 \u00b5s over a plain BaseTool calling engine.run",
        lambda d: d.get("added_s"),
        20e-6,
        False,
        lambda v: f"{v * 1e6:+.0f} \u00b5s",
    ),
)


def evaluate_goals(figures: dict[str, Any], keys: list[str]) -> list[dict[str, Any]]:
    out = []
    for goal in GOALS:
        for key in keys:
            if not goal.applies(key):
                continue
            data = figures.get(goal.figure, {}).get(key)
            value = goal.metric(data) if isinstance(data, dict) else None
            out.append(
                {
                    "figure": goal.figure,
                    "executor": key,
                    "target": goal.target,
                    "limit": goal.limit,
                    "value": value,
                    "shown": goal.show(value) if value is not None else "-",
                    "verdict": goal.verdict(value) if value is not None else "not measured",
                }
            )
    return out


def _goal_cell(results: dict[str, Any], figure: str, key: str) -> str:
    return "; ".join(
        f"{g['target']}: {g['verdict']}"
        for g in results["goals"]
        if g["figure"] == figure and g["executor"] == key and g["verdict"] not in ("info", "not measured")
    )


def _table(headers: list[str], rows: list[list[str]], markdown: bool) -> str:
    if markdown:

        def cell(text: str) -> str:
            return text.replace("|", "\\|").replace("\n", " ")

        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


class _Out:
    def __init__(self, results: dict[str, Any], markdown: bool) -> None:
        self.results = results
        self.markdown = markdown
        self.parts: list[str] = []

    def title(self, text: str, level: int = 3) -> None:
        if self.markdown:
            self.parts.append(f"{'#' * level} {text}")
        else:
            self.parts.append(f"\n{text}\n{'=' * min(len(text), 100)}")

    def text(self, text: str) -> None:
        self.parts.append(text)

    def code(self, code: str) -> None:
        self.parts.append(
            f"```python\n{code}\n```" if self.markdown else "    " + code.replace("\n", "\n    ")
        )

    def table(self, headers: list[str], rows: list[list[str]]) -> None:
        self.parts.append(_table(headers, rows, self.markdown) if rows else "(no executor measured this)")

    def rows(self, figure: str) -> list[tuple[str, str, dict[str, Any]]]:
        """(key, label, data) of each executor measured in `figure`, in the run's order."""
        data = self.results["figures"].get(figure, {})
        return [
            (k, _label(self.results, k), data[k])
            for k in self.results["executors"]
            if k in data and isinstance(data[k], dict)
        ]

    def __str__(self) -> str:
        return "\n\n".join(self.parts) + "\n"


def _label(results: dict[str, Any], key: str) -> str:
    return str(results["executors"].get(key, {}).get("label", key))


def _short(text: str | None, n: int = 90) -> str:
    text = (text or "").replace("\n", " ").strip()
    return text if len(text) <= n else text[: n - 1] + "\N{HORIZONTAL ELLIPSIS}"


def render(results: dict[str, Any], markdown: bool) -> str:
    out = _Out(results, markdown)
    if not markdown:
        out.title(f"Goals ({results['mode']} run)")
        _goals_table(out)
    _latency_tables(out)
    _namespace_table(out)
    _new_cell_table(out)
    _new_session_table(out)
    _host_toll_table(out)
    _caller_depth_table(out)
    _memory_table(out)
    _concurrency_table(out)
    _probe_tables(out)
    _adapter_table(out)
    if not markdown and results["skipped"]:
        out.title("Not measured")
        out.text("\n".join(f"- {k}: {v}" for k, v in results["skipped"].items()))
    return str(out)


def _latency_tables(out: _Out) -> None:
    s = out.results["settings"]
    for fig in F.LATENCY(F.settings(s["quick"])):
        out.title(fig.title)
        rows = []
        for key, label, d in out.rows(fig.key):
            if "failure" in d:
                rows.append([label, _short(d["failure"]), "", ""])
                continue
            rel = fmt_ratio(_inverse(d)) if fig.throughput else fmt_ratio(d.get("ratio"))
            rows.append([label, fmt_time(d.get("value_s")), rel, _goal_cell(out.results, fig.key, key)])
        out.table(
            ["executor", "per call", "throughput vs bare" if fig.throughput else f"{X} bare", "goal"], rows
        )


def _namespace_table(out: _Out) -> None:
    out.title(
        f"`x = 1` as the namespace grows (time per call; {X} the same executor with an empty namespace)"
    )
    sizes = [str(n) for n in F.NAMESPACE_SIZES]
    rows = []
    for key, label, d in out.rows("namespace"):
        empty = next((v["empty_s"] for v in d.values() if isinstance(v, dict) and "empty_s" in v), None)
        if empty is None:
            failure = d.get("failure") or next(
                (v.get("failure") for v in d.values() if isinstance(v, dict)), ""
            )
            rows.append([label, _short(failure), "", "", "", "", ""])
            continue
        row = [label, fmt_time(empty)]
        for size in sizes:
            v = d.get(size, {})
            if "failure" in v:
                row.append(_short(v["failure"], 40))
            else:
                row.append(f"{fmt_time(v.get('value_s'))} ({fmt_ratio(v.get('growth'))})")
        row += [fmt_ratio(d.get(sizes[-1], {}).get("ratio")), _goal_cell(out.results, "namespace", key)]
        rows.append(row)
    headers = ["executor", "empty", "10 vars", "1,000 vars", "10,000 vars + 10^6 list", f"{X} bare at 10,000"]
    out.table([*headers, "goal"], rows)


def _new_cell_table(out: _Out) -> None:
    out.title(F.NEW_CELL_TITLE)
    rows = []
    for key, label, d in out.rows("new_cell"):
        if "failure" in d:
            rows.append([label, _short(d["failure"]), "", ""])
            continue
        goal = _goal_cell(out.results, "new_cell", key)
        rows.append([label, fmt_time(d.get("value_s")), fmt_ratio(d.get("ratio")), goal])
    out.table(["executor", "per call", f"{X} bare", "goal"], rows)


def _new_session_table(out: _Out) -> None:
    out.title("New session: first call (`x = 1`) in a fresh session")
    rows = []
    for key, label, d in out.rows("new_session"):
        if "failure" in d:
            rows.append([label, _short(d["failure"]), "", ""])
            continue
        goal = _goal_cell(out.results, "new_session", key)
        rows.append([label, fmt_time(d.get("value_s")), fmt_ratio(d.get("ratio")), goal])
    out.table(["executor", "per new session (median)", f"{X} bare", "goal"], rows)


def _host_toll_table(out: _Out) -> None:
    out.title("The host's own code beside the executor: a bare `x = 1` in the executor's process")
    out.text(
        "After the executor's runs, the process that ran them times a bare `compile` + `exec` of its own, "
        f"against the same in a fresh interpreter ({X} bare). Our restricted policies' audit hook is "
        "process-wide: from the first restricted run on, it judges every audited event of the process, the "
        "host's own included (it looks for sandboxed code on the calling stack). Code that raises no audit "
        "events (arithmetic, loops, most library calls) pays nothing."
    )
    rows = []
    for _key, label, d in out.rows("host_toll"):
        if "failure" in d:
            rows.append([label, _short(d["failure"]), ""])
            continue
        rows.append([label, fmt_time(d.get("value_s")), fmt_ratio(d.get("ratio"))])
    out.table(["executor", "per call", f"{X} bare"], rows)


def _caller_depth_table(out: _Out) -> None:
    out.title(F.CALLER_DEPTH_TITLE)
    out.text(
        f"The same `x = 1` called directly and from {F.CALLER_DEPTH} frames of plain Python functions above "
        "the executor, as an agent framework's tool call puts its own between its loop and the tool "
        "(frames of a loop that stays on the stack are not counted again). The trivial-call budget is "
        "timed on the direct call; this is what such a stack adds to it. The bare row is what the "
        "extra calls themselves cost. Our restricted policies' audit hook checks each new frame above a "
        "run for sandboxed code when the run starts (and when a new cell compiles); the subprocess "
        "boundary's host process has no hook (its worker's does, with a short stack of its own)."
    )
    rows = []
    for _key, label, d in out.rows("caller_depth"):
        if "failure" in d:
            rows.append([label, _short(d["failure"]), "", ""])
            continue
        per_frame = d.get("per_frame_s")
        rows.append(
            [
                label,
                fmt_time(d.get("direct_s")),
                fmt_time(d.get("value_s")),
                fmt_time(per_frame) if per_frame is None or per_frame > 0 else "none (within noise)",
            ]
        )
    out.table(["executor", "direct call", f"{F.CALLER_DEPTH} frames deeper", "per extra frame"], rows)


def _memory_table(out: _Out) -> None:
    out.title(
        f"Memory: idle sessions (each ran `x = 1`; {out.results['settings']['idle_sessions']:,} where cheap)"
    )
    rows = []
    for key, label, d in out.rows("memory"):
        if "failure" in d:
            rows.append([label, _short(d["failure"]), "", "", "", ""])
            continue
        over = f"{d['sessions']:,} sessions" + (" (extrapolated)" if d.get("extrapolated") else "")
        per_1000 = f"{d['per_1000_mb']:,.1f} MB"
        ratio = fmt_ratio(d.get("ratio"))
        goal = _goal_cell(out.results, "memory", key)
        rows.append([label, fmt_kb(d["per_session_kb"]), ratio, per_1000, over, goal])
    out.table(
        ["executor", "per idle session", f"{X} bare", "per 1,000 sessions", "measured over", "goal"], rows
    )
    out.text(
        "Resident memory of the process plus unique memory (USS) of its child processes, after gc; bare exec "
        "(the reference) is counted with tracemalloc, as a few hundred bytes per session are below what RSS "
        "resolves."
    )


def _concurrency_table(out: _Out) -> None:
    n = F.CONCURRENCY_SESSIONS
    out.title(f"Concurrency: {n} sessions printing at once (sessions whose output was mixed or lost)")
    rows = []
    for _, label, d in out.rows("concurrency"):
        if "failure" in d or "skipped" in d:
            rows.append([label, "n/a", "n/a", _short(d.get("failure") or d.get("skipped"))])
            continue
        cells, notes = [], []
        for mode in ("threads", "asyncio"):
            m = d[mode]
            cells.append(f"{m['mixed']}/{n} mixed" + (f", {m['errors']} errors" if m["errors"] else ""))
            if m.get("error_example"):
                notes.append(_short(m["error_example"], 60))
            if m.get("example"):
                notes.append(_short(m["example"], 100))
        rows.append([label, *cells, "; ".join(dict.fromkeys(notes))])
    out.table(["executor", "threads", "asyncio", "example"], rows)


def _probe_tables(out: _Out) -> None:
    s = out.results["settings"]
    probes = out.results["figures"].get("probes", {})
    for probe in F.PROBES:
        out.title(f"Runaway probe: {probe.title} (timeout {s['probe_timeout_s']:g} s)")
        out.code(probe.code)
        data = probes.get(probe.key, {})
        rows = [
            [_label(out.results, k), *_probe_cells(data[k])] for k in out.results["executors"] if k in data
        ]
        out.table(["executor", "call returned", "result", "session survived", "peak RSS"], rows)
    if out.results["mode"] == "quick":
        out.text("Quick mode probes our boundaries only; the full run probes bare exec and the peers too.")
    out.text(
        "Each probe first sets `keep = 42`, then runs the probe with the executor's own timeout where it has "
        "one. 'Returned' means control came back to the caller (late: past the timeout + 0.5 s); "
        "'survived' means the same session then printed `keep`. "
        f"The benchmark caps each probe's address space (RLIMIT_AS) at its size after setup + "
        f"{s['probe_headroom_mb']:,} MiB, children included: in-process, nothing else stops a memory bomb. "
        "The subprocess boundary gets `Limits(memory_mb=512)`."
    )


def _probe_cells(d: dict[str, Any]) -> list[str]:
    if d.get("returned") is None:
        return [_short(d.get("failure"), 60), "", "", ""]
    peak = f"{d['peak_rss_mb']:,.0f} MB" if d.get("peak_rss_mb") else "-"
    if not d["returned"]:
        return [f"no: {_short(d.get('detail'), 70)}", "", "-", peak]
    returned = f"yes, {d['elapsed_s']:.2f} s" + ("" if d.get("on_time") else " (late)")
    result = d.get("status", "?")
    if d.get("error"):
        result += f": {_short(d['error'], 70)}"
    if d.get("out_chars"):
        result += f" [{d['out_chars']:,} chars of output kept]"
    survived = "yes" if d.get("survived") else f"no: {_short(d.get('detail'), 60)}"
    return [returned, result, survived, peak]


def _adapter_table(out: _Out) -> None:
    adapter = out.results["figures"].get("adapter", {}).get("langchain-tool")
    if adapter is None:
        return
    out.title("LangChain: GenparkReplTool.invoke(tool call) over a bare engine.run(`x = 1`)")
    if "failure" in adapter:
        out.text(_short(adapter["failure"], 300))
        return
    rows = [
        [f"engine.run (policy {adapter.get('policy')})", fmt_time(adapter["core_s"])],
        ["GenparkReplTool.invoke(tool call)", fmt_time(adapter["tool_s"])],
        ["overhead of the tool over engine.run", fmt_time(adapter["overhead_s"])],
        ["no-op tool of the same shape: LangChain's own cost", fmt_time(adapter["noop_s"])],
        ["plain tool of the same shape whose _run calls engine.run", fmt_time(adapter["plain_s"])],
        ["added by GenparkReplTool over the plain tool", f"{adapter['added_s'] * 1e6:+.1f} {US}"],
    ]
    if "separate_s" in adapter:
        rows.append(
            [
                "tool - engine.run - no-op, each timed alone (includes the cost of running both in turn)",
                f"{adapter['separate_s'] * 1e6:+.1f} {US}",
            ]
        )
    out.table(["measure", "per call"], rows)


def _goals_table(out: _Out) -> None:
    rows = [
        [_label(out.results, g["executor"]), g["target"], g["shown"], g["verdict"]]
        for g in out.results["goals"]
    ]
    rows += _checkpoint_goals(out.results.get("checkpoints"))
    ray = out.results.get("ray")
    if ray:  # benchmarks/ray_bench.py's own goal
        added, limit = ray["call_ms_added_by_ray"], ray["call_goal_ms"]
        verdict = "met" if added <= limit else f"missed: {added / limit:.2f}{X} the limit"
        target = f"added to a warm call over the local subprocess boundary <= {limit:g} ms (lane)"
        rows.append(["ray boundary", target, f"{added:.2f} ms", verdict])
        through = ray.get("call_ms_added_by_ray_through_ray")
        if through is not None:
            verdict = "met" if through <= limit else f"missed: {through / limit:.2f}{X} the limit"
            target = f"the same through Ray (`lane=False`, as to a host on another machine) <= {limit:g} ms"
            rows.append(["ray boundary", target, f"{through:.2f} ms", verdict])
    table = (out.results.get("default_boundary") or {}).get("first_table_ms")
    if table:
        value = table["preloaded"]
        verdict = "met" if value <= 10 else f"missed: {value / 10:.2f}{X} the limit"
        target = "a new conversation's first pandas call, data stack preloaded <= 10 ms"
        rows.append(["genpark default", target, f"{value:.1f} ms", verdict])
    out.table(["executor", "goal", "measured", "verdict"], rows)


def _checkpoint_goals(figures: dict[str, Any] | None) -> list[list[str]]:
    """The goals benchmarks/checkpoints.py measures: the round trip without the checkpoint (the per-call
    budget of the request path; the checkpoint's own cost is the next rows'), what a large session adds
    to a trivial cell, and engine.fork."""
    if not figures or not figures.get("sizes"):
        return []

    def row(target: str, value: float, limit: float, shown: str) -> list[str]:
        verdict = "met" if value <= limit else f"missed: {value / limit:.2f}{X} the limit"
        return ["genpark subprocess/trusted", target, shown, verdict]

    sizes = {r["mb"]: r for r in figures["sizes"]}
    rows = []
    if (empty := sizes.get(0)) is not None and "back_to_back_ms_without" in empty:
        value = empty["back_to_back_ms_without"] / 1000
        rows.append(
            row(
                "warm round trip without a checkpoint (`checkpoints=False`) \u2264 250 \u00b5s",
                value,
                250e-6,
                fmt_time(value),
            )
        )
    if 0 in sizes and (big := max(sizes)) >= 900:
        added = sizes[big]["cell_ms_with"] - sizes[0]["cell_ms_with"]
        rows.append(
            row(
                f"trivial cell with {big} MB of state \u2264 2 ms over an empty session",
                added,
                2.0,
                f"{added:+.2f} ms",
            )
        )
    if fork := figures.get("fork"):
        rows.append(
            row(
                f"engine.fork of a {fork['mb']} MB session (numpy preloaded) \u2264 50 ms",
                fork["fork_ms"],
                50.0,
                f"{fork['fork_ms']:.1f} ms",
            )
        )
    return rows


def render_document(results: dict[str, Any]) -> str:
    m = results["machine"]
    s = results["settings"]
    out = _Out(results, markdown=True)
    out.title("Benchmarks", 1)
    out.text(
        "<!-- Generated by `benchmarks/run.py --markdown docs/benchmarks.md` from a real run. "
        "Do not edit by hand: rerun it. -->"
    )
    out.text(
        "genpark-repl-tools against a bare `compile` + `exec` and against the tools users would pick "
        "instead: LangChain's `PythonAstREPLTool`, smolagents' `LocalPythonExecutor`, RestrictedPython and "
        "a Jupyter kernel."
    )
    out.title("Reproduce", 2)
    out.text(
        "```\n"
        "python3 scripts/dev.py bench            # full run; installs the peers into .venv-bench first\n"
        "python3 scripts/dev.py bench --quick    # fewer repetitions, under 2 minutes\n"
        "python3 scripts/dev.py bench --markdown docs/benchmarks.md --json bench.json\n"
        "```"
    )
    load, load_end = m.get("loadavg_start"), m.get("loadavg_end")
    load_text = f"{load[0]:.2f} \N{RIGHTWARDS ARROW} {load_end[0]:.2f}" if load and load_end else "-"
    out.title("This run", 2)
    facts = [
        ["mode", f"{results['mode']} ({results.get('elapsed_s', '?')} s)"],
        ["CPU", str(m["cpu"])],
        ["cores", str(m["cores"])],
        ["Python", str(m["python"])],
        ["OS", str(m["os"])],
        ["date", str(m["date"])],
        ["commit", str(m.get("commit") or "-")],
        ["1-minute load average (start, end)", load_text],
    ]
    out.table(["", ""], facts)
    cores = m.get("cores")
    if load and load_end and cores and max(load[0], load_end[0]) > cores:
        out.text(
            f"The machine was shared during this run: a load average above its {cores} cores means other "
            "processes competed for the CPU. In-process times are CPU time and barely move; wall times "
            "(the subprocess boundary, Jupyter) are inflated, so a budget they miss may be the load: their "
            f"{X} bare column, timed in alternating rounds against bare exec, shows how much."
        )
    versions = [[v["label"], str(v["version"])] for v in results["executors"].values() if v.get("version")]
    if versions:
        out.table(["executor", "version"], versions)
    if results["skipped"]:
        out.text("Not measured: " + "; ".join(f"`{k}` ({v})" for k, v in results["skipped"].items()) + ".")
    out.title("Headline", 2)
    out.text("\n".join(headline(results)))
    out.title("Method", 2)
    out.text("\n".join(_method(s)))
    out.title("Goals", 2)
    _goals_table(out)
    out.title("Figures", 2)
    out.parts.append(render(results, markdown=True).rstrip())
    if results.get("checkpoints"):  # benchmarks/checkpoints.py, run by run.py
        import checkpoints

        out.title("Checkpoints (subprocess boundary)", 2)
        out.text(checkpoints.markdown(results["checkpoints"]))
    if results.get("host_tools"):  # benchmarks/host_tools.py, run by run.py
        import host_tools

        out.title("Host tools called from session code", 2)
        out.text(host_tools.markdown(results["host_tools"]))
    if results.get("load"):  # benchmarks/load.py, run apart (--load-json)
        import load

        out.title("10,000 conversations over 32 workers (benchmarks/load.py)", 2)
        out.text(load.markdown(results["load"]))
    if results.get("container"):  # benchmarks/container.py, run by run.py
        import container

        out.title("Container boundary: a new session's first call", 2)
        out.text(container.markdown(results["container"]))
    if results.get("ray"):  # benchmarks/ray_bench.py, run by run.py (with the ray extra)
        import ray_bench

        out.title("Ray boundary against the local subprocess boundary (benchmarks/ray_bench.py)", 2)
        out.text(ray_bench.markdown(results["ray"]))
    if results.get("default_boundary"):  # benchmarks/default_boundary.py, run by run.py
        out.title("The default boundary", 2)
        out.text(_default_boundary(results["default_boundary"]))
    return str(out)


def _default_boundary(d: dict[str, Any]) -> str:
    """benchmarks/default_boundary.py's figures: what the sandboxed default costs against in-process."""
    n, readme, idle = d["sessions"], d["readme_s"], d["idle"]
    default, inprocess = idle["default"], idle["inprocess"]
    back = default.get("return_median_ms")
    workers = default.get("live_workers")

    def row(label: str, cell: Callable[[dict[str, Any]], str]) -> str:
        return f"| {label} | {cell(default)} | {cell(inprocess)} |"

    rows = [
        '| | default (`ReplEngine()`) | `boundary="inprocess"` |',
        "|---|---|---|",
        f"| README example as a fresh process (median) | {readme['default']:.2f} s "
        f"| {readme['inprocess']:.2f} s |",
        row("warm call (`x = 1`), median", lambda d: f"{d['warm_call_us']:,} µs"),
        row(f"{n:,} idle sessions: memory", lambda d: f"{d['memory_mb']:,.1f} MB"),
        row(f"{n:,} idle sessions: time to create", lambda d: f"{d['create_s']:.2f} s"),
    ]
    if back is not None:
        rows.append(f"| return to a hibernated session (median) | {back:.1f} ms | - |")
    table = d.get("first_table_ms")
    if table:
        rows.append(
            f"| a new conversation's first `pd.DataFrame(...).describe()` (median), numpy and pandas "
            f"preloaded / not | {table['preloaded']:.1f} / {table['not_preloaded']:.1f} ms | - |"
        )
    notes = (
        f"The default is the `{default['boundary']}` boundary here. The README example runs as a whole "
        "new Python process: imports, engine start, two cells and the observation. Memory is the host's "
        "resident growth plus the unique memory (USS) of every child process (zygote, live workers, their "
        "checkpoint copies)."
    )
    if workers:
        notes += (
            f" The default keeps {workers} workers live; the other sessions hibernate to the engine's own "
            "temporary store and come back on their next call (the hibernated row)."
        )
    if table:
        notes += (
            " The first-table row is the median over 25 new sessions, one every 0.3 s (each finds the "
            "zygote's spare), measured first, in a host process that served nothing yet."
        )
    return "\n".join(rows) + "\n\n" + notes + "\n"


def _method(s: dict[str, Any]) -> list[str]:
    return [
        "- Each executor runs each job in its own process with a time bound; a peer that hangs or crashes is "
        "reported in its row, and the whole process tree is killed.",
        f"- `{X} bare` is the executor's time over a bare `exec(compile(code, ...), namespace)` of the same "
        "snippet, timed in alternating rounds: the median over rounds of the ratio of the two batches "
        "timed moments apart, so load from other processes hits both sides alike. Bare exec runs in a "
        "fresh interpreter of its own that imports only the standard library: in the executor's process, "
        "the audit hook our restricted policies install would judge its `compile` and `exec` too (after "
        "one restricted run, about twice the cost of a bare `x = 1`), and the ratios would look better "
        "than they are. "
        "`per call` is the fastest round (other processes only ever add time); the goals' time budgets "
        f"judge it. Up to {s['rounds']} rounds of batches of about {s['target_round_s'] * 1000:.0f} ms, "
        f"{s['budget_s']:g} s per figure; a batch's size comes from timing a batch of warm calls first, "
        "not one call.",
        "- Executors that do their work in the calling process (the in-process boundary, the in-process "
        "peers; bare exec in its own) are timed in process CPU time, which other processes on a shared "
        "machine barely disturb; the subprocess boundary and Jupyter, whose work happens in other "
        "processes, in wall time (and so is their bare-exec partner).",
        "- Every timed snippet runs once first and its output is checked; a wrong answer is reported instead "
        "of a time.",
        "- Peers are used the way their docs show: `PythonAstREPLTool._run` (one tool per session; "
        "LangChain's BaseTool machinery is measured separately), "
        "`LocalPythonExecutor(additional_authorized_imports=[])`, "
        "`compile_restricted` + `exec` with RestrictedPython's guards (plus `list`, `sum`, ... as builtins), "
        "one ipykernel per session through `jupyter_client`.",
        "- New cell: each call runs a cell never run before (`x = <n>` with n counting up, so no cache "
        "helps), batches alternating with bare `compile` + `exec` of other new cells, as above. "
        "New session: median over fresh sessions of the first call, one session after another (the "
        "subprocess boundary's zygote keeps one worker forked ahead and forks the next as soon as it "
        "hands one over; a burst of sessions at once would find one spare only). Memory: resident "
        "memory of the "
        "process plus the unique memory (USS) of its child processes, after `gc.collect()`, over idle "
        "sessions that each ran `x = 1`.",
        "- LangChain adapter: `GenparkReplTool.invoke` with a tool call against a plain `BaseTool` of the "
        "same shape (config injected, content and artifact) whose `_run` calls `engine.run` and returns "
        "nothing rendered, timed in the same rounds in CPU time: the difference is what our tool adds "
        "(session from the thread, observation text, JSON artifact). The no-op tool shows LangChain's own "
        "share; running LangChain's code and the engine's in turn costs more than each alone, which is "
        "any tool's cost, so it is in the plain tool too.",
    ]


def headline(results: dict[str, Any]) -> list[str]:
    """A few generated lines a README can quote: our default policy, the subprocess boundary, the peers."""
    fig = results["figures"]
    lines = []

    def get(figure: str, key: str, *path: str) -> Any:
        return _get(fig.get(figure, {}).get(key, {}), *path)

    default = results.get("default_policy")
    key = f"inprocess-{default}"
    if key in results["executors"]:
        parts = []
        if (v := get("trivial", key, "value_s")) is not None:
            r = get("trivial", key, "ratio")
            parts.append(f"a trivial call takes {fmt_time(v)} ({fmt_ratio(r)} a bare `exec`)")
        if (v := get("new_cell", key, "value_s")) is not None:
            r = get("new_cell", key, "ratio")
            parts.append(f"a new cell {fmt_time(v)} ({fmt_ratio(r)} a bare `compile` + `exec`)")
        if (r := get("cpu", key, "ratio")) is not None:
            parts.append(f"CPU-heavy code runs at {1 / r:.2f} of bare-exec throughput")
        if (g := get("namespace", key, "10000", "growth")) is not None:
            parts.append(
                f"`x = 1` beside 10,000 variables and a 10^6-element list costs {fmt_ratio(g)} the empty case"
            )
        if (m := get("memory", key, "per_1000_mb")) is not None:
            parts.append(f"1,000 idle sessions take {m:.1f} MB")
        mixed = [get("concurrency", key, mode, "mixed") for mode in ("threads", "asyncio")]
        if None not in mixed:
            parts.append(f"32 concurrent sessions mixed output {sum(mixed)} times")
        lines.append(f"- In-process, policy `{default}`: " + "; ".join(parts) + ".")
    sub = f"subprocess-{default}"
    if sub in results["executors"]:
        parts = []
        if (v := get("new_session", sub, "value_s")) is not None:
            parts.append(f"a new session (worker) starts in {fmt_time(v)}")
        if (v := get("trivial", sub, "value_s")) is not None:
            parts.append(f"a warm `x = 1` round trip takes {fmt_time(v)}")
        if (v := get("memory", sub, "per_session_kb")) is not None:
            parts.append(f"an idle worker holds {fmt_kb(v)} of its own")
        lines.append(f"- Subprocess boundary, policy `{default}`: " + "; ".join(parts) + ".")
    for peer in ("langchain-ast", "smolagents", "restrictedpython", "jupyter"):
        if peer not in results["executors"]:
            continue
        parts = []
        failing = [f for f in ("recursive", "comprehension") if "failure" in fig.get(f, {}).get(peer, {})]
        if failing:
            parts.append("fails the " + " and ".join(f"{f} figure" for f in failing))
        if (r := get("cpu", peer, "ratio")) is not None:
            parts.append(f"CPU-heavy throughput {1 / r:.2f} of bare exec")
        if (r := get("trivial", peer, "ratio")) is not None:
            parts.append(f"trivial call {fmt_ratio(r)} bare")
        mixed = get("concurrency", peer, "threads", "mixed")
        if mixed:
            parts.append(f"{mixed}/32 concurrent sessions got mixed output")
        hung = [
            p.title
            for p in F.PROBES
            if fig.get("probes", {}).get(p.key, {}).get(peer, {}).get("returned") is False
        ]
        if hung:
            parts.append("never returned from: " + ", ".join(hung))
        lines.append(f"- {_label(results, peer)}: " + "; ".join(parts) + ".")
    return lines
