"""The subprocess boundary's lifecycle: no orphans, idle eviction, caps, recovery, capture, describe()."""

from __future__ import annotations

import ast
import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator

import pytest
from _procs import WAIT_S, alive, read_line, wait_for, wait_gone

from genpark_repl_tools import BoundaryError, CapacityError, ExecutionResult, Limits, ReplEngine

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")

# A worker pid, its parent (the zygote) and a grandchild that would outlive a careless kill.
PIDS_WITH_GRANDCHILD = (
    "import os, subprocess\n_p = subprocess.Popen(['sleep', '60'])\n[os.getpid(), os.getppid(), _p.pid]"
)


@pytest.fixture(scope="module")
def engine() -> Iterator[ReplEngine]:
    with ReplEngine(
        policy="trusted", boundary="subprocess", limits=Limits(timeout_s=5, max_output_chars=1000)
    ) as engine:
        yield engine


def _pids(result: ExecutionResult) -> list[int]:
    assert result.status == "ok", result.error
    pids: list[int] = json.loads(result.value or "[]")
    return pids


# ---- no orphans -----------------------------------------------------------------------------------


def test_close_leaves_no_processes() -> None:
    engine = ReplEngine(policy="trusted", boundary="subprocess")
    pids = [pid for s in ("a", "b", "c") for pid in _pids(engine.run(PIDS_WITH_GRANDCHILD, session=s))]
    assert len(set(pids)) == 7  # three workers, three grandchildren, one zygote
    assert all(alive(pid) for pid in pids)
    workspace_root = engine.describe()["workspace_root"]
    engine.close()
    assert [pid for pid in pids if alive(pid)] == []  # close() waits: nothing to poll for
    assert not os.path.exists(workspace_root)


def test_an_engine_dropped_without_close_cleans_up() -> None:
    engine = ReplEngine(policy="trusted", boundary="subprocess", session_ttl_s=60)
    pids = _pids(engine.run(PIDS_WITH_GRANDCHILD))
    workspace_root = engine.describe()["workspace_root"]
    del engine
    gc.collect()
    assert wait_gone(pids) == []
    assert not os.path.exists(workspace_root)


def test_close_session_stops_only_that_worker(engine: ReplEngine) -> None:
    mine = _pids(engine.run(PIDS_WITH_GRANDCHILD, session="closing"))
    other = _pids(engine.run(PIDS_WITH_GRANDCHILD, session="staying"))
    assert engine.close("closing") is True
    assert wait_gone([mine[0], mine[2]]) == []
    assert alive(other[0])
    assert alive(other[2])
    assert engine.run("1 + 1", session="staying").value == "2"


def _workspace(engine: ReplEngine, session: str) -> str:
    cwd = engine.run("import os\nos.getcwd()", session=session).value or "''"
    return str(ast.literal_eval(cwd))


def test_closing_a_session_stops_code_that_is_running(engine: ReplEngine) -> None:
    results: list[ExecutionResult] = []
    pid = int(engine.run("import os\nos.getpid()", session="busy").value or 0)
    marker = os.path.join(_workspace(engine, "busy"), "started")
    # C-level work that outlasts the engine's 5 s limit by far: only the close can end it as a crash.
    code = "open('started', 'w').close()\n10**10**8"
    thread = threading.Thread(target=lambda: results.append(engine.run(code, session="busy")), daemon=True)
    thread.start()
    assert wait_for(lambda: os.path.exists(marker)), "the call never started"
    assert engine.close("busy") is True
    thread.join(WAIT_S)
    assert not thread.is_alive()
    assert len(results) == 1
    assert results[0].status == "crashed"
    assert results[0].error is not None
    assert results[0].error.type == "SessionClosed"
    assert wait_gone([pid]) == []


HOST = """\
import json, sys, time
from genpark_repl_tools import ReplEngine
engine = ReplEngine(policy="trusted", boundary="subprocess")
pids = []
for session in ("a", "b"):
    pids += json.loads(engine.run({code!r}, session=session).value)
print(json.dumps(pids), flush=True)
time.sleep(60)
"""


