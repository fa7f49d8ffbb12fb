"""Per-session budgets (Limits.max_session_calls / max_session_cpu_s): refused with a plain message."""

from __future__ import annotations

import pytest

from genpark_repl_tools import Limits, ReplEngine
from genpark_repl_tools.observability import AuditEvent
from genpark_repl_tools.tools import run_python

CPU_LOOP = """
import time
end = time.thread_time() + 0.3
while time.thread_time() < end:
    pass
"""


def test_call_budget_refuses_later_runs_and_touches_nothing() -> None:
    events: list[AuditEvent] = []
    with ReplEngine(
        boundary="inprocess", limits=Limits(max_session_calls=2), on_event=events.append
    ) as engine:
        assert engine.run("x = 1", "s").ok
        assert engine.run("x = 2", "s").ok
        refused = engine.run("x = 3", "s", call_id="call_3")
        assert refused.status == "error"
        assert refused.error is not None and refused.error.type == "BudgetExceeded"
        assert refused.error.message == "this session has used its budget of 2 runs; nothing ran"
        assert refused.execution_count == 2
        assert engine.inspect("x", "s").repr == "2"  # the refused run did not run
        assert engine.run("y = 1", "other").ok  # budgets are per session
        usage = engine.usage("s")
        assert (usage.calls, usage.refused, usage.remaining_calls) == (2, 1, 0)
    assert [(e.kind, e.rule, e.call_id, e.code) for e in events] == [("budget", "calls", "call_3", "x = 3")]


def test_the_model_reads_the_refusal_through_the_tool_layer() -> None:
    with ReplEngine(boundary="inprocess", limits=Limits(max_session_calls=1)) as engine:
        run_python(engine, "x = 1", "s")
        reply = run_python(engine, "x = 2", "s")
    assert reply.is_error
    assert reply.text.startswith("Error: BudgetExceeded: this session has used its budget of 1 runs")
    assert "Tell the user the budget is spent." in reply.text


def test_cpu_budget_is_checked_before_each_run() -> None:
    with ReplEngine(boundary="inprocess", policy="trusted", limits=Limits(max_session_cpu_s=0.2)) as engine:
        first = engine.run(CPU_LOOP, "s")
        assert first.ok  # the run that crosses the line completes
        refused = engine.run("1 + 1", "s")
        assert refused.error is not None and refused.error.type == "BudgetExceeded"
        assert "CPU budget" in refused.error.message and "of 0.2 s" in refused.error.message
        usage = engine.usage("s")
        assert usage.cpu_s >= 0.25 and usage.remaining_cpu_s == 0
        assert engine.run("1 + 1", "fresh").ok


def test_closing_a_session_resets_its_budget_but_reset_does_not() -> None:
    with ReplEngine(boundary="inprocess", limits=Limits(max_session_calls=1)) as engine:
        engine.run("x = 1", "s")
        engine.reset("s")  # a model's reset_session must not buy it more runs
        assert engine.run("x = 1", "s").error.type == "BudgetExceeded"  # type: ignore[union-attr]
        engine.close("s")  # the host ends the conversation
        assert engine.run("x = 1", "s").ok


def test_a_call_the_boundary_failed_gives_its_slot_back() -> None:
    with ReplEngine(boundary="inprocess", limits=Limits(max_session_calls=1, max_sessions=1)) as engine:
        engine.run("x = 1", "a")
        from genpark_repl_tools import CapacityError

        with pytest.raises(CapacityError):
            engine.run("x = 1", "b")
        assert engine.usage("b").calls == 0
        engine.close("a")
        assert engine.run("x = 1", "b").ok


@pytest.mark.slow
def test_budgets_hold_on_the_subprocess_boundary() -> None:
    limits = Limits(max_session_calls=2)
    with ReplEngine(boundary="subprocess", limits=limits) as engine:
        assert engine.run("x = 1").ok and engine.run("x").value == "1"
        assert engine.run("x").error.type == "BudgetExceeded"  # type: ignore[union-attr]


