"""Policies: what executed code may do, and the runtime that enforces it."""

from __future__ import annotations

from ._errors import PolicyViolation, UnsupportedInterpreter
from ._model import AttributeRules, ModuleRule, Policy
from ._runtime import PolicyRuntime, runtime_for, session_workspace

__all__ = [
    "AttributeRules",
    "ModuleRule",
    "Policy",
    "PolicyRuntime",
    "PolicyViolation",
    "UnsupportedInterpreter",
    "runtime_for",
    "session_workspace",
]