def test_a_killed_host_leaves_no_orphans() -> None:
    command = [sys.executable, "-c", HOST.format(code=PIDS_WITH_GRANDCHILD)]
    with subprocess.Popen(command, stdout=subprocess.PIPE) as host:
        try:
            pids = json.loads(read_line(host))
            assert len(set(pids)) == 5
            assert all(alive(pid) for pid in pids)
        finally:
            host.kill()  # SIGKILL: no atexit, no finalizers; only the kernel closing its sockets
    assert wait_gone(pids) == []


def test_a_killed_zygote_is_replaced(engine: ReplEngine) -> None:
    worker, zygote, grandchild = _pids(engine.run(PIDS_WITH_GRANDCHILD, session="zygote-dies"))
    engine.run("kept = 1", session="zygote-dies")
    os.kill(zygote, signal.SIGKILL)
    assert wait_gone([worker, grandchild]) == []  # parent-death signal, then the group kill
    first = engine.run("kept", session="zygote-dies")
    assert first.status == "crashed"
    after = engine.run("import os\nos.getppid()", session="zygote-dies")
    assert after.status == "ok"
    assert after.session_restarted is True
    assert int(after.value or 0) not in (0, zygote)
    assert engine.run("1", session="another").status == "ok"


# ---- eviction and caps ----------------------------------------------------------------------------


def test_idle_sessions_are_evicted_after_the_ttl() -> None:
    with ReplEngine(policy="trusted", boundary="subprocess", session_ttl_s=0.3) as engine:
        pid = int(engine.run("import os\nx = 1\nos.getpid()", session="idle").value or 0)
        assert wait_for(lambda: "idle" not in engine.sessions())
        assert wait_gone([pid]) == []
        result = engine.run("x", session="idle")
        assert result.session_restarted is True
        assert result.error is not None
        assert result.error.type == "NameError"
        assert any("idle for more than 0.3 s" in note for note in result.notes)


def test_busy_sessions_are_not_evicted() -> None:
    with ReplEngine(policy="trusted", boundary="subprocess", session_ttl_s=0.3) as engine:
        engine.run("x = 1", session="busy")
        result = engine.run("import time\ntime.sleep(0.8)\nx", session="busy")
        assert (result.status, result.value) == ("ok", "1")


def test_the_worker_cap_gives_a_clear_error() -> None:
    with ReplEngine(policy="trusted", boundary="subprocess", max_workers=2) as engine:
        engine.run("1", session="one")
        engine.run("1", session="two")
        with pytest.raises(CapacityError, match="max_workers=2"):
            engine.run("1", session="three")
        engine.close("one")
        assert engine.run("1", session="three").status == "ok"


def test_a_memory_limit_below_the_start_size_is_refused() -> None:
    with (
        ReplEngine(policy="trusted", boundary="subprocess", limits=Limits(memory_mb=16)) as engine,
        pytest.raises(BoundaryError, match="memory_mb=16 is too small"),
    ):
        engine.run("1")


def test_preloaded_modules_are_imported_once_in_the_zygote() -> None:
    with ReplEngine(policy="trusted", boundary="subprocess", preload=("json", "decimal")) as engine:
        assert engine.run("import sys\n'decimal' in sys.modules").value == "True"


def test_a_failing_preload_is_reported() -> None:
    with (
        ReplEngine(
            policy="trusted", boundary="subprocess", preload=("no_such_module_for_genpark",)
        ) as engine,
        pytest.raises(BoundaryError, match="No module named 'no_such_module_for_genpark'"),
    ):
        engine.run("1")


def test_a_restricted_policy_confines_files_to_the_session_workspace() -> None:
    with ReplEngine(policy="standard", boundary="subprocess") as engine:
        wrote = engine.run(
            "with open('a.txt', 'w') as f:\n    f.write('hi')\nopen('a.txt').read()", session="p"
        )
        assert (wrote.status, wrote.value) == ("ok", "'hi'")
        refused = engine.run("open('/etc/hosts').read()", session="p")
        assert refused.error is not None
        assert refused.error.type == "PolicyViolation"
        workspace = os.path.join(engine.describe()["workspace_root"], "p-")
        assert f"workspace '{workspace}" in refused.error.message  # the session's directory, not the root


# ---- capture --------------------------------------------------------------------------------------


