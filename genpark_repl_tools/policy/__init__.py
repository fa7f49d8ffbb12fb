"""Policies: what executed code may do, and the runtime that enforces it."""

from __future__ import annotations

from ._model import Policy
from ._runtime import PolicyRuntime, runtime_for

__all__ = ["Policy", "PolicyRuntime", "runtime_for"]
