"""Streaming a run: the events `ReplEngine.stream` / `astream` yield, and the channel that carries them.

The code runs on a worker thread (as with `arun`); the capture (in-process) or the host pumping the
worker's pipes (subprocess) hands each write to `Channel.put` through `ExecutionRequest.on_output`.
The consumer takes everything queued since its last look at once, joins the pieces of one stream and
drops progress-bar redraws it no longer needs (`squash_returns`), so a slow consumer sees fewer,
larger chunks and never a backlog of redraws. Figures are sent when the run ends, from the result's
attachments (capturing them as they are shown would cost every plot a PNG render mid-run).

Abandoning the iterator (`break`, `aclose()`, garbage collection) cancels the call (`engine.cancel`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from ._capture import squash_returns
from ._models import Attachment, ExecutionResult

__all__ = ["Channel", "FigureEvent", "OutputEvent", "ResultEvent", "StreamEvent"]


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class OutputEvent(_Event):
    """Text the code wrote, in order. A `\\r` not followed by `\\n` restarts the line (a progress bar)."""

    kind: Literal["output"] = "output"
    stream: Literal["stdout", "stderr"]
    text: str


class FigureEvent(_Event):
    """A figure the run produced (sent when the run ends, before the result)."""

    kind: Literal["figure"] = "figure"
    attachment: Attachment


class ResultEvent(_Event):
    """The run's `ExecutionResult`: always the last event."""

    kind: Literal["result"] = "result"
    result: ExecutionResult


StreamEvent = Annotated[OutputEvent | FigureEvent | ResultEvent, Field(discriminator="kind")]


class Channel:
    """Output pieces from the thread that captures them to the one consumer; safe for many writers.

    `wake()` is called once per batch (when the first piece after a `take` arrives), not per write:
    a print loop costs one list append per write.
    """

    __slots__ = ("_armed", "_items", "_lock", "_result", "_wake")

    def __init__(self, wake: Callable[[], object]) -> None:
        self._lock = threading.Lock()
        self._items: list[tuple[str, str]] = []
        self._armed = True
        self._wake = wake
        self._result: ExecutionResult | BaseException | None = None

    def put(self, stream: str, text: str) -> None:
        with self._lock:
            self._items.append((stream, text))
            if not self._armed:
                return
            self._armed = False
        self._wake()

    def finish(self, outcome: ExecutionResult | BaseException) -> None:
        with self._lock:
            self._result = outcome
        self._wake()

    def take(self) -> tuple[list[OutputEvent], ExecutionResult | BaseException | None]:
        """What arrived since the last take (joined per stream run), and the outcome once there is one."""
        with self._lock:
            items, self._items = self._items, []
            self._armed = True
            outcome = self._result
        events: list[OutputEvent] = []
        i = 0
        while i < len(items):
            stream = items[i][0]
            j = i + 1
            while j < len(items) and items[j][0] == stream:
                j += 1
            text = squash_returns("".join(text for _, text in items[i:j]))
            events.append(OutputEvent(stream=stream, text=text))
            i = j
        return events, outcome


def final_events(result: ExecutionResult) -> list[FigureEvent | ResultEvent]:
    events: list[FigureEvent | ResultEvent] = [FigureEvent(attachment=a) for a in result.attachments]
    events.append(ResultEvent(result=result))
    return events
