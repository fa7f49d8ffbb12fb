"""What the runner asks of a policy: audit, AST transform, builtins, and a guard around execution.

The runner depends only on `PolicyRuntime`; `runtime_for(policy)` builds the one a `Policy` needs.
"""

from __future__ import annotations

import ast
import builtins
import time as _time
import types
from collections.abc import Hashable
from typing import Any, Protocol

from .._models import AuditFinding
from ._context import session_workspace
from ._model import Policy
from ._sleep import interruptible_sleep

__all__ = ["PolicyRuntime", "TrustedRuntime", "interruptible_sleep", "runtime_for", "session_workspace"]


class PolicyRuntime(Protocol):
    policy: Policy

    @property
    def name(self) -> str: ...

    @property
    def cache_key(self) -> Hashable:
        """Compiled code is cached per (cache_key, source)."""
        ...

    def audit(self, tree: ast.Module, source: str) -> list[AuditFinding]:
        """Static findings; any finding refuses the code before it runs."""
        ...

    def transform(self, tree: ast.Module) -> ast.Module:
        """Rewrite the audited tree before compiling (e.g. route dynamic attribute access to guards)."""
        ...

    def new_builtins(self) -> dict[str, Any]:
        """A fresh builtins dict for one session."""
        ...

    def enter(self, session_builtins: dict[str, Any] | None = None) -> Any:
        """Activate runtime guards for the current context; returns a token for `exit`.

        `session_builtins`: the builtins table (`new_builtins`) of the session whose cell is about
        to run, whose per-session state the runtime switches to; None for other guarded calls
        (a variable's description).
        """
        ...

    def exit(self, token: Any) -> None: ...


class _TimeModule(types.ModuleType):
    """The `time` module as executed code sees it: the real one, with an interruptible `sleep`."""

    def __init__(self) -> None:
        super().__init__("time", _time.__doc__)
        self.sleep = interruptible_sleep

    def __getattr__(self, name: str) -> Any:
        return getattr(_time, name)

    def __dir__(self) -> list[str]:
        return dir(_time)


_time_view = _TimeModule()


def _trusted_import(
    name: str,
    globals: dict[str, Any] | None = None,
    locals: dict[str, Any] | None = None,
    fromlist: Any = (),
    level: int = 0,
) -> Any:
    if name == "time" and level == 0:
        return _time_view
    return builtins.__import__(name, globals, locals, fromlist, level)


class TrustedRuntime:
    """No audit and no guards: full Python. Only `time.sleep` is swapped so timeouts can stop it."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    @property
    def name(self) -> str:
        return self.policy.name

    @property
    def cache_key(self) -> Hashable:
        return ("trusted",)

    def audit(self, tree: ast.Module, source: str) -> list[AuditFinding]:
        return []

    def transform(self, tree: ast.Module) -> ast.Module:
        return tree

    def new_builtins(self) -> dict[str, Any]:
        table = dict(builtins.__dict__)
        table["__import__"] = _trusted_import
        return table

    def enter(self, session_builtins: dict[str, Any] | None = None) -> Any:
        return None

    def exit(self, token: Any) -> None:
        return None


def runtime_for(policy: Policy) -> PolicyRuntime:
    if not policy.restricted:
        return TrustedRuntime(policy)
    from ._restricted import RestrictedRuntime  # imports the guards only when a policy needs them

    return RestrictedRuntime(policy)
