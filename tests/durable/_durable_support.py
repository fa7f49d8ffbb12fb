"""Shared constants for the durable-session tests."""

from __future__ import annotations

KEY = b"durable-tests-key-0123456789abcdef"
