"""Per-execution capture of stdout/stderr that is safe under threads and asyncio.

`contextlib.redirect_stdout` swaps one process-wide object, so concurrent executions would write into
each other's buffers. Here `sys.stdout`/`sys.stderr` are replaced by routers only while at least one
execution is running; a router sends each write to the capture of the *current execution context*
(a `ContextVar`), and every other write (host threads, code outside any execution) to the stream
that was there before. When the last execution ends the original streams are put back, also when
the executed code (trusted policy) assigned `sys.stdout` itself.

Threads started by the executed code do not inherit the context (CPython does not copy it into new
threads), so their output goes to the host's stream; asyncio tasks do inherit it.

Captured text follows one rule on every boundary (_text): lone surrogates and bytes that are not
UTF-8 (`sys.stdout.buffer.write`) become backslash escapes as they are written, so the bounds
count the same characters the subprocess boundary's host counts.

A carriage return that does not end a line (`\r` not followed by `\n`) restarts the line, as on a
terminal: the next text replaces what the line held, so a progress bar (tqdm) redrawn 10,000 times
leaves its latest state, not 10,000 copies (`BoundedText`; the subprocess host decodes its pipes
into the same class). `StreamingText` also hands each write to a callback while the text is within
its bounds: what `ReplEngine.stream` yields is the text the result will hold.
"""

from __future__ import annotations

import io
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar, Token
from typing import Any, BinaryIO, Protocol, TextIO

from ._text import BYTES_ERRORS, clean

__all__ = [
    "BoundedText",
    "Capture",
    "OutputCapture",
    "StreamingCapture",
    "StreamingText",
    "TextSink",
    "capturing",
    "reserved_stdout",
    "squash_returns",
]


class TextSink(Protocol):
    """Where one stream of one execution goes."""

    def write(self, text: str) -> None: ...

    def getvalue(self) -> str: ...

    @property
    def truncated(self) -> bool: ...


class OutputCapture(Protocol):
    """The two sinks of one execution (`Capture`, or a boundary's own)."""

    @property
    def stdout(self) -> TextSink: ...

    @property
    def stderr(self) -> TextSink: ...


class BoundedText:
    """Text kept as head + tail within `limit` characters, however much is written.

    A `\r` that does not end a line restarts the line: the next text erases it (see the module doc).
    With `emit` (`StreamingText`), each write is also handed on while the text is within bounds.
    """

    __slots__ = (
        "_cr",
        "_emit",
        "_head",
        "_head_len",
        "_head_limit",
        "_name",
        "_tail",
        "_tail_len",
        "_tail_limit",
        "total",
    )

    def __init__(
        self, limit: int, emit: Callable[[tuple[str, str]], object] | None = None, name: str = "stdout"
    ) -> None:
        self._head_limit = limit // 2
        self._tail_limit = limit - self._head_limit
        self._head: list[str] = []
        self._head_len = 0
        self._tail: list[str] = []
        self._tail_len = 0
        self.total = 0
        self._cr = False  # the last text ended with a \r: the line restarts unless \n follows
        self._emit = emit
        self._name = name

    def write(self, text: str, _raw: bool = False) -> None:
        """Keep `text` (`_raw`: a piece without `\r`, or a lone `\r`, from `_write_returns`).

        One method for every write, not split into helpers: it runs once per `print()` argument,
        and a Python call per argument is what output costs (sandboxed code pays more per call).
        """
        before = self.total
        if not _raw and (self._cr or "\r" in text):  # one C-level scan: plain printing pays nothing more
            self._write_returns(text)
        elif text:
            self.total += len(text)
            rest = text
            room = self._head_limit - self._head_len
            if room > 0:
                part = text[:room]
                self._head.append(part)
                self._head_len += len(part)
                rest = text[room:]
            if rest:
                self._tail.append(rest)
                self._tail_len += len(rest)
                if self._tail_len > 2 * self._tail_limit:
                    # Compact: memory stays within a small multiple of the limit while a cell prints forever.
                    joined = "".join(self._tail)[-self._tail_limit :]
                    self._tail = [joined]
                    self._tail_len = len(joined)
        emit = self._emit
        if emit is not None and text and not _raw:
            bound = self._head_limit + self._tail_limit
            if self.total <= bound:
                emit((self._name, text))
            elif before < bound:  # the write that crosses the bound: its part within it
                emit((self._name, text[: bound - before]))

    def _write_returns(self, text: str) -> None:
        for i, part in enumerate(text.split("\r")):
            if i:
                self._cr = True
            if not part:
                continue
            if self._cr:
                self._cr = False
                if part[0] == "\n":
                    BoundedText.write(self, "\r", True)  # CRLF: a line end, kept as written
                else:
                    self._erase_line()
            BoundedText.write(self, part, True)

    def _erase_line(self) -> None:
        """Drop the text after the last newline (a line longer than the omitted middle: its tail)."""
        erased = 0
        for pieces, is_tail in ((self._tail, True), (self._head, False)):
            if not is_tail and self.total - erased > self._head_len:
                break  # the line began in the omitted middle: what is left of it is not ours to see
            while pieces:
                piece = pieces[-1]
                cut = piece.rfind("\n") + 1
                erased += len(piece) - cut
                if is_tail:
                    self._tail_len -= len(piece) - cut
                else:
                    self._head_len -= len(piece) - cut
                if cut:
                    pieces[-1] = piece[:cut]
                    self.total -= erased
                    return
                pieces.pop()
        self.total -= erased

    @property
    def truncated(self) -> bool:
        return self.total > self._head_limit + self._tail_limit

    def getvalue(self) -> str:
        if not self.total:
            return ""  # most cells print nothing
        head = "".join(self._head)
        tail = "".join(self._tail)
        if not self.truncated:
            return head + tail
        tail = tail[-self._tail_limit :]
        omitted = self.total - len(head) - len(tail)
        return f"{head}\n[... {omitted:,} characters omitted ...]\n{tail}"


