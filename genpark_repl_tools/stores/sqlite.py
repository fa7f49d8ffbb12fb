"""SQLiteStore: the embedded default. One file, WAL, one row per session replaced atomically."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ._base import (
    MAX_ENTRY_BYTES,
    Lease,
    SessionStore,
    StoredSnapshot,
    StoreEntry,
    StoreError,
    busy,
    check_size,
    corrupt,
    entry_limit,
    lease_times,
    new_token,
)

__all__ = ["SQLiteStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session  TEXT PRIMARY KEY,
    data     BLOB NOT NULL,
    size     INTEGER NOT NULL,
    saved_at REAL NOT NULL,
    version  INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS leases (
    session    TEXT PRIMARY KEY,
    token      TEXT NOT NULL,
    expires_at REAL NOT NULL
);
"""
_POLL_S = 0.02


class SQLiteStore(SessionStore):
    """Sessions in one SQLite file: for one process, or several processes on one host.

    Every put replaces the session's row in one transaction (readers see the old or the new blob,
    never a mix); WAL lets readers run while a writer writes. Leases are rows with an expiry, taken
    in `BEGIN IMMEDIATE` transactions, so processes sharing the file exclude each other.

        with SQLiteStore.from_path("sessions.db") as store:
            engine = ReplEngine(store=store, snapshot_key=key)
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout_s: float = 10.0,
        lease_ttl_s: float = 30.0,
        lease_wait_s: float = 10.0,
        max_entry_bytes: int | None = MAX_ENTRY_BYTES,
    ) -> None:
        self.path = Path(path)
        self.lease_ttl_s, self.lease_wait_s = lease_ttl_s, lease_wait_s
        self.max_entry_bytes = entry_limit(max_entry_bytes)
        self._lock = threading.Lock()
        try:
            self._db: sqlite3.Connection | None = sqlite3.connect(
                self.path, timeout=timeout_s, isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the session store {str(self.path)!r}: {exc}") from exc

    @classmethod
    @contextmanager
    def from_path(cls, path: str | os.PathLike[str], **options: Any) -> Iterator[SQLiteStore]:
        """A store for the block; closed at its end."""
        store = cls(path, **options)
        try:
            yield store
        finally:
            store.close()

    @contextmanager
    def _tx(self, immediate: bool = False) -> Iterator[sqlite3.Connection]:
        with self._lock:
            db = self._db
            if db is None:
                raise StoreError("the session store is closed")
            try:
                db.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
                try:
                    yield db
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")
            except sqlite3.Error as exc:
                raise StoreError(f"session store {str(self.path)!r}: {exc}") from exc

    # ---- snapshots ------------------------------------------------------------------------------

    def put(self, session: str, data: bytes) -> StoreEntry:
        check_size(self, session, len(data), writing=True)
        now = time.time()
        with self._tx(immediate=True) as db:
            row = db.execute(
                "INSERT INTO sessions (session, data, size, saved_at, version) VALUES (?, ?, ?, ?, 1) "
                "ON CONFLICT(session) DO UPDATE SET data = excluded.data, size = excluded.size, "
                "saved_at = excluded.saved_at, version = sessions.version + 1 RETURNING version",
                (session, data, len(data), now),
            ).fetchone()
        return StoreEntry(session, int(row[0]), len(data), now)

    def get(self, session: str) -> StoredSnapshot | None:
        with self._tx() as db:  # one read transaction: the blob measured is the blob read
            row = db.execute(
                "SELECT version, size, saved_at, typeof(data), length(data) FROM sessions WHERE session = ?",
                (session,),
            ).fetchone()
            if row is None:
                return None
            if row[3] != "blob":
                raise corrupt(session, f"its data is {row[3]}, not a blob")
            check_size(self, session, int(row[4]), writing=False)
            (data,) = db.execute("SELECT data FROM sessions WHERE session = ?", (session,)).fetchone()
        return StoredSnapshot(_entry(session, row[:3]), bytes(data))

    def info(self, session: str) -> StoreEntry | None:
        with self._tx() as db:
            row = db.execute(
                "SELECT version, size, saved_at FROM sessions WHERE session = ?", (session,)
            ).fetchone()
        return None if row is None else _entry(session, row)

    def list(self) -> list[StoreEntry]:
        with self._tx() as db:
            rows = db.execute(
                "SELECT session, version, size, saved_at FROM sessions ORDER BY saved_at, session"
            ).fetchall()
        return [_entry(r[0], r[1:]) for r in rows]

    def delete(self, session: str) -> bool:
        with self._tx(immediate=True) as db:
            count = db.execute("DELETE FROM sessions WHERE session = ?", (session,)).rowcount
        return bool(count)

    # ---- leases ---------------------------------------------------------------------------------

    def acquire(self, session: str, *, ttl_s: float | None = None, wait_s: float | None = None) -> Lease:
        ttl_s, wait_s = lease_times(self, ttl_s, wait_s)
        token = new_token()
        deadline = time.monotonic() + wait_s
        while True:
            now = time.time()
            with self._tx(immediate=True) as db:
                taken = db.execute(
                    "INSERT INTO leases (session, token, expires_at) VALUES (?, ?, ?) "
                    "ON CONFLICT(session) DO UPDATE SET token = excluded.token, "
                    "expires_at = excluded.expires_at "
                    "WHERE leases.expires_at <= ?",
                    (session, token, now + ttl_s, now),
                ).rowcount
            if taken:
                return Lease(session, token, ttl_s)
            if time.monotonic() >= deadline:
                raise busy(session, wait_s)
            time.sleep(_POLL_S)

    def renew(self, lease: Lease) -> bool:
        with self._tx(immediate=True) as db:
            count = db.execute(
                "UPDATE leases SET expires_at = ? WHERE session = ? AND token = ?",
                (time.time() + lease.ttl_s, lease.session, lease.token),
            ).rowcount
        return bool(count)

    def release(self, lease: Lease) -> bool:
        with self._tx(immediate=True) as db:
            count = db.execute(
                "DELETE FROM leases WHERE session = ? AND token = ?", (lease.session, lease.token)
            ).rowcount
        return bool(count)

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def __repr__(self) -> str:
        return f"<SQLiteStore {str(self.path)!r}>"


def _entry(session: str, row: Any) -> StoreEntry:
    try:
        return StoreEntry(session, int(row[0]), int(row[1]), float(row[2]))
    except (TypeError, ValueError):
        raise corrupt(session, "its version, size or save time is not a number") from None
