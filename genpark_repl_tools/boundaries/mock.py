"""The mock boundary: runs nothing, answers with your handler."""

from __future__ import annotations

from collections.abc import Callable

from .._boundary import BaseBoundary, ExecutionRequest
from .._limits import Limits
from .._models import ExecutionResult, VariableInfo
from .._session import SessionTable, not_defined
from ..policy import Policy

__all__ = ["Handler", "MockBoundary"]

Handler = Callable[[ExecutionRequest], ExecutionResult]


class MockBoundary(BaseBoundary):
    """Answers every request with `handler(request)`; records sessions. Runs no code at all.

    For testing code built on the engine (adapters, agents) without executing anything.
    """

    name = "mock"

    def __init__(self, handler: Handler, policy: Policy | None = None, limits: Limits | None = None) -> None:
        super().__init__(policy or Policy.trusted(), limits or Limits())
        self._handler = handler
        self._sessions: SessionTable[list[ExecutionRequest]] = SessionTable(self.limits.max_sessions)

    def execute(self, request: ExecutionRequest) -> ExecutionResult:
        self._check_open()
        with self._sessions.lock:
            self._sessions.get_or_create(request.session, lambda _: []).append(request)
        return self._handler(request)

    def requests(self, session: str) -> list[ExecutionRequest]:
        return list(self._sessions.find(session) or ())

    def variables(self, session: str, *, include_hidden: bool = False) -> list[VariableInfo]:
        self._sessions.get(session)
        return []

    def inspect(self, session: str, name: str) -> VariableInfo:
        self._sessions.get(session)
        raise not_defined(name, session)

    def reset(self, session: str) -> None:
        self._sessions.get(session)

    def close_session(self, session: str) -> bool:
        return self._sessions.pop(session) is not None

    def sessions(self) -> list[str]:
        return self._sessions.names()
