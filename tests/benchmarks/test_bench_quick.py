"""The benchmark command (benchmarks/run.py) in quick mode, on our own executors only.

It checks what the tables say, never how fast anything was: which rows exist, that our sessions never
mix output, that runaway code comes back and the session survives, and that a job that hangs is
killed and reported instead of stalling the run.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from genpark_repl_tools import ReplEngine

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
_RUN_BOUND_S = 240  # the quick run includes the side figures (Ray cluster, 200 default sessions)

LATENCY = ("trivial", "print", "cpu", "recursive", "comprehension", "new_cell", "new_session", "host_toll")
NAMESPACE_SIZES = ("10", "1000", "10000")
PROBES = ("loop", "swallow", "flood", "bomb")
PRESETS = ("trusted", "standard", "strict")
DEFAULT_POLICY = inspect.signature(ReplEngine).parameters["policy"].default
LINUX = sys.platform.startswith("linux")  # the subprocess boundary's platform


def _bench_module(name: str) -> ModuleType:
    """A module of benchmarks/ (a script directory, not a package), imported under a private name."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    if name.startswith("_"):  # helpers run.py itself imports by these names
        return importlib.import_module(name)
    qualified = f"genpark_bench_{name}"
    if qualified not in sys.modules:
        spec = importlib.util.spec_from_file_location(qualified, BENCH / f"{name}.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[qualified] = module
        spec.loader.exec_module(module)
    return sys.modules[qualified]


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "run.py"), "--quick", "--executors", "ours", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=_RUN_BOUND_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout, json.loads(out.read_text(encoding="utf-8"))


def _ours(results: dict[str, Any]) -> list[str]:
    return [k for k in results["executors"] if k.startswith(("inprocess-", "subprocess-"))]


def test_rows_for_every_preset_and_boundary_and_no_peers(bench: tuple[str, dict[str, Any]]) -> None:
    _, results = bench
    expected = {"bare", *(f"inprocess-{p}" for p in PRESETS)}
    if LINUX:
        expected.add(f"subprocess-{DEFAULT_POLICY}")
    keys = set(results["executors"])
    assert expected <= keys, results["skipped"]
    assert not keys & {"langchain-ast", "smolagents", "restrictedpython", "jupyter"}
    assert not any(key.startswith(("inprocess-", "subprocess-")) for key in results["skipped"])


def _assert_derived_from_samples(row: dict[str, Any], reference: str, field: str, value: Any = min) -> None:
    """A figure is what its own samples say: the table's numbers come from measured rounds."""
    samples = row["samples"]
    assert row["rounds"] == len(samples["x"]) == len(samples[reference]) >= 1
    assert all(math.isfinite(t) and t > 0 for t in samples["x"] + samples[reference])
    assert row["value_s"] == pytest.approx(value(samples["x"]))
    paired = statistics.median(x / y for x, y in zip(samples["x"], samples[reference], strict=True))
    assert row[field] == pytest.approx(paired)


def test_every_figure_has_a_measured_row_per_executor(bench: tuple[str, dict[str, Any]]) -> None:
    _, results = bench
    figures = results["figures"]
    for key in ["bare", *_ours(results)]:
        for figure in LATENCY:
            row = figures[figure][key]
            assert "failure" not in row, (figure, key, row)
            # A new session is timed once per session: the typical one, not the luckiest.
            value = statistics.median if figure == "new_session" else min
            _assert_derived_from_samples(row, "bare", "ratio", value)
        for size in NAMESPACE_SIZES:
            row = figures["namespace"][key][size]
            assert "failure" not in row, (size, key, row)
            _assert_derived_from_samples(row, "ref", "growth")
            _assert_derived_from_samples(row, "bare", "ratio")
        memory = figures["memory"][key]
        assert "failure" not in memory, (key, memory)
        assert memory["sessions"] >= 1


