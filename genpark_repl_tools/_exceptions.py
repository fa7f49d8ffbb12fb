"""Exceptions for misuse of the engine and for infrastructure failures.

What the agent's code does is never an exception here: it is data in an `ExecutionResult`.

    ReplError
    ├── SessionNotFound        the session id names no live session (inspect, variables)
    ├── VariableNotFound       inspect() of a name the session does not hold
    ├── EngineClosed           the engine or boundary was closed
    ├── BoundaryError          a boundary could not do its job (worker failed to start, ...)
    │   └── CapacityError      a cap on sessions or workers was reached
    └── MissingDependency      an optional extra is not installed
"""

from __future__ import annotations

__all__ = [
    "BoundaryError",
    "CapacityError",
    "EngineClosed",
    "MissingDependency",
    "ReplError",
    "SessionNotFound",
    "VariableNotFound",
]


class ReplError(Exception):
    """Base class of every exception the engine raises on purpose."""


class SessionNotFound(ReplError, KeyError):
    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "session not found"


class VariableNotFound(ReplError, KeyError):
    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "variable not found"


class EngineClosed(ReplError, RuntimeError):
    pass


class BoundaryError(ReplError, RuntimeError):
    pass


class CapacityError(BoundaryError):
    pass


class MissingDependency(ReplError, ImportError):
    pass
