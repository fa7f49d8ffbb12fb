"""Blocking calls return by the time limit: the queues code gets (and their locks) wait in short steps.

A thread blocked inside C never sees the watchdog's exception, so before this a cell calling
`queue.SimpleQueue().get()` held its thread, and the session, forever. Each call here runs on a
helper thread joined with a generous bound, so a regression fails instead of hanging the suite.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from _security import PARAMS, ok, run

from genpark_repl_tools import ExecutionResult, Limits, ReplEngine

BOUND_S = 30  # far above the 0.5 s limit: only a call that never returns reaches it

BLOCKING = {
    "simple_queue_get": "import queue\nqueue.SimpleQueue().get()",
    "queue_get": "import queue\nqueue.Queue().get()",
    "lifo_get": "import queue\nqueue.LifoQueue().get()",
    "priority_get": "import queue\nqueue.PriorityQueue().get()",
    "full_put": "import queue\nq = queue.Queue(1)\nq.put(1)\nq.put(2)",
    "join": "import queue\nq = queue.Queue()\nq.put(1)\nq.join()",
    "held_mutex": "import queue\nq = queue.Queue()\nq.mutex.acquire()\nq.mutex.acquire()",
    "condition_wait": "import queue\nq = queue.Queue()\nwith q.not_empty:\n    q.not_empty.wait()",
    "swallowed": (
        "import queue\nwhile True:\n    try:\n        queue.SimpleQueue().get()\n"
        "    except Exception:\n        pass"
    ),
}
LEGIT = (
    "import queue\n"
    "q = queue.Queue()\n"
    "for i in range(3):\n"
    "    q.put(i)\n"
    "got = [q.get() for _ in range(3)]\n"
    "s = queue.SimpleQueue()\n"
    "s.put('x')\n"
    "try:\n"
    "    queue.Queue().get(timeout=0.05)\n"
    "    empty = False\n"
    "except queue.Empty:\n"
    "    empty = True\n"
    "p = queue.PriorityQueue()\n"
    "p.put((2, 'b'))\n"
    "p.put((1, 'a'))\n"
    "(got, s.get(), s.get(timeout=0.01) if not s.empty() else None, empty, p.get(), q.empty(),\n"
    " isinstance(q, queue.Queue), type(q).__name__)"
)


@pytest.fixture(scope="module", params=PARAMS, ids=[f"{p}-{b}" for p, b in PARAMS])
def short(request: pytest.FixtureRequest) -> Iterator[ReplEngine]:
    policy, boundary = request.param
    with ReplEngine(policy=policy, boundary=boundary, limits=Limits(timeout_s=0.5)) as e:
        yield e


def run_bounded(engine: ReplEngine, code: str) -> ExecutionResult:
    results: list[ExecutionResult] = []
    worker = threading.Thread(target=lambda: results.append(run(engine, code)), daemon=True)
    worker.start()
    worker.join(BOUND_S)
    assert results, f"the call never returned: {code!r}"
    return results[0]


@pytest.mark.parametrize("code", list(BLOCKING.values()), ids=list(BLOCKING))
def test_blocking_calls_end_at_the_time_limit(short: ReplEngine, code: str) -> None:
    result = run_bounded(short, code)
    assert result.status == "timeout", result.to_observation()


def test_queues_still_work(short: ReplEngine) -> None:
    assert (
        ok(run_bounded(short, LEGIT)).value == "([0, 1, 2], 'x', None, True, (1, 'a'), True, True, 'Queue')"
    )
