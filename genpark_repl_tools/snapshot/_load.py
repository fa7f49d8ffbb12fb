"""Restoring a snapshot into a session: authenticated first, then loaded under the session's policy.

Security model: the HMAC is checked before anything is parsed. Under a restricted policy the
unpickler's `find_class` admits only what `Admission` allows (no `os.system`, no `eval`, no
`open`), session code is compiled again from its recorded source under the policy (audit,
transform, timeout guards), classes are made by the session's own guarded `__build_class__`, and
the whole load runs under the session's guards and a deadline (`call_guarded`), like any call back
into the session. Under `trusted` the session already has full rights, so names are looked up
as plain pickle would.
"""

from __future__ import annotations

import builtins
import importlib
import io
import pickle
import pickletools
import platform
import sys
from collections.abc import Callable, Sequence
from types import CellType, CodeType, FunctionType
from typing import Any

from .._compile import compile_cell
from .._limits import Limits
from .._models import SessionRestore, SkippedVariable, SnapshotManifest
from .._session import Session, call_guarded
from .._watchdog import ExecutionTimeout
from ..policy._audithook import adopt
from ..policy._errors import PolicyViolation
from ..policy._runtime import PolicyRuntime
from . import _markers as markers
from ._admit import SessionScope, import_by_name
from ._cells import cell_codes
from ._format import SessionSnapshot, SnapshotError, SnapshotRefused

__all__ = ["restore_snapshot"]

_LOAD_TIMEOUT_S = 60.0

# Pydantic defers the manifest's validator (its `files` names a model defined after it) to its first
# use: built here instead, once, so a restore in a new worker (the zygote imports this module) does
# not spend milliseconds building it.
SnapshotManifest.model_rebuild()
_DATACLASS_PARAMS = frozenset({"init", "repr", "eq", "order", "unsafe_hash", "frozen", "slots"})
_FUNCTION_DICT_DUNDERS = frozenset({"__wrapped__"})


class _Buffers:
    """Out-of-band buffers, consumed in order; repositioned when a record fails. Each is taken
    from the snapshot's table only when the pickle asks for it."""

    def __init__(self, buffers: Sequence[Any]) -> None:
        self.buffers = buffers
        self.at = 0

    def __iter__(self) -> _Buffers:
        return self

    def __next__(self) -> Any:
        if self.at >= len(self.buffers):
            raise StopIteration
        self.at += 1
        return self.buffers[self.at - 1]