def test_text_has_one_table_per_figure_with_our_rows(bench: tuple[str, dict[str, Any]]) -> None:
    text, results = bench
    for title in (
        "Goals (quick run)",
        "Trivial call: `x = 1`",
        "Print call",
        "CPU-heavy loop",
        "Recursive function",
        "Comprehension over session variables",
        "`x = 1` as the namespace grows",
        "New cell: code never run before",
        "New session",
        "The host's own code beside the executor",
        "Caller depth: `x = 1` called from",
        "Memory: idle sessions",
        "Concurrency: 32 sessions printing at once",
        "Runaway probe: infinite loop",
        "Runaway probe: loop swallowing BaseException",
        "Runaway probe: print flood",
        "Runaway probe: memory bomb",
    ):
        assert title in text
    for key in ["bare", *_ours(results)]:
        assert results["executors"][key]["label"] in text
    goals = {(g["executor"], g["figure"]) for g in results["goals"]}
    for figure in ("trivial", "new_cell", "cpu", "namespace", "memory"):
        assert ("inprocess-trusted", figure) in goals
    assert all(g["verdict"] != "not measured" for g in results["goals"]), results["goals"]


def test_per_call_goals_are_time_budgets_on_the_measured_time(bench: tuple[str, dict[str, Any]]) -> None:
    _, results = bench
    budgets = {(f"inprocess-{p}", "trivial"): 100e-6 for p in PRESETS}
    budgets |= {(f"inprocess-{p}", "new_cell"): 300e-6 for p in PRESETS}
    if LINUX:
        budgets[(f"subprocess-{DEFAULT_POLICY}", "trivial")] = 250e-6
    goals = {(g["executor"], g["figure"]): g for g in results["goals"]}
    for (key, figure), budget in budgets.items():
        goal = goals[(key, figure)]
        assert goal["limit"] == pytest.approx(budget), goal
        assert goal["value"] == results["figures"][figure][key]["value_s"], goal
        assert (goal["verdict"] == "met") == (goal["value"] <= budget), goal


def test_caller_depth_is_measured_per_frame_from_paired_rounds(bench: tuple[str, dict[str, Any]]) -> None:
    _, results = bench
    depth = _bench_module("_figures").CALLER_DEPTH
    for key in ["bare", *_ours(results)]:
        row = results["figures"]["caller_depth"][key]
        assert "failure" not in row, (key, row)
        samples = row["samples"]
        assert row["rounds"] == len(samples["x"]) == len(samples["ref"]) >= 1
        assert row["value_s"] == pytest.approx(min(samples["x"]))
        assert row["direct_s"] == pytest.approx(min(samples["ref"]))
        paired = statistics.median(x - r for x, r in zip(samples["x"], samples["ref"], strict=True))
        assert row["per_frame_s"] == pytest.approx(paired / depth)


def test_the_deep_caller_adds_exactly_the_frames_it_says() -> None:
    worker = _bench_module("_worker")
    seen: list[int] = []

    def fn(code: str) -> str:
        seen.append(len(inspect.stack(0)))
        return code

    def direct() -> None:
        fn("x = 1")

    def deep(depth: int) -> None:
        assert worker._nested(depth, fn, "x = 1") == "x = 1"

    direct()
    for depth in (1, 5, 32):
        deep(depth)
        assert seen[-1] - seen[0] == depth


def test_our_sessions_never_mix_output(bench: tuple[str, dict[str, Any]]) -> None:
    _, results = bench
    for key in _ours(results):
        row = results["figures"]["concurrency"][key]
        assert "failure" not in row, (key, row)
        assert row["sessions"] == 32
        for mode in ("threads", "asyncio"):
            assert row[mode]["mixed"] == 0, (key, mode, row[mode])
            assert row[mode]["errors"] == 0, (key, mode, row[mode])


