"""One suite every boundary passes unchanged: same API, same result shapes, same semantics."""

from __future__ import annotations

import _thread
import ast
import asyncio
import ctypes
import json
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import pytest

from .._engine import ReplEngine
from .._exceptions import EngineClosed, SessionNotFound, VariableNotFound
from .._limits import Limits
from .._models import ExecutionResult
from .._stream import OutputEvent, ResultEvent
from .bad_output import BAD_OUTPUT_TIMEOUT_S, BAD_OUTPUTS, BadOutput, assert_bad_output, kind_of

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


# ---- host tools -----------------------------------------------------------------------------------

TOOL_PROGRAM = (
    "mine = ['session']\n"
    "got = lookup('owl', mine)\n"
    "got['hits'].append('changed here')\n"
    "try:\n"
    "    lookup('', mine)\n"
    "except ToolError as exc:\n"
    "    failed = str(exc)\n"
    "try:\n"
    "    lookup(object(), mine)\n"
    "except ToolError as exc:\n"
    "    refused = str(exc)\n"
    "(got, lookup('owl', mine)['hits'], mine, later('x'), failed, refused[:31])"
)
TOOL_PROGRAM_VALUE = (
    "({'hits': ['owl', 'session', 'changed here']}, ['owl', 'session'], ['session'], 'x!', "
    "'lookup: nothing to look up', 'lookup: argument 1 is of type o')"
)


def _lookup(q: str, seen: list[str]) -> dict[str, Any]:
    if not q:
        raise LookupError("nothing to look up")
    seen.append("the host's change")  # to its own copy: the session's list stays as it was
    return {"hits": [q, seen[0]]}


async def _later(text: str) -> str:
    await asyncio.sleep(0.001)
    return text + "!"


class ToolConformance:
    """Host tools, the same on every boundary that offers them; a boundary that cannot refuses them.
    Mixed into BoundaryConformance: needs its `make_engine` fixture."""

    def test_the_same_tool_program_gives_the_same_result(self, make_engine: MakeEngine) -> None:
        tools = {"lookup": _lookup, "later": _later}
        probe = make_engine(policy="trusted")
        if not probe.boundary.supports_tools:
            with pytest.raises(ValueError, match="cannot offer host tools"):
                make_engine(policy="standard", tools=tools)
            return
        for policy in ("standard", "trusted"):
            engine = make_engine(policy=policy, tools=tools)
            result = engine.run(TOOL_PROGRAM, session="tools")
            assert (result.status, result.value) == ("ok", TOOL_PROGRAM_VALUE), result.error
            assert result.usage.tool_calls == 4  # the refused call never reached the tool

    def test_a_slow_tool_times_the_run_out_and_the_session_goes_on(self, make_engine: MakeEngine) -> None:
        release = threading.Event()
        probe = make_engine(policy="trusted")
        if not probe.boundary.supports_tools:
            pytest.skip(f"the {probe.boundary.name} boundary offers no host tools")
        engine = make_engine(policy="trusted", tools={"slow": lambda: release.wait(WAIT_S)})
        started = time.monotonic()
        try:
            result = engine.run("x = 1\nslow()", session="slow", timeout_s=0.5)
        finally:
            release.set()
        assert result.status in ("timeout", "crashed") and result.error is not None
        assert result.error.type == "Timeout"
        assert time.monotonic() - started < 0.5 + TIMEOUT_SLACK_S
        assert engine.run("x", session="slow").value == "1"


