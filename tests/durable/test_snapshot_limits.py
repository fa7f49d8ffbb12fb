"""Snapshots and stored blobs are bounded: reading one allocates in proportion to its bytes and
authenticates it before splitting its buffers, every size has a limit, and an entry over a limit
or corrupt fails with a clear error that leaves every other session's state alone."""

from __future__ import annotations

import json
import pickle
import sqlite3
import struct
import time
import tracemalloc
from pathlib import Path

import pytest
from _durable_support import KEY, keyed_engine

from genpark_repl_tools import ReplEngine
from genpark_repl_tools._models import SnapshotManifest
from genpark_repl_tools.snapshot import SessionSnapshot, SnapshotAuthError, SnapshotError, SnapshotTooLarge
from genpark_repl_tools.snapshot._format import MAGIC, BufferTable, SnapshotParts
from genpark_repl_tools.stores import EntryTooLarge, SQLiteStore, StoreError

MANIFEST = SnapshotManifest(
    session="default",
    created_at="2026-01-01T00:00:00Z",
    execution_count=1,
    policy="standard",
    python="3.11.0",
)


def header(records: list[list[object]]) -> bytes:
    data = {
        "format": 1,
        "manifest": MANIFEST.model_dump(mode="json"),
        "records": records,
        "imports": {},
        "sources": {},
        "bookkeeping": {},
    }
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


def blob(head: bytes, payload: bytes, table: bytes, mac: bytes = bytes(32)) -> bytes:
    return (
        MAGIC + struct.pack("<I", len(head)) + head + struct.pack("<Q", len(payload)) + payload + table + mac
    )


def empty_buffers(count: int) -> bytes:
    """A table declaring `count` buffers of no bytes: 8 bytes each, the cheapest a sender can make."""
    return struct.pack("<I", count) + bytes(8 * count)


def signed(head: bytes, payload: bytes, table: bytes) -> bytes:
    unsigned = SessionSnapshot.from_bytes(blob(head, payload, table), max_bytes=None)
    unsigned.mac = unsigned._digest(KEY)
    return unsigned.to_bytes()


def out_of_band(value: bytes) -> bytes:
    """A pickle of one buffer sent out of band (as numpy arrays travel)."""
    return pickle.dumps(pickle.PickleBuffer(value), protocol=5, buffer_callback=lambda _: False)


# ---- reading a blob ------------------------------------------------------------------------------


def test_a_declared_buffer_count_costs_nothing_before_authentication(engines: list[ReplEngine]) -> None:
    # 16 MB declaring two million buffers: split eagerly it was one object per buffer, 25 times the
    # bytes received, before the HMAC said the blob was not ours.
    data = blob(header([]), b"", empty_buffers(2_000_000))
    tracemalloc.start()
    started = time.perf_counter()
    try:
        snapshot = SessionSnapshot.from_bytes(data)
        with pytest.raises(SnapshotAuthError):
            snapshot.verify(KEY)
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(snapshot.buffers) == 2_000_000
    assert peak < 1.5 * len(data), f"reading {len(data):,} bytes allocated {peak:,}"
    assert elapsed < 1.0
    with pytest.raises(SnapshotAuthError):
        keyed_engine(engines, "standard").restore("default", data)


def test_a_table_declaring_more_buffers_than_its_bytes_hold_is_refused_unread() -> None:
    table = struct.pack("<I", 2**32 - 1) + bytes(64)
    with pytest.raises(SnapshotAuthError, match="truncated"):
        SessionSnapshot.from_bytes(blob(header([]), b"", table))


def test_buffers_are_split_on_demand_and_a_signed_table_is_kept_as_its_bytes() -> None:
    payload = out_of_band(b"abc")
    table = struct.pack("<IQ", 2, 3) + b"abc" + struct.pack("<Q", 4) + b"wxyz"
    data = signed(header([["x", 0, len(payload), 0, 1]]), payload, table)
    snapshot = SessionSnapshot.from_bytes(data)
    assert isinstance(snapshot.buffers, BufferTable)
    assert [bytes(b) for b in snapshot.buffers] == [b"abc", b"wxyz"]
    assert bytes(snapshot.buffers[-1]) == b"wxyz" and not snapshot.buffers[0].readonly
    with pytest.raises(IndexError):
        snapshot.buffers[2]
    snapshot.verify(KEY)
    # signing again (as the host signs a worker's blob) writes the table back byte for byte
    again = SessionSnapshot.sign(json.loads(snapshot.header), snapshot.payload, snapshot.buffers, KEY)
    assert again.to_bytes() == data


