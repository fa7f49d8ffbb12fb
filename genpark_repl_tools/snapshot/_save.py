"""Taking a snapshot: the session's variables pickled one record each, code by reference to its cell.

Pickling runs code: library reducers, and the session's own methods where pickle iterates a
container subclass the session defined. So the whole save runs like any other call back into the
session: under its policy guards and a deadline (`call_guarded`). Session classes that define
their own pickling hooks (`__reduce__`, `__reduce_ex__`, `__getstate__`, `__getnewargs__`...) are
not saved under a restricted policy: the audit refuses those hooks, so a class that has one got it
around the guards, and its output would be what that class chose. Under `trusted` they are used.
"""

from __future__ import annotations

import collections
import datetime as _dt
import io
import pickle
import platform
import sys
import threading
import types
import typing
from functools import _lru_cache_wrapper
from types import CellType, CodeType, FunctionType, ModuleType
from typing import Any, Protocol

from .._compile import CELL_PREFIX, CompiledCell, compile_cell
from .._introspect import module_of, type_name
from .._limits import Limits
from .._models import SkippedVariable, SnapshotManifest, SnapshotVariable
from .._session import Session, call_guarded
from .._watchdog import ExecutionTimeout
from ..policy._runtime import PolicyRuntime
from . import _markers as markers
from ._admit import SessionScope
from ._cells import cell_codes
from ._format import FORMAT, SessionSnapshot, SnapshotError, SnapshotTooLarge, snapshot_limit

__all__ = ["take_snapshot"]

_REDUCER_HOOKS = frozenset(
    {"__reduce__", "__reduce_ex__", "__getstate__", "__setstate__", "__getnewargs__", "__getnewargs_ex__"}
)
# Entries of a class __dict__ that the class statement itself makes again.
_CLASS_SKIP = frozenset(
    {
        "__dict__",
        "__weakref__",
        "__module__",
        "__qualname__",
        "__doc__",
        "__orig_bases__",
        "__parameters__",
        "__abstractmethods__",
        "_abc_impl",
        "__dataclass_fields__",
        "__dataclass_params__",
        "__match_args__",
        "__slots__",
        "__annotations__",
        "__static_attributes__",
        "__firstlineno__",
        "__slotnames__",
    }
)
# Class attributes the class statement itself makes: slot descriptors, NamedTuple field getters.
_MADE_WITH_CLASS = (
    types.MemberDescriptorType,
    types.GetSetDescriptorType,
    type(collections.namedtuple("_T", "a").a),  # type: ignore[attr-defined]
)
_DATACLASS_PARAMS = ("init", "repr", "eq", "order", "unsafe_hash", "frozen")
_LOCKS = (type(threading.Lock()), type(threading.RLock()), threading.Condition, threading.Semaphore)
_IN_MEMORY_STREAMS = (io.StringIO, io.BytesIO)
_SAVE_TIMEOUT_S = 60.0


class BufferSink(Protocol):
    """Where the pickler's out-of-band buffers go: each one is a view of memory the session goes on
    changing, so a sink keeps a copy, wherever it keeps it."""

    nbytes: int  # the buffers' bytes so far

    def __len__(self) -> int: ...

    def add(self, buffer: memoryview) -> None: ...

    def clear(self) -> None: ...


class SinkFailed(OSError):
    """A sink could not keep a buffer (a handoff's file could not be written): the whole save
    fails, rather than leave out the variable that held it."""


class _Copies:
    """The buffers as bytes objects, for a snapshot blob."""

    def __init__(self) -> None:
        self.items: list[bytes] = []
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self.items)

    def add(self, buffer: memoryview) -> None:
        data = bytes(buffer)
        self.items.append(data)
        self.nbytes += len(data)

    def clear(self) -> None:
        self.items.clear()
        self.nbytes = 0


class NotSaved(Exception):
    """Raised inside pickling when a value cannot be part of a snapshot; carries the reason."""


