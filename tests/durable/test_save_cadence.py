"""With a store and checkpoints, the store is written on a cadence, not after every cell.

Checkpoints roll a failed cell back without the store, so a run's save waits: at most every
`save_every_s` seconds of activity, on hibernation and on close. A session whose cells run without a
checkpoint (the session's threads, checkpoints off, in-process) is saved after every cell, as before.
Real subprocess workers and real SQLite and Redis stores.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _durable_support import KEY

from genpark_repl_tools import Limits, ReplEngine
from genpark_repl_tools.stores import RedisStore, SessionStore, SQLiteStore

pytest.importorskip("genpark_repl_tools.boundaries.subprocess")
pytestmark = pytest.mark.slow


@pytest.fixture(params=["sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SessionStore]:
    if request.param == "sqlite":
        with SQLiteStore.from_path(tmp_path / "sessions.db", lease_wait_s=5) as sqlite:
            yield sqlite
    else:
        url = request.getfixturevalue("redis_url")
        prefix = request.getfixturevalue("redis_prefix")
        with RedisStore(url, prefix=prefix, lease_wait_s=5) as redis:
            yield redis


def engine_with(store: SessionStore, **options: Any) -> ReplEngine:
    boundary = options.pop("boundary", "subprocess")
    engine = ReplEngine(
        policy="trusted",
        boundary=boundary,
        limits=Limits(timeout_s=5),
        store=store,
        snapshot_key=KEY,
        **options,
    )
    if (
        boundary == "subprocess"
        and options.get("checkpoints", True)
        and not engine.boundary.supports_rollback
    ):
        engine.close()
        pytest.skip("checkpoints need a child subreaper (Linux)")
    return engine


def version(store: SessionStore, session: str = "default") -> int:
    entry = store.info(session)
    return 0 if entry is None else entry.version


def test_cells_with_checkpoints_are_saved_on_close_not_after_each(store: SessionStore) -> None:
    engine = engine_with(store, save_every_s=30.0)
    try:
        engine.run("x = 1")  # a session's first run is saved: another engine on the store finds it
        assert version(store) == 1
        engine.run("x += 1")
        engine.run("x += 1")
        assert version(store) == 1  # left to the checkpoints
        crashed = engine.run("x += 100\nimport os\nos._exit(1)")
        assert crashed.rolled_back is True  # by the checkpoint, with nothing stored
        assert engine.run("x").value == "3"
        assert version(store) == 1
    finally:
        engine.close()
    assert version(store) == 2  # closing saved the last state
    with engine_with(store, save_every_s=30.0) as restarted:  # a new host process
        assert restarted.run("x").value == "3"


def test_closing_a_session_saves_it(store: SessionStore) -> None:
    with engine_with(store, save_every_s=30.0) as engine:
        engine.run("y = 'first'", session="s")
        engine.run("y = 'kept'", session="s")
        assert version(store, "s") == 1
        assert engine.close("s") is True
        assert version(store, "s") == 2
        assert engine.run("y", session="s").value == "'kept'"  # back from the store


def test_the_store_is_written_every_save_every_s_while_used_and_after(store: SessionStore) -> None:
    with engine_with(store, save_every_s=0.5) as engine:
        engine.run("n = 0")
        started = time.monotonic()
        while time.monotonic() - started < 1.4:
            engine.run("n += 1")
            time.sleep(0.05)
        during = version(store)
        assert 1 <= during <= 3  # about once every 0.5 s, not once per cell (~25 cells)
        count = engine.run("n").value
        # Idle after the burst: saved within about save_every_s, without another run.
        deadline = time.monotonic() + 10
        while version(store) == during and time.monotonic() < deadline:
            time.sleep(0.05)
        assert version(store) > during
        # A host restart (this engine is not closed) comes back to the last save.
        with engine_with(store, save_every_s=0.5) as other:
            assert other.run("n").value == count


def test_hibernation_saves_first(store: SessionStore) -> None:
    with engine_with(store, save_every_s=30.0) as engine:
        engine.run("z = [1]")
        engine.run("z.append(2)")
        assert version(store) == 1
        assert engine.hibernate() is True
        assert version(store) == 2
        woke = engine.run("z")
        assert (woke.value, woke.session_restored is not None) == ("[1, 2]", True)


@pytest.mark.parametrize(
    "options",
    [{"boundary": "subprocess", "checkpoints": False}, {"boundary": "inprocess"}],
    ids=["checkpoints off", "in-process"],
)
def test_without_checkpoints_every_cell_is_saved(store: SessionStore, options: dict[str, Any]) -> None:
    with engine_with(store, save_every_s=30.0, **options) as engine:
        for n in range(1, 4):
            engine.run(f"v = {n}")
            assert version(store) == n


def test_a_session_with_threads_is_saved_after_every_cell(store: SessionStore) -> None:
    with engine_with(store, save_every_s=30.0) as engine:
        engine.run("import threading\nstop = threading.Event()\nthreading.Thread(target=stop.wait).start()")
        before = version(store)
        ran = engine.run("kept = [1]")
        assert any("No checkpoint was taken before this cell" in n for n in ran.notes)
        assert version(store) == before + 1
        crashed = engine.run("kept.append(2)\nimport os\nos._exit(1)")
        # No checkpoint, so the store rolls it back: it holds the state from just before the cell.
        assert crashed.rolled_back is True
        assert engine.run("kept").value == "[1]"


def test_a_crash_without_checkpoint_after_unsaved_cells_says_how_far_back(store: SessionStore) -> None:
    with engine_with(store, save_every_s=30.0) as engine:
        engine.run("x = 1")
        assert engine.hibernate() is True  # saved: x = 1
        engine.run("y = 2")  # left to the checkpoint, unsaved
        # The next cell still had a checkpoint; the threads it starts leave the one after without.
        engine.run("import threading\nstop = threading.Event()\nthreading.Thread(target=stop.wait).start()")
        crashed = engine.run("import os\nos._exit(1)")
        assert crashed.rolled_back is False  # not to the state before this cell
        text = crashed.to_observation()
        assert "restored from its last save" in text and "the runs after that save are gone too" in text
        assert "Rolled back" not in text
        assert engine.run("x, 'y' in dir()").value == "(1, False)"


def test_save_every_s_must_be_positive(store: SessionStore) -> None:
    with pytest.raises(ValueError, match="save_every_s"):
        ReplEngine(policy="trusted", store=store, snapshot_key=KEY, save_every_s=0)


def test_two_engines_taking_turns_on_one_session_never_diverge(store: SessionStore) -> None:
    """A load balancer without sticky sessions: calls alternate between two engines on one store. An
    engine that takes the session over from the store saves after its run, so the other sees a newer
    version and continues from it, instead of going on from its own, older state."""
    a, b = engine_with(store), engine_with(store)
    try:
        assert a.run("log = ['a1']").status == "ok"
        assert b.run("log.append('b2')").status == "ok"
        assert a.run("log.append('a3')").status == "ok"
        assert b.run("log.append('b4')").status == "ok"
        assert a.run("log").value == "['a1', 'b2', 'a3', 'b4']"
    finally:
        a.close()
        b.close()


def test_changes_another_engine_overtook_are_reported_not_saved_over_it(store: SessionStore) -> None:
    """Engine a's cell waits for its save; engine b continues from the store (without that cell) and
    saves. Then a neither writes its stale state over b's nor goes on silently: its next run comes
    back from b's state and says that its unsaved runs were superseded."""
    a, b = engine_with(store), engine_with(store)
    try:
        a.run("log = ['a1']")
        a.close("default")  # saved on close: the store holds a1
        a.run("log.append('a2')")  # waits for its save (checkpointed)
        assert b.run("log.append('b3')").status == "ok"  # from the store: a1 only
        a._durable.flush()  # type: ignore[union-attr]  # a's background pass, or its close
        back = a.run("log")
        assert back.value == "['a1', 'b3']"
        assert any(note.startswith("Another process continued this session") for note in back.notes)
        assert b.run("log").value == "['a1', 'b3']"
    finally:
        a.close()
        b.close()
