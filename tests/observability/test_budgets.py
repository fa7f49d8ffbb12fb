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
    with ReplEngine(limits=Limits(max_session_calls=2), on_event=events.append) as engine:
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
    with ReplEngine(limits=Limits(max_session_calls=1)) as engine:
        run_python(engine, "x = 1", "s")
        reply = run_python(engine, "x = 2", "s")
    assert reply.is_error
    assert reply.text.startswith("Error: BudgetExceeded: this session has used its budget of 1 runs")
    assert "Tell the user the budget is spent." in reply.text


def test_cpu_budget_is_checked_before_each_run() -> None:
    with ReplEngine(policy="trusted", limits=Limits(max_session_cpu_s=0.2)) as engine:
        first = engine.run(CPU_LOOP, "s")
        assert first.ok  # the run that crosses the line completes
        refused = engine.run("1 + 1", "s")
        assert refused.error is not None and refused.error.type == "BudgetExceeded"
        assert "CPU budget" in refused.error.message and "of 0.2 s" in refused.error.message
        usage = engine.usage("s")
        assert usage.cpu_s >= 0.25 and usage.remaining_cpu_s == 0
        assert engine.run("1 + 1", "fresh").ok


def test_closing_a_session_resets_its_budget_but_reset_does_not() -> None:
    with ReplEngine(limits=Limits(max_session_calls=1)) as engine:
        engine.run("x = 1", "s")
        engine.reset("s")  # a model's reset_session must not buy it more runs
        assert engine.run("x = 1", "s").error.type == "BudgetExceeded"  # type: ignore[union-attr]
        engine.close("s")  # the host ends the conversation
        assert engine.run("x = 1", "s").ok


def test_a_call_the_boundary_failed_gives_its_slot_back() -> None:
    with ReplEngine(limits=Limits(max_session_calls=1, max_sessions=1)) as engine:
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
