"""The in-process boundary: the caller's own process, microseconds per call."""

from __future__ import annotations

import threading
from typing import Any

from ._boundary import BaseBoundary, ExecutionRequest, cancelled_before_start
from ._compile import compile_cell
from ._exceptions import CapacityError, SessionNotFound, VariableNotFound
from ._introspect import describe, variable_name
from ._limits import Limits
from ._models import ExecutionResult, VariableInfo
from ._runner import Session, call_guarded, run_cell
from ._watchdog import ExecutionTimeout
from .policy import Policy, runtime_for

__all__ = ["InProcessBoundary"]

_DESCRIBE_TIMEOUT_S = 5.0


class InProcessBoundary(BaseBoundary):
    """Runs code on the calling thread, in a namespace per session.

    Security model: namespace isolation plus the policy's audit and runtime guards. This protects the
    host from accidents and casual misuse; it is not an OS sandbox. Code runs with the host's
    privileges, memory and CPU limits are not enforced, and C-level calls cannot be interrupted
    (a timeout lands when they return). Run untrusted code on the subprocess boundary.
    """

    name = "inprocess"

    def __init__(self, policy: Policy, limits: Limits) -> None:
        super().__init__(policy, limits)
        self._runtime = runtime_for(policy)
        self._sessions: dict[str, Session] = {}
        self._running: dict[str, ExecutionRequest] = {}  # session -> the call running in it
        self._lock = threading.Lock()

    # ---- contract -------------------------------------------------------------------------------

    def execute(self, request: ExecutionRequest) -> ExecutionResult:
        self._check_open()
        session = self._get_or_create(request.session)
        cell = compile_cell(request.code, self._runtime)
        limits = self.limits
        if request.timeout_s is not None and request.timeout_s != limits.timeout_s:
            limits = limits.model_copy(update={"timeout_s": request.timeout_s})
        with session.lock:
            if request.cancelled:
                return cancelled_before_start(request, self.policy.name, self.name, session.execution_count)
            self._running[request.session] = request
            try:
                return run_cell(session, cell, self._runtime, limits, self.name)
            finally:
                self._running.pop(request.session, None)
                session.cancel_pending = False

    def variables(self, session: str, *, include_hidden: bool = False) -> list[VariableInfo]:
        s = self._get(session)
        with s.lock:
            names = s.user_names(include_hidden)
            return [self._describe(s, name) for name in names]

    def inspect(self, session: str, name: str) -> VariableInfo:
        s = self._get(session)
        with s.lock:
            if name not in s.namespace or name == "__builtins__":
                raise VariableNotFound(f"name {name!r} is not defined in session {session!r}")
            return self._describe(s, name)

    def reset(self, session: str) -> None:
        s = self._get(session)
        with s.lock:
            s.reset(self._runtime)

    def interrupt(self, session: str, request: ExecutionRequest | None = None) -> bool:
        with self._lock:
            s = self._sessions.get(session)
        running = self._running.get(session)
        if s is None or running is None or (request is not None and running is not request):
            return False
        return s.interrupt()

    def close_session(self, session: str) -> bool:
        with self._lock:
            s = self._sessions.pop(session, None)
        if s is None:
            return False
        with s.lock:
            s.namespace.clear()
        return True

    def sessions(self) -> list[str]:
        with self._lock:
            return list(self._sessions)

    def describe(self) -> dict[str, Any]:
        return {
            "boundary": self.name,
            "policy": self.policy.name,
            "enforced": {
                "namespace_isolation": True,
                "timeout": "pure-Python code and time.sleep; C-level calls only when they return",
                "output_bounds": True,
                "memory_limit": False,
                "cpu_limit": False,
                "network_isolation": False,
                "filesystem_confinement": self.policy.restricted,
                "crash_isolation": False,
            },
        }

    # ---- internals ------------------------------------------------------------------------------

    def _get(self, session: str) -> Session:
        with self._lock:
            s = self._sessions.get(session)
        if s is None:
            raise SessionNotFound(f"no session {session!r}; run code in it first")
        return s

    def _get_or_create(self, session: str) -> Session:
        with self._lock:
            s = self._sessions.get(session)
            if s is None:
                cap = self.limits.max_sessions
                if cap is not None and len(self._sessions) >= cap:
                    raise CapacityError(
                        f"{cap} sessions are live (Limits.max_sessions); close one with engine.close(session)"
                    )
                s = self._sessions[session] = Session(session, self._runtime)
        return s

    def _describe(self, s: Session, name: str) -> VariableInfo:
        value = s.namespace[name]
        timeout = min(self.limits.timeout_s, _DESCRIBE_TIMEOUT_S)
        try:
            info: VariableInfo = call_guarded(
                s, self._runtime, timeout, describe, name, value, self.limits.max_repr_chars
            )
        except ExecutionTimeout:
            info = VariableInfo(
                name=variable_name(name, self.limits.max_repr_chars),
                type=type(value).__name__,
                repr="<repr timed out>",
                repr_truncated=True,
            )
        return info
