"""ExecutionResult.usage per run and cumulative figures per session (engine.usage)."""

from __future__ import annotations

import pytest

from genpark_repl_tools import Limits, ReplEngine

# Burns 0.5 s of this thread's CPU time whatever the load on the machine (CPU time, not wall time).
CPU_LOOP = """
import time
end = time.thread_time() + 0.5
n = 0
while time.thread_time() < end:
    n += 1
"""


def test_cpu_loop_reports_its_cpu_time_in_process() -> None:
    with ReplEngine(boundary="inprocess", policy="trusted") as engine:
        result = engine.run(CPU_LOOP)
    assert result.status == "ok", result.to_observation()
    assert result.usage.cpu_ms is not None
    assert 400 <= result.usage.cpu_ms <= 700
    assert result.usage.wall_ms >= result.duration_ms >= result.usage.cpu_ms * 0.99
    assert result.usage.peak_memory_mb is None  # a shared process has no per-run peak to report


@pytest.mark.slow
def test_cpu_loop_reports_its_cpu_time_in_the_worker(sub_engine: ReplEngine) -> None:
    result = sub_engine.run(CPU_LOOP, session="cpu")
    assert result.status == "ok", result.to_observation()
    assert result.usage.cpu_ms is not None
    assert 400 <= result.usage.cpu_ms <= 700


@pytest.mark.slow
def test_worker_cpu_counts_threads_the_code_starts(sub_engine: ReplEngine) -> None:
    code = """
import threading, time
def burn():
    end = time.thread_time() + 0.5
    while time.thread_time() < end:
        pass
ts = [threading.Thread(target=burn) for _ in range(2)]
for t in ts:
    t.start()
for t in ts:
    t.join()
"""
    result = sub_engine.run(code, session="threads")
    assert result.status == "ok", result.to_observation()
    assert result.usage.cpu_ms is not None
    assert 900 <= result.usage.cpu_ms <= 1400  # two threads, 0.5 s of CPU each


@pytest.mark.slow
def test_peak_memory_is_the_worker_high_water_mark(sub_engine: ReplEngine) -> None:
    first = sub_engine.run("x = 1", session="mem")
    grown = sub_engine.run(
        "big = bytearray(120 * 2**20)\nbig[::4096] = b'x' * len(big[::4096])\ndel big", "mem"
    )
    after = sub_engine.run("y = 2", session="mem")
    assert first.usage.peak_memory_mb is not None and grown.usage.peak_memory_mb is not None
    assert grown.usage.peak_memory_mb - first.usage.peak_memory_mb >= 110
    # A high-water mark: freeing the memory does not lower it.
    assert after.usage.peak_memory_mb == grown.usage.peak_memory_mb
    assert sub_engine.usage("mem").peak_memory_mb == grown.usage.peak_memory_mb


def test_session_usage_adds_up_its_runs() -> None:
    with ReplEngine(boundary="inprocess") as engine:
        results = [engine.run(code, "a") for code in ("x = 1", "x +", "import os", "x")]
        engine.run("z = 1", "b")
        usage = engine.usage("a")
        assert usage.calls == 4
        assert usage.statuses == {"ok": 2, "error": 1, "blocked": 1}
        assert usage.cpu_s == pytest.approx(sum(r.usage.cpu_ms or 0 for r in results) / 1000, abs=1e-5)
        assert usage.wall_s == pytest.approx(sum(r.usage.wall_ms for r in results) / 1000, abs=1e-5)
        assert not usage.cpu_estimated
        assert usage.max_calls is None and usage.remaining_calls is None
        assert engine.usage("b").calls == 1
        assert engine.usage("never-used").calls == 0
        engine.reset("a")  # a reset keeps the account: the session's runs still happened
        assert engine.usage("a").calls == 4
        engine.close("a")  # closing the session forgets it
        assert engine.usage("a").calls == 0


@pytest.mark.slow
def test_a_killed_worker_is_charged_its_wall_time() -> None:
    limits = Limits(timeout_s=0.5)
    with ReplEngine(policy="trusted", boundary="subprocess", limits=limits, kill_grace_s=0.1) as engine:
        result = engine.run("import os\nos._exit(3)", "crash")
        assert result.status == "crashed"
        assert result.usage.cpu_ms is None
        assert result.usage.wall_ms > 0
        usage = engine.usage("crash")
        assert usage.cpu_estimated
        assert usage.cpu_s == pytest.approx(result.usage.wall_ms / 1000, rel=1e-3)


def test_accounts_of_sessions_the_boundary_dropped_are_pruned() -> None:
    with ReplEngine(boundary="inprocess", limits=Limits(max_history_cells=5)) as engine:
        for i in range(1100):
            engine.run("x = 1", f"s{i}")
            if i < 1000:
                engine.boundary.close_session(f"s{i}")  # as an idle eviction would, behind the engine's back
        assert engine.usage("s0").calls == 0 and engine.history("s0") == []
        assert engine.usage("s1099").calls == 1 and len(engine.history("s1099")) == 1
        assert engine.usage("s1000").calls == 1


def test_run_cell_leaves_cpu_to_a_caller_that_measures_it_itself() -> None:
    # The subprocess worker counts its whole process and sets cpu_ms itself: run_cell then reads no
    # CPU clock (two system calls a run) and leaves the field for it.
    from genpark_repl_tools import Limits
    from genpark_repl_tools._compile import compile_cell
    from genpark_repl_tools._runner import run_cell
    from genpark_repl_tools._session import Session
    from genpark_repl_tools.policy import Policy
    from genpark_repl_tools.policy._runtime import TrustedRuntime

    runtime = TrustedRuntime(Policy.trusted())
    session = Session("s", runtime)
    for code in ("x = 1", "x = ("):  # a run, and a cell refused before it runs
        cell = compile_cell(code, runtime)
        assert run_cell(session, cell, runtime, Limits(), "inprocess", measure_cpu=False).usage.cpu_ms is None
        assert run_cell(session, cell, runtime, Limits(), "inprocess").usage.cpu_ms is not None
