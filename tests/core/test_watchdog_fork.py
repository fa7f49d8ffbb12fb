"""A process forked from one whose watchdog runs starts its own: its cells still stop at the deadline."""

from __future__ import annotations

import os
import time
import warnings

import pytest

from genpark_repl_tools import Limits, ReplEngine
from genpark_repl_tools._watchdog import watchdog

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")

LOOP = "while True:\n    pass"


def run_in_child(code: str, bound_s: float = 30.0) -> str:
    """`code`'s status when run by a new in-process engine in a forked child ("hung" if the child
    did not answer within `bound_s`: then it is killed)."""
    read, write = os.pipe()
    with warnings.catch_warnings():
        # 3.12+ warns about forking a process with threads (this one runs the watchdog's): the child
        # touches none of their locks but the watchdog's, which is what this test is about.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        status = "failed"
        try:
            with ReplEngine(policy="trusted", boundary="inprocess", limits=Limits(timeout_s=0.3)) as engine:
                status = engine.run(code).status
        finally:
            os.write(write, status.encode())
            os._exit(0)
    os.close(write)
    deadline = time.monotonic() + bound_s
    try:
        while time.monotonic() < deadline:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.read(read, 64).decode() or "failed"
            time.sleep(0.02)
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        return "hung"
    finally:
        os.close(read)


def test_a_forked_process_stops_its_cells_at_the_deadline() -> None:
    with ReplEngine(policy="trusted", boundary="inprocess", limits=Limits(timeout_s=0.3)) as engine:
        assert engine.run(LOOP).status == "timeout"  # the watchdog runs here now
    assert watchdog.started and watchdog.thread_id is not None
    assert run_in_child(LOOP) == "timeout"
    assert run_in_child("1 + 1") == "ok"  # and a cell within its time is left alone
    # The parent's watchdog goes on as before.
    with ReplEngine(policy="trusted", boundary="inprocess", limits=Limits(timeout_s=0.3)) as engine:
        assert engine.run(LOOP).status == "timeout"
