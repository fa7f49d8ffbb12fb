"""Host tools: the agent's own functions, callable from session code, with plain data as the boundary.

    engine = ReplEngine(tools={"search": search})
    engine.run('hits = search("cats", limit=3)')

Session code sees one plain function per tool (a stub, made here: `ToolStubs`). A call packs its
arguments into bytes (`pack`: None, bool, int, float, str, bytes, list, tuple and dict with str keys;
a subclass of one of these crosses as its plain value, anything else is refused), and the host unpacks
them into new objects, checks them against the tool's signature (pydantic validates annotated
parameters), runs the real function, and packs the result, or the message of its exception, back the
same way (`ToolRun.serve`). The same bytes travel on every boundary: in-process they are handed to a
host thread (`ToolPool`), on the subprocess boundary they go over the worker's socket, on Ray from
the worker to its host actor and from there to the driver, where the tools are.

Security model: a tool runs with the host's rights, outside the policy: offer only what the model may
use. No object crosses in either direction: session code gets copies of the tool's result and never
a host object (the stub closes over nothing but its name and the session's channel), and host code
gets copies of the arguments, so no method of a session object runs in the host's code. In-process
the tool runs on a host thread, whose stack holds no session code, so the policy's audit hook does
not judge it; the session's own code around the call stays guarded. Every call is bounded: at most
`MAX_DEPTH` levels of nesting and `MAX_DATA_BYTES` of packed data each way.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import keyword
import math
import os
import queue
import struct
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from ._introspect import short_type_name
from ._text import clean

__all__ = [
    "MAX_DATA_BYTES",
    "MAX_DEPTH",
    "POOL",
    "Tool",
    "ToolError",
    "ToolRun",
    "ToolStubs",
    "check_tools",
    "pack",
    "unpack",
]

MAX_DEPTH = 32  # levels of nested lists, tuples and dicts in one argument or result
MAX_DATA_BYTES = 16 * 1024 * 1024  # packed size of one call's arguments, and of one result
_MAX_MESSAGE_CHARS = 2000
_MAX_NAME_CHARS = 80
_MAX_USAGE_CHARS = 300
_MAX_DOC_CHARS = 2000
_RECORDS_KEPT = 1000  # tool calls recorded per run for the audit trail (the count is exact)
# A session thread waiting for a tool wakes this often, so a timeout or an interrupt lands.
_WAIT_SLICE_S = 0.02
_PLAIN = "None, bool, int, float, str, bytes, list, tuple, dict with str keys"


class _Sealed(type):
    """ToolError's metaclass: the class is shared by every session, so none may change it (an
    attribute one session set would be read by another)."""

    def __setattr__(cls, name: str, value: Any) -> None:
        raise AttributeError(f"{type.__dict__['__name__'].__get__(cls)} is read-only")

    def __delattr__(cls, name: str) -> None:
        raise AttributeError(f"{type.__dict__['__name__'].__get__(cls)} is read-only")


class ToolError(Exception, metaclass=_Sealed):
    """A host tool refused its arguments or failed. Raised in session code, never in the host.

    Its message is "<tool name>: <what went wrong>": the tool's own message for an exception it
    raised (no host traceback), or what the call may pass for a refused argument. Session code
    finds it under the name `ToolError`, so it can `except ToolError`.
    """

    # Results name the class the way the model reads it ("ToolError: search: ..."), not by its
    # private module path; like the built-in exceptions it is raised inside executed code.
    __module__ = "builtins"


# ---- the data that crosses: one packed form for every boundary ------------------------------------

_NONE, _TRUE, _FALSE, _INT, _BIGINT, _FLOAT, _STR, _BYTES, _LIST, _TUPLE, _DICT = b"NTFiIfsbltd"
_I64 = struct.Struct("!q")
_F64 = struct.Struct("!d")
_LEN = struct.Struct("!I")
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


class _Refused(Exception):
    """A value that cannot cross; `where` grows as the packer unwinds (`[2]['key']`)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.where: list[str] = []


