"""Session stores: where snapshots live between processes (see docs/sessions.md).

`SQLiteStore` is imported eagerly (sqlite3 is in the standard library); `RedisStore` only when
asked for, so redis-py stays an optional extra (`genpark-repl-tools[redis]`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._base import EntryTooLarge, Lease, SessionBusy, SessionStore, StoredSnapshot, StoreEntry, StoreError
from .sqlite import SQLiteStore

if TYPE_CHECKING:
    from .redis import RedisStore

__all__ = [
    "EntryTooLarge",
    "Lease",
    "RedisStore",
    "SQLiteStore",
    "SessionBusy",
    "SessionStore",
    "StoreEntry",
    "StoreError",
    "StoredSnapshot",
    "open_store",
]


def open_store(spec: str, **options: Any) -> SessionStore:
    """A store from a spec: `sqlite:PATH`, or a Redis URL (`redis://host:6379/0`, `rediss://...`,
    `unix://...`) with an optional `#prefix` for its keys. Options go to the store's constructor."""
    kind, sep, rest = spec.partition(":")
    if kind == "sqlite" and sep and rest:
        return SQLiteStore(rest, **options)
    if kind in ("redis", "rediss", "unix") and sep:
        from .redis import RedisStore

        url, _, prefix = spec.partition("#")
        if prefix:
            options.setdefault("prefix", prefix)
        return RedisStore(url, **options)
    raise ValueError(f"unknown store {spec!r}: use sqlite:PATH or redis://HOST:PORT/DB[#PREFIX]")


def __getattr__(name: str) -> Any:
    if name == "RedisStore":
        from .redis import RedisStore

        return RedisStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
