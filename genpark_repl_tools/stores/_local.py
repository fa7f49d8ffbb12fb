"""The default engine's own store: where its sandboxed sessions hibernate when workers run out.

A sandboxed engine keeps at most `max_workers` live workers; without a store the next new
conversation is refused. An engine built with the default boundary makes this store for itself, so
that its workers are a cache (the least recently used idle session hibernates here and comes back on
its next call) without the caller choosing a store: a SQLite file in a private temporary directory,
removed when the engine closes. Nothing in it outlives the engine, so the engine saves to it only
when a session hibernates or ran a cell without a checkpoint.

Only this process opens the file, so leases are locks of this process: a run costs no thread and no
write, and a second call on a busy session waits for it as it would without a store.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator

from ._base import Lease, SessionBusy, new_token
from .sqlite import SQLiteStore

__all__ = ["LocalStore"]


class LocalStore(SQLiteStore):
    """Hibernated sessions of one engine, in a private temporary SQLite file removed on close."""

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="genpark-repl-hibernated-")  # mode 0700
        try:
            super().__init__(os.path.join(self._dir, "sessions.db"))
        except BaseException:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        self._locks: dict[str, threading.Lock] = {}
        self._held: dict[str, str] = {}  # session -> the token of the lease that holds its lock
        self._guard = threading.Lock()

    def _session_lock(self, session: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(session, threading.Lock())

    def acquire(self, session: str, *, ttl_s: float | None = None, wait_s: float | None = None) -> Lease:
        """Wait for the session's other call to end (without limit unless `wait_s` says)."""
        if not self._session_lock(session).acquire(timeout=-1 if wait_s is None else wait_s):
            raise SessionBusy(f"session {session!r} is running another call; try again when it has ended")
        token = new_token()
        with self._guard:
            self._held[session] = token
        return Lease(session, token, self.lease_ttl_s if ttl_s is None else ttl_s)

    def renew(self, lease: Lease) -> bool:
        with self._guard:
            return self._held.get(lease.session) == lease.token

    def release(self, lease: Lease) -> bool:
        with self._guard:
            if self._held.get(lease.session) != lease.token:
                return False
            del self._held[lease.session]
            lock = self._locks[lease.session]
        lock.release()
        return True

    @contextlib.contextmanager
    def hold(
        self, session: str, *, ttl_s: float | None = None, wait_s: float | None = None
    ) -> Iterator[Lease]:
        lease = self.acquire(session, ttl_s=ttl_s, wait_s=wait_s)
        try:
            yield lease
        finally:
            self.release(lease)

    def close(self) -> None:
        try:
            super().close()
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)