class _Packer:
    """Packs plain data. Touches a value only through its exact base type's own C slots, so no
    method a session's subclass defines (`__iter__`, `__str__`, `__len__`, ...) runs here."""

    __slots__ = ("left", "out")

    def __init__(self, limit: int) -> None:
        self.out = bytearray()
        self.left = limit

    def add(self, value: Any, depth: int) -> None:
        t = type(value)
        out = self.out
        if t is str or issubclass(t, str):
            if t is not str:
                value = str.__str__(value)  # an exact copy; none of the subclass's code runs
            if len(value) > self.left:
                raise _Refused("too large")
            data = value.encode("utf-8", "surrogatepass")
            self._spend(len(data) + 5)
            out.append(_STR)
            out += _LEN.pack(len(data))
            out += data
        elif t is bool:
            self._spend(1)
            out.append(_TRUE if value else _FALSE)
        elif t is int or issubclass(t, int):
            if t is not int:
                value = int.__int__(value)
            if _I64_MIN <= value <= _I64_MAX:
                self._spend(9)
                out.append(_INT)
                out += _I64.pack(value)
            else:
                size = (value.bit_length() + 8) // 8
                self._spend(size + 5)
                out.append(_BIGINT)
                out += _LEN.pack(size)
                out += value.to_bytes(size, "big", signed=True)
        elif t is float or issubclass(t, float):
            self._spend(9)
            out.append(_FLOAT)
            out += _F64.pack(float.__float__(value))
        elif value is None:
            self._spend(1)
            out.append(_NONE)
        elif t is list or t is tuple or issubclass(t, (list, tuple)):
            if depth >= MAX_DEPTH:
                raise _Refused(f"nested more than {MAX_DEPTH} levels deep")
            items = list.copy(value) if issubclass(t, list) else tuple.__getitem__(value, slice(None))
            self._spend(5)
            out.append(_LIST if issubclass(t, list) else _TUPLE)
            out += _LEN.pack(len(items))
            for i, item in enumerate(items):
                try:
                    self.add(item, depth + 1)
                except _Refused as refused:
                    refused.where.insert(0, f"[{i}]")
                    raise
        elif t is dict or issubclass(t, dict):
            if depth >= MAX_DEPTH:
                raise _Refused(f"nested more than {MAX_DEPTH} levels deep")
            pairs = list(dict.items(value))  # the dict's own storage, not an `items` the class defines
            self._spend(5)
            out.append(_DICT)
            out += _LEN.pack(len(pairs))
            for key, item in pairs:
                if not issubclass(type(key), str):
                    raise _Refused(f"a dict key is a {short_type_name(key)}; keys must be str")
                text = str.__str__(key)
                self.add(text, depth + 1)
                try:
                    self.add(item, depth + 1)
                except _Refused as refused:
                    refused.where.insert(0, f"[{text[:40]!r}]")
                    raise
        elif t is bytes or issubclass(t, bytes):
            data = bytes.__getitem__(value, slice(None))  # an exact bytes copy
            self._spend(len(data) + 5)
            out.append(_BYTES)
            out += _LEN.pack(len(data))
            out += data
        else:
            raise _Refused(f"of type {short_type_name(value)}")

    def _spend(self, size: int) -> None:
        self.left -= size
        if self.left < 0:
            raise _Refused(f"more than {MAX_DATA_BYTES:,} bytes of data")


def pack(value: Any) -> bytes:
    """`value` as bytes in the one form that crosses; ValueError naming what cannot cross."""
    packer = _Packer(MAX_DATA_BYTES)
    try:
        packer.add(value, 0)
    except _Refused as refused:
        raise ValueError(_refusal_text(refused)) from None
    return bytes(packer.out)


def _refusal_text(refused: _Refused, what: str = "the value") -> str:
    where = "".join(refused.where)
    if refused.reason.startswith("of type "):
        return f"{what}{where} is {refused.reason}"
    return f"{what}{where}: {refused.reason}"


def unpack(data: bytes) -> Any:
    """The value `data` packs, as new objects; ValueError if `data` is not exactly one packed value.

    Reads what a sandboxed worker sent, so it trusts nothing: every length is checked against what
    is left, nesting is bounded, and only the plain types above are ever made.
    """
    if len(data) > MAX_DATA_BYTES + 64:  # a call adds its name and a few bytes of framing
        raise ValueError(f"malformed tool data: more than {MAX_DATA_BYTES:,} bytes")
    try:
        value, end = _read(data, 0, 0)
    except (IndexError, struct.error, UnicodeDecodeError, RecursionError) as exc:
        raise ValueError(f"malformed tool data: {exc}") from None
    if end != len(data):
        raise ValueError("malformed tool data: bytes after the value")
    return value


