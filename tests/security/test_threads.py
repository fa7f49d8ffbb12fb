"""Threads: restricted code cannot start them (a thread would run outside the guards and time limit)."""

from __future__ import annotations

import pytest
from _security import assert_import_refused, blocked, ok, run

from genpark_repl_tools import Limits, Policy, ReplEngine

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
    with ReplEngine(policy="trusted", limits=Limits(timeout_s=5)) as engine:
        code = (
            "import threading\nout = []\nt = threading.Thread(target=out.append, "
            "args=(1,))\nt.start()\nt.join()\nout"
        )
        assert ok(engine.run(code)).value == "[1]"
