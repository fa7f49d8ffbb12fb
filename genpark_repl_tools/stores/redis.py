"""RedisStore: sessions shared by many processes or hosts, with a per-session lease (redis-py).

Keys (under `prefix`): `<prefix>snap:<session>` a hash (data, size, saved_at, version),
`<prefix>index` a sorted set of session ids by save time, `<prefix>lease:<session>` the lease token.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .._exceptions import MissingDependency
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

__all__ = ["RedisStore"]

# Release and extend only while the token is still ours: never a bare DEL (redis-py's Lock does the same).
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""
_EXTEND = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end
return 0
"""
_POLL_S = 0.02


def _redis() -> Any:
    try:
        import redis
    except ImportError:
        raise MissingDependency(
            "RedisStore needs redis-py: install genpark-repl-tools[redis] (pip install redis)"
        ) from None
    return redis


class RedisStore(SessionStore):
    """Sessions in Redis: for several processes or hosts running the same sessions.

    A lease is a key set with `SET NX PX` to a random token; it is extended while work runs and
    released by a script that deletes it only if the token still matches, so a holder whose lease
    expired can never remove the next holder's.

        with RedisStore.from_url("redis://localhost:6379/0") as store:
            engine = ReplEngine(store=store, snapshot_key=key)
    """

    def __init__(
        self,
        url: str = "redis://localhost:6379/0",
        *,
        prefix: str = "genpark:",
        lease_ttl_s: float = 30.0,
        lease_wait_s: float = 10.0,
        client: Any = None,
        max_entry_bytes: int | None = MAX_ENTRY_BYTES,
    ) -> None:
        redis = _redis()
        self.lease_ttl_s, self.lease_wait_s = lease_ttl_s, lease_wait_s
        self.max_entry_bytes = entry_limit(max_entry_bytes)
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError,)
        self.url = url
        self.prefix = prefix
        self._client = client if client is not None else redis.Redis.from_url(url)
        self._release = self._client.register_script(_RELEASE)
        self._extend = self._client.register_script(_EXTEND)

    @classmethod
    @contextmanager
    def from_url(cls, url: str, **options: Any) -> Iterator[RedisStore]:
        """A store for the block; its connections are closed at its end."""
        store = cls(url, **options)
        try:
            yield store
        finally:
            store.close()

    def _key(self, kind: str, session: str) -> str:
        return f"{self.prefix}{kind}:{session}"

    @contextmanager
    def _mapped(self) -> Iterator[None]:
        try:
            yield
        except self._errors as exc:
            raise StoreError(f"session store {self.url!r}: {exc}") from exc

    # ---- snapshots ------------------------------------------------------------------------------

    def put(self, session: str, data: bytes) -> StoreEntry:
        check_size(self, session, len(data), writing=True)
        now = time.time()
        key = self._key("snap", session)
        with self._mapped():
            pipe = self._client.pipeline(transaction=True)
            pipe.hset(key, mapping={"data": data, "size": len(data), "saved_at": repr(now)})
            pipe.hincrby(key, "version", 1)
            pipe.zadd(f"{self.prefix}index", {session: now})
            _, version, _ = pipe.execute()
        return StoreEntry(session, int(version), len(data), now)

    def get(self, session: str) -> StoredSnapshot | None:
        key = self._key("snap", session)
        with self._mapped():
            size = int(self._client.hstrlen(key, "data"))
            check_size(self, session, size, writing=False)  # before the blob is sent
            values = self._client.hmget(key, "version", "size", "saved_at", "data")
        if values[0] is None or values[3] is None:
            return None
        # a put between the two reads may have replaced the blob
        check_size(self, session, len(values[3]), writing=False)
        return StoredSnapshot(_entry(session, values), bytes(values[3]))

    def info(self, session: str) -> StoreEntry | None:
        with self._mapped():
            values = self._client.hmget(self._key("snap", session), "version", "size", "saved_at")
        return None if values[0] is None else _entry(session, values)

    def list(self) -> list[StoreEntry]:
        with self._mapped():
            names = [n.decode() for n in self._client.zrange(f"{self.prefix}index", 0, -1)]
            pipe = self._client.pipeline(transaction=False)
            for name in names:
                pipe.hmget(self._key("snap", name), "version", "size", "saved_at")
            rows = pipe.execute()
        pairs = zip(names, rows, strict=True)
        return [_entry(name, values) for name, values in pairs if values[0] is not None]

    def delete(self, session: str) -> bool:
        with self._mapped():
            pipe = self._client.pipeline(transaction=True)
            pipe.delete(self._key("snap", session))
            pipe.zrem(f"{self.prefix}index", session)
            deleted, _ = pipe.execute()
        return bool(deleted)

    # ---- leases ---------------------------------------------------------------------------------

    def acquire(self, session: str, *, ttl_s: float | None = None, wait_s: float | None = None) -> Lease:
        ttl_s, wait_s = lease_times(self, ttl_s, wait_s)
        token = new_token()
        key = self._key("lease", session)
        deadline = time.monotonic() + wait_s
        with self._mapped():
            while not self._client.set(key, token, nx=True, px=max(1, int(ttl_s * 1000))):
                if time.monotonic() >= deadline:
                    raise busy(session, wait_s)
                time.sleep(_POLL_S)
        return Lease(session, token, ttl_s)

    def renew(self, lease: Lease) -> bool:
        with self._mapped():
            done = self._extend(
                keys=[self._key("lease", lease.session)], args=[lease.token, max(1, int(lease.ttl_s * 1000))]
            )
        return bool(done)

    def release(self, lease: Lease) -> bool:
        with self._mapped():
            done = self._release(keys=[self._key("lease", lease.session)], args=[lease.token])
        return bool(done)

    def close(self) -> None:
        self._client.close()

    def __repr__(self) -> str:
        return f"<RedisStore {self.url!r} prefix={self.prefix!r}>"


def _entry(session: str, values: list[Any]) -> StoreEntry:
    try:
        return StoreEntry(session, int(values[0]), int(values[1] or 0), float(values[2] or 0.0))
    except (TypeError, ValueError):
        raise corrupt(session, "its version, size or save time is not a number") from None
