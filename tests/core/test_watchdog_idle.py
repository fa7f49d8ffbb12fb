"""The watchdog sleeps only when no execution was armed for LINGER_S, not when its passes saw none."""

from __future__ import annotations

import threading
import time

import pytest

from genpark_repl_tools import _watchdog
from genpark_repl_tools._watchdog import Watchdog


class _CountingEvent(threading.Event):
    def __init__(self) -> None:
        super().__init__()
        self.sets = 0

    def set(self) -> None:
        self.sets += 1
        super().set()


def test_executions_between_its_passes_keep_the_watchdog_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    # A subprocess worker's executions end before the watchdog's thread gets the GIL (it gets it
    # when the worker blocks between requests), so no pass sees a slot. Each arm() must not wake a
    # watchdog that went to sleep for want of seeing one: that was a thread wake-up and two GIL
    # hand-offs per run (the worker's round trip doubled once a session was busy for LINGER_S).
    monkeypatch.setattr(_watchdog, "LINGER_S", 0.3)
    monkeypatch.setattr(_watchdog, "POLL_S", 0.01)
    dog = Watchdog()
    wake = dog._wake = _CountingEvent()
    arms = 0
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        slot = dog.arm(30.0)
        slot.done = True
        dog.release(slot)
        arms += 1
        time.sleep(0.001)  # between executions: the GIL is free, no slot is armed
    # The first arm() starts the thread (and may wake it); a pause of the test's thread longer than
    # LINGER_S on a loaded machine may let it sleep once more. Without the fix: one per arm() after
    # the first LINGER_S (hundreds).
    assert arms > 200
    assert wake.sets <= 5, f"{wake.sets} wake-ups for {arms} executions"


def test_an_idle_watchdog_still_sleeps_and_the_next_arm_wakes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_watchdog, "LINGER_S", 0.05)
    monkeypatch.setattr(_watchdog, "POLL_S", 0.01)
    dog = Watchdog()
    wake = dog._wake = _CountingEvent()
    slot = dog.arm(30.0)
    slot.done = True
    dog.release(slot)
    deadline = time.monotonic() + 10
    while dog._next_wake == float("inf"):  # the thread's first pass
        assert time.monotonic() < deadline, "the watchdog's thread did not start"
        time.sleep(0.001)
    while dog._next_wake != float("inf"):
        assert time.monotonic() < deadline, "the watchdog kept polling with nothing armed"
        time.sleep(0.01)
    sets = wake.sets
    slot = dog.arm(30.0)
    slot.done = True
    dog.release(slot)
    assert wake.sets == sets + 1
