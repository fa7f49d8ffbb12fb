"""Session snapshots: variables by value, imports by name, authenticated (see docs/sessions.md)."""

from __future__ import annotations

from ._format import (
    SessionSnapshot,
    SnapshotAuthError,
    SnapshotError,
    SnapshotRefused,
    SnapshotTooLarge,
    read_manifest,
)
from ._load import restore_snapshot
from ._save import take_snapshot

__all__ = [
    "SessionSnapshot",
    "SnapshotAuthError",
    "SnapshotError",
    "SnapshotRefused",
    "SnapshotTooLarge",
    "read_manifest",
    "restore_snapshot",
    "take_snapshot",
]
