"""Exceptions for misuse of the engine and for infrastructure failures.

What the agent's code does is never an exception here: it is data in an `ExecutionResult`.

    ReplError
    ├── SessionNotFound        the session id names no live session (inspect, variables)
    ├── VariableNotFound       inspect() of a name the session does not hold
    ├── EngineClosed           the engine or boundary was closed
    ├── BoundaryError          a boundary could not do its job (worker failed to start, ...)
    │   └── CapacityError      a cap on sessions or workers was reached
    ├── MissingDependency      an optional extra is not installed
    └── FileError              a file operation on a session's workspace was refused or failed
        ├── UnsafeFileName     the name escapes the workspace (.., absolute, symlink, device, NUL, too long)
        ├── FileNotFound       no such file in the workspace
        ├── FileQuotaExceeded  a per-file or per-session size quota would be exceeded
        └── FilesUnavailable   this boundary has no workspace the host can reach
"""

from __future__ import annotations

__all__ = [
    "BoundaryError",
    "CapacityError",
    "EngineClosed",
    "FileError",
    "FileNotFound",
    "FileQuotaExceeded",
    "FilesUnavailable",
    "MissingDependency",
    "ReplError",
    "SessionNotFound",
    "UnsafeFileName",
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


class FileError(ReplError):
    pass


class UnsafeFileName(FileError, ValueError):
    pass


class FileNotFound(FileError, KeyError):
    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "file not found"


class FileQuotaExceeded(FileError):
    pass


class FilesUnavailable(FileError):
    pass