class _Rebuilder(SessionScope):
    """Rebuilds one snapshot's objects in one session: the targets of the snapshot's markers."""

    def __init__(self, session: Session, runtime: PolicyRuntime, header: dict[str, Any]) -> None:
        super().__init__(session, runtime)
        self.sources: dict[str, list[Any]] = header.get("sources", {})
        self._codes: dict[str, list[CodeType]] = {}
        self.targets: dict[str, Any] = {
            "function": self.function,
            "function_state": self.function_state,
            "cell": CellType,
            "cell_state": self.cell_state,
            "klass": self.klass,
            "class_state": self.class_state,
            "module": self.module,
            "lru_cache": self.lru_cache,
            "namedtuple": self.namedtuple,
            "empty_cell": markers.empty_cell,
        }

    def find_class(self, module: str, name: str) -> Any:
        if module == markers.MODULE:
            target = self.targets.get(name)
            if target is None:
                raise SnapshotRefused(f"the snapshot names an unknown marker {name!r}; nothing was loaded")
            return target
        if self.restricted:
            return self.admission.resolve(module, name)
        value: Any = importlib.import_module(module)
        for part in name.split("."):
            value = getattr(value, part)
        return value

    # ---- session code ---------------------------------------------------------------------------

    def code(self, filename: str, index: int, name: str) -> CodeType:
        codes = self._codes.get(filename)
        if codes is None:
            entry = self.sources.get(filename)
            if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[1], str):
                raise SnapshotRefused(f"the snapshot has no source for {name!r}; nothing was loaded")
            count, source = entry
            cell = compile_cell(str(source), self.runtime)  # audited, transformed, as when it ran
            if cell.syntax_error is not None or cell.findings:
                why = cell.findings[0].message if cell.findings else "a syntax error"
                policy = self.runtime.name
                raise SnapshotRefused(
                    f"the code of {name!r} is refused by policy '{policy}': {why}; nothing was loaded"
                )
            codes = self._codes[filename] = cell_codes(cell)
            # Its functions and class bodies are the session's code: the audit hook judges their
            # frames as it judges the cell's (they run without the runner's exec, which would say so).
            for code in codes:
                adopt(code)
            self.session.sources[cell.filename] = (int(count), cell.lines)
        if not isinstance(index, int) or not 0 <= index < len(codes) or codes[index].co_name != name:
            raise SnapshotRefused(f"the snapshot's reference to {name!r} does not match its source")
        return codes[index]

    def function(
        self, filename: str, index: int, name: str, qualname: str, closure: tuple[Any, ...] | None
    ) -> FunctionType:
        code = self.code(filename, index, name)
        if closure is not None and not (
            isinstance(closure, tuple) and all(type(c) is CellType for c in closure)
        ):
            raise SnapshotRefused(f"the closure of {name!r} is not made of cells; nothing was loaded")
        if len(closure or ()) != len(code.co_freevars):
            raise SnapshotRefused(f"the closure of {name!r} does not match its code; nothing was loaded")
        fn = FunctionType(
            code, self.namespace, name, None, closure
        )  # code compiled from source, not the blob
        fn.__qualname__ = str(qualname)
        return fn

    def function_state(self, fn: FunctionType, state: tuple[Any, ...]) -> None:
        defaults, kwdefaults, attributes, annotations = state
        if not (defaults is None or isinstance(defaults, tuple)) or not (
            kwdefaults is None or isinstance(kwdefaults, dict)
        ):
            raise SnapshotRefused(f"the defaults of {fn.__name__!r} are malformed; nothing was loaded")
        fn.__defaults__ = defaults
        fn.__kwdefaults__ = kwdefaults
        for key, value in dict(attributes).items():
            if not isinstance(key, str) or (key.startswith("__") and key not in _FUNCTION_DICT_DUNDERS):
                raise SnapshotRefused(f"the snapshot sets {key!r} on a function; nothing was loaded")
            fn.__dict__[key] = value
        fn.__annotations__ = dict(annotations)

    def cell_state(self, cell: CellType, value: Any) -> None:
        if value is not markers.empty_cell:
            cell.cell_contents = value

    def klass(
        self,
        filename: str,
        index: int,
        name: str,
        qualname: str,
        bases: tuple[Any, ...],
        keywords: dict[str, Any],
        dataclass: dict[str, bool] | None,
    ) -> type:
        code = self.code(filename, index, name)
        if code.co_freevars or not isinstance(bases, tuple) or not isinstance(keywords, dict):
            raise SnapshotRefused(f"the class {name!r} is malformed; nothing was loaded")
        if self.restricted and keywords:
            raise SnapshotRefused(f"the class {name!r} asks for a metaclass; nothing was loaded")
        body = FunctionType(code, self.namespace, name)
        build = self.table["__build_class__"] if self.restricted else builtins.__build_class__
        # The class statement's body runs again, as it did when the session defined the class
        # (under the session's guards); its attributes are then set to their saved values.
        cls = build(body, name, *bases, **keywords)
        if not isinstance(cls, type):
            raise SnapshotRefused(f"the class {name!r} did not rebuild as a class; nothing was loaded")
        type.__setattr__(cls, "__qualname__", str(qualname))
        if dataclass is not None:
            if not isinstance(dataclass, dict) or not set(dataclass) <= _DATACLASS_PARAMS:
                raise SnapshotRefused(f"the dataclass options of {name!r} are malformed; nothing was loaded")
            decorate = import_by_name(self.table, "dataclasses").dataclass
            cls = decorate(**{k: bool(v) for k, v in dataclass.items()})(cls)
        return cls  # type: ignore[no-any-return]

    def class_state(self, cls: type, state: dict[str, Any]) -> None:
        for key, value in dict(state).items():
            if not isinstance(key, str) or (key.startswith("_") and key not in vars(cls)):
                raise SnapshotRefused(
                    f"the snapshot sets {key!r} on class {cls.__name__!r}; nothing was loaded"
                )
            if vars(cls).get(key, markers.empty_cell) is not value:
                type.__setattr__(cls, key, value)

    def module(self, name: str) -> Any:
        try:
            return import_by_name(self.table, str(name))
        except (PolicyViolation, ImportError, AttributeError) as exc:
            raise SnapshotRefused(f"the snapshot imports {name!r}: {exc}; nothing was loaded") from None

    def lru_cache(self, wrapped: Any, maxsize: int | None, typed: bool) -> Any:
        if not (maxsize is None or isinstance(maxsize, int)) or not isinstance(typed, bool):
            raise SnapshotRefused("the snapshot's lru_cache options are malformed; nothing was loaded")
        return import_by_name(self.table, "functools").lru_cache(maxsize=maxsize, typed=typed)(wrapped)

    def namedtuple(self, name: str, fields: tuple[str, ...], defaults: tuple[Any, ...] | None) -> type:
        factory = import_by_name(self.table, "collections").namedtuple
        cls: type = factory(str(name), tuple(fields), defaults=defaults)
        type.__setattr__(cls, "__module__", self.namespace["__name__"])  # as a class made in a cell
        return cls


