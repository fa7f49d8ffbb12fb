"""Hibernation: with a store, idle subprocess workers are stopped and their sessions come back from
the store on the next call, transparently."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _durable_support import KEY

from genpark_repl_tools import ReplEngine
from genpark_repl_tools.stores import SQLiteStore

pytest.importorskip("genpark_repl_tools.boundaries.subprocess")
pytestmark = pytest.mark.slow


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore.from_path(tmp_path / "sessions.db", lease_wait_s=5) as store:
        yield store


def wait_until(predicate: object, bound_s: float = 20.0) -> bool:
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def test_idle_workers_hibernate_and_come_back(store: SQLiteStore) -> None:
    with ReplEngine(
        policy="standard", boundary="subprocess", store=store, snapshot_key=KEY, hibernate_after_s=0.2
    ) as engine:
        first = engine.run("def f(v):\n    return v + 1\ncount = 41\nopen('note.txt', 'w').write('kept')")
        assert first.status == "ok"
        # The worker was stopped (the session leaves the table just before its worker is retired).
        assert wait_until(lambda: engine.sessions() == [] and engine.describe()["workers"]["live"] == 0)
        back = engine.run("f(count), open('note.txt').read()")
        assert (back.status, back.value) == ("ok", "(42, 'kept')")  # variables and workspace files
        assert back.session_restored is not None and {"f", "count"} <= set(back.session_restored.restored)
        assert back.session_restarted is False
        assert back.execution_count == 2
        assert "restored from its snapshot" in back.to_observation()


def test_hibernate_by_hand(store: SQLiteStore) -> None:
    with ReplEngine(boundary="subprocess", store=store, snapshot_key=KEY) as engine:
        engine.run("x = [1, 2]", session="s")
        assert engine.hibernate("s") is True
        assert engine.sessions() == []
        assert engine.hibernate("s") is False  # nothing left to stop
        assert engine.run("x", session="s").value == "[1, 2]"


def test_a_session_whose_change_was_not_saved_stays_awake(store: SQLiteStore) -> None:
    with ReplEngine(boundary="subprocess", store=store, snapshot_key=KEY) as engine:
        engine.run("x = 1", session="s")
        assert engine._durable is not None
        engine._durable._unsaved.add("s")  # as after a failed save
        assert engine.hibernate("s") is False
        assert engine.sessions() == ["s"]


def test_hibernation_needs_a_store() -> None:
    with pytest.raises(ValueError, match="needs a store"):
        ReplEngine(boundary="subprocess", snapshot_key=KEY, hibernate_after_s=1)