class Capture:
    """The buffers of one execution."""

    __slots__ = ("stderr", "stdout")

    def __init__(self, limit: int) -> None:
        self.stdout = BoundedText(limit)
        self.stderr = BoundedText(limit)


class StreamingText(BoundedText):
    """A `BoundedText` that also hands each write to `emit` as `(name, text)` while the text is
    within its bounds (past them the stream goes quiet; the result keeps head and tail).

    `emit` is called on the thread that writes, for every `print()` argument: it must be quick and
    must not raise. `ReplEngine.stream` passes a `deque.append`, which costs no Python frame.
    """

    __slots__ = ()

    def __init__(self, limit: int, emit: Callable[[tuple[str, str]], object], name: str = "stdout") -> None:
        super().__init__(limit, emit, name)


class StreamingCapture:
    """The buffers of one streamed execution: `on_output((stream_name, text))` sees every write."""

    __slots__ = ("stderr", "stdout")

    def __init__(self, limit: int, on_output: Callable[[tuple[str, str]], object]) -> None:
        self.stdout = StreamingText(limit, on_output, "stdout")
        self.stderr = StreamingText(limit, on_output, "stderr")


def squash_returns(text: str) -> str:
    """Each line's text before its last restarting `\r` dropped: `'a\rb\rc'` -> `'\rc'`.

    Writing the result into a `BoundedText` gives what writing `text` would: for stream consumers,
    which then see a progress bar's latest state instead of every redraw.
    """
    if "\r" not in text:
        return text
    lines = text.split("\n")
    for i, line in enumerate(lines):
        cut = line.rstrip("\r").rfind("\r")
        if cut > 0:
            lines[i] = line[cut:]
    return "\n".join(lines)


_current: ContextVar[OutputCapture | None] = ContextVar("genpark_repl_capture", default=None)


class _BinaryView:
    """`sys.stdout.buffer` while capturing: bytes are decoded into the text capture."""

    def __init__(self, target: TextSink) -> None:
        self._target = target

    def write(self, data: bytes | bytearray | memoryview) -> int:
        data = bytes(data)
        self._target.write(data.decode("utf-8", BYTES_ERRORS))
        return len(data)

    def flush(self) -> None:
        return None


# The streams the routers stand in for while any execution runs (stdout, stderr): kept in a list
# rather than on the routers, whose attribute writes go through io's machinery, twice per run.
_fallbacks: list[TextIO | None] = [None, None]


