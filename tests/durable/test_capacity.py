"""Workers as a cache over the store: at max_workers, the least recently used idle session hibernates
and its worker slot is reused; many more conversations than workers keep their variables."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from _durable_support import KEY

from genpark_repl_tools import CapacityError, ReplEngine
from genpark_repl_tools.stores import SQLiteStore

pytest.importorskip("genpark_repl_tools.boundaries.subprocess")
pytestmark = pytest.mark.slow

CONVERSATIONS = 300
WORKERS = 4


def define(i: int) -> str:
    return f"a = {i}\nb = 'conversation-{i}'\nc = list(range({i % 7}))\n"


def expected(i: int) -> str:
    return repr((i, f"conversation-{i}", list(range(i % 7))))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore.from_path(tmp_path / "sessions.db", lease_wait_s=20) as store:
        yield store


def test_hundreds_of_conversations_on_a_few_workers(store: SQLiteStore) -> None:
    with ReplEngine(
        policy="standard", boundary="subprocess", store=store, snapshot_key=KEY, max_workers=WORKERS
    ) as engine:
        for i in range(CONVERSATIONS):
            result = engine.run(define(i), session=f"c{i}")
            assert result.status == "ok", result
        assert engine.describe()["workers"]["live"] <= WORKERS

        # Three callers at once on four workers: conversations come back while others hibernate to
        # make room for them (each caller keeps at most one worker busy, so one is always idle).
        def come_back(i: int) -> tuple[int, str | None, bool]:
            result = engine.run("a, b, c", session=f"c{i}")
            assert result.status == "ok", result
            return i, result.value, result.session_restored is not None

        with ThreadPoolExecutor(3) as pool:
            returned = list(pool.map(come_back, range(CONVERSATIONS)))
        assert [value for _, value, _ in returned] == [expected(i) for i in range(CONVERSATIONS)]
        # All but the last few came back from the store (the live ones were the last created).
        assert sum(restored for *_, restored in returned) >= CONVERSATIONS - WORKERS
        assert engine.describe()["workers"]["live"] <= WORKERS
        assert len(engine.sessions()) <= WORKERS


def test_two_engines_share_one_redis_store(redis_url: str, redis_prefix: str) -> None:
    from genpark_repl_tools.stores import RedisStore

    conversations = 40
    with (
        RedisStore(redis_url, prefix=redis_prefix, lease_wait_s=20) as store,
        # Saved after every run: a conversation taken over between saves on a cadence would go on
        # from the last save (as documented), and this test hands each one over every turn.
        ReplEngine(
            boundary="subprocess", store=store, snapshot_key=KEY, max_workers=2, save_every_s=None
        ) as one,
        ReplEngine(
            boundary="subprocess", store=store, snapshot_key=KEY, max_workers=2, save_every_s=None
        ) as two,
    ):
        engines = (one, two)
        for i in range(conversations):
            assert engines[i % 2].run(define(i), session=f"r{i}").status == "ok"
        # Each conversation goes on in the other engine, then back in the first: both at their cap,
        # each restores what the other saved last.
        for turn in (1, 0):
            for i in range(conversations):
                result = engines[(i + turn) % 2].run("a += 1000\na, b, c", session=f"r{i}")
                assert result.status == "ok", result
        for i in range(conversations):
            value = one.run("a", session=f"r{i}").value
            assert value == str(i + 2000)
        assert one.describe()["workers"]["live"] <= 2 and two.describe()["workers"]["live"] <= 2


def _start_long_calls(engine: ReplEngine, names: list[str]) -> list[threading.Thread]:
    """Calls that stay running (until their `stop` file appears), started and waited for."""
    threads = [
        threading.Thread(
            target=engine.run,
            args=(
                "import os, time\nopen('started', 'w').close()\nwhile not os.path.exists('stop'):\n"
                "    time.sleep(0.02)",
            ),
            kwargs={"session": name},
        )
        for name in names
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    for name in names:
        workspace = engine.boundary.session_workspace(name)
        while workspace is None or not (workspace.path / "started").exists():
            assert time.monotonic() < deadline, "the long calls did not start"
            time.sleep(0.02)
            workspace = engine.boundary.session_workspace(name)
    return threads


def _stop_long_calls(engine: ReplEngine, names: list[str], threads: list[threading.Thread]) -> None:
    for name in names:
        workspace = engine.boundary.session_workspace(name)
        assert workspace is not None
        (workspace.path / "stop").touch()
    for thread in threads:
        thread.join(30)


def test_capacity_error_only_when_every_worker_runs_a_call(store: SQLiteStore) -> None:
    with ReplEngine(
        policy="trusted", boundary="subprocess", store=store, snapshot_key=KEY, max_workers=2
    ) as engine:
        names = ["busy1", "busy2"]
        threads = _start_long_calls(engine, names)
        try:
            with pytest.raises(CapacityError, match=r"all 2 workers are running calls .*oldest has run for"):
                engine.run("x = 1", session="newcomer")
        finally:
            _stop_long_calls(engine, names, threads)
        # The neighbour: once the calls ended, their workers are idle and one makes room.
        assert engine.run("x = 1", session="newcomer").status == "ok"
        assert engine.run("'started' in __import__('os').listdir()", session="busy1").value == "True"


def test_without_a_store_the_error_says_how_to_hibernate() -> None:
    with ReplEngine(policy="trusted", boundary="subprocess", max_workers=1) as engine:
        assert engine.run("x = 1", session="first").status == "ok"
        with pytest.raises(CapacityError, match=r"max_workers=1.*ReplEngine\(store=\.\.\.\)"):
            engine.run("x = 1", session="second")
        assert engine.run("x", session="first").value == "1"  # the live one is untouched


def test_a_worker_left_stale_by_another_engine_makes_room(store: SQLiteStore) -> None:
    # The conversation went on in the other engine: this one's worker holds an older state, which
    # the store does not need, so it may go.
    with (
        ReplEngine(
            boundary="subprocess", store=store, snapshot_key=KEY, max_workers=1, save_every_s=None
        ) as one,
        ReplEngine(
            boundary="subprocess", store=store, snapshot_key=KEY, max_workers=1, save_every_s=None
        ) as two,
    ):
        assert one.run("x = 1", session="moved").status == "ok"
        assert two.run("x += 1", session="moved").status == "ok"
        assert one.run("y = 2", session="newcomer").status == "ok"
        assert one.sessions() == ["newcomer"]
        back = one.run("x", session="moved")  # from the store, with the other engine's change
        assert (back.value, back.session_restored is not None) == ("2", True)
