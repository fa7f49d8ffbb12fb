"""Streaming a run: the events `ReplEngine.stream` / `astream` yield, and the channel that carries them.

The code runs on a worker thread (as with `arun`); the capture (in-process) or the host pumping the
worker's pipes (subprocess) hands each write to `Channel.put` through `ExecutionRequest.on_output`.
The consumer looks every `POLL_S` and takes everything queued since its last look at once, joins
the pieces of one stream and drops progress-bar redraws it no longer needs (`squash_returns`), so a
slow consumer sees fewer, larger chunks and never a backlog of redraws. Figures are sent when the
run ends, from the result's attachments (capturing them as they are shown would cost every plot a
PNG render mid-run).

Abandoning the iterator (`break`, `aclose()`, garbage collection) cancels the call (`engine.cancel`).
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from ._capture import squash_returns
from ._models import Attachment, ExecutionResult

__all__ = ["POLL_S", "Channel", "FigureEvent", "OutputEvent", "ResultEvent", "StreamEvent", "join_runs"]


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


# How often a consumer looks for output while the code runs (the issue asks for 250 ms at most).
POLL_S = 0.02

StreamEvent = Annotated[OutputEvent | FigureEvent | ResultEvent, Field(discriminator="kind")]


class Channel:
    """Output pieces from the thread that captures them to the one consumer.

    The writing side costs one `deque.append` per write and never wakes the consumer: the consumer
    looks every `POLL_S` (and at once when the run ends), so a print loop pays neither a lock nor a
    thread switch per line, and a chunk reaches the consumer within about `POLL_S` of its print.
    """

    __slots__ = ("_items", "_result", "_wake", "put")

    def __init__(self, wake: Callable[[], object]) -> None:
        self._items: deque[tuple[str, str]] = deque()
        self.put = self._items.append
        self._wake = wake
        self._result: ExecutionResult | BaseException | None = None

    def finish(self, outcome: ExecutionResult | BaseException) -> None:
        self._result = outcome
        self._wake()

    def take(self) -> tuple[list[OutputEvent], ExecutionResult | BaseException | None]:
        """What arrived since the last take (joined per stream run), and the outcome once there is one."""
        outcome = self._result  # read first: every piece written before the run ended is queued by now
        items = self._items
        if outcome is not None:  # nobody writes any more
            pieces = list(items)
            items.clear()
        else:
            pop = items.popleft
            pieces = [pop() for _ in range(len(items))]  # what is there now; more may come meanwhile
        return [OutputEvent(stream=stream, text=text) for stream, text in join_runs(pieces)], outcome


def join_runs(pieces: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(stream, text) pieces with consecutive pieces of one stream joined and their redraws squashed."""
    runs: list[tuple[str, str]] = []
    i = 0
    while i < len(pieces):
        stream = pieces[i][0]
        j = i + 1
        while j < len(pieces) and pieces[j][0] == stream:
            j += 1
        runs.append((stream, squash_returns("".join(text for _, text in pieces[i:j]))))
        i = j
    return runs


class Workers:
    """Daemon threads that run streamed calls, reused while idle (starting a thread per call costs
    more than a small cell on a busy machine). As many as calls run at once; an idle one leaves after
    `IDLE_S`. Daemon threads: a call stuck in C code never holds up the interpreter's exit."""

    IDLE_S = 60.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Callable[[], object]]] = []

    def submit(self, fn: Callable[[], object]) -> None:
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(
                target=self._serve, args=(inbox,), name="genpark-repl-stream", daemon=True
            ).start()
        inbox.put(fn)

    def _serve(self, inbox: queue.SimpleQueue[Callable[[], object]]) -> None:
        while True:
            try:
                fn = inbox.get(timeout=self.IDLE_S)
            except queue.Empty:
                with self._lock:
                    if inbox in self._idle:  # else a submit took it and is about to hand it a call
                        self._idle.remove(inbox)
                        return
                continue
            fn()
            del fn
            with self._lock:
                self._idle.append(inbox)


WORKERS = Workers()


def final_events(result: ExecutionResult) -> list[FigureEvent | ResultEvent]:
    events: list[FigureEvent | ResultEvent] = [FigureEvent(attachment=a) for a in result.attachments]
    events.append(ResultEvent(result=result))
    return events
