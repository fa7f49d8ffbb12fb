"""Blocking calls that the time limit can end: queues and the locks they carry, waiting in short steps.

The watchdog stops a cell by raising an exception in its thread, which Python only delivers between
bytecodes: a thread blocked inside C (`SimpleQueue().get()`, `Lock.acquire()`, `Condition.wait()`
with no timeout) never sees it. The queue classes restricted code gets wait in steps of
`SLEEP_STEP_S`, so every blocking call returns by its timeout or the cell's, plus one step.
(`threading` itself is not importable under a restricted policy: the queues are the only route to
these primitives; the reachability audit checks that no other lock is reachable.)
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

from ._sleep import SLEEP_STEP_S

__all__ = ["SteppedCondition", "SteppedLock", "stepped_queues"]


def _deadline(timeout: float | None) -> float | None:
    if timeout is None or timeout < 0:
        return None
    return time.monotonic() + timeout


def _step(deadline: float | None) -> float:
    if deadline is None:
        return SLEEP_STEP_S
    return max(0.0, min(SLEEP_STEP_S, deadline - time.monotonic()))


class SteppedLock:
    """A `threading.Lock` whose blocking acquire waits in short steps."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not blocking:
            return self._lock.acquire(False)
        deadline = _deadline(timeout)
        while True:
            if self._lock.acquire(True, _step(deadline)):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return repr(self._lock)


class SteppedCondition(threading.Condition):
    """A `threading.Condition` whose wait without a timeout waits in short steps.

    No notification is lost between steps: notify() needs the lock, which this thread holds again
    between two steps.
    """

    def wait(self, timeout: float | None = None) -> bool:
        deadline = _deadline(timeout)
        while True:
            if super().wait(_step(deadline)):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False


def _stepped(cls: type[queue.Queue[Any]]) -> type:
    def __init__(self: Any, maxsize: int = 0) -> None:
        cls.__init__(self, maxsize)
        self.mutex = SteppedLock()
        self.not_empty = SteppedCondition(self.mutex)
        self.not_full = SteppedCondition(self.mutex)
        self.all_tasks_done = SteppedCondition(self.mutex)

    return type(cls.__name__, (cls,), {"__init__": __init__, "__module__": "queue", "__doc__": cls.__doc__})


class _SimpleQueue(queue.SimpleQueue):  # type: ignore[type-arg]
    __doc__ = queue.SimpleQueue.__doc__

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if not block:
            return super().get(False)
        if timeout is not None and timeout < 0:
            raise ValueError("'timeout' must be a non-negative number")
        deadline = _deadline(timeout)
        while True:
            try:
                return super().get(True, _step(deadline))
            except queue.Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise


_SimpleQueue.__module__ = "queue"
_SimpleQueue.__qualname__ = _SimpleQueue.__name__ = "SimpleQueue"


def stepped_queues() -> dict[type, type]:
    """The real queue classes -> the ones restricted code gets."""
    return {
        queue.SimpleQueue: _SimpleQueue,
        queue.Queue: _stepped(queue.Queue),
        queue.LifoQueue: _stepped(queue.LifoQueue),
        queue.PriorityQueue: _stepped(queue.PriorityQueue),
    }