class _Hooks:
    """What both readers do for a snapshot: globals come from the rebuilder, persistent ids are refused."""

    rebuilder: _Rebuilder

    def find_class(self, module: str, name: str) -> Any:
        return self.rebuilder.find_class(module, name)

    def persistent_load(self, pid: Any) -> Any:
        raise SnapshotRefused(
            "the snapshot uses persistent ids, which snapshots never do; nothing was loaded"
        )


class _Unpickler(_Hooks, pickle.Unpickler):
    def __init__(self, file: io.BytesIO, buffers: _Buffers, rebuilder: _Rebuilder) -> None:
        super().__init__(file, buffers=buffers)
        self.rebuilder = rebuilder


_BROKEN = object()


class _Depends(Exception):
    pass


class _SlowUnpickler(_Hooks, pickle._Unpickler):
    """The pure-Python reader, used after a record failed: its memo can be set index by index,
    and a later record that reaches a value of the failed one fails too instead of getting junk."""

    dispatch = dict(pickle._Unpickler.dispatch)
    memo: dict[int, Any]

    def __init__(self, file: io.BytesIO, buffers: _Buffers, rebuilder: _Rebuilder) -> None:
        super().__init__(file, buffers=buffers)
        self.rebuilder = rebuilder


def _checked_get(load_get: Callable[[Any], None]) -> Callable[[Any], None]:
    def load(self: Any) -> None:
        load_get(self)
        if self.stack[-1] is _BROKEN:
            raise _Depends("it depends on a value that could not be rebuilt")

    return load


for _op in (pickle.GET, pickle.BINGET, pickle.LONG_BINGET):
    _SlowUnpickler.dispatch[_op[0]] = _checked_get(_SlowUnpickler.dispatch[_op[0]])


def _memo_puts(data: Any) -> int:
    return sum(1 for op, _, _ in pickletools.genops(bytes(data)) if op.name in _MEMO_PUTS)


_MEMO_PUTS = frozenset({"MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT"})


def _recover(
    failed: Any, file: io.BytesIO, records: list[Any], index: int, buffers: _Buffers, rebuilder: _Rebuilder
) -> _SlowUnpickler:
    """A reader for the records after `records[index]`, which failed half-way: its memo keeps what
    the earlier records built and marks every slot of the failed one as broken."""
    old = failed.memo.copy() if not isinstance(failed.memo, dict) else dict(failed.memo)
    payload = file.getbuffer()
    before = sum(_memo_puts(payload[r[1] : r[1] + r[2]]) for r in records[:index])
    record = records[index]
    count = _memo_puts(payload[record[1] : record[1] + record[2]])
    reader = _SlowUnpickler(file, buffers, rebuilder)
    reader.memo = {i: old.get(i, _BROKEN) for i in range(before)}
    reader.memo.update(dict.fromkeys(range(before, before + count), _BROKEN))
    return reader