def test_fd_level_output_is_captured_in_order(engine: ReplEngine) -> None:
    code = textwrap.dedent(
        """\
        import ctypes, os, subprocess, sys
        print('1 print')
        os.write(1, b'2 os.write\\n')
        ctypes.CDLL(None).printf(b'3 printf\\n')
        subprocess.run(['echo', '4 child process'])
        print('5 print')
        os.write(2, b'err\\n')
        """
    )
    result = engine.run(code, session="fd")
    assert result.stdout == "1 print\n2 os.write\n3 printf\n4 child process\n5 print\n"
    assert result.stderr == "err\n"


def test_fd_level_flood_is_bounded(engine: ReplEngine) -> None:
    result = engine.run("import os\nfor _ in range(50):\n    os.write(1, b'x' * 1_000_000)", session="flood")
    assert result.status == "ok"
    assert result.stdout_truncated
    assert len(result.stdout) < 1200
    assert "characters omitted" in result.stdout


LATE_PRINTER = """\
import os, threading, time
def late():
    while not os.path.exists('go'):  # the host says when: after this call has returned
        time.sleep(0.01)
    print('late', flush=True)
    open('printed', 'w').close()
threading.Thread(target=late, daemon=True).start()
"""


def test_output_from_a_thread_after_the_call_reaches_the_next_call(engine: ReplEngine) -> None:
    workspace = _workspace(engine, "late")
    assert engine.run(LATE_PRINTER, session="late").stdout == ""
    with open(os.path.join(workspace, "go"), "w"):
        pass
    assert wait_for(lambda: os.path.exists(os.path.join(workspace, "printed")))
    assert engine.run("print('now')", session="late").stdout == "late\nnow\n"


# ---- describe -------------------------------------------------------------------------------------


# The frames below the running cell, oldest first, as (function, module file name).
STACK_BELOW_CELL = """
import os, sys
_f, _below = sys._getframe().f_back, []
while _f is not None:
    _below.append((_f.f_code.co_name, os.path.basename(_f.f_code.co_filename)))
    _f = _f.f_back
_below[::-1]
"""


def test_a_worker_serves_with_the_zygote_frames_unwound(engine: ReplEngine) -> None:
    # The sandbox's audit hook walks every frame below a run when the run activates the policy:
    # the worker's loop runs right above the zygote's main(), not inside its spawn handler.
    result = engine.run(STACK_BELOW_CELL, "stack")
    assert result.status == "ok", result.error
    below = ast.literal_eval(result.value or "[]")
    assert below[:4] == [
        ("<module>", "<string>"),
        ("main", "_zygote.py"),
        ("loop", "_worker.py"),
        ("_exec", "_worker.py"),
    ]
    assert not [frame for frame in below if frame[1] == "_zygote.py" and frame[0] != "main"]


def test_describe_reports_only_checked_protections(engine: ReplEngine) -> None:
    description = engine.describe()
    enforced = description["enforced"]
    assert description["boundary"] == "subprocess"
    assert enforced["crash_isolation"] is True
    # Limits.memory_mb is not set on this engine: the boundary's default cap applies, and says so.
    assert enforced["memory_limit"] == "RLIMIT_AS 4096 MiB per worker"
    assert all(isinstance(value, (bool, str)) for value in enforced.values())
    for protection, value in enforced.items():
        if value is False and protection not in (
            "memory_limit",
            "cpu_limit",
            "open_files_limit",
            "file_size_limit",
        ):
            assert description["unavailable"], f"{protection} is off without a stated reason"


def test_require_refuses_an_unknown_protection() -> None:
    with pytest.raises(ValueError, match="unknown protections"):
        ReplEngine(policy="trusted", boundary="subprocess", require=("teleportation",))


def test_require_fails_when_a_protection_is_off() -> None:
    with pytest.raises(BoundaryError, match="network_isolation"):
        ReplEngine(policy="trusted", boundary="subprocess", network=True, require=("network_isolation",))


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can switch users")
def test_an_explicit_unprivileged_user() -> None:
    with ReplEngine(policy="trusted", boundary="subprocess", user=12345) as engine:
        assert engine.run("import os\nos.getresuid()").value == "(12345, 12345, 12345)"
        assert engine.describe()["enforced"]["privileges"].startswith("uid 12345 (root dropped)")


def test_importing_the_package_does_not_import_the_boundary() -> None:
    code = (
        "import sys, genpark_repl_tools.boundaries as b\n"
        "assert 'genpark_repl_tools.boundaries.subprocess' not in sys.modules\n"
        "assert b.SubprocessBoundary.name == 'subprocess'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