# Trusted code owns the process that measures it: these make the measurement lie, as a compromised
# worker would. In-process the run's CPU time comes from the runner's _cpu_ms; in a worker from the
# worker module's _rusage (ru_utime + ru_stime of itself and its children).
LIE_IN_PROCESS = "import genpark_repl_tools._runner as runner\nrunner._cpu_ms = lambda started: {value}"
LIE_IN_WORKER = """
import itertools, sys, types
worker = sys.modules["genpark_repl_tools.boundaries._subprocess._worker"]
rss = worker._rusage()[0].ru_maxrss
ticks = itertools.count()
def lie():
    used = types.SimpleNamespace(ru_utime={value}, ru_stime=0.0, ru_maxrss=rss)
    return used, types.SimpleNamespace(ru_utime=0.0, ru_stime=0.0)
worker._rusage = lie
"""
LIES = {"nan": "float('nan')", "negative": "-1e9", "infinite": "float('inf')", "too much": "1e12"}


@pytest.fixture
def restore_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process the lie is told in the host's own runner module: put it back afterwards."""
    import genpark_repl_tools._runner as runner

    monkeypatch.setattr(runner, "_cpu_ms", runner._cpu_ms)


@pytest.mark.parametrize("lie", sorted(LIES))
@pytest.mark.usefixtures("restore_runner")
def test_a_cpu_time_that_cannot_be_true_is_charged_the_deadline(lie: str) -> None:
    limits = Limits(timeout_s=1.5, max_session_cpu_s=3)
    with ReplEngine(boundary="inprocess", policy="trusted", limits=limits) as engine:
        lied = engine.run(LIE_IN_PROCESS.format(value=LIES[lie]), "s")
        assert lied.ok, lied.to_observation()
        usage = engine.usage("s")
        assert usage.cpu_s == 1.5 and usage.cpu_estimated  # the deadline's worth, never less
        assert engine.run("1 + 1", "s").ok  # 1.5 s of 3 s: one more run
        assert engine.run("1 + 1", "s").error.type == "BudgetExceeded"  # type: ignore[union-attr]


@pytest.mark.usefixtures("restore_runner")
def test_a_deadline_set_for_the_call_is_the_one_charged() -> None:
    with ReplEngine(
        boundary="inprocess", policy="trusted", limits=Limits(timeout_s=1, max_session_cpu_s=100)
    ) as engine:
        assert engine.run(LIE_IN_PROCESS.format(value="-5.0"), "s", timeout_s=7).ok
        assert engine.usage("s").cpu_s == 7


def test_a_true_cpu_time_is_charged_as_reported() -> None:
    with ReplEngine(boundary="inprocess", policy="trusted", limits=Limits(max_session_cpu_s=100)) as engine:
        result = engine.run(CPU_LOOP, "s")
        assert result.ok and result.usage.cpu_ms is not None and result.usage.cpu_ms >= 300
        usage = engine.usage("s")
        assert not usage.cpu_estimated and usage.cpu_s == pytest.approx(result.usage.cpu_ms / 1000, abs=1e-6)
        engine.run("x = 1", "s")
        assert not engine.usage("s").cpu_estimated  # a run near zero is believed too


@pytest.mark.parametrize("value", ["-1000.0 * next(ticks)", "float('nan')"])
def test_a_worker_that_lies_about_its_cpu_cannot_refill_the_budget(value: str) -> None:
    limits = Limits(timeout_s=2, max_session_cpu_s=3)
    with ReplEngine(policy="trusted", boundary="subprocess", limits=limits) as engine:
        lied = engine.run(LIE_IN_WORKER.format(value=value), "s")
        results = [engine.run("1 + 1", "s") for _ in range(3)]
        usage = engine.usage("s")
        assert usage.cpu_estimated and usage.cpu_s > 0
        if value.startswith("-"):
            # A figure that cannot be true stops the worker that sent it: the run is crashed, says
            # why, and is charged the host's own measure (whether the lie survives in the copy the
            # session rolls back to differs between Pythons; every lying run is stopped alike).
            assert lied.status == "crashed" and lied.error is not None and "cpu_ms" in lied.error.message
            for later in results:
                assert later.ok or (later.error is not None and "cpu_ms" in later.error.message)