def test_a_signed_snapshot_with_a_malformed_table_fails_and_the_session_stays(
    engines: list[ReplEngine],
) -> None:
    # what a worker could make and the host sign: authentic, yet its buffer claims a length the
    # table does not hold
    payload = out_of_band(b"abc")
    table = struct.pack("<IQ", 2, 2**40) + bytes(16)
    data = signed(header([["x", 0, len(payload), 0, 1]]), payload, table)
    engine = keyed_engine(engines, "standard")
    engine.run("x = 'before'")
    with pytest.raises(SnapshotError, match="buffer table is malformed"):
        engine.restore("default", data)
    assert engine.run("x").value == "'before'"


def test_an_out_of_band_buffer_restores_from_the_table(engines: list[ReplEngine]) -> None:
    payload = out_of_band(b"abc")
    table = struct.pack("<IQ", 1, 3) + b"abc"
    engine = keyed_engine(engines, "standard")
    restored = engine.restore("default", signed(header([["x", 0, len(payload), 0, 1]]), payload, table))
    assert restored.restored == ["x"]
    assert engine.run("bytes(x)").value == "b'abc'"


def test_a_blob_over_the_limit_is_refused_before_it_is_copied() -> None:
    data = blob(header([]), b"", empty_buffers(0))
    assert SessionSnapshot.from_bytes(data, max_bytes=len(data)).payload == b""
    with pytest.raises(SnapshotTooLarge, match=r"over the limit of 0\.0 MB .*not loaded"):
        SessionSnapshot.from_bytes(data, max_bytes=len(data) - 1)


# ---- a snapshot in parts -------------------------------------------------------------------------


def test_parts_are_joined_within_the_limit() -> None:
    parts = SnapshotParts(max_bytes=10)
    parts.add(b"abc")
    parts.add(b"def")
    assert parts.finish(b"ghij") == b"abcdefghij"
    single = SnapshotParts(max_bytes=10)
    assert single.finish(b"x" * 10) == b"x" * 10


def test_the_part_that_passes_the_limit_drops_everything() -> None:
    parts = SnapshotParts(max_bytes=2**20)
    chunk = bytes(300_000)
    for _ in range(3):
        parts.add(chunk)
    with pytest.raises(SnapshotTooLarge, match=r"more than 1\.0 MB"):
        parts.add(chunk)
    assert parts._parts == []  # nothing held once refused
    with pytest.raises(SnapshotTooLarge):  # a sender that goes on is refused again
        parts.finish(b"x")


# ---- stores ---------------------------------------------------------------------------------------


def test_a_save_over_the_stores_limit_is_said_and_the_stored_state_stays(
    engines: list[ReplEngine], tmp_path: Path
) -> None:
    with SQLiteStore.from_path(tmp_path / "s.db") as store:
        engine = keyed_engine(engines, "standard", store=store)
        assert engine.run("x = 1", session="a").status == "ok"
        assert engine.run("y = 2", session="b").status == "ok"
        saved = store.info("a")
        assert saved is not None
        store.max_entry_bytes = saved.size + 1000
        result = engine.run("x = 'x' * 5000", session="a")
        assert result.status == "ok"
        assert any("not saved to the session store" in n and "max_entry_bytes" in n for n in result.notes)
        assert store.info("a") == saved  # the last state that fitted is kept
        assert engine.run("y = 3", session="b").notes == []  # another session saves as before
        assert store.info("b").version == 2  # type: ignore[union-attr]


def test_a_stored_entry_over_the_limit_or_corrupt_is_a_clear_error_for_its_session_only(
    engines: list[ReplEngine], tmp_path: Path
) -> None:
    path = tmp_path / "s.db"
    with SQLiteStore.from_path(path) as store:
        writer = keyed_engine(engines, "standard", store=store)
        writer.run("x = 'x' * 50_000", session="big")
        writer.run("y = 2", session="small")
        writer.run("z = 3", session="broken")
        writer.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE sessions SET data = 'text' WHERE session = 'broken'")
    with SQLiteStore.from_path(path, max_entry_bytes=20_000) as store:
        reader = keyed_engine(engines, "standard", store=store)
        with pytest.raises(EntryTooLarge, match=r"'big' is .* over this store's max_entry_bytes .* not read"):
            reader.run("x", session="big")
        with pytest.raises(StoreError, match="'broken' is corrupt"):
            reader.run("z", session="broken")
        assert reader.run("y", session="small").value == "2"
        assert store.info("big") is not None and store.info("broken") is not None
