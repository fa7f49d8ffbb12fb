"""The runtime of the restricted profiles (strict, standard): audit, transform, guards, audit hook."""

from __future__ import annotations

import ast
import contextlib
import contextvars
import os
import shutil
import sys
import tempfile
import threading
import weakref
from collections.abc import Hashable
from typing import Any

from .._models import AuditFinding
from . import _audithook, _paths
from ._audit import audit
from ._audithook import SandboxState
from ._errors import PolicyViolation
from ._guards import SESSION, Execution, SessionGuards, current_execution
from ._model import Policy
from ._rules import StaticRules, rules_for
from ._transform import transform

__all__ = ["RestrictedRuntime"]

_SPECS_KEPT = 1024  # workspaces whose activation spec a runtime keeps (one per session directory)


class RestrictedRuntime:
    """Runs code under a restricted policy, in-process.

    Security model: three layers. The static audit refuses what it can see before anything runs;
    the AST transform routes the few dynamic constructs it cannot decide to runtime guards; the
    session's builtins (guarded getattr/type/import, read-only module views) and a process-wide
    audit hook (files, processes, network, native code, introspection) hold at run time. This
    guards the host against accidents and casual misuse. It is not an OS sandbox: C code in
    allowed libraries runs with the host's privileges, and memory/CPU are not bounded here. Run
    untrusted code on the subprocess boundary.
    """

    def __init__(self, policy: Policy, *, _shared: RestrictedRuntime | None = None) -> None:
        if not policy.restricted:
            raise ValueError("RestrictedRuntime needs a restricted policy")
        self.policy = policy
        # The same policy in another workspace (with_workspace) shares the rules: they do not name it.
        self.rules: StaticRules = rules_for(policy) if _shared is None else _shared.rules
        self._key = ("restricted", self.rules.key)
        self._workspace: str | None = None
        self._workspace_lock = threading.Lock()
        self.state = SandboxState(policy.name, policy.files, self._resolve_workspace)
        self._specs: dict[str | None, tuple[Any, ...]] = {}
        # Before this runtime compiles anything: the hook approves the cells the host compiles.
        _audithook.install()

    def with_workspace(self, path: str) -> RestrictedRuntime:
        """This runtime's policy with `path` as its workspace. Its static rules are this runtime's:
        they never depend on the workspace, and deriving them again costs a subprocess worker about
        a millisecond of its start."""
        return RestrictedRuntime(self.policy.with_workspace(path), _shared=self)

    @property
    def name(self) -> str:
        return self.policy.name

    @property
    def cache_key(self) -> Hashable:
        return self._key

    @property
    def workspace(self) -> str:
        """The directory files may be used in (created on first use; a temporary one if none is set)."""
        return self.state.workspace

    def _resolve_workspace(self) -> str:
        with self._workspace_lock:
            if self._workspace is None:
                if self.policy.workspace is not None:
                    path = str(self.policy.workspace)
                    os.makedirs(path, exist_ok=True)
                else:
                    path = tempfile.mkdtemp(prefix="genpark-ws-")
                    weakref.finalize(self, _remove_workspace, path)
                self._workspace = path
            return self._workspace

    def audit(self, tree: ast.Module, source: str) -> list[AuditFinding]:
        return audit(tree, source, self.rules)

    def transform(self, tree: ast.Module) -> ast.Module:
        return transform(tree, self.rules)

    def new_builtins(self) -> dict[str, Any]:
        return SessionGuards(self.policy, self.rules, self.state).builtins()

    def enter(self, session_builtins: dict[str, Any] | None = None) -> Any:
        # The workspace is resolved (and created) here, in the host's own context, before the hook
        # judges anything; the hook keeps its own copy of these rules.
        workspace = self.state.workspace if self.policy.files else None
        # One spec per workspace (a session with its own directory has its own), made once: the hook
        # remembers specs by identity, so a new tuple per run would cost it a lookup by value and
        # a new entry each time.
        spec = self._specs.get(workspace)
        if spec is None:
            rules = self.rules
            spec = _audithook.rules_spec(
                self.policy.name, self.policy.files, workspace, rules.denied_attrs, rules.denied_prefixes
            )
            if len(self._specs) >= _SPECS_KEPT:
                self._specs.clear()
            self._specs[workspace] = spec
        # The activation request, raised here (not through _audithook.activate): the hook anchors the
        # execution at the caller of the function that raises it, which must be this one's caller (the
        # frame the guarded code runs under), not a helper that returns first. The hook was installed
        # when this runtime was made, so it always answers.
        # Before the hook is active (it refuses changing directory): relative paths mean the workspace.
        directory = _paths.enter_directory(workspace)
        hook_token: list[contextvars.Token[Any]] = []
        try:
            sys.audit(_audithook.ACTIVATE, spec, hook_token)
            if not hook_token:
                raise RuntimeError("the sandbox audit hook did not answer")
        except BaseException:
            _paths.exit_directory(directory)
            raise
        execution = Execution()
        paths_token = _paths.enter(self.policy.name, workspace)
        token = (hook_token, current_execution.set(execution), execution, paths_token, directory)
        if session_builtins is not None:
            guards = session_builtins.get(SESSION)
            if type(guards) is SessionGuards:
                try:
                    guards.enter(execution)
                except BaseException:
                    self.exit(token)  # never leave the host's context sandboxed
                    raise
        return token

    def exit(self, token: Any) -> None:
        hook_token, execution_token, execution, paths_token, directory = token
        _paths.exit(paths_token)
        _audithook.deactivate(hook_token)
        _paths.exit_directory(directory)  # first after the hook: host code on this thread, host paths
        current_execution.reset(execution_token)
        execution.restore()


def _remove_workspace(path: str) -> None:
    # Runs when the runtime is collected. That may happen while a cell of another runtime runs; an
    # empty context leaves that execution's rules behind, but if the collection happened inside
    # sandboxed code the hook still refuses: the directory is then left to the system's temp cleanup.
    with contextlib.suppress(PolicyViolation):
        contextvars.Context().run(shutil.rmtree, path, ignore_errors=True)