def _read(data: bytes, at: int, depth: int) -> tuple[Any, int]:
    tag = data[at]
    at += 1
    if tag in (_STR, _BYTES, _BIGINT):
        (size,) = _LEN.unpack_from(data, at)
        at += 4
        end = at + size
        if end > len(data):
            raise ValueError("malformed tool data: a length past the end")
        chunk = data[at:end]
        if tag == _STR:
            return chunk.decode("utf-8", "surrogatepass"), end
        if tag == _BYTES:
            return bytes(chunk), end
        return int.from_bytes(chunk, "big", signed=True), end
    if tag == _INT:
        return _I64.unpack_from(data, at)[0], at + 8
    if tag == _FLOAT:
        return _F64.unpack_from(data, at)[0], at + 8
    if tag == _NONE:
        return None, at
    if tag == _TRUE:
        return True, at
    if tag == _FALSE:
        return False, at
    if tag in (_LIST, _TUPLE, _DICT):
        if depth >= MAX_DEPTH:
            raise ValueError(f"malformed tool data: nested more than {MAX_DEPTH} levels deep")
        (count,) = _LEN.unpack_from(data, at)
        at += 4
        if count > len(data) - at:  # every item takes at least one byte
            raise ValueError("malformed tool data: a count past the end")
        if tag == _DICT:
            result: dict[str, Any] = {}
            for _ in range(count):
                if data[at] != _STR:
                    raise ValueError("malformed tool data: a dict key that is not a str")
                key, at = _read(data, at, depth + 1)
                result[key], at = _read(data, at, depth + 1)
            return result, at
        items = []
        for _ in range(count):
            item, at = _read(data, at, depth + 1)
            items.append(item)
        return (items if tag == _LIST else tuple(items)), at
    raise ValueError(f"malformed tool data: unknown tag {tag}")


# ---- the host's side: the tools and one run's calls ----------------------------------------------


class _BadArguments(Exception):
    pass


class Tool:
    """One host function offered to sessions, with what its signature lets a call pass."""

    __slots__ = ("adapters", "doc", "fn", "name", "signature", "usage")

    def __init__(self, name: str, fn: Callable[..., Any]) -> None:
        self.name = name
        self.fn = fn
        self.signature: inspect.Signature | None
        try:
            self.signature = inspect.signature(fn, eval_str=True)
        except (TypeError, ValueError):  # some builtins have none: any call is passed on as made
            self.signature = None
        except Exception as exc:  # an annotation that names something undefined
            raise TypeError(f"tool {name!r}: its annotations cannot be resolved ({exc})") from None
        # Annotated parameters are validated (and converted: a dict into a pydantic model) by pydantic;
        # `Any`, `object` and unannotated ones take whatever plain data arrives.
        self.adapters: dict[str, tuple[Any, Any]] = {}
        if self.signature is not None:
            for parameter in self.signature.parameters.values():
                annotation = parameter.annotation
                if annotation is inspect.Parameter.empty or annotation is Any or annotation is object:
                    continue
                from pydantic import TypeAdapter

                try:
                    adapter = TypeAdapter(annotation)
                except Exception as exc:
                    raise TypeError(
                        f"tool {name!r}: pydantic cannot validate parameter {parameter.name!r} ({exc})"
                    ) from None
                self.adapters[parameter.name] = (parameter.kind, adapter)
        usage = f"{name}{self.signature}" if self.signature is not None else f"{name}(...)"
        self.usage = usage if len(usage) <= _MAX_USAGE_CHARS else usage[: _MAX_USAGE_CHARS - 3] + "..."
        doc = inspect.getdoc(fn) or ""
        self.doc = f"{self.usage}\n\n{doc[:_MAX_DOC_CHARS]}".rstrip()

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any], loop: Any) -> Any:
        """Check the arguments against the signature, then call; an awaitable result is awaited."""
        signature = self.signature
        if signature is not None:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as exc:
                raise _BadArguments(str(exc)) from None
            if self.adapters:
                self._validate(bound.arguments)
            args, kwargs = bound.args, bound.kwargs
        value = self.fn(*args, **kwargs)
        if inspect.isawaitable(value):
            value = _await(value, loop)
        return value

    def _validate(self, arguments: dict[str, Any]) -> None:
        from pydantic import ValidationError

        for name, value in arguments.items():
            found = self.adapters.get(name)
            if found is None:
                continue
            kind, adapter = found
            try:
                if kind is inspect.Parameter.VAR_POSITIONAL:
                    arguments[name] = tuple(adapter.validate_python(v) for v in value)
                elif kind is inspect.Parameter.VAR_KEYWORD:
                    arguments[name] = {k: adapter.validate_python(v) for k, v in value.items()}
                else:
                    arguments[name] = adapter.validate_python(value)
            except ValidationError as exc:
                first = exc.errors(include_url=False)[0]
                at = "".join(f"[{part!r}]" for part in first.get("loc", ()))
                raise _BadArguments(f"argument {name!r}{at}: {first.get('msg', 'invalid')}") from None