class BoundaryConformance(ToolConformance):
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

    @pytest.mark.parametrize(
        "code",
        [
            "x = 1" + "+1" * 100_000,  # the parser: RecursionError
            "x = " + "-" * 100_000 + "1",  # the parser: MemoryError (3.11)
            "x = " + "-" * 3_000 + "1",
            # Parsed, then too deep for the timeout guards' tree rewrite (under trusted)
            "try:\n    x = 1" + "+1" * 600 + "\nexcept Exception:\n    pass",
        ],
        ids=["long-sum", "long-negation", "negation-3000", "guarded-sum"],
    )
    def test_code_too_deeply_nested_to_compile_is_an_error_result(
        self, engine: ReplEngine, code: str
    ) -> None:
        # Python gives up compiling such code with RecursionError or MemoryError; that used to reach
        # the caller of engine.run as an exception. It is the run's error; the session goes on.
        try:  # where this Python compiles it (3.15 takes 3,000 negations), there is nothing to report
            compile(code, "<deep>", "exec")
        except (RecursionError, MemoryError):
            pass
        else:
            if "try:" not in code:
                pytest.skip("this Python compiles it")
        engine.run("x = 'before'", session="deep")
        result = engine.run(code, session="deep")
        assert result.status in ("error", "blocked"), result
        error = result.error
        assert error is not None
        if result.status == "error":  # "blocked": a restricted policy's audit refused the nesting first
            assert error.type in ("RecursionError", "MemoryError")
            assert "nested too deeply" in error.message and error.hint
        again = engine.run(code, session="deep")  # not cached as a failure that hides a retry's outcome
        assert (again.status, again.error and again.error.type) == (result.status, error.type)
        assert engine.run("x", session="deep").value == "'before'"

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

    def test_compiler_warnings_are_the_cells_stderr(self, engine: ReplEngine) -> None:
        # A SyntaxWarning comes from compiling, before the code runs: it is the cell's stderr (on
        # every run of it, in every session: compiled cells are cached), not the host's. Shown as a
        # plain `python` shows warnings (a test runner records them, or makes them errors).
        code = "import sys\ny = 5\nx = y is 5\nprint('err', file=sys.stderr)"
        warning = _compiler_says(code)  # this Python's wording (3.12 changed it)
        with warnings.catch_warnings():
            warnings.simplefilter("default", SyntaxWarning)
            warnings.showwarning = _show_on_stderr
            for session in ("warned", "warned", "other"):
                result = engine.run(code, session)
                assert (result.status, result.stderr) == ("ok", warning + "err\n")
            assert engine.run("print('fine')", "warned").stderr == ""

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

    def test_reset_empties_the_session_the_same_way_everywhere(self, engine: ReplEngine) -> None:
        engine.run("x = 1\ndef f():\n    global g\n    g = 2\n", session="r")
        engine.run("f()", session="r")
        engine.reset("r")
        assert engine.variables("r") == []
        with pytest.raises(VariableNotFound, match=r"^name 'x' is not defined in session 'r'$"):
            engine.inspect("x", session="r")
        result = engine.run("y = 3\ny", session="r")
        assert (result.status, result.value, result.execution_count) == ("ok", "3", 1)
        assert result.session_restarted is False
        assert [v.name for v in result.changes.created] == ["y"]

    def test_modules_are_described_as_modules(self, engine: ReplEngine) -> None:
        # Whatever the policy hands out for a module (a read-only view), the model sees "module".
        result = engine.run("import math\nm = math\nm", session="mod")
        assert result.value_type == "module"
        assert {(v.name, v.type, v.kind) for v in result.changes.created} == {
            ("m", "module", "module"),
            ("math", "module", "module"),
        }
        assert engine.inspect("math", session="mod").type == "module"

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
        # The session's directory as this host sees it: a container's worker sees only its mount point.
        workspace = engine.boundary.session_workspace("busy")
        marker = (workspace.path if workspace else Path(ast.literal_eval(cwd))) / "close-test-started"
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

    # ---- rollback and fork ----------------------------------------------------------------------
    # Rollback: only a boundary that claims it (supports_rollback) is held to it; fork: every boundary
    # that takes snapshots (engine.fork goes through one).

    def test_a_cell_that_ends_its_process_is_rolled_back(self, make_engine: MakeEngine) -> None:
        engine = make_engine(policy="trusted", limits=Limits(timeout_s=5.0))
        if not engine.boundary.supports_rollback:
            pytest.skip(f"the {engine.boundary.name} boundary does not roll back")
        engine.run("kept = [1, 2]", session="rb")
        failed = engine.run("kept.append(3)\nnew = 1\nimport os\nos._exit(9)", session="rb")
        assert (failed.status, failed.rolled_back) == ("crashed", True)
        assert "Rolled back: the variables from before this cell are intact" in failed.to_observation()
        after = engine.run("kept, 'new' in dir()", session="rb")
        assert (after.value, after.session_restarted) == ("([1, 2], False)", False)

    def test_fork_copies_a_session_that_then_goes_its_own_way(self, make_engine: MakeEngine) -> None:
        engine = make_engine(policy="trusted", limits=Limits(timeout_s=5.0))
        if not engine.boundary.supports_snapshots:
            pytest.skip(f"the {engine.boundary.name} boundary takes no snapshots, so it cannot fork")
        engine.run(
            "import math\ndata = [1, 2]\ndef area(r):\n    return round(math.pi * r * r, 2)", session="src"
        )
        engine.upload("src", "notes.txt", b"kept")  # files through the workspace API: every policy
        restored = engine.fork("src", "copy")
        assert set(restored.restored) >= {"data", "area"}
        assert engine.run("data, area(1)", session="copy").value == "([1, 2], 3.14)"
        assert engine.download("copy", "notes.txt") == b"kept"
        engine.run("data.append(3)", session="copy")
        engine.run("data.append(4)", session="src")
        engine.upload("src", "notes.txt", b"src only")
        assert engine.run("data", session="src").value == "[1, 2, 4]"
        assert engine.run("data", session="copy").value == "[1, 2, 3]"
        assert engine.download("copy", "notes.txt") == b"kept"
        assert engine.close("src") is True
        assert engine.run("data", session="copy").value == "[1, 2, 3]"
        assert engine.download("copy", "notes.txt") == b"kept"

    def test_fork_refuses_bad_input_and_changes_nothing(self, make_engine: MakeEngine) -> None:
        engine = make_engine(policy="trusted", limits=Limits(timeout_s=5.0))
        if not engine.boundary.supports_snapshots:
            pytest.skip(f"the {engine.boundary.name} boundary takes no snapshots, so it cannot fork")
        engine.run("x = 1", session="one")
        engine.run("x = 2", session="two")
        with pytest.raises(SessionNotFound, match="no session 'ghost' to fork"):
            engine.fork("ghost", "new")
        with pytest.raises(ValueError, match="session 'two' exists"):
            engine.fork("one", "two")
        with pytest.raises(ValueError, match="into itself"):
            engine.fork("one", "one")
        assert sorted(engine.sessions()) == ["one", "two"]
        assert engine.run("x", session="two").value == "2"
        engine.close()
        with pytest.raises(EngineClosed):
            engine.fork("one", "three")

    # ---- refusals by the policy ------------------------------------------------------------------
    # One status whichever layer refused: a caller (the CLI's exit code, an agent) need not know
    # whether the audit saw it in the text or a runtime guard saw it while the code ran.

    def test_a_refusal_by_the_policy_is_blocked_before_or_while_running(
        self, make_engine: MakeEngine
    ) -> None:
        engine = make_engine(policy="standard", limits=Limits(timeout_s=10.0))
        before = engine.run("import socket", session="p")
        assert (before.status, [f.rule for f in before.findings]) == ("blocked", ["import"])
        assert before.changes.is_empty()
        during = engine.run("kept = 1\nopen('/etc/passwd').read()", session="p")
        assert during.status == "blocked", during.to_observation()
        assert during.error is not None and during.error.refused_by == "guard"
        rules = [(f.rule, f.line, f.message.split(" is not")[0]) for f in during.findings]
        assert rules == [("runtime-guard", 2, "opening '/etc/passwd'")]
        assert [v.name for v in during.changes.created] == ["kept"]
        assert "Blocked by policy 'standard' while running" in during.to_observation()
        assert engine.run("kept", session="p").value == "1"  # what ran before the refusal is kept
        # The neighbour: code raising a PermissionError itself was refused by nothing.
        own = engine.run("raise PermissionError('mine')", session="p")
        assert (own.status, own.error and own.error.refused_by) == ("error", None)

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

    # ---- interrupts and abandoned calls -----------------------------------------------------------

    @pytest.fixture
    def patient(self, make_engine: MakeEngine) -> ReplEngine:
        # A long timeout: only the interrupt under test may stop the loop.
        return make_engine(policy="trusted", limits=Limits(timeout_s=60.0))

    def test_interrupt_stops_running_code_and_keeps_session(self, patient: ReplEngine) -> None:
        patient.run("x = 21", session="i")
        results: list[ExecutionResult] = []
        runner = threading.Thread(target=lambda: results.append(patient.run(INFINITE_LOOP, session="i")))
        runner.start()
        time.sleep(0.5)  # let the loop start; if it has not yet, the interrupt cancels it before it runs
        deadline = time.monotonic() + INTERRUPT_BOUND_S
        while not patient.interrupt("i"):  # False until the call holds the session
            assert time.monotonic() < deadline, "the call never started"
            time.sleep(0.01)
        runner.join(INTERRUPT_BOUND_S)
        assert not runner.is_alive(), "interrupt() did not stop the loop"
        (result,) = results
        assert result.status == "cancelled"
        assert result.error is not None and result.error.type == "Cancelled"
        if "before it started" in result.error.message:  # a loaded machine: nothing ran, also correct
            assert patient.run("x, 'n' in dir()", session="i").value == "(21, False)"
        else:
            assert "interrupted" in result.to_observation()
            assert patient.run("x, n > 0", session="i").value == "(21, True)"

    def test_interrupt_with_nothing_running(self, patient: ReplEngine) -> None:
        assert patient.interrupt("nobody") is False
        patient.run("y = 1", session="idle")
        assert patient.interrupt("idle") is False
        assert patient.run("y + 1", session="idle").value == "2"

    def test_host_interrupted_mid_call_keeps_replies_in_step(self, patient: ReplEngine) -> None:
        # Ctrl-C in a synchronous host (KeyboardInterrupt in the main thread) while the code runs.
        patient.run("x = 21", session="s")
        timer = threading.Timer(0.5, _thread.interrupt_main)
        timer.start()
        try:
            outcome: ExecutionResult | None = patient.run(INFINITE_LOOP, session="s")
        except KeyboardInterrupt:
            outcome = None  # the boundary let the host's interrupt through
        finally:
            timer.cancel()
        if outcome is not None:  # the interrupt landed in the code: it is the cell's own
            assert outcome.status in ("error", "cancelled")
        self._assert_in_step(patient, "s")

    def test_thread_abandoned_mid_call_keeps_replies_in_step(self, patient: ReplEngine) -> None:
        # An exception raised into a thread while it waits for the boundary (as a framework's
        # cancellation of a worker thread does).
        patient.run("x = 21", session="t")
        outcomes: list[object] = []

        def call() -> None:
            try:
                outcomes.append(patient.run(INFINITE_LOOP, session="t"))
            except _Abandon:
                outcomes.append("abandoned")

        caller = threading.Thread(target=call)
        caller.start()
        time.sleep(0.5)
        assert caller.ident is not None
        _raise_in_thread(caller.ident, _Abandon)
        caller.join(INTERRUPT_BOUND_S)
        if caller.is_alive():  # a C-level wait can delay it; raise again once
            _raise_in_thread(caller.ident, _Abandon)
            caller.join(INTERRUPT_BOUND_S)
        assert not caller.is_alive()
        self._assert_in_step(patient, "t")

    def test_cancelled_arun_stops_the_code(self, patient: ReplEngine) -> None:
        patient.run("x = 21", session="c")

        async def main() -> None:
            task = asyncio.create_task(patient.arun(INFINITE_LOOP, session="c"))
            await asyncio.sleep(0.5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(main())
        # The loop holds the session until it stops: a prompt next call shows it stopped (the
        # timeout is 60 s, the bound much less).
        assert _value_within_bound(patient, "x", "c") == "21", "the cancelled call's code kept running"
        self._assert_in_step(patient, "c")

    @staticmethod
    def _assert_in_step(engine: ReplEngine, session: str) -> None:
        assert engine.run("x", session=session).value == "21"
        for word in ("second", "third", "fourth"):
            result = engine.run(repr(word), session=session)
            assert (result.status, result.value) == ("ok", repr(word))

    # ---- bad output: whatever the code prints, returns or names (testing/bad_output.py) --------------

    @pytest.mark.parametrize("case", BAD_OUTPUTS, ids=kind_of)
    def test_bad_output_gives_well_formed_and_the_same_text(
        self, make_engine: MakeEngine, case: BadOutput
    ) -> None:
        engine = make_engine(policy="trusted", limits=Limits(timeout_s=BAD_OUTPUT_TIMEOUT_S))
        # The endless __repr__ is stopped sooner: waiting out the generous limit proves nothing more.
        timeout_s = 1.0 if case.status == "timeout" else None
        result = engine.run(case.code, session="bad", timeout_s=timeout_s)
        assert_bad_output(result, case)
        # Any UTF-8 transport carries it, and it reads back as it was.
        dumped = result.model_dump_json()
        dumped.encode("utf-8")
        assert ExecutionResult.model_validate_json(dumped) == result
        result.to_observation().encode("utf-8")
        if engine.boundary.name != "inprocess":
            # Every boundary gives the in-process text (pinned above where it is deterministic).
            with ReplEngine(policy="trusted", limits=engine.limits) as reference:
                expected = reference.run(case.code, session="bad", timeout_s=timeout_s)
                assert _same_text(result) == _same_text(expected)
        # The session keeps serving, and its listing is well-formed too.
        assert engine.run("1 + 1", session="bad").value == "2"
        for info in engine.variables("bad", include_hidden=True):
            info.model_dump_json().encode("utf-8")

    # ---- streaming --------------------------------------------------------------------------------

    def test_stream_delivers_each_chunk_while_the_code_runs(self, patient: ReplEngine) -> None:
        patient.run("import time", session="st")  # the first call may start a worker: not timed
        code = "for i in range(5):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.1)\n'done'"
        arrivals: list[tuple[float, str]] = []
        final: ExecutionResult | None = None
        started = time.monotonic()
        for event in patient.stream(code, session="st"):
            if isinstance(event, OutputEvent):
                assert final is None, "output after the result"
                arrivals.append((time.monotonic() - started, event.text))
            elif isinstance(event, ResultEvent):
                final = event.result
        assert final is not None and (final.status, final.value) == ("ok", "'done'")
        streamed = "".join(text for _, text in arrivals)
        assert streamed == final.stdout == "".join(f"tick {i}\n" for i in range(5))
        # Each tick arrives about when it is printed (i * 100 ms), long before the run ends: the
        # bound is generous for a loaded machine; the order and the early arrival are what count.
        for i in range(5):
            when = next(t for t, _ in _cumulative(arrivals) if f"tick {i}\n" in _)
            assert when < i * 0.1 + STREAM_CHUNK_BOUND_S, f"tick {i} arrived after {when:.2f} s"
        assert arrivals[0][0] < final.duration_ms / 1000, "the first chunk came only with the result"

    def test_astream_gives_the_same_events(self, engine: ReplEngine) -> None:
        async def main() -> list[Any]:
            return [
                event
                async for event in engine.astream(
                    "import sys\nprint('out')\nprint('err', file=sys.stderr)\n6 * 7"
                )
            ]

        events = asyncio.run(main())
        assert isinstance(events[-1], ResultEvent) and events[-1].result.value == "42"
        text = {s: "".join(e.text for e in events if isinstance(e, OutputEvent) and e.stream == s)
                for s in ("stdout", "stderr")}  # fmt: skip
        assert text == {"stdout": "out\n", "stderr": "err\n"}
        assert text["stdout"] == events[-1].result.stdout and text["stderr"] == events[-1].result.stderr

    def test_leaving_the_stream_cancels_the_code(self, patient: ReplEngine) -> None:
        patient.run("x = 21", session="sc")
        started = time.monotonic()
        events = patient.stream("print('started', flush=True)\n" + INFINITE_LOOP, session="sc")
        for event in events:
            assert isinstance(event, OutputEvent) and event.text == "started\n"
            break
        events.close()  # what garbage collection does to an abandoned generator, made explicit
        value = _value_within_bound(patient, "x, n > 0", "sc")
        assert value == "(21, True)", "the abandoned stream's code kept running"
        assert time.monotonic() - started < INTERRUPT_BOUND_S
        self._assert_in_step(patient, "sc")

    def test_leaving_an_async_stream_cancels_the_code(self, patient: ReplEngine) -> None:
        patient.run("x = 21", session="ac")

        async def main() -> None:
            events = patient.astream("print('started', flush=True)\n" + INFINITE_LOOP, session="ac")
            async for _ in events:
                break
            await events.aclose()

        asyncio.run(main())
        assert _value_within_bound(patient, "x", "ac") == "21", "the abandoned stream's code kept running"

    def test_progress_bar_redraws_collapse(self, engine: ReplEngine) -> None:
        # Written by hand: what tqdm writes (a \r, then the bar), 10,000 times, then a newline.
        code = (
            "import sys\nfor i in range(10_000):\n"
            "    sys.stderr.write(f'\\r{i + 1:5d}/10000 |{\"#\" * ((i + 1) // 500):20s}|')\n"
            "sys.stderr.write('\\n')\nprint('done')\n"
        )
        events = list(engine.stream(code, session="bar"))
        result = events[-1].result  # type: ignore[union-attr]
        assert result.status == "ok"
        assert result.stderr == f"10000/10000 |{'#' * 20}|\n"
        assert result.stdout == "done\n" and not result.stderr_truncated
        assert engine.run(code, session="bar").stderr == result.stderr  # streamed or not: one text
        streamed = "".join(e.text for e in events if isinstance(e, OutputEvent) and e.stream == "stderr")
        assert streamed.count("\r") < 10_000  # redraws the consumer did not look at are dropped
        assert streamed.endswith(f"\r10000/10000 |{'#' * 20}|\n")

    def test_tqdm_leaves_a_few_lines(self, engine: ReplEngine) -> None:
        pytest.importorskip("tqdm")
        code = "from tqdm import tqdm\nfor _ in tqdm(range(10_000), mininterval=0, miniters=1):\n    pass\n"
        # 10,000 redraws take well under the fixture's 1 s on a quiet machine, not on a loaded one.
        result = engine.run(code, session="tqdm", timeout_s=30)
        assert result.status == "ok", result.error
        assert 1 <= len(result.stderr.splitlines()) <= 3, result.stderr
        assert "10000/10000" in result.stderr and not result.stderr_truncated


# An interrupt lands within ~50 ms on a quiet machine; the bound allows a loaded CI machine.
INTERRUPT_BOUND_S = 10.0
# A streamed chunk arrives within ~10 ms of its print on a quiet machine (the issue asks 250 ms).
STREAM_CHUNK_BOUND_S = 1.0


def _compiler_says(code: str) -> str:
    """What this Python's compiler warns for `code`, as a run shows it (the cell named `<input>`)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        compile(code, "<input>", "exec")
    return "".join(f"<input>:{w.lineno}: {w.category.__name__}: {w.message}\n" for w in seen)


def _show_on_stderr(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """`warnings.showwarning` as a plain `python` has it: the warning on sys.stderr."""
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno))


def _cumulative(arrivals: list[tuple[float, str]]) -> list[tuple[float, str]]:
    """(arrival time, all text received by then) for each chunk."""
    seen = ""
    out = []
    for when, text in arrivals:
        seen += text
        out.append((when, seen))
    return out


def _value_within_bound(engine: ReplEngine, code: str, session: str) -> str | None:
    """The value of `code` run in `session` on another thread, or None if the call did not return
    within INTERRUPT_BOUND_S (code that should have stopped still holds the session)."""
    done: list[ExecutionResult] = []
    follower = threading.Thread(target=lambda: done.append(engine.run(code, session=session)))
    follower.start()
    follower.join(INTERRUPT_BOUND_S)
    return done[0].value if done else None


class _Abandon(Exception):
    """Raised into a thread to make it abandon the call it is waiting on."""


def _raise_in_thread(tid: int, exc: type[BaseException]) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), ctypes.py_object(exc))


def _same_text(result: ExecutionResult) -> dict[str, Any]:
    """What a model or a program reads of a result, without what varies between runs."""
    error = result.error.model_dump() if result.error is not None else None
    if error is not None and result.status == "timeout":
        del error["message"]  # it says how long the run took
    return {
        "status": result.status,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "value": result.value,
        "value_type": result.value_type,
        "error": error,
        "changes": result.changes.model_dump(),
    }
