"""Shared constants for the durable-session tests."""

from __future__ import annotations

from typing import Any

from genpark_repl_tools import ReplEngine

KEY = b"durable-tests-key-0123456789abcdef"


def keyed_engine(engines: list[ReplEngine], policy: str, **options: Any) -> ReplEngine:
    """A new engine with the tests' snapshot key, added to `engines` (the fixture closes them)."""
    options.setdefault("boundary", "inprocess")  # the snapshot of a session object; subprocess tests say so
    engines.append(ReplEngine(policy=policy, snapshot_key=KEY, **options))
    return engines[-1]