def unsaveable(obj: Any) -> str | None:
    """Why `obj` is never saved (None: try to pickle it)."""
    if isinstance(obj, (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)):
        return "a generator or coroutine: its running state cannot be saved; make it again"
    if isinstance(obj, io.IOBase) and not isinstance(obj, _IN_MEMORY_STREAMS):
        return "an open file or stream: open it again after the restore"
    if isinstance(obj, _LOCKS):
        return "a lock: make a new one"
    if isinstance(obj, threading.Thread):
        return "a thread: threads do not survive a restore"
    if isinstance(obj, (types.FrameType, types.TracebackType, CodeType)):
        return "interpreter internals (a frame, traceback or code object)"
    module = module_of(type(obj))
    if module.startswith(("matplotlib", "mpl_toolkits")):
        return "a matplotlib object: figures are not saved; draw it again after the restore"
    if module in ("socket", "ssl", "selectors"):
        return "a network connection"
    return None


class _Context(SessionScope):
    """State of one snapshot: the session, its cells, the admission rules, the buffers."""

    def __init__(self, session: Session, runtime: PolicyRuntime, buffers: BufferSink) -> None:
        super().__init__(session, runtime)
        self.buffers = buffers
        self.sources: dict[str, list[Any]] = {}
        self._cells: dict[str, tuple[CompiledCell, list[CodeType]] | None] = {}
        self.modules: set[str] = set()
        self._specials: dict[int, tuple[Any, ModuleType, str]] | None = None

    def special(self, obj: Any) -> tuple[Any, ModuleType, str] | None:
        """The (view, name) a per-session stand-in came from (`from random import randint` gives a
        method of the session's own generator): saved as that lookup, so it comes back the same way."""
        if self._specials is None:
            self._specials = {}
            guards = getattr(self.table.get("__import__"), "__self__", None)
            for name, view in dict(getattr(guards, "views", {})).items():
                real = sys.modules.get(name)
                for attr, value in list(vars(view).items()):
                    if attr.startswith("_") or isinstance(value, ModuleType):
                        continue
                    if getattr(real, attr, None) is not value:  # the session's own stand-in
                        self._specials[id(value)] = (value, view, attr)
        hit = self._specials.get(id(obj))
        return hit if hit is not None and hit[0] is obj else None

    # ---- cells --------------------------------------------------------------------------------

    def cell(self, filename: str) -> tuple[CompiledCell, list[CodeType]] | None:
        if filename not in self._cells:
            entry = self.session.sources.get(filename)
            found = None
            if entry is not None:
                count, lines = entry
                source = "\n".join(lines) + "\n"
                cell = compile_cell(source, self.runtime)
                if cell.body is not None:
                    found = (cell, cell_codes(cell))
                    self.sources[filename] = [count, source]
            self._cells[filename] = found
        return self._cells[filename]

    def locate(self, code: CodeType) -> tuple[str, int]:
        """(cell filename, index of the code object in that cell) or NotSaved."""
        filename = code.co_filename
        if not filename.startswith(CELL_PREFIX):
            raise NotSaved("made outside a cell (exec, compile or a library): its source is not recorded")
        found = self.cell(filename)
        if found is None:
            raise NotSaved("its cell is no longer kept (a session keeps the source of its last 256 cells)")
        for index, candidate in enumerate(found[1]):
            if candidate is code or candidate == code:
                return filename, index
        raise NotSaved("its code could not be matched to the cell's source")

    # ---- reducers -------------------------------------------------------------------------------

    def reduce(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is FunctionType and obj.__module__ == markers.MODULE:
            return NotImplemented
        if self.restricted and (callable(obj) or isinstance(obj, type)):
            hit = self.special(obj)
            if hit is not None:
                return (getattr, (hit[1], hit[2]))
        if isinstance(obj, _lru_cache_wrapper):
            params = obj.cache_parameters()
            return (markers.lru_cache, (obj.__wrapped__, params["maxsize"], params["typed"]))
        if isinstance(obj, typing.TypeVar):
            return (typing.TypeVar, (obj.__name__, *obj.__constraints__))
        if kind is FunctionType:
            return self.function(obj)
        if kind is CellType:
            try:
                contents = obj.cell_contents
            except ValueError:
                contents = markers.empty_cell
            return (markers.cell, (), contents, None, None, markers.cell_state)
        if isinstance(obj, ModuleType):
            return (markers.module, (module_name(obj),))
        if isinstance(obj, type):
            return self.klass(obj)
        reason = unsaveable(obj)
        if reason is not None:
            raise NotSaved(reason)
        if isinstance(obj, types.BuiltinFunctionType) or kind.__name__ == "cython_function_or_method":
            owner = getattr(obj, "__self__", None)
            if owner is None or isinstance(owner, ModuleType):
                self.check_global(obj)  # pickled by name: the loader must admit that name
        return NotImplemented

    def check_global(self, obj: Any) -> None:
        module = getattr(obj, "__module__", None)
        name = getattr(obj, "__qualname__", None)
        if not isinstance(module, str) or not isinstance(name, str):
            return  # pickle decides (a bound method, for one, is reduced to getattr(obj, name))
        self.modules.add(module.partition(".")[0])
        if self.restricted:
            why = self.admission.admits(module, name)
            if why is not None:
                raise NotSaved(f"it refers to {why}")

    def function(self, fn: FunctionType) -> Any:
        code = fn.__code__
        if not code.co_filename.startswith(CELL_PREFIX) or fn.__globals__ is not self.namespace:
            if "<" in fn.__qualname__ or fn.__module__ == self.namespace.get("__name__"):
                raise NotSaved(
                    "a function made outside a cell (exec, compile or a library): its source is not recorded"
                )
            self.check_global(fn)
            return NotImplemented
        filename, index = self.locate(code)
        state = (fn.__defaults__, fn.__kwdefaults__, dict(fn.__dict__), dict(fn.__annotations__))
        args = (filename, index, fn.__name__, fn.__qualname__, fn.__closure__)
        return (markers.function, args, state, None, None, markers.function_state)

    def klass(self, cls: type) -> Any:
        if cls.__module__ != self.namespace.get("__name__"):
            self.check_global(cls)
            return NotImplemented
        if self.restricted:
            for base in cls.__mro__:
                if base.__module__ != cls.__module__:
                    continue
                for hook in _REDUCER_HOOKS & set(vars(base)):
                    code = _code_of(vars(base)[hook])
                    if code is None or code.co_filename.startswith(CELL_PREFIX):
                        raise NotSaved(f"class {base.__name__} defines its own pickling hook {hook}")
        body = self.class_body(cls)
        if body is None:
            if issubclass(cls, tuple) and isinstance(getattr(cls, "_fields", None), tuple):
                defaults = tuple(cls._field_defaults.values()) if cls._field_defaults else None  # type: ignore[attr-defined]
                return (markers.namedtuple, (cls.__name__, cls._fields, defaults))  # type: ignore[attr-defined]
            raise NotSaved(f"class {cls.__name__} was not made by a class statement in a kept cell")
        filename, index, code = body
        if code.co_freevars:
            raise NotSaved(f"class {cls.__name__} is defined inside a function")
        bases = cls.__dict__.get("__orig_bases__", cls.__bases__)
        keywords: dict[str, Any] = {}
        if type(cls) is not _winner(bases):
            keywords["metaclass"] = type(cls)
        params = cls.__dict__.get("__dataclass_params__")
        dataclass = {k: getattr(params, k) for k in _DATACLASS_PARAMS} if params is not None else None
        if dataclass is not None and "__slots__" in vars(cls) and "__slots__" not in code.co_names:
            dataclass["slots"] = True  # made by the decorator (slots=True), not by the class body
        state = {} if _is_enum(cls) else self.class_state(cls, code)
        args = (filename, index, cls.__name__, cls.__qualname__, tuple(bases), keywords, dataclass)
        return (markers.klass, args, state, None, None, markers.class_state)

    def class_body(self, cls: type) -> tuple[str, int, CodeType] | None:
        """The class statement's body code: found through a method if it has one, else by name."""
        methods = [_code_of(v) for v in vars(cls).values()]
        for code in methods:
            if code is not None and code.co_filename.startswith(CELL_PREFIX):
                found = self.cell(code.co_filename)
                if found is None:
                    continue
                for index, candidate in enumerate(found[1]):
                    if candidate.co_name == cls.__name__ and any(
                        c is code or c == code for c in candidate.co_consts if isinstance(c, CodeType)
                    ):
                        return code.co_filename, index, candidate
        qualname = cls.__qualname__
        cells = sorted(self.session.sources.items(), key=lambda item: item[1][0], reverse=True)
        for filename, _ in cells:
            found = self.cell(filename)
            if found is None:
                continue
            for index, candidate in enumerate(found[1]):
                if (
                    candidate.co_name == cls.__name__
                    and getattr(candidate, "co_qualname", qualname) == qualname
                ):
                    return filename, index, candidate
        return None

    def class_state(self, cls: type, body: CodeType) -> dict[str, Any]:
        from_body = [c for c in body.co_consts if isinstance(c, CodeType)]
        dataclass = "__dataclass_params__" in vars(cls)
        state = {}
        for key, value in vars(cls).items():
            if key in _CLASS_SKIP or isinstance(value, _MADE_WITH_CLASS):
                continue
            if dataclass and key.startswith("__") and getattr(value, "__module__", None) == "dataclasses":
                # the decorator's own functions (Python 3.13's __replace__, __getstate__/__setstate__
                # of frozen slotted ones): the restore applies the decorator again
                continue
            code = _code_of(value)
            if code is not None and any(code is c or code == c for c in from_body):
                continue  # the class statement makes it again
            if code is not None and not code.co_filename.startswith(CELL_PREFIX) and not _importable(value):
                continue  # generated (dataclass, NamedTuple, Enum): made again with the class
            state[key] = value
        return state


class _Pickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, context: _Context) -> None:
        super().__init__(file, protocol=5, buffer_callback=self._buffer)
        self.context = context

    def _buffer(self, buffer: pickle.PickleBuffer) -> bool:
        self.context.buffers.add(buffer.raw())
        return False  # out of band

    def reducer_override(self, obj: Any) -> Any:
        return self.context.reduce(obj)


