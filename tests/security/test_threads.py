"""Threads: restricted code cannot start them (a thread would run outside the guards and time limit).

The import guard keeps `threading`, `_thread` and `concurrent.futures` away from restricted code on
every Python. From 3.12 a thread start is also an audit event, and the hook refuses it unless an
allowed library starts it while it is being imported (matplotlib's font-cache timer in a fresh worker).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _security import BOUNDARIES, assert_import_refused, blocked, ok, refusal, run

from genpark_repl_tools import Limits, Policy, ReplEngine
from genpark_repl_tools.policy import PolicyViolation

THREADING = "import threading\nthreading.Thread(target=print).start()"
LOW_LEVEL = "import _thread\n_thread.start_new_thread(print, ())"
EXECUTOR = "from concurrent.futures import ThreadPoolExecutor"
PROCESSES = "import multiprocessing"
VIA_QUEUE_MODULE = "import queue\nqueue.threading.Thread(target=print).start()"


@pytest.mark.parametrize(
    ("code", "module"),
    [
        (THREADING, "threading"),
        (LOW_LEVEL, "_thread"),
        (EXECUTOR, "concurrent.futures"),
        (PROCESSES, "multiprocessing"),
    ],
)
def test_thread_modules_are_refused(engine: ReplEngine, code: str, module: str) -> None:
    assert_import_refused(blocked(run(engine, code)), module, engine.policy.name)


def test_threading_is_not_reachable_through_allowed_modules(engine: ReplEngine) -> None:
    result = run(engine, VIA_QUEUE_MODULE)
    assert result.error is not None and result.error.type == "AttributeError"
    assert result.error.message.startswith("'queue.threading' is the module 'threading'")


def test_restricted_policies_cannot_be_configured_with_threads() -> None:
    with pytest.raises(ValueError, match="threads=True needs restricted=False"):
        Policy.strict().model_copy(update={"threads": True}).model_validate(
            Policy.strict().model_copy(update={"threads": True}).model_dump()
        )


def test_trusted_code_may_start_threads() -> None:
    with ReplEngine(boundary="inprocess", policy="trusted", limits=Limits(timeout_s=5)) as engine:
        code = (
            "import threading\nout = []\nt = threading.Thread(target=out.append, "
            "args=(1,))\nt.start()\nt.join()\nout"
        )
        assert ok(engine.run(code)).value == "[1]"


# ---- the audit hook's rule for thread starts (3.12+ audit them) ------------------------------------

AUDITED = pytest.mark.skipif(
    sys.version_info < (3, 12), reason="Python 3.10 and 3.11 raise no audit event when a thread starts"
)
STARTING_THREADS = r"^starting threads \(_thread\.start_(new|joinable)_thread\) is not allowed under policy '"

# A library that starts a thread from its top-level code (as matplotlib's font manager does while it
# builds its cache) and offers a function that starts one when called.
LIBRARY = """
import threading

ran = []
_t = threading.Thread(target=ran.append, args=("at import",))
_t.start()
_t.join()


def start(target):
    t = threading.Thread(target=target)
    t.start()
    t.join()
"""


@pytest.fixture
def threading_library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = f"genpark_thread_library_{os.getpid()}_{id(tmp_path)}"
    (tmp_path / f"{name}.py").write_text(LIBRARY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    yield name
    sys.modules.pop(name, None)


@AUDITED
def test_a_thread_start_is_refused_while_restricted_code_runs(
    sandboxed: Callable[[Callable[[], Any]], Any],
) -> None:
    ran = threading.Event()
    with pytest.raises(PolicyViolation, match=STARTING_THREADS):
        sandboxed(lambda: threading.Thread(target=ran.set, daemon=True).start())
    assert not ran.is_set()


@pytest.mark.parametrize("policy", ["strict", "standard"])
def test_a_library_may_start_a_thread_while_it_is_imported(policy: str, threading_library: str) -> None:
    """In-process (the worker could not read the module from a temporary directory); matplotlib below
    shows the same on both boundaries."""
    allowed = Policy.preset(policy).allow_imports(threading_library)
    with ReplEngine(boundary="inprocess", policy=allowed, limits=Limits(timeout_s=30)) as engine:
        assert ok(engine.run(f"import {threading_library} as lib\nlib.ran")).value == "['at import']"


@AUDITED
@pytest.mark.parametrize("policy", ["strict", "standard"])
def test_a_session_cannot_ask_a_library_for_a_thread(policy: str, threading_library: str) -> None:
    allowed = Policy.preset(policy).allow_imports(threading_library)
    with ReplEngine(boundary="inprocess", policy=allowed, limits=Limits(timeout_s=30)) as engine:
        result = engine.run(f"import {threading_library} as lib\nlib.start(print)")
    assert result.error is not None and result.error.type == "PolicyViolation", result.to_observation()
    assert result.error.message.startswith("starting threads (_thread.start_"), result.error.message


@AUDITED
def test_a_library_function_cannot_start_a_thread_for_the_session(
    sandboxed: Callable[[Callable[[], Any]], Any], threading_library: str
) -> None:
    module = importlib.import_module(threading_library)  # imported by the host: its thread ran
    assert module.ran == ["at import"]
    ran = threading.Event()
    with pytest.raises(PolicyViolation, match=STARTING_THREADS):
        sandboxed(lambda: module.start(ran.set))
    assert not ran.is_set()
    module.start(ran.set)  # the host itself, outside restricted code, still may
    assert ran.is_set()


# ---- on both boundaries, with a real library: matplotlib -------------------------------------------

FIGURE = "import matplotlib.pyplot as plt\nfig = plt.figure(figsize=(1, 1))\n_ = plt.plot([1, 2])\n'drawn'"


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_matplotlib_builds_its_font_cache_under_the_policy(boundary: str, tmp_path: Path) -> None:
    """A fresh worker (HOME is its workspace) has no font cache: matplotlib builds it while it is
    imported and starts a timer thread to warn if that takes long. In-process the same happens in a
    host that has not imported matplotlib yet and has no cache: a fresh interpreter shows it."""
    pytest.importorskip("matplotlib")
    if boundary == "subprocess":
        with ReplEngine(policy="standard", boundary="subprocess", limits=Limits(timeout_s=120)) as engine:
            assert ok(engine.run(FIGURE)).value == "'drawn'"
        return
    script = textwrap.dedent(
        f"""
        import sys
        from genpark_repl_tools import Limits, ReplEngine
        assert "matplotlib" not in sys.modules
        with ReplEngine(boundary="inprocess", policy="standard", limits=Limits(timeout_s=120)) as engine:
            result = engine.run({FIGURE!r})
        print(result.status, result.value, result.error and result.error.message)
        """
    )
    cache = tmp_path / "mplconfig"
    cache.mkdir()
    env = {**os.environ, "MPLCONFIGDIR": str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "ok 'drawn' None", done.stdout + done.stderr
    assert any(p.name.startswith("fontlist-") for p in cache.iterdir())  # the cache was built there


@AUDITED
@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_a_matplotlib_call_cannot_start_a_thread_for_the_session(boundary: str) -> None:
    """`FontManager()` called by the session (not at import) starts the same timer: refused."""
    pytest.importorskip("matplotlib")
    with ReplEngine(policy="standard", boundary=boundary, limits=Limits(timeout_s=120)) as engine:
        result = engine.run("import matplotlib.font_manager as fm\nfm.FontManager()")
    assert refusal(result).startswith("starting threads (_thread.start_"), result.to_observation()
