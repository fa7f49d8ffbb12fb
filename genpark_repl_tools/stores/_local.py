"""The default engine's own store: where its sandboxed sessions hibernate when workers run out.

A sandboxed engine keeps at most `max_workers` live workers; without a store the next new
conversation is refused. An engine built with the default boundary makes this store for itself, so
that its workers are a cache (the least recently used idle session hibernates here and comes back on
its next call) without the caller choosing a store. Nothing in it outlives the engine, so the engine
saves to it only when a session hibernates or ran a cell without a checkpoint.

One process uses it, so it is as plain as it can be: a file per session in a private temporary
directory (the blobs stay out of the host's memory), written whole and renamed into place, with the
index (version, size, time) in memory; leases are locks of this process. Nothing in it is a
transaction or a lock that a Ctrl-C between two bytecodes could leave half done or held: a blob is
renamed into place or not at all, and a lease is an RLock taken inside the `try` that releases it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator

from ._base import (
    MAX_ENTRY_BYTES,
    Lease,
    SessionBusy,
    SessionStore,
    StoredSnapshot,
    StoreEntry,
    StoreError,
    check_size,
    new_token,
)

__all__ = ["LocalStore"]


class LocalStore(SessionStore):
    """Hibernated sessions of one engine: files in a private temporary directory, removed on close."""

    def __init__(self, max_entry_bytes: int | None = MAX_ENTRY_BYTES) -> None:
        self.max_entry_bytes = max_entry_bytes
        self.path = tempfile.mkdtemp(prefix="genpark-repl-hibernated-")  # mode 0700
        self._entries: dict[str, StoreEntry] = {}
        self._locks: dict[str, threading.RLock] = {}
        self._closed = False

    def _file(self, session: str) -> str:
        return os.path.join(self.path, hashlib.sha256(session.encode("utf-8", "surrogatepass")).hexdigest())

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("the session store is closed")

    # ---- snapshots ------------------------------------------------------------------------------

    def put(self, session: str, data: bytes) -> StoreEntry:
        self._check_open()
        check_size(self, session, len(data), writing=True)
        target = self._file(session)
        partial = f"{target}.{new_token()}.part"
        try:
            with open(partial, "wb") as f:
                f.write(data)
            os.replace(partial, target)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(partial)
            raise StoreError(f"cannot write session {session!r} to the temporary store: {exc}") from exc
        previous = self._entries.get(session)
        entry = StoreEntry(session, (previous.version if previous else 0) + 1, len(data), time.time())
        self._entries[session] = entry
        return entry

    def get(self, session: str) -> StoredSnapshot | None:
        self._check_open()
        entry = self._entries.get(session)
        if entry is None:
            return None
        check_size(self, session, entry.size, writing=False)
        try:
            with open(self._file(session), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"cannot read session {session!r} from the temporary store: {exc}") from exc
        return StoredSnapshot(entry, data)

    def info(self, session: str) -> StoreEntry | None:
        self._check_open()
        return self._entries.get(session)

    def list(self) -> list[StoreEntry]:
        self._check_open()
        return sorted(self._entries.values(), key=lambda entry: entry.saved_at)

    def delete(self, session: str) -> bool:
        self._check_open()
        if self._entries.pop(session, None) is None:
            return False
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._file(session))
        return True

    # ---- leases: locks of this process ----------------------------------------------------------

    def _session_lock(self, session: str) -> threading.RLock:
        # setdefault is one step of the dict (no lock of ours to be left held by a Ctrl-C).
        lock = self._locks.get(session)
        return lock if lock is not None else self._locks.setdefault(session, threading.RLock())

    def acquire(self, session: str, *, ttl_s: float | None = None, wait_s: float | None = None) -> Lease:
        """Wait for the session's other call to end (without limit unless `wait_s` says)."""
        if not self._session_lock(session).acquire(timeout=-1 if wait_s is None else wait_s):
            raise SessionBusy(f"session {session!r} is running another call; try again when it has ended")
        return Lease(session, new_token(), self.lease_ttl_s if ttl_s is None else ttl_s)

    def renew(self, lease: Lease) -> bool:
        return True  # held until released: this process cannot crash without it

    def release(self, lease: Lease) -> bool:
        try:
            self._session_lock(lease.session).release()
        except RuntimeError:  # not held by this thread
            return False
        return True

    @contextlib.contextmanager
    def hold(
        self, session: str, *, ttl_s: float | None = None, wait_s: float | None = None
    ) -> Iterator[Lease]:
        lock = self._session_lock(session)
        busy = False
        try:
            # Taken inside the try: a Ctrl-C right after the acquire returns still reaches the
            # finally, whose release is refused if the acquire never finished.
            if not lock.acquire(timeout=-1 if wait_s is None else wait_s):
                busy = True
                raise SessionBusy(f"session {session!r} is running another call; try again when it has ended")
            yield Lease(session, new_token(), self.lease_ttl_s if ttl_s is None else ttl_s)
        finally:
            if not busy:
                with contextlib.suppress(RuntimeError):
                    lock.release()

    def close(self) -> None:
        self._closed = True
        self._entries.clear()
        shutil.rmtree(self.path, ignore_errors=True)