def take_snapshot(session: Session, runtime: PolicyRuntime, limits: Limits, key: bytes) -> SessionSnapshot:
    """Snapshot `session` (the caller holds its lock)."""
    copies = _Copies()
    header, payload = save_guarded(session, runtime, limits, copies)
    snapshot = SessionSnapshot.sign(header, payload, copies.items, key)
    check_size(snapshot.size_bytes, limits, header)
    return snapshot


def save_guarded(
    session: Session, runtime: PolicyRuntime, limits: Limits, buffers: BufferSink
) -> tuple[dict[str, Any], bytes]:
    """The snapshot's header and payload, its buffers put in `buffers`: run like a call back into
    the session, under its policy's guards and a deadline."""
    timeout = max(limits.timeout_s, _SAVE_TIMEOUT_S)
    try:
        saved: tuple[dict[str, Any], bytes] = call_guarded(runtime, timeout, _save, session, runtime, buffers)
    except ExecutionTimeout:
        raise SnapshotError(f"taking the snapshot took longer than {timeout:g} s") from None
    return saved


def check_size(size: int, limits: Limits, header: dict[str, Any]) -> None:
    """SnapshotTooLarge if a snapshot of `size` bytes is over the limit, naming its largest variables."""
    limit = snapshot_limit(limits)
    if limit is not None and size > limit:
        saved = header["manifest"]["saved"]
        largest = sorted(saved, key=lambda v: -v["bytes"])[:3]
        names = ", ".join(f"{v['name']} ({v['bytes'] / 1e6:,.1f} MB)" for v in largest)
        raise SnapshotTooLarge(
            f"the session's snapshot would be {size / 1e6:,.1f} MB, over the limit of {limit / 1e6:,.1f} MB "
            f"(Limits.max_snapshot_bytes); the largest variables: {names or 'none'}. Delete what is not "
            "needed (del name) to make it fit"
        )