class _Router(io.TextIOBase):
    """Stands in for sys.stdout or sys.stderr; sends writes to the current context's capture."""

    __slots__ = ("_current", "_fallbacks", "_index", "_name")

    def __init__(self, name: str, index: int) -> None:
        super().__init__()
        self._name = name
        self._index = index
        # Held: at interpreter exit this module's globals may be gone.
        self._current = _current.get
        self._fallbacks = _fallbacks

    @property
    def fallback(self) -> TextIO | None:
        """The stream this router stands in for (None while no execution runs)."""
        return self._fallbacks[self._index]

    def _target(self) -> TextSink | None:
        cap = self._current()
        if cap is None or getattr(cap, "finished", False):  # finished: a run Ctrl-C cut short
            return None
        return cap.stdout if self._name == "stdout" else cap.stderr

    def write(self, s: str) -> int:
        target = self._target()
        if target is None:
            fallback = self._fallbacks[self._index]
            return fallback.write(s) if fallback is not None else len(s)
        if type(s) is str:
            # Text as a pipe to the host would carry it (see _text); ASCII costs one check.
            if not s.isascii():
                try:
                    s.encode("utf-8")
                except UnicodeEncodeError:
                    target.write(clean(s))
                    return len(s)
            target.write(s)
            return len(s)
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        target.write(clean(s))  # a str subclass: read as a plain str, its methods never run
        return str.__len__(s)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self._target() is None and self.fallback is not None:
            self.fallback.flush()

    def isatty(self) -> bool:
        if self._target() is None and self.fallback is not None:
            return self.fallback.isatty()
        return False

    def fileno(self) -> int:
        if self._target() is None and self.fallback is not None:
            return self.fallback.fileno()
        raise io.UnsupportedOperation("captured output has no file descriptor")

    def writable(self) -> bool:
        return True

    @property
    def buffer(self) -> Any:
        target = self._target()
        if target is None:
            return getattr(self.fallback, "buffer", None)
        return _BinaryView(target)

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.fallback, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self.fallback, "errors", None) or "strict"

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fallback, name)


# Taken as `try: _lock.acquire() ... finally: release`, never `with` nor acquire() before a try: on
# 3.13+ a pending KeyboardInterrupt (a signal) surfaces right after a C call returns, so after acquire()
# and before a `with` block or a try that follows it, and the lock would stay held, hanging every later
# run. Inside the try it reaches the finally; the release there is an RLock's, which refuses (and is
# told apart) when this thread does not hold it: the interrupt came before the acquire finished.
_lock = threading.RLock()
# The captures routed now (executions and guarded calls), each with whether it counts as an execution.
# Executions running now and ever started are for whoever needs to know whether one ran alone
# (figure ownership, _rich): kept under the same lock as the routing, so an execution pays one lock
# to start and one to end. A capture whose run marked it `finished` but was interrupted (Ctrl-C)
# before it left (see run_cell) is dropped by the next execution to start or end: its routing can
# never outlive it, and the routers still come off when the last live one ends.
_live: dict[Any, bool] = {}
_started = 0
# Created once and reused: building a TextIOBase per execution would cost more than the execution.
_routers = (_Router("stdout", 0), _Router("stderr", 1))


class capturing:
    """Route this context's stdout/stderr into `cap` for the duration of the block.

    The routers are installed by the first of the executions running at once and removed by the
    last (reference-counted under `_lock`).
    """

    __slots__ = ("_cap", "_token")

    def __init__(self, cap: OutputCapture) -> None:
        self._cap = cap

    def __enter__(self) -> OutputCapture:
        self._token = route(self._cap)
        return self._cap

    def __exit__(self, *exc: object) -> None:
        unroute(self._token)


def route(cap: OutputCapture) -> Token[OutputCapture | None]:
    """`capturing(cap).__enter__()` without the object; pair it with `unroute`."""
    return enter_execution(cap, counted=False)[0]


def unroute(token: Token[OutputCapture | None]) -> None:
    """End what `route` began: this context's routing, and the routers when no execution is left."""
    exit_execution(token, counted=False)


