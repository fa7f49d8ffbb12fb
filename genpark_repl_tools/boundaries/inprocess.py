"""The in-process boundary: the caller's own process, microseconds per call."""

from __future__ import annotations

import functools
from typing import Any

from .._boundary import BaseBoundary, ExecutionRequest, cancelled_before_start
from .._capture import StreamingCapture
from .._compile import compile_cell
from .._limits import Limits
from .._models import ExecutionResult, VariableInfo
from .._runner import run_cell
from .._session import Session, SessionTable
from ..policy import Policy, PolicyRuntime, runtime_for

__all__ = ["InProcessBoundary"]


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
        self._sessions: SessionTable[Session] = SessionTable(limits.max_sessions)
        self._running: dict[str, ExecutionRequest] = {}  # session -> the call running in it

    @property
    def runtime(self) -> PolicyRuntime:
        """The policy's mechanism these sessions run under (snapshots load through it)."""
        return self._runtime

    def session(self, name: str, *, create: bool = False) -> Session:
        """The session object itself, for the engine's snapshots; SessionNotFound unless `create`."""
        if create:
            return self._sessions.get_or_create(name, self._new_session)
        return self._sessions.get(name)

    # ---- contract -------------------------------------------------------------------------------

    def execute(self, request: ExecutionRequest) -> ExecutionResult:
        self._check_open()
        session = self._sessions.get_or_create(request.session, self._new_session)
        cell = compile_cell(request.code, self._runtime)
        limits = self.limits
        if request.timeout_s is not None and request.timeout_s != limits.timeout_s:
            limits = limits.model_copy(update={"timeout_s": request.timeout_s})
        with session.lock:
            if request.cancelled:
                return cancelled_before_start(request, self.policy.name, self.name, session.execution_count)
            self._running[request.session] = request
            try:
                if request.on_output is None:
                    return run_cell(session, cell, self._runtime, limits, self.name)
                streaming = functools.partial(StreamingCapture, on_output=request.on_output)
                return run_cell(session, cell, self._runtime, limits, self.name, streaming)
            finally:
                self._running.pop(request.session, None)
                session.cancel_pending = False

    def variables(self, session: str, *, include_hidden: bool = False) -> list[VariableInfo]:
        s = self._sessions.get(session)
        with s.lock:
            return s.variables(self.limits, include_hidden)

    def inspect(self, session: str, name: str) -> VariableInfo:
        s = self._sessions.get(session)
        with s.lock:
            return s.inspect(name, self.limits)

    def reset(self, session: str) -> None:
        s = self._sessions.get(session)
        with s.lock:
            s.reset()

    def interrupt(self, session: str, request: ExecutionRequest | None = None) -> bool:
        s = self._sessions.find(session)
        running = self._running.get(session)
        if s is None or running is None or (request is not None and running is not request):
            return False
        return s.interrupt()

    def close_session(self, session: str) -> bool:
        s = self._sessions.pop(session)
        if s is None:
            return False
        with s.lock:
            s.namespace.clear()
        return True

    def sessions(self) -> list[str]:
        return self._sessions.names()

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

    def _new_session(self, name: str) -> Session:
        return Session(name, self._runtime)