def check_tools(tools: Mapping[str, Callable[..., Any]] | None, what: str = "tools") -> dict[str, Tool]:
    """The tools of a mapping, checked: TypeError/ValueError saying what is wrong with one."""
    if tools is None:
        return {}
    if not isinstance(tools, Mapping):
        raise TypeError(f"{what} must be a mapping of names to callables, not {type(tools).__name__}")
    checked: dict[str, Tool] = {}
    for name, fn in tools.items():
        if not isinstance(name, str):
            raise TypeError(f"a tool name must be a str, not {type(name).__name__}")
        if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
            raise ValueError(
                f"tool name {name!r} must be a Python identifier, not a keyword, not starting with '_'"
            )
        if name == "ToolError":
            raise ValueError("tool name 'ToolError' is taken: session code catches tool failures by it")
        if not callable(fn):
            raise TypeError(f"tool {name!r} must be callable, not {type(fn).__name__}")
        checked[name] = Tool(name, fn)
    return checked


def _await(awaitable: Any, loop: Any) -> Any:
    """Run an async tool's awaitable to its end: on the caller's event loop if the run came from
    one (`engine.arun`: the tool shares that loop's resources), else on this host thread's own."""
    if loop is not None and loop.is_running() and not loop.is_closed():

        async def wrapped() -> Any:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(wrapped(), loop).result()
    own = _local.__dict__.get("loop")
    if own is None:
        own = _local.loop = asyncio.new_event_loop()
    return own.run_until_complete(awaitable)


_local = threading.local()