def enter_execution(
    cap: OutputCapture, counted: bool = True
) -> tuple[Token[OutputCapture | None], int, bool]:
    """`route(cap)` for one execution, `counted` among the running ones: (the token for
    `exit_execution`, the execution's serial number, whether no other execution was running)."""
    global _started
    out, err = _routers
    live = _live
    try:
        _lock.acquire()
        if live:
            _drop_finished()
        if not live:  # the first: the streams it replaces are the host's (never a router, which an
            # exit cut short by Ctrl-C can leave installed: then the host's are still the fallbacks)
            if sys.stdout is not out:
                _fallbacks[0] = sys.stdout
            if sys.stderr is not err:
                _fallbacks[1] = sys.stderr
        # Also when already active: executed code (trusted policy) may have replaced the streams.
        if sys.stdout is not out:
            sys.stdout = out
        if sys.stderr is not err:
            sys.stderr = err
        live[cap] = counted
        if counted:
            _started += 1
        serial = _started
        alone = counted if len(live) == 1 else _running() == 1
    finally:
        # Not contextlib.suppress: its __enter__ is a call, which an interrupt can follow.
        try:  # noqa: SIM105
            _lock.release()
        except RuntimeError:  # not held: interrupted before acquire() returned
            pass
    return _current.set(cap), serial, alone


def exit_execution(token: Token[OutputCapture | None], counted: bool = True) -> None:
    """End what `enter_execution` began: this context's routing, and the routers when no
    execution is left."""
    cap = _current.get()
    _current.reset(token)
    live = _live
    try:
        _lock.acquire()
        live.pop(cap, None)
        if live:
            _drop_finished()
        else:
            _restore_streams()
    finally:
        try:  # noqa: SIM105 - as in enter_execution
            _lock.release()
        except RuntimeError:
            pass


def _drop_finished() -> None:
    """Forget the captures of runs that ended without leaving (under `_lock`); the last one gone
    puts the host's streams back."""
    for cap in [c for c in _live if getattr(c, "finished", False)]:
        del _live[cap]
    if not _live:
        _restore_streams()


def _restore_streams() -> None:
    fallbacks = _fallbacks
    if fallbacks[0] is not None:
        sys.stdout = fallbacks[0]
    if fallbacks[1] is not None:
        sys.stderr = fallbacks[1]
    fallbacks[0] = fallbacks[1] = None


def _running() -> int:
    """Executions running now (under `_lock`)."""
    return sum(_live.values())


def alone_since(serial: int) -> bool:
    """Whether the execution numbered `serial` is the only one running and none started after it
    (call it from that execution, which ran alone when it started)."""
    try:
        _lock.acquire()
        return _started == serial and _running() == 1
    finally:
        try:  # noqa: SIM105 - as in enter_execution
            _lock.release()
        except RuntimeError:
            pass


def redirect(cap: OutputCapture) -> Token[OutputCapture | None] | None:
    """Send this context's output to `cap` for a while, inside a run that is routed already (the
    routers installed, this context's capture live): `token.var.reset(token)` ends it. None when
    the context is not routed: use `route`, which also installs the routers."""
    if _current.get() is None or sys.stderr is not _routers[1] or sys.stdout is not _routers[0]:
        return None
    return _current.set(cap)


def current() -> OutputCapture | None:
    """The capture of the execution (or guarded call) running in this context, if any."""
    return _current.get()


@contextmanager
def reserved_stdout() -> Iterator[BinaryIO]:
    """Reserve the process's stdout (file descriptor 1) for the caller until the block ends.

    Yields a binary file on a private duplicate of fd 1, and points fd 1 itself at stderr: bytes
    written below `sys.stdout` (`os.write(1, ...)`, C `printf`, child processes), which no capture
    sees in-process, then cannot interleave with what the caller writes (a JSON-RPC channel, a
    JSON report). `sys.stdout`, if it is fd 1, goes to stderr too. Restored on exit.
    """
    with suppress(AttributeError, OSError, ValueError):
        sys.stdout.flush()  # what was printed before still goes where it was meant to
    if sys.platform == "win32":  # pragma: no cover
        private = os.dup(1)
    else:
        import fcntl

        private = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)  # never 0-2, not inherited by children
    try:
        os.dup2(2, 1)
    except OSError:  # no stderr: what goes to fd 1 is dropped instead
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
    try:
        yield os.fdopen(private, "wb", closefd=False)
    finally:
        with suppress(AttributeError, OSError, ValueError):
            sys.stdout.flush()
        os.dup2(private, 1)
        os.close(private)