def restore_snapshot(
    session: Session, runtime: PolicyRuntime, limits: Limits, snapshot: SessionSnapshot, key: bytes
) -> SessionRestore:
    """Replace `session`'s state with the snapshot's (the caller holds its lock).

    Raises SnapshotAuthError (altered or foreign blob) or SnapshotRefused (it names something the
    policy does not allow); then the session is left as it was.
    """
    header = snapshot.header_data(key)  # authenticates before anything else is read
    saved_state = (
        dict(session.namespace),
        session.execution_count,
        session.sources.copy(),
        session.global_names,
        session.dynamic,
        session.touches_host,
    )
    session.reset()
    timeout = max(limits.timeout_s, _LOAD_TIMEOUT_S)
    try:
        info: SessionRestore = call_guarded(runtime, timeout, _load, session, runtime, snapshot, header)
    except BaseException as exc:
        namespace, count, sources, global_names, dynamic, touches_host = saved_state
        session.namespace.clear()
        session.namespace.update(namespace)
        session.execution_count = count
        session.sources.clear()
        session.sources.update(sources)
        session.global_names, session.dynamic, session.touches_host = global_names, dynamic, touches_host
        if isinstance(exc, ExecutionTimeout):
            raise SnapshotError(f"restoring the snapshot took longer than {timeout:g} s") from None
        raise
    return info


def _load(
    session: Session, runtime: PolicyRuntime, snapshot: SessionSnapshot, header: dict[str, Any]
) -> SessionRestore:
    manifest = SnapshotManifest.model_validate(header["manifest"])  # the authenticated header's
    rebuilder = _Rebuilder(session, runtime, header)
    restored: list[str] = []
    failed: dict[str, str] = {}
    imports = header.get("imports", {})
    for name, module in imports.items():
        try:
            session.namespace[name] = import_by_name(rebuilder.table, module)
            restored.append(name)
        except (PolicyViolation, ImportError, AttributeError) as exc:
            failed[name] = f"import {module} is not possible here: {exc}"[:300]
    payload = io.BytesIO(snapshot.payload)
    buffers = _Buffers(snapshot.buffers)
    unpickler: Any = _Unpickler(payload, buffers, rebuilder)
    records = header["records"]
    for index, (name, offset, _length, first_buffer, _count) in enumerate(records):
        payload.seek(offset)
        buffers.at = first_buffer
        try:
            # bound at once: a class body rebuilt by a later record may use it
            session.namespace[name] = unpickler.load()
            restored.append(name)
        except (SnapshotError, ExecutionTimeout):  # refused, or a malformed buffer table
            raise
        except PolicyViolation as exc:
            raise SnapshotRefused(
                f"rebuilding {name!r} was refused by the policy ({exc}); nothing was loaded", reason=str(exc)
            ) from None
        except Exception as exc:
            failed[name] = str(exc) if isinstance(exc, _Depends) else f"{type(exc).__name__}: {exc}"[:300]
            unpickler = _recover(unpickler, payload, records, index, buffers, rebuilder)
    session.execution_count = manifest.execution_count
    bookkeeping = header.get("bookkeeping", {})
    session.global_names = frozenset(bookkeeping.get("global_names", ()))
    session.dynamic = bool(bookkeeping.get("dynamic", False))
    session.touches_host = bool(bookkeeping.get("touches_host", False))
    return SessionRestore(
        snapshot_created_at=manifest.created_at,
        execution_count=manifest.execution_count,
        restored=restored,
        not_saved=[SkippedVariable.model_validate(s.model_dump()) for s in manifest.not_saved],
        failed=failed,
        warnings=version_warnings(manifest.python, manifest.libraries),
    )


def version_warnings(python: str, libraries: dict[str, str]) -> list[str]:
    warnings = []
    here = platform.python_version()
    if python.split(".")[:2] != here.split(".")[:2]:
        warnings.append(f"the snapshot was made with Python {python}; this is Python {here}")
    for name, version in sorted(libraries.items()):
        if name in sys.stdlib_module_names:
            continue  # older snapshots recorded json's and re's: the Python version above covers them
        module = sys.modules.get(name)
        current = getattr(module, "__version__", None) if module is not None else None
        if current is None:
            try:
                from importlib.metadata import version as dist_version

                current = dist_version(name)
            except Exception:
                current = None
        if current is None:
            warnings.append(f"the snapshot used {name} {version}, which is not installed here")
        elif current != version:
            warnings.append(f"the snapshot was made with {name} {version}; this is {name} {current}")
    return warnings
