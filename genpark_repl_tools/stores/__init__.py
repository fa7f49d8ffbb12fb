"""Session stores: where snapshots live between processes (see docs/sessions.md).

`SQLiteStore` is imported eagerly (sqlite3 is in the standard library); `RedisStore` only when
asked for, so redis-py stays an optional extra (`genpark-repl-tools[redis]`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._base import Lease, SessionBusy, SessionStore, StoredSnapshot, StoreEntry, StoreError
from .sqlite import SQLiteStore

if TYPE_CHECKING:
    from .redis import RedisStore

__all__ = [
    "Lease",
    "RedisStore",
    "SQLiteStore",
    "SessionBusy",
    "SessionStore",
    "StoreEntry",
    "StoreError",
    "StoredSnapshot",
]


def __getattr__(name: str) -> Any:
    if name == "RedisStore":
        from .redis import RedisStore

        return RedisStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