def _save(session: Session, runtime: PolicyRuntime, buffers: BufferSink) -> tuple[dict[str, Any], bytes]:
    context = _Context(session, runtime, buffers)
    skipped: dict[str, SkippedVariable] = {}
    imports: dict[str, str] = {}
    # A value that fails half-way leaves the pickler's memo naming objects whose bytes were thrown
    # away, so the dump starts again without it. Values known to be unsaveable never start.
    while True:
        out = io.BytesIO()
        context.buffers.clear()
        pickler = _Pickler(out, context)
        records: list[list[Any]] = []
        saved: list[SnapshotVariable] = []
        failed = None
        for name, value in list(session.namespace.items()):
            if name.startswith("__") or name in skipped:
                continue
            if isinstance(value, ModuleType):
                imports[name] = module_name(value)
                context.modules.add(imports[name].partition(".")[0])
                continue
            reason = unsaveable(value)
            if reason is not None:
                skipped[name] = SkippedVariable(name=name, type=type_name(value), reason=reason)
                continue
            start, first_buffer, buffer_bytes = out.tell(), len(context.buffers), context.buffers.nbytes
            try:
                pickler.dump(value)
            except (ExecutionTimeout, SnapshotTooLarge, SinkFailed):  # the save itself failed
                raise
            except NotSaved as exc:
                reason = str(exc)
            except RecursionError:
                reason = "it is nested too deeply to save"
            except Exception as exc:
                reason = f"it cannot be pickled ({type(exc).__name__}: {exc})"[:300]
            if reason is not None:
                failed = SkippedVariable(name=name, type=type_name(value), reason=reason)
                break
            length = out.tell() - start
            records.append([name, start, length, first_buffer, len(context.buffers) - first_buffer])
            size = length + context.buffers.nbytes - buffer_bytes
            saved.append(SnapshotVariable(name=name, type=type_name(value), bytes=size))
            context.modules.add(module_of(type(value)).partition(".")[0])
        if failed is None:
            break
        skipped[failed.name] = failed
    payload = out.getvalue()
    manifest = SnapshotManifest(
        session=session.name,
        created_at=_dt.datetime.now(_dt.timezone.utc),
        execution_count=session.execution_count,
        policy=runtime.name,
        python=platform.python_version(),
        libraries=library_versions(context.modules | context.admission.modules),
        saved=saved,
        not_saved=list(skipped.values()),
        imports=imports,
        size_bytes=len(payload) + context.buffers.nbytes,
    )
    header = {
        "format": FORMAT,
        "manifest": manifest.model_dump(mode="json"),
        "records": records,
        "imports": imports,
        "sources": context.sources,
        "bookkeeping": {
            "global_names": sorted(session.global_names),
            "dynamic": session.dynamic,
            "touches_host": session.touches_host,
        },
    }
    return header, payload


