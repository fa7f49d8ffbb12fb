"""A bounded history of each session's runs, for review and notebook export.

Keeping a run costs a reference to the result the engine already built and a few `len()` calls;
`Limits.max_history_cells` and `max_history_bytes` bound what is held per session (oldest runs go
first; a run larger than the whole budget is kept without its figures). `max_history_cells=0`
keeps nothing.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from datetime import datetime, timezone
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from ._limits import Limits
from ._models import ExecutionResult

__all__ = ["History", "HistoryEntry"]


class HistoryEntry(BaseModel):
    """One run of a session (or the point where it was reset)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["run", "reset"] = "run"
    code: str = ""
    result: ExecutionResult | None = None
    call_id: str | None = None
    at: datetime


class _Entry(NamedTuple):
    kind: str
    code: str
    result: ExecutionResult | None
    call_id: str | None
    at: float
    size: int


class _Log:
    __slots__ = ("dropped", "entries", "size")

    def __init__(self) -> None:
        self.entries: deque[_Entry] = deque()
        self.size = 0
        self.dropped = 0  # runs that fell out of the bound


class History:
    def __init__(self, limits: Limits) -> None:
        self.max_cells = limits.max_history_cells
        self.max_bytes = limits.max_history_bytes
        self._logs: dict[str, _Log] = {}
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.max_cells > 0

    def add(self, code: str, result: ExecutionResult, call_id: str | None) -> None:
        size = _size(code, result)
        if size > self.max_bytes and result.attachments:
            result = result.model_copy(update={"attachments": []})
            size = _size(code, result)
        self._append(result.session, _Entry("run", code, result, call_id, time.time(), size))

    def mark_reset(self, session: str) -> None:
        if self.enabled:
            self._append(session, _Entry("reset", "", None, None, time.time(), 0))

    def _append(self, session: str, entry: _Entry) -> None:
        with self._lock:
            log = self._logs.get(session)
            if log is None:
                log = self._logs[session] = _Log()
            log.entries.append(entry)
            log.size += entry.size
            while len(log.entries) > 1 and (len(log.entries) > self.max_cells or log.size > self.max_bytes):
                gone = log.entries.popleft()
                log.size -= gone.size
                log.dropped += gone.kind == "run"

    def entries(self, session: str) -> tuple[list[HistoryEntry], int]:
        """The session's kept entries, oldest first, and how many older runs were dropped."""
        with self._lock:
            log = self._logs.get(session)
            kept = list(log.entries) if log is not None else []
            dropped = log.dropped if log is not None else 0
        return [
            HistoryEntry(
                kind=e.kind,
                code=e.code,
                result=e.result,
                call_id=e.call_id,
                at=datetime.fromtimestamp(e.at, timezone.utc),
            )
            for e in kept
        ], dropped

    def forget(self, session: str) -> None:
        with self._lock:
            self._logs.pop(session, None)


def _size(code: str, result: ExecutionResult) -> int:
    size = len(code) + len(result.stdout) + len(result.stderr) + len(result.value or "")
    if result.error is not None:
        size += len(result.error.traceback) + len(result.error.message)
    for attachment in result.attachments:
        size += len(attachment.data_base64)
    return size