def test_runaway_code_returns_and_the_session_survives_in_process(bench: tuple[str, dict[str, Any]]) -> None:
    _, results = bench
    probes = results["figures"]["probes"]
    limits_chars = 20_000  # Limits().max_output_chars: the flood keeps head + tail within it
    for key in (k for k in _ours(results) if k.startswith("inprocess-")):
        for probe in ("loop", "swallow", "flood"):
            row = probes[probe][key]
            assert row["returned"] is True, (probe, key, row)
            assert row["status"] == "timeout", (probe, key, row)
            assert row["survived"] is True, (probe, key, row)
        assert probes["flood"][key]["out_chars"] <= limits_chars + 200
        bomb = probes["bomb"][key]
        assert bomb["returned"] is True, (key, bomb)
        assert bomb["status"] in ("timeout", "error", "blocked"), (key, bomb)
        assert bomb["survived"] is True, (key, bomb)


@pytest.mark.skipif(not LINUX, reason="the subprocess boundary runs on Linux")
def test_runaway_code_returns_on_the_subprocess_boundary(bench: tuple[str, dict[str, Any]]) -> None:
    _, results = bench
    keys = [k for k in _ours(results) if k.startswith("subprocess-")]
    assert keys == [f"subprocess-{DEFAULT_POLICY}"]
    for key in keys:
        for probe in PROBES:
            row = results["figures"]["probes"][probe][key]
            assert row["returned"] is True, (probe, key, row)
            assert row["status"] in ("timeout", "crashed", "error", "blocked"), (probe, key, row)


def test_bare_exec_is_timed_in_a_process_our_hook_never_reached() -> None:
    # A restricted run here installs our audit hook in this process, which from then on judges this
    # process's own compile and exec: the partner is a fresh interpreter, untouched by it.
    partner_module = _bench_module("_partner")
    with ReplEngine(boundary="inprocess", policy="strict") as engine:
        assert engine.run("x = 1").status == "ok"
        partner = partner_module.BarePartner(30)
        try:
            seen = partner.run("import sys\nprint(sorted(m for m in sys.modules if 'genpark' in m))", "s")
            assert (seen.ok, seen.out) == (True, "[]\n")
            assert partner.run("x = 41", "a").ok
            assert partner.run("print(x + 1)", "a").out == "42\n"  # sessions keep their namespace
            assert not partner.run("print(x)", "b").ok  # and only their own
            call = partner.caller("a")
            seconds = partner_module.timed(call, ["x = 2"] * 200, time.process_time)
            assert 0 < seconds < 0.01
            assert partner.run("print(x)", "a").out == "2\n"  # the batch ran there, in that session
        finally:
            partner.close()


def test_a_hanging_job_is_killed_and_reported() -> None:
    run = _bench_module("run")
    figures = _bench_module("_figures")
    settings = figures.settings(True)
    job = run.run_job(run.Job("probe", "bare", "loop"), sys.executable, settings, 60)
    assert job.killed is not None
    assert job.killed.startswith("call still running")
    assert job.event("ready") is not None
    assert job.event("returned") is None
    with pytest.raises(ProcessLookupError):
        os.kill(job.pid, 0)


def test_a_crashing_job_is_reported() -> None:
    run = _bench_module("run")
    figures = _bench_module("_figures")
    job = run.run_job(run.Job("latency", "no-such-executor"), sys.executable, figures.settings(True), 60)
    assert job.killed is None
    failed = job.event("failed")
    assert failed is not None
    assert "unknown executor 'no-such-executor'" in failed["error"]


def test_a_batch_is_sized_by_warm_calls_not_by_a_slow_first_one() -> None:
    """The first call after a setup cell may be slow; a batch sized by it would hold a couple of calls."""
    worker = _bench_module("_worker")
    now = [0.0]
    calls: list[str] = []

    def fn(code: str) -> None:
        calls.append(code)
        now[0] += 0.010 if len(calls) == 1 else 0.000_010  # 10 ms once, then 10 us a call

    size = worker.batch_size(fn, lambda: "x = 1", lambda: now[0], 0.005, 100_000)
    assert 400 <= size <= 600  # 5 ms of 10 us calls; one slow call sized it to 1 before
    assert len(calls) < 1000  # calibrating took about a quarter of a batch, not more
    assert worker.batch_size(fn, lambda: "x = 1", lambda: now[0], 0.005, 50) == 50  # the cap holds
