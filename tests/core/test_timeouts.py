"""In-process timeouts: they stop Python code, never reach the host, and say when C code delayed them."""

from __future__ import annotations

import gc
import re
import subprocess
import sys
import threading

import pytest

from genpark_repl_tools import Limits, ReplEngine
from genpark_repl_tools._watchdog import ExecutionTimeout


@pytest.fixture
def engine() -> ReplEngine:
    with ReplEngine(boundary="inprocess", policy="trusted", limits=Limits(timeout_s=0.5)) as e:
        yield e


def test_timeout_never_leaks_into_the_host_when_code_ends_at_the_deadline(engine: ReplEngine) -> None:
    # Cells that finish right around their deadline race the watchdog's injection. Whatever the
    # interleaving, the host must only ever see results, never ExecutionTimeout.
    # Garbage left by earlier tests would otherwise be collected inside a cell, and an injection can
    # land in a host finalizer running there (a known limit of in-process timeouts, not this test's).
    gc.collect()
    statuses = set()
    for i in range(150):
        budget = 0.002 + (i % 10) * 0.0005
        code = (
            f"import time\nend = time.perf_counter() + {budget}\nwhile time.perf_counter() < end:\n    pass"
        )
        try:
            statuses.add(engine.run(code, timeout_s=0.0025).status)
        except ExecutionTimeout:  # pragma: no cover - the failure this test exists to catch
            pytest.fail("ExecutionTimeout reached the host")
        # Host code right after the run must not be interrupted either.
        for _ in range(200):
            pass
    assert statuses <= {"ok", "timeout"}
    assert "timeout" in statuses


def test_timeout_in_one_thread_does_not_touch_another(engine: ReplEngine) -> None:
    outcome: dict[str, str] = {}

    def slow() -> None:
        outcome["slow"] = engine.run("while True:\n    pass", session="slow").status

    def fast() -> None:
        values = [engine.run("sum(range(1000))", session="fast").value for _ in range(200)]
        outcome["fast"] = "ok" if set(values) == {"499500"} else repr(set(values))

    threads = [threading.Thread(target=slow), threading.Thread(target=fast)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert outcome == {"slow": "timeout", "fast": "ok"}


def test_timeout_reports_where_the_code_was(engine: ReplEngine) -> None:
    result = engine.run("x = 1\ndef spin():\n    while True:\n        pass\nspin()")
    assert result.status == "timeout"
    assert result.error is not None
    # Inside the loop: its header (line 3), or its body from Python 3.14, where the interpreter checks
    # for a pending exception on the jump back rather than at the header.
    assert result.error.line in (3, 4)
    assert "spin" in result.error.traceback
    assert "limit 0.5 s" in result.error.message


def test_finally_blocks_cannot_keep_running_forever(engine: ReplEngine) -> None:
    # Unstopped, this cell never returns: run it on a thread so a failure is a bounded wait, not a hang.
    code = "while True:\n    try:\n        while True:\n            pass\n    finally:\n        pass\n"
    results: list[str] = []
    runner = threading.Thread(target=lambda: results.append(engine.run(code).status), daemon=True)
    runner.start()
    runner.join(60)
    assert results == ["timeout"]


# The generator ignores GeneratorExit when the unwinding loop drops it; CPython reports that as an
# "unraisable" exception (into the cell's captured stderr), which pytest would turn into a failure.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_generator_swallowing_is_stopped(engine: ReplEngine) -> None:
    code = (
        "def gen():\n    while True:\n        try:\n            yield 1\n        except BaseException:\n"
        "            continue\n\nfor _ in gen():\n    pass\n"
    )
    assert engine.run(code).status == "timeout"


def test_sleep_view_is_the_real_time_module_otherwise(engine: ReplEngine) -> None:
    import time as host_time

    code = (
        "import time\nfrom time import sleep, monotonic, perf_counter\nsleep(0.01)\n"
        "(type(monotonic).__name__, perf_counter is time.perf_counter, time.struct_time.__name__, "
        "sleep is time.sleep, sleep.__name__)"
    )
    expected = "('builtin_function_or_method', True, 'struct_time', True, 'interruptible_sleep')"
    assert engine.run(code).value == expected
    # The host's own module is untouched.
    assert host_time.sleep.__name__ == "sleep"


def test_negative_sleep_is_a_value_error(engine: ReplEngine) -> None:
    result = engine.run("import time\ntime.sleep(-1)")
    assert result.error is not None and result.error.type == "ValueError"


@pytest.mark.slow
def test_c_level_call_is_stopped_late_and_says_so() -> None:
    with ReplEngine(boundary="inprocess", policy="trusted", limits=Limits(timeout_s=0.05)) as engine:
        # One C call that blocks for 1.5 s whatever the machine's speed: acquiring a held lock with a
        # timeout. The stop can only land when it returns, at least 1.45 s late.
        result = engine.run(
            "import _thread\nheld = _thread.allocate_lock()\nheld.acquire()\nheld.acquire(timeout=1.5)"
        )
    assert result.status == "timeout"
    [note] = [note for note in result.notes if "C-level call" in note]
    late = re.search(r"could only be stopped (\d+\.\d) s later", note)
    assert late is not None, note
    assert float(late.group(1)) >= 1.4
    assert "boundary='subprocess' kills it on time" in note


@pytest.mark.parametrize("policy", ["strict", "standard"])
def test_the_first_run_in_a_process_may_be_restricted(policy: str) -> None:
    # The watchdog's thread starts on the first run; it must start outside the sandbox, which refuses
    # thread starts (Python 3.12 reports them to audit hooks). A fresh interpreter has no thread yet.
    code = (
        "from genpark_repl_tools import ReplEngine\n"
        f"with ReplEngine(policy={policy!r}) as engine:\n"
        "    print(engine.run('6 * 7').value)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "42\n", "")
