"""ReplEngine(store=...): runs save the session; a session this process does not hold comes back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _durable_support import KEY

from genpark_repl_tools import ReplEngine
from genpark_repl_tools.snapshot import SessionSnapshot, SnapshotAuthError
from genpark_repl_tools.stores import SessionBusy, SQLiteStore


@pytest.fixture
def store(sqlite_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore.from_path(sqlite_path, lease_wait_s=0.3) as store:
        yield store


def test_a_run_saves_and_another_engine_restores(store: SQLiteStore) -> None:
    with ReplEngine(boundary="inprocess", store=store, snapshot_key=KEY) as first:
        first.run(
            "def area(r):\n    return 3 * r * r\nradii = [1, 2]\ngen = (i for i in radii)", session="s1"
        )
        assert first.run("radii.append(3)", session="s1").session_restored is None  # in-place change
    entry = store.info("s1")
    assert entry is not None and entry.version == 2
    with ReplEngine(boundary="inprocess", store=store, snapshot_key=KEY) as second:
        result = second.run("[area(r) for r in radii]", session="s1")
        assert (result.status, result.value) == ("ok", "[3, 12, 27]")
        assert result.session_restored is not None
        assert set(result.session_restored.restored) == {"area", "radii"}
        assert [s.name for s in result.session_restored.not_saved] == ["gen"]
        assert result.execution_count == 3
        text = result.to_observation()
        assert "restored from its snapshot" in text and "area, radii" in text and "gen (a generator" in text
        assert second.run("radii", session="s1").session_restored is None  # only the first run says so


def test_a_stale_local_copy_catches_up(store: SQLiteStore) -> None:
    with (
        ReplEngine(boundary="inprocess", store=store, snapshot_key=KEY) as a,
        ReplEngine(boundary="inprocess", store=store, snapshot_key=KEY) as b,
    ):
        a.run("n = 1", session="s")
        b.run("n += 10", session="s")  # b restores a's state first
        result = a.run("n", session="s")  # a's own copy is stale: it restores b's
        assert result.value == "11" and result.session_restored is not None


def test_blocked_code_does_not_save(store: SQLiteStore) -> None:
    with ReplEngine(boundary="inprocess", policy="strict", store=store, snapshot_key=KEY) as engine:
        engine.run("x = 1", session="s")
        assert engine.run("import os", session="s").status == "blocked"
        assert engine.run("def broken(:", session="s").status == "error"
    entry = store.info("s")
    assert entry is not None and entry.version == 1


def test_reset_deletes_the_stored_snapshot(store: SQLiteStore) -> None:
    with ReplEngine(boundary="inprocess", store=store, snapshot_key=KEY) as engine:
        engine.run("x = 1", session="s")
        engine.reset("s")
        assert store.info("s") is None
    with ReplEngine(boundary="inprocess", store=store, snapshot_key=KEY) as other:
        assert other.run("x", session="s").status == "error"


def test_a_busy_session_raises_after_the_wait(store: SQLiteStore) -> None:
    engine = ReplEngine(boundary="inprocess", store=store, snapshot_key=KEY)
    with engine, store.hold("s"), pytest.raises(SessionBusy, match="busy in another process"):
        engine.run("x = 1", session="s")  # as if another process ran the session


def test_an_altered_stored_snapshot_is_refused(store: SQLiteStore) -> None:
    with ReplEngine(boundary="inprocess", store=store, snapshot_key=KEY) as engine:
        engine.run("x = 1", session="s")
    stored = store.get("s")
    assert stored is not None
    data = bytearray(stored.data)
    data[len(data) // 2] ^= 0xFF
    store.put("s", bytes(data))
    with (
        ReplEngine(boundary="inprocess", store=store, snapshot_key=KEY) as other,
        pytest.raises(SnapshotAuthError),
    ):
        other.run("x", session="s")


def test_stored_blobs_are_snapshots_with_a_manifest(store: SQLiteStore) -> None:
    with ReplEngine(boundary="inprocess", store=store, snapshot_key=KEY) as engine:
        engine.run("values = list(range(10))", session="s")
    stored = store.get("s")
    assert stored is not None
    manifest = SessionSnapshot.from_bytes(stored.data).manifest
    assert manifest.session == "s" and [v.name for v in manifest.saved] == ["values"]


def test_store_needs_a_boundary_that_takes_snapshots(store: SQLiteStore) -> None:
    from genpark_repl_tools.boundaries import MockBoundary

    def handler(request: object) -> None:
        raise AssertionError("never runs")

    with pytest.raises(ValueError, match="does not support snapshots"):
        ReplEngine(boundary=MockBoundary(handler), store=store, snapshot_key=KEY)


def test_a_restore_by_hand_becomes_the_stored_state(store: SQLiteStore) -> None:
    with ReplEngine(boundary="inprocess", snapshot_key=KEY) as loose:
        loose.run("answer = 42")
        snapshot = loose.snapshot()
    with ReplEngine(boundary="inprocess", store=store, snapshot_key=KEY) as engine:
        engine.run("answer = 0", session="s")
        engine.restore("s", snapshot)
        assert engine.run("answer", session="s").value == "42"
    with ReplEngine(boundary="inprocess", store=store, snapshot_key=KEY) as other:
        assert other.run("answer", session="s").value == "42"


@pytest.mark.parametrize("policy", ["standard", "strict"])
def test_restricted_sessions_save_their_functions(store: SQLiteStore, policy: str) -> None:
    """The cells compile from their source (and a trailing value is stored by patching the code):
    saving and restoring compile them again while the session's rules are active, as the host."""
    with ReplEngine(boundary="inprocess", policy=policy, store=store, snapshot_key=KEY) as first:
        result = first.run("def double(v):\n    return 2 * v\nkept = [1, 2]\ndouble(21)", session="p")
        assert (result.status, result.value) == ("ok", "42")
    with ReplEngine(boundary="inprocess", policy=policy, store=store, snapshot_key=KEY) as second:
        back = second.run("double(len(kept)), kept", session="p")
        assert (back.status, back.value) == ("ok", "(4, [1, 2])")
        assert back.session_restored is not None and back.session_restored.not_saved == []