def module_name(module: ModuleType) -> str:
    name = ModuleType.__getattribute__(module, "__name__")
    return name if isinstance(name, str) else "?"


def library_versions(tops: set[str]) -> dict[str, str]:
    """The versions of the libraries the values come from. The standard library's are the Python
    version, recorded apart (and Python 3.15 deprecates json's and re's own __version__)."""
    versions = {}
    for top in sorted(tops):
        module = sys.modules.get(top)
        if module is None or top in sys.stdlib_module_names or top == "__main__":
            continue
        version = getattr(module, "__version__", None)
        if isinstance(version, str):
            versions[top] = version
    return versions


def _code_of(value: Any) -> CodeType | None:
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        value = value.fget
    code = getattr(value, "__code__", None) if isinstance(value, FunctionType) else None
    return code if isinstance(code, CodeType) else None


def _importable(value: Any) -> bool:
    """Whether a function can be named by module and qualified name (so pickled by reference)."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    module = sys.modules.get(getattr(value, "__module__", None) or "")
    qualname = getattr(value, "__qualname__", "")
    if module is None or not isinstance(qualname, str) or "<" in qualname:
        return False
    found: Any = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found is value


def _winner(bases: tuple[Any, ...]) -> type:
    winner: type = type
    for base in bases:
        meta = type(base)
        if isinstance(base, type) and issubclass(meta, winner):
            winner = meta
    return winner


def _is_enum(cls: type) -> bool:
    enum = sys.modules.get("enum")
    return enum is not None and isinstance(cls, type) and issubclass(cls, enum.Enum)