def _message(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:
        text = ""
    text = clean(text or type(exc).__name__)
    return text if len(text) <= _MAX_MESSAGE_CHARS else text[:_MAX_MESSAGE_CHARS] + "..."


class ToolRun:
    """One run's tool calls, on the host: serves them, counts them, and records them.

    Made by the engine for a run of a session that has tools; the boundary calls `begin` before the
    session's code runs (host code, in the run's own context: the tools run in a copy of it, so a
    tool's span nests under the run's span and it sees the caller's context variables) and hands
    each call's bytes to `serve`, on a host thread.
    """

    __slots__ = (
        "_lock",
        "calls",
        "context",
        "deadline",
        "dropped",
        "loop",
        "max_calls",
        "records",
        "tool_s",
        "tools",
        "tracer",
    )

    def __init__(self, tools: Mapping[str, Tool], max_calls: int | None, tracer: Any = None) -> None:
        self.tools = tools
        self.max_calls = max_calls
        self.tracer = tracer
        self.calls = 0
        self.tool_s = 0.0
        self.records: list[tuple[str, str, float, str]] = []  # (tool, outcome, ms, message)
        self.dropped = 0
        self.context: contextvars.Context | None = None
        self.deadline = math.inf
        self.loop: Any = None  # the event loop of an `arun` caller, for async tools
        self._lock = threading.Lock()

    def offer(self) -> tuple[tuple[str, str], ...]:
        """(name, doc) of each tool, for the session's stubs."""
        return tuple((tool.name, tool.doc) for tool in self.tools.values())

    def begin(self, timeout_s: float) -> None:
        """Host code, before the session's code runs: the run's context and deadline."""
        self.context = contextvars.copy_context()
        self.deadline = time.monotonic() + timeout_s
        POOL.ensure_idle()

    def serve(self, payload: bytes) -> bytes:
        """One call: its packed (name, args, kwargs) in, its packed reply out (on a host thread)."""
        context = self.context if self.context is not None else contextvars.Context()
        reply: bytes = context.copy().run(self._serve, payload)
        return reply

    def _serve(self, payload: bytes) -> bytes:
        started = time.perf_counter()
        name = "?"
        outcome = "refused"
        message = ""
        span = None
        try:
            try:
                call = unpack(payload)
                if type(call) is not tuple or len(call) != 3:
                    raise ValueError("malformed tool call")
                asked, args, kwargs = call
                if type(asked) is not str or type(args) is not tuple or type(kwargs) is not dict:
                    raise ValueError("malformed tool call")
            except ValueError as exc:
                message = f"tool call refused: {exc}"
                return b"E" + message.encode("utf-8", "surrogatepass")
            tool = self.tools.get(asked)
            if tool is None:  # the name the session sent is its own text: shown cut and cleaned
                name = clean(asked[:_MAX_NAME_CHARS])
                message = f"{name}: no such tool in this session"
                return b"E" + message.encode("utf-8", "surrogatepass")
            name = tool.name
            with self._lock:
                if self.max_calls is not None and self.calls >= self.max_calls:
                    message = (
                        f"{name}: this run made {self.max_calls} tool calls, the limit "
                        "(Limits.max_tool_calls); do the rest in a later run"
                    )
                    return b"E" + message.encode("utf-8", "surrogatepass")
                self.calls += 1
            if self.tracer is not None:
                from ._telemetry import start_tool_span

                span = start_tool_span(self.tracer, name)
            try:
                value = tool.call(args, kwargs, self.loop)
            except _BadArguments as exc:
                message = f"{name}: {exc}; it accepts {tool.usage}"
                return b"E" + message.encode("utf-8", "surrogatepass")
            except BaseException as exc:  # the tool's failure is the session's to see, never the host's
                outcome = "error"
                message = f"{name}: {_message(exc)}"
                return b"E" + message.encode("utf-8", "surrogatepass")
            try:
                data = _pack_result(value)
            except ValueError as exc:
                outcome = "error"
                message = f"{name}: its result cannot cross into the session: {exc}"
                return b"E" + message.encode("utf-8", "surrogatepass")
            outcome = "ok"
            return b"R" + data
        finally:
            elapsed = time.perf_counter() - started
            if span is not None:
                from ._telemetry import finish_tool_span

                finish_tool_span(span, outcome, message)
            with self._lock:
                self.tool_s += elapsed
                if len(self.records) < _RECORDS_KEPT:
                    self.records.append((name, outcome, round(elapsed * 1e6) / 1000, message))
                else:
                    self.dropped += 1

    def wait(self, job: _Job, cut: Callable[[], float] | None = None) -> bytes | None:
        """For a host thread that is not the session's (the subprocess boundary): the reply, or None
        once the run's deadline (or `cut()`, an interrupt's) passed first."""
        while True:
            limit = min(self.deadline, cut()) if cut is not None else self.deadline
            remaining = limit - time.monotonic()
            if remaining <= 0:
                return None
            if job.done.acquire(timeout=min(remaining, 0.05)):
                return job.reply


def _pack_result(value: Any) -> bytes:
    """A tool's result as packed plain data; a pydantic model (or a dataclass, a datetime, ... in
    it) crosses as its JSON form."""
    try:
        return pack(value)
    except ValueError:
        pass
    from pydantic import BaseModel
    from pydantic_core import PydanticSerializationError, to_jsonable_python

    if isinstance(value, BaseModel):
        return pack(value.model_dump(mode="json"))
    try:
        plain = to_jsonable_python(value)
    except PydanticSerializationError:
        return pack(value)  # raises again, naming what cannot cross
    return pack(plain)


# ---- host threads that run the tools -------------------------------------------------------------


class _Job:
    __slots__ = ("done", "payload", "reply", "serve")

    def __init__(self, serve: Callable[[bytes], bytes], payload: bytes) -> None:
        self.serve = serve
        self.payload = payload
        self.reply: bytes = b""
        self.done = threading.Lock()
        self.done.acquire()


class ToolPool:
    """Host threads that run tool calls, one call each at a time; their stacks hold no session code.

    A session thread cannot start a thread (the policy's hook refuses it), so the pool keeps one
    idle thread ready at all times: the thread that takes a call starts the next one first if it
    was the last idle one. A tool still running when its run timed out keeps its thread until it
    returns (its reply is dropped); the pool grows past it. Idle threads beyond `_IDLE_KEPT` end.
    """

    _IDLE_KEPT = 4

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0

    def forget_threads(self) -> None:
        """In a forked child: the parent's threads are not there; start over with none."""
        self._jobs = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0

    def ensure_idle(self) -> None:
        if self._idle == 0:
            with self._lock:
                if self._idle == 0:
                    self._start()

    def _start(self) -> None:  # under _lock
        self._idle += 1
        threading.Thread(target=self._loop, name="genpark-tool", daemon=True).start()

    def submit(self, serve: Callable[[bytes], bytes], payload: bytes) -> _Job:
        job = _Job(serve, payload)
        self._jobs.put(job)
        return job

    def call(self, serve: Callable[[bytes], bytes], payload: bytes) -> bytes:
        """For the session's thread: the reply, waiting in slices so a timeout or interrupt lands."""
        job = self.submit(serve, payload)
        acquire = job.done.acquire
        while not acquire(timeout=_WAIT_SLICE_S):
            pass
        return job.reply

    def _loop(self) -> None:
        jobs = self._jobs
        while True:
            job = jobs.get()
            with self._lock:
                self._idle -= 1
                if self._idle == 0:
                    self._start()
            try:
                job.reply = job.serve(job.payload)
            except BaseException as exc:  # serve answers everything; this is a last resort
                job.reply = b"E" + f"tool call failed: {_message(exc)}".encode("utf-8", "surrogatepass")
            job.done.release()
            del job
            with self._lock:
                if self._idle >= self._IDLE_KEPT:
                    return
                self._idle += 1


POOL = ToolPool()
if hasattr(os, "register_at_fork"):
    # A process forked after tools ran (a server's workers) would count the parent's idle threads,
    # hand its calls to them, and wait forever.
    os.register_at_fork(after_in_child=POOL.forget_threads)


# ---- the session's side: the stubs -----------------------------------------------------------------


class ToolStubs:
    """The stubs in one session's builtins, and how their calls reach the host (`send`: packed call
    in, packed reply out). The same on every boundary; only `send` differs."""

    __slots__ = ("names", "run", "send", "table")

    def __init__(self, send: Callable[[bytes], bytes] | None = None) -> None:
        self.send = send if send is not None else self._local_send
        self.names: tuple[tuple[str, str], ...] = ()
        self.table: dict[str, Any] | None = None
        self.run: ToolRun | None = None  # in-process: the run whose code is running

    def install(self, table: dict[str, Any], offer: tuple[tuple[str, str], ...]) -> None:
        """Make `table` (the session's builtins) hold exactly the stubs of `offer`."""
        if table is self.table and offer == self.names:
            return
        if table is self.table:
            for name, _ in self.names:
                table.pop(name, None)
        for name, doc in offer:
            table[name] = _stub(name, doc, self.call)
        if offer:
            table["ToolError"] = ToolError
        else:
            table.pop("ToolError", None)
        self.table, self.names = table, offer

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        packer = _Packer(MAX_DATA_BYTES)
        try:
            packer.add((name, args, kwargs), 0)
        except _Refused as refused:
            raise ToolError(f"{name}: {_argument_text(refused)}; tools take plain data ({_PLAIN})") from None
        reply = self.send(bytes(packer.out))
        if reply[:1] == b"R":
            try:
                return unpack(reply[1:])
            except ValueError as exc:
                raise ToolError(f"{name}: {exc}") from None
        raise ToolError(reply[1:].decode("utf-8", "surrogatepass"))

    def _local_send(self, payload: bytes) -> bytes:
        run = self.run
        if run is None:
            return b"E" + b"tools can be called only while the session's code runs"
        return POOL.call(run.serve, payload)


def _argument_text(refused: _Refused) -> str:
    where = refused.where
    # where[0] is the (name, args, kwargs) slot, where[1] the argument's index or keyword.
    if len(where) >= 2 and where[0] == "[1]":
        what = f"argument {int(where[1][1:-1]) + 1}"
    elif len(where) >= 2 and where[0] == "[2]":
        what = f"argument {where[1][1:-1]}"
    else:
        what = "an argument"
    refused.where = where[2:]
    return _refusal_text(refused, what)


def _stub(name: str, doc: str, call: Callable[[str, tuple[Any, ...], dict[str, Any]], Any]) -> Any:
    def stub(*args: Any, **kwargs: Any) -> Any:
        return call(name, args, kwargs)

    stub.__name__ = stub.__qualname__ = name
    stub.__doc__ = doc
    stub.__module__ = "tools"
    return stub
