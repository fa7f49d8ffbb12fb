"""The Docker daemon restarted while sessions live: the next call is a 'crashed' result that says the
container stopped, a call while no daemon answers a clear error, each within seconds (never a hang);
once the daemon is back, calls work in fresh containers, and close() leaves no container behind.

In a module of its own, collected after the other container tests: it stops the daemon they use. It
restarts only the daemon scripts/docker_env.py started (the one named in its pidfile), the same way.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from genpark_repl_tools import Limits
from genpark_repl_tools._exceptions import BoundaryError

from .conftest import ENGINE_LABEL, SCRIPT, containers

PIDFILE = Path("/var/run/genpark-dockerd.pid")
QUICK_S = 10.0  # "within seconds": a hang would run into the start timeout (30 s) or forever
STOP_S = 60.0  # the daemon stops its containers first (10 s each at most, in parallel)


def _running_dockerd(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    name, state = stat.split("(", 1)[1].rsplit(")", 1)
    return name == "dockerd" and state.split()[0] not in ("Z", "X")


def _our_daemon() -> int:
    try:
        pid = int(PIDFILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pid = 0
    if not pid or not _running_dockerd(pid):
        message = f"the Docker daemon was not started by {SCRIPT.name} (no running dockerd in {PIDFILE})"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return pid


def _stop_daemon(pid: int) -> None:
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_S
    while _running_dockerd(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running_dockerd(pid), f"dockerd did not stop within {STOP_S:g} s"


def _start_daemon() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--no-test-image"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def _timed(call: Any) -> tuple[Any, float]:
    started = time.monotonic()
    try:
        outcome = call()
    except BoundaryError as exc:
        outcome = exc
    return outcome, time.monotonic() - started


def test_a_daemon_restart_is_a_crash_or_a_clear_error_then_sessions_start_afresh(make_engine: Any) -> None:
    pid = _our_daemon()
    engine = make_engine(policy="trusted", limits=Limits(timeout_s=30), warm_containers=1)
    engine_id = str(engine.boundary.container.engine_id)
    assert engine.run("x = 1", session="lives").status == "ok"
    _stop_daemon(pid)
    try:
        # The session's container stopped with the daemon: its next call says the worker is gone.
        lost, took = _timed(lambda: engine.run("x", session="lives"))
        assert took < QUICK_S
        assert not isinstance(lost, BoundaryError), lost
        assert lost.status == "crashed" and lost.error is not None, lost
        assert "its container stopped" in lost.error.message, lost.error
        # No daemon to start a new one: a clear error, at once.
        refused, took = _timed(lambda: engine.run("x", session="lives"))
        assert took < QUICK_S
        assert isinstance(refused, BoundaryError), refused
        assert "Docker daemon is not reachable" in str(refused)
    finally:
        _start_daemon()

    after = engine.run("'x' in dir()", session="lives")
    assert (after.status, after.value, after.session_restarted) == ("ok", "False", True)
    fresh = engine.run("1 + 1", session="new")  # the warm container stopped with the daemon too
    assert (fresh.status, fresh.value) == ("ok", "2")

    engine.close()
    assert containers(f"{ENGINE_LABEL}={engine_id}") == []
