"""One suite every boundary passes unchanged: same API, same result shapes, same semantics."""

from __future__ import annotations

import ast
import asyncio
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .._engine import ReplEngine
from .._exceptions import EngineClosed, SessionNotFound, VariableNotFound
from .._limits import Limits
from .._models import ExecutionResult

MakeEngine = Callable[..., ReplEngine]

FIB = "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
INFINITE_LOOP = "n = 0\nwhile True:\n    n += 1\n"
SWALLOWING_LOOP = (
    "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass\n"
)
SUPPRESSING_LOOP = (
    "import contextlib\nwhile True:\n    with contextlib.suppress(BaseException):\n        while True:\n"
    "            pass\n"
)
SLEEP = "import time\ntime.sleep(30)\n"

# Generous slack: CI machines are loaded. What the timeout tests prove is that the code stopped (it would
# run forever, or 30 s for SLEEP); how close to the deadline it stopped is the benchmarks' business.
TIMEOUT_SLACK_S = 10.0
# Bounds on waits for a call that another thread runs; a failure costs this long, a pass returns early.
WAIT_S = 30.0


class BoundaryConformance:
    """Subclass and provide a `make_engine` fixture: make_engine(**ReplEngine kwargs) -> ReplEngine."""

    @pytest.fixture
    def engine(self, make_engine: MakeEngine) -> ReplEngine:
        return make_engine(policy="trusted", limits=Limits(timeout_s=1.0))

    # ---- namespaces -----------------------------------------------------------------------------

    def test_state_persists_between_calls(self, engine: ReplEngine) -> None:
        assert engine.run("x = 40", session="a").status == "ok"
        result = engine.run("x + 2", session="a")
        assert (result.status, result.value, result.value_type) == ("ok", "42", "int")

    def test_sessions_are_isolated(self, engine: ReplEngine) -> None:
        engine.run("secret = 'alice'", session="alice")
        result = engine.run("secret", session="bob")
        assert result.status == "error"
        assert result.error is not None and result.error.type == "NameError"
        assert engine.run("secret", session="alice").value == "'alice'"

    def test_recursive_function_sees_itself(self, engine: ReplEngine) -> None:
        result = engine.run(FIB + "fib(15)")
        assert (result.status, result.value) == ("ok", "610")
        assert engine.run("fib(10)").value == "55"

    def test_trailing_expression_runs_once(self, engine: ReplEngine) -> None:
        engine.run("calls = []\ndef f():\n    calls.append(1)\n    raise ValueError('boom')\n")
        result = engine.run("f()")
        assert result.status == "error"
        assert engine.run("len(calls)").value == "1"

    def test_none_value_is_not_shown(self, engine: ReplEngine) -> None:
        result = engine.run("print('hi')")
        assert (result.stdout, result.value) == ("hi\n", None)

    # ---- errors ---------------------------------------------------------------------------------

    def test_syntax_error_has_line_column_and_caret(self, engine: ReplEngine) -> None:
        result = engine.run("x = 1\ny = (2 +\n")
        assert result.status == "error"
        error = result.error
        assert error is not None
        assert (error.type, error.line, error.column) == ("SyntaxError", 2, 4)
        assert "^" in error.traceback
        assert "'(' was never closed" in error.message

    def test_runtime_error_shows_only_user_frames(self, engine: ReplEngine) -> None:
        result = engine.run("def g():\n    return 1 / 0\n\ng()\n")
        error = result.error
        assert error is not None
        assert (error.type, error.message, error.line) == ("ZeroDivisionError", "division by zero", 2)
        assert error.source_line == "    return 1 / 0"
        assert "genpark_repl_tools" not in error.traceback
        assert error.traceback.count('File "<input>"') == 2

    def test_failed_call_keeps_earlier_assignments(self, engine: ReplEngine) -> None:
        result = engine.run("a = 1\nb = undefined_name\nc = 3")
        assert result.status == "error"
        assert [v.name for v in result.changes.created] == ["a"]
        assert engine.run("a").value == "1"

    @pytest.mark.parametrize(
        ("code", "etype"),
        [("raise SystemExit(3)", "SystemExit"), ("raise KeyboardInterrupt", "KeyboardInterrupt")],
    )
    def test_base_exceptions_become_results(self, engine: ReplEngine, code: str, etype: str) -> None:
        engine.run("kept = 1")
        result = engine.run(code)
        assert result.status == "error"
        assert result.error is not None and result.error.type == etype
        assert engine.run("kept").value == "1"

    def test_exit_zero_is_not_an_error(self, engine: ReplEngine) -> None:
        result = engine.run("print('bye')\nraise SystemExit(0)")
        assert (result.status, result.stdout) == ("ok", "bye\n")
        assert result.notes == ["SystemExit does not end the session; its variables are kept."]

    def test_deep_recursion_is_an_error_not_a_crash(self, engine: ReplEngine) -> None:
        result = engine.run("def down(n):\n    return down(n + 1)\ndown(0)")
        assert result.status == "error"
        assert result.error is not None and result.error.type == "RecursionError"
        assert len(result.error.traceback) < 10_000
        assert engine.run("1 + 1").value == "2"

    # ---- timeouts -------------------------------------------------------------------------------

    @pytest.mark.parametrize("code", [INFINITE_LOOP, SWALLOWING_LOOP, SUPPRESSING_LOOP, SLEEP])
    def test_timeout_stops_code_and_keeps_session(self, engine: ReplEngine, code: str) -> None:
        engine.run("survivor = 'still here'")
        started = time.monotonic()
        result = engine.run(code)
        elapsed = time.monotonic() - started
        assert result.status == "timeout"
        assert elapsed < engine.limits.timeout_s + TIMEOUT_SLACK_S
        assert result.error is not None and result.error.type == "Timeout"
        assert engine.run("survivor").value == "'still here'"

    def test_per_call_timeout_overrides_limits(self, engine: ReplEngine) -> None:
        started = time.monotonic()
        result = engine.run(INFINITE_LOOP, timeout_s=0.3)
        assert result.status == "timeout"
        assert time.monotonic() - started < 0.3 + TIMEOUT_SLACK_S

    # ---- output ---------------------------------------------------------------------------------

    def test_stdout_and_stderr_are_captured_separately(self, engine: ReplEngine) -> None:
        result = engine.run("import sys\nprint('out')\nprint('err', file=sys.stderr)")
        assert (result.stdout, result.stderr) == ("out\n", "err\n")

    def test_output_flood_is_bounded(self, make_engine: MakeEngine) -> None:
        engine = make_engine(policy="trusted", limits=Limits(timeout_s=5, max_output_chars=1000))
        result = engine.run("for i in range(200_000):\n    print(i)")
        assert result.status == "ok"
        assert result.stdout_truncated
        assert len(result.stdout) < 1200
        assert result.stdout.startswith("0\n1\n")
        assert result.stdout.endswith("199999\n")
        assert "characters omitted" in result.stdout

    def test_value_repr_is_bounded(self, make_engine: MakeEngine) -> None:
        engine = make_engine(policy="trusted", limits=Limits(max_repr_chars=100))
        result = engine.run("'x' * 10_000_000")
        assert result.value is not None and result.value_truncated
        assert len(result.value) < 200

    # ---- introspection --------------------------------------------------------------------------

    def test_variables_hide_modules_and_private_names(self, engine: ReplEngine) -> None:
        engine.run("import math\n_hidden = 1\nvisible = [1, 2, 3]\ndef f(x): return x")
        names = {v.name: v for v in engine.variables()}
        assert set(names) == {"visible", "f"}
        assert names["visible"].len == 3
        assert names["f"].kind == "function"
        hidden = {v.name for v in engine.variables(include_hidden=True)}
        assert {"math", "_hidden", "visible", "f"} <= hidden

    def test_inspect_bounds_huge_values(self, engine: ReplEngine) -> None:
        engine.run("big = list(range(1_000_000))")
        info = engine.inspect("big")
        assert (info.type, info.len) == ("list", 1_000_000)
        assert len(info.repr) < 3000

    def test_inspect_errors(self, engine: ReplEngine) -> None:
        engine.run("x = 1")
        with pytest.raises(VariableNotFound):
            engine.inspect("nope")
        with pytest.raises(SessionNotFound):
            engine.inspect("x", session="no-such-session")

    def test_changes_report_created_rebound_deleted(self, engine: ReplEngine) -> None:
        engine.run("a = 1\nb = 2\nc = 3")
        result = engine.run("a = 10\ndel b\nd = [1, 2]")
        assert [v.name for v in result.changes.created] == ["d"]
        assert [v.name for v in result.changes.rebound] == ["a"]
        assert result.changes.deleted == ["b"]
        assert result.changes.created[0].len == 2

    def test_changes_through_global_statement_in_earlier_function(self, engine: ReplEngine) -> None:
        engine.run("counter = 0\ndef bump():\n    global counter\n    counter += 1\n")
        result = engine.run("bump()")
        assert [v.name for v in result.changes.rebound] == ["counter"]

    # ---- lifecycle ------------------------------------------------------------------------------

    def test_reset_and_close_session(self, engine: ReplEngine) -> None:
        engine.run("x = 1", session="s1")
        engine.run("y = 2", session="s2")
        assert set(engine.sessions()) >= {"s1", "s2"}
        engine.reset("s1")
        assert engine.run("x", session="s1").status == "error"
        assert engine.close("s2") is True
        assert "s2" not in engine.sessions()
        assert engine.close("s2") is False

    def test_execution_count(self, engine: ReplEngine) -> None:
        counts = [engine.run("1", session="count").execution_count for _ in range(3)]
        assert counts == [1, 2, 3]

    def test_engine_close_while_a_call_runs(
        self, make_engine: MakeEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """close() ends a running call: the caller gets a result, never a hang or a host exception."""
        monkeypatch.chdir(tmp_path)  # where in-process code writes; the subprocess worker has its own
        engine = make_engine(policy="trusted", limits=Limits(timeout_s=2))
        cwd = engine.run("import os, time\nos.getcwd()", session="busy").value
        assert cwd is not None
        marker = Path(ast.literal_eval(cwd)) / "close-test-started"
        results: list[ExecutionResult | BaseException] = []

        def call() -> None:
            code = f"open({marker.name!r}, 'w').close()\nwhile True:\n    time.sleep(0.01)"
            try:
                results.append(engine.run(code, session="busy"))
            except BaseException as exc:  # recorded for the assertion below
                results.append(exc)

        runner = threading.Thread(target=call, daemon=True)
        runner.start()
        deadline = time.monotonic() + WAIT_S
        while not marker.exists() and runner.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert marker.exists(), f"the call never started: {results}"
        closer = threading.Thread(target=engine.close, daemon=True)
        closer.start()
        closer.join(engine.limits.timeout_s + TIMEOUT_SLACK_S)
        runner.join(WAIT_S)
        assert not closer.is_alive(), "close() did not return"
        assert not runner.is_alive(), "the running call never returned"
        [outcome] = results
        assert isinstance(outcome, ExecutionResult), outcome
        # The subprocess boundary kills the worker at once; in-process code cannot be killed, so
        # close() waits for the call to reach its time limit.
        error_type = outcome.error.type if outcome.error else None
        assert (outcome.status, error_type) in (("crashed", "SessionClosed"), ("timeout", "Timeout"))
        with pytest.raises(EngineClosed):
            engine.run("1", session="busy")
        assert engine.close() is True

    def test_closed_engine_refuses_calls(self, make_engine: MakeEngine) -> None:
        engine = make_engine(policy="trusted")
        engine.run("x = 1")
        engine.close()
        with pytest.raises(EngineClosed):
            engine.run("x")

    # ---- telemetry ------------------------------------------------------------------------------

    def test_result_is_plain_json_and_round_trips(self, engine: ReplEngine) -> None:
        result = engine.run("import sys\nxs = [1, 2]\nprint('o')\nprint('e', file=sys.stderr)\nxs")
        data = result.model_dump(mode="json")
        assert json.loads(json.dumps(data)) == data
        assert ExecutionResult.model_validate(data) == result
        assert data["boundary"] == engine.boundary.name
        assert data["policy"] == engine.policy.name

    def test_duration_is_measured_within_the_call(self, engine: ReplEngine) -> None:
        started = time.perf_counter()
        result = engine.run("import time\ntime.sleep(0.2)")
        wall_ms = (time.perf_counter() - started) * 1000
        # The sleep is inside the measured span, and the span is inside the call.
        assert 200 <= result.duration_ms <= wall_ms

    # ---- concurrency ----------------------------------------------------------------------------

    def test_parallel_sessions_do_not_mix_output(self, engine: ReplEngine) -> None:
        results: dict[int, ExecutionResult] = {}

        def worker(i: int) -> None:
            code = f"for k in range(200):\n    print('s{i}-' + str(k))\n"
            results[i] = engine.run(code, session=f"par-{i}")

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(results) == 8
        for i, result in results.items():
            assert result.stdout == "".join(f"s{i}-{k}\n" for k in range(200))

    def test_calls_on_one_session_are_serialized(self, engine: ReplEngine) -> None:
        # A read-sleep-write cell: if two calls on the session ever overlapped, both would read the same
        # length during the sleep (which releases the GIL) and append the same number.
        engine.run("import time\nhits = []")
        code = "n = len(hits)\ntime.sleep(0.005)\nhits.append(n)\n"
        barrier = threading.Barrier(4)

        def worker() -> None:
            barrier.wait(WAIT_S)
            for _ in range(10):
                engine.run(code)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT_S)
        assert engine.run("hits").value == repr(list(range(40)))

    def test_arun(self, engine: ReplEngine) -> None:
        async def main() -> list[Any]:
            return await asyncio.gather(*(engine.arun(f"{i} * 2", session=f"as-{i}") for i in range(4)))

        results = asyncio.run(main())
        assert [r.value for r in results] == ["0", "2", "4", "6"]
