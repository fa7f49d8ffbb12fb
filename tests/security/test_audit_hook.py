"""The audit-hook guard: refuses processes, network, native code, introspection and files outside the
workspace for restricted code, and leaves the host's own work alone."""

from __future__ import annotations

import ctypes
import gc
import os
import pickle
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest
from _security import ok, refusal, run

from genpark_repl_tools import Limits, ReplEngine
from genpark_repl_tools.policy import PolicyViolation

LIBRARY_READS_OUTSIDE = "import pathlib\ndef leak():\n    return pathlib.Path('/etc/hostname').read_text()"


def _exec() -> None:
    exec("x = 1", {})


EVENTS: list[tuple[str, Callable[[], Any], str]] = [
    ("process", lambda: subprocess.Popen(["true"]), "starting or signalling processes (subprocess.Popen)"),
    ("system", lambda: os.system("true"), "starting or signalling processes (os.system)"),
    ("kill", lambda: os.kill(os.getpid(), 0), "starting or signalling processes (os.kill)"),
    ("socket", socket.socket, "network access (socket.__new__)"),
    ("resolve", lambda: socket.getaddrinfo("localhost", 80), "network access (socket.getaddrinfo)"),
    ("dlopen", lambda: ctypes.CDLL(None), "native code and raw memory (ctypes) (ctypes.dlopen)"),
    ("referrers", lambda: gc.get_referrers(object), "interpreter introspection (gc.get_referrers)"),
    ("objects", gc.get_objects, "interpreter introspection (gc.get_objects)"),
    ("tracing", lambda: sys.settrace(None), "tracing and profiling hooks (sys.settrace)"),
    ("chdir", lambda: os.chdir("/"), "changing process-wide settings (os.chdir)"),
    ("environment", lambda: os.putenv("GENPARK_X", "1"), "changing process-wide settings (os.putenv)"),
    ("pickle", lambda: pickle.loads(pickle.dumps(ValueError)), "loading pickles (pickle.find_class)"),
    ("exec", _exec, "running code built at run time (exec, eval, templates, string annotations)"),
]


@pytest.mark.parametrize(("label", "action", "what"), EVENTS, ids=[e[0] for e in EVENTS])
def test_dangerous_events_are_refused_while_restricted_code_runs(
    sandboxed: Callable[[Callable[[], Any]], Any], label: str, action: Callable[[], Any], what: str
) -> None:
    with pytest.raises(PolicyViolation) as refused:
        sandboxed(action)
    assert str(refused.value).startswith(f"{what} is not allowed under policy '")
    assert os.getcwd() != "/" and "GENPARK_X" not in os.environ


def test_audit_hooks_cannot_be_added(sandboxed: Callable[[Callable[[], Any]], Any]) -> None:
    # CPython swallows the refusal (an Exception) and does not add the hook.
    seen: list[str] = []

    def spy(event: str, args: tuple[Any, ...]) -> None:
        if event == "genpark.test.spy":
            seen.append(event)

    sandboxed(lambda: sys.addaudithook(spy))
    sys.audit("genpark.test.spy")
    assert seen == []


def test_files_outside_the_workspace_are_refused(sandboxed: Callable[[Callable[[], Any]], Any]) -> None:
    with pytest.raises(PolicyViolation, match=r"^opening '/etc/hostname' is not allowed under policy '"):
        sandboxed(lambda: open("/etc/hostname").close())


def test_the_host_is_unaffected_outside_restricted_code(engine: ReplEngine) -> None:
    ok(run(engine, "x = 1"))  # the hook is installed and has seen restricted code
    with open("/etc/hostname") as f:
        assert f.read()
    assert subprocess.run(["true"], check=True).returncode == 0
    namespace: dict[str, Any] = {}
    exec("y = 2", namespace)
    assert namespace["y"] == 2
    assert gc.get_referrers(namespace) is not None


def test_other_threads_are_unaffected_while_restricted_code_runs() -> None:
    outcome: dict[str, object] = {}
    with ReplEngine(boundary="inprocess", policy="strict", limits=Limits(timeout_s=10)) as engine:
        done = threading.Event()

        def host_work() -> None:
            with open("/etc/hostname") as f:
                outcome["read"] = bool(f.read())
            outcome["exec"] = subprocess.run(["true"], check=True).returncode
            done.set()

        code = (
            "import time\nend = time.monotonic() + 5\nwhile time.monotonic() < end and not stop:\n    "
            "time.sleep(0.01)"
        )
        worker = threading.Thread(target=host_work)
        session = "long-running"
        engine.run("stop = False", session=session)
        runner = threading.Thread(target=engine.run, args=(code,), kwargs={"session": session})
        runner.start()
        worker.start()
        assert done.wait(10)
        engine.boundary._sessions[session].namespace["stop"] = True  # type: ignore[attr-defined]
        runner.join(10)
        worker.join(10)
    assert outcome == {"read": True, "exec": 0}


def test_python_imports_allowed_modules_inside_restricted_code(engine: ReplEngine) -> None:
    sys.modules.pop("colorsys", None)
    assert ok(run(engine, "import colorsys\ncolorsys.rgb_to_hsv(1, 0, 0)")).value == "(0.0, 1.0, 1)"
    assert "colorsys" in sys.modules


def test_restricted_functions_the_host_calls_later_are_still_refused() -> None:
    with ReplEngine(boundary="inprocess", policy="standard") as engine:
        session = "callback"
        ok(engine.run(LIBRARY_READS_OUTSIDE, session=session))
        leak = engine.boundary._sessions[session].namespace["leak"]  # type: ignore[attr-defined]
        with pytest.raises(
            PolicyViolation, match=r"^opening '/etc/hostname' is not allowed under policy 'standard'"
        ):
            leak()  # called by the host, outside any execution: the hook finds the session's frame


def test_refusals_inside_cells_are_results_not_exceptions(engine: ReplEngine) -> None:
    code = "import json\ntry:\n    json.dumps = 1\nexcept PermissionError as e:\n    caught = str(e)\ncaught"
    result = ok(run(engine, code))
    assert result.value is not None and "changing attribute 'dumps' of a module" in result.value
    assert refusal(run(engine, "import json\njson.dumps = 1")).startswith("changing attribute 'dumps'")
