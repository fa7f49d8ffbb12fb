"""The store conformance suite, once per store: SQLite (a file) and Redis (a real server)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from genpark_repl_tools.stores import SessionStore, SQLiteStore
from genpark_repl_tools.testing.store_conformance import StoreConformance


class TestSQLiteStore(StoreConformance):
    @pytest.fixture
    def store(self, sqlite_path: Path) -> Iterator[SessionStore]:
        with SQLiteStore.from_path(sqlite_path) as store:
            yield store


class TestRedisStore(StoreConformance):
    @pytest.fixture
    def store(self, redis_url: str, redis_prefix: str) -> Iterator[SessionStore]:
        from genpark_repl_tools.stores import RedisStore

        with RedisStore.from_url(redis_url, prefix=redis_prefix) as store:
            yield store


def test_sqlite_store_is_one_file_in_wal_mode(sqlite_path: Path) -> None:
    with SQLiteStore(sqlite_path) as store:
        store.put("s", b"data")
        mode = store._db.execute("PRAGMA journal_mode").fetchone()[0]  # type: ignore[union-attr]
    assert mode == "wal"
    assert sqlite_path.exists()
    with SQLiteStore(sqlite_path) as again:  # reopened: the data is on disk
        stored = again.get("s")
        assert stored is not None and stored.data == b"data"
