"""The session store contract: snapshots by session id, plus a per-session lease.

    SessionStore            put / get / info / list / delete, acquire / renew / release
    ├── SQLiteStore         one file (WAL); processes on one host      (genpark_repl_tools.stores.sqlite)
    └── RedisStore          many processes or hosts                    (genpark_repl_tools.stores.redis)

A store keeps opaque, already-authenticated blobs (`SessionSnapshot.to_bytes()`); it never parses
them. Each is bounded by the store's `max_entry_bytes`, on `put` and, before the blob is read, on
`get`: a store written by another program, or corrupted, cannot make a reader hold more.

A lease says which process runs a session now: `acquire` waits up to `wait_s` and then raises
`SessionBusy`; a lease expires `ttl_s` after it was taken or last renewed, so a crashed holder
never blocks a session for good. `hold()` keeps a lease renewed while work runs.
"""

from __future__ import annotations

import secrets
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType

from .._exceptions import ReplError

__all__ = [
    "MAX_ENTRY_BYTES",
    "EntryTooLarge",
    "Lease",
    "SessionBusy",
    "SessionStore",
    "StoreEntry",
    "StoreError",
    "StoredSnapshot",
]

# The largest blob a store takes or hands back unless it is told otherwise (max_entry_bytes): the
# engine's own snapshot limit's default (snapshot/_format.py).
MAX_ENTRY_BYTES = 128 * 1024 * 1024


class StoreError(ReplError, RuntimeError):
    """The store failed (unreachable, corrupt, closed)."""


class EntryTooLarge(StoreError):
    """A snapshot larger than the store's `max_entry_bytes`: not written (the stored one stays), or
    not read."""


class SessionBusy(StoreError):
    """Another process holds the session's lease and did not let go within the wait."""


@dataclass(frozen=True)
class StoreEntry:
    """What a store knows about one session without reading its blob."""

    session: str
    version: int  # grows by one with every put
    size: int  # bytes
    saved_at: float  # Unix time


@dataclass(frozen=True)
class StoredSnapshot:
    entry: StoreEntry
    data: bytes


@dataclass
class Lease:
    """A held lease: only the holder of `token` may renew or release it."""

    session: str
    token: str
    ttl_s: float


def new_token() -> str:
    return secrets.token_hex(16)


def lease_times(store: SessionStore, ttl_s: float | None, wait_s: float | None) -> tuple[float, float]:
    ttl = store.lease_ttl_s if ttl_s is None else ttl_s
    wait = store.lease_wait_s if wait_s is None else wait_s
    if not ttl > 0 or not wait >= 0:
        raise ValueError(f"lease ttl must be > 0 and wait >= 0 seconds, got ttl={ttl!r} wait={wait!r}")
    return ttl, wait


def entry_limit(value: int | None) -> int | None:
    if value is not None and not (isinstance(value, int) and value > 0):
        raise ValueError(f"max_entry_bytes must be a positive number of bytes or None, got {value!r}")
    return value


def check_size(store: SessionStore, session: str, size: int, *, writing: bool) -> None:
    """Raise EntryTooLarge if `size` is over the store's limit."""
    limit = store.max_entry_bytes
    if limit is None or size <= limit:
        return
    if writing:
        raise EntryTooLarge(
            f"the snapshot of session {session!r} is {size / 1e6:,.1f} MB, over this store's "
            f"max_entry_bytes of {limit / 1e6:,.1f} MB; it was not saved (the stored one is unchanged)"
        )
    raise EntryTooLarge(
        f"the stored snapshot of session {session!r} is {size / 1e6:,.1f} MB, over this store's "
        f"max_entry_bytes of {limit / 1e6:,.1f} MB; it was not read. Open the store with a larger "
        "max_entry_bytes to read it, or delete it"
    )


def corrupt(session: str, what: str) -> StoreError:
    return StoreError(f"the stored entry of session {session!r} is corrupt ({what}); it was not read")


def busy(session: str, wait_s: float) -> SessionBusy:
    return SessionBusy(
        f"session {session!r} is busy in another process (it holds the session's lease); "
        f"waited {wait_s:g} s. Try again when that run has finished."
    )


class SessionStore(ABC):
    """Keeps session snapshots and hands out per-session leases. Safe to share between threads.

    Security model: a store holds bytes written by untrusted code and is itself untrusted; the
    engine authenticates every blob (HMAC) before loading it, so a store cannot make a session run
    anything. Leases are advisory coordination between engines that share the store.
    """

    lease_ttl_s: float = 30.0  # a lease not renewed for this long expires (a crashed holder)
    lease_wait_s: float = 10.0  # how long acquire() waits for another holder before SessionBusy
    max_entry_bytes: int | None = MAX_ENTRY_BYTES  # the largest blob put or get handles (None: any)

    # ---- snapshots ------------------------------------------------------------------------------

    @abstractmethod
    def put(self, session: str, data: bytes) -> StoreEntry:
        """Replace the session's snapshot atomically; returns the new entry (version + 1).
        EntryTooLarge (nothing written) if `data` is over `max_entry_bytes`."""

    @abstractmethod
    def get(self, session: str) -> StoredSnapshot | None:
        """The session's snapshot, or None. EntryTooLarge, before the blob is read, if it is over
        `max_entry_bytes`; StoreError if the entry is corrupt."""

    @abstractmethod
    def info(self, session: str) -> StoreEntry | None:
        """The session's entry without its blob, or None."""

    @abstractmethod
    def list(self) -> list[StoreEntry]:
        """Every stored session, oldest save first."""

    @abstractmethod
    def delete(self, session: str) -> bool:
        """Forget the session's snapshot; False if there was none."""

    # ---- leases ---------------------------------------------------------------------------------

    @abstractmethod
    def acquire(self, session: str, *, ttl_s: float | None = None, wait_s: float | None = None) -> Lease:
        """Take the session's lease, waiting up to `wait_s` (default `lease_wait_s`); raises SessionBusy."""

    @abstractmethod
    def renew(self, lease: Lease) -> bool:
        """Extend the lease by its ttl; False if it was lost (expired and taken by another)."""

    @abstractmethod
    def release(self, lease: Lease) -> bool:
        """Give the lease up; False if it was no longer ours. Never removes another's lease."""

    @contextmanager
    def hold(
        self, session: str, *, ttl_s: float | None = None, wait_s: float | None = None
    ) -> Iterator[Lease]:
        """Hold the session's lease for the block, renewing it every ttl/3 while the block runs."""
        lease = self.acquire(session, ttl_s=ttl_s, wait_s=wait_s)
        ttl_s = lease.ttl_s
        stop = threading.Event()

        def keep_alive() -> None:
            while not stop.wait(ttl_s / 3):
                if not self.renew(lease):
                    return

        keeper = threading.Thread(target=keep_alive, name=f"lease-{session[:32]}", daemon=True)
        keeper.start()
        try:
            yield lease
        finally:
            stop.set()
            keeper.join()
            self.release(lease)

    # ---- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:  # noqa: B027 - stores without resources need not override it
        """Release the store's connections. Idempotent."""

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
