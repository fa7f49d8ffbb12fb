"""The exception executed code sees when a runtime guard refuses something, and the one a restricted
policy raises when it cannot run on this interpreter."""

from __future__ import annotations

__all__ = ["PolicyViolation", "UnsupportedInterpreter"]


class PolicyViolation(PermissionError):
    """Raised inside executed code when the policy refuses an operation at run time.

    A subclass of PermissionError (so of OSError) on purpose: library code that survives an
    unwritable cache directory or an unreadable file keeps working when the policy refuses the
    access. Code that catches it has still been refused: nothing happened.
    """


# Tracebacks and results name the class the way the model reads it ("PolicyViolation: ..."), not by
# its private module path; like the built-in exceptions it is raised inside executed code.
PolicyViolation.__module__ = "builtins"


class UnsupportedInterpreter(RuntimeError):
    """A restricted policy cannot start: the audit hook's self-test failed on this Python.

    Raised when a restricted runtime is made, every time (the verdict is per process); the policy
    "trusted" needs no hook and is not affected.
    """
