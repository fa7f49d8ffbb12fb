"""Describe values without ever rendering a huge object in full.

Runs on the executing thread, inside the execution's guarded region: a user-defined `__repr__` or
`__len__` is user code, so it is subject to the same timeout and policy as the cell itself.

Whatever a `__repr__` returns (a `str` subclass, lone surrogates, megabytes) or raises, the text
here is a plain, bounded `str` that encodes to UTF-8 (`_text.clean`), on every boundary alike.
"""

from __future__ import annotations

import inspect as _inspect
import reprlib
import types
from typing import Any

from ._models import VariableInfo
from ._rich import summarize, table_repr, table_texts
from ._text import clean
from ._watchdog import ExecutionTimeout

__all__ = ["SCALAR_TYPES", "bounded_repr", "describe", "type_name", "value_repr", "variable_name"]

_FUNCTION_TYPES = (
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.BuiltinMethodType,
)


class _Repr(reprlib.Repr):
    """reprlib walks builtin containers lazily, so a 10**6-element list costs only what is shown."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.maxlevel = 4
        self.maxlist = self.maxtuple = self.maxset = self.maxfrozenset = self.maxdeque = 40
        self.maxarray = 40
        self.maxdict = 30
        self.maxstring = limit
        self.maxlong = limit
        self.maxother = limit

    cut = False

    def repr1(self, x: Any, level: int) -> str:
        # reprlib shortens silently; note whether it did, so results can say "truncated".
        t = type(x)
        if t in _LIMITED:
            n = len(x)
            if n > getattr(self, _LIMITED[t]) or (level <= 0 and n):
                self.cut = True
        return super().repr1(x, level)

    def repr_dict(self, x: dict[Any, Any], level: int) -> str:
        # reprlib sorts keys; a model should see the dict in its own (insertion) order.
        n = len(x)
        if n == 0:
            return "{}"
        if level <= 0:
            return "{...}"
        pieces = []
        for i, (key, value) in enumerate(x.items()):
            if i >= self.maxdict:
                pieces.append("...")
                break
            pieces.append(f"{self.repr1(key, level - 1)}: {self.repr1(value, level - 1)}")
        return "{" + ", ".join(pieces) + "}"

    def repr_int(self, x: int, level: int) -> str:
        try:
            return super().repr_int(x, level)
        except ValueError:  # more digits than sys.get_int_max_str_digits() allows
            return f"<int with {x.bit_length():,} bits>"

    def repr_instance(self, x: Any, level: int) -> str:
        # Objects that summarise themselves stay readable; others are cut after. pandas and numpy
        # reprs obey display options the code may have unbounded, so those are rendered bounded.
        text = table_repr(x, self.maxother)
        return repr(x) if text is None else text


_SIMPLE = frozenset({float, bool, type(None), complex})
SHORT_INT_BITS = 4000  # an int shorter than this is shown by its repr as it is
_SCALARS = frozenset({int, float, bool, complex, type(None)})
# Builtin types that are never a table or array and whose type name is their own `__name__`.
# Looked up only for classes whose metaclass is `type`: hashing any other class may run its code.
_PLAIN = _SCALARS | {str}
SCALAR_TYPES = _SCALARS

_LIMITED: dict[type, str] = {
    str: "maxstring",
    bytes: "maxstring",
    list: "maxlist",
    tuple: "maxtuple",
    set: "maxset",
    frozenset: "maxfrozenset",
    dict: "maxdict",
}


def bounded_repr(obj: Any, limit: int) -> tuple[str, bool]:
    """Return (text, truncated) with len(text) <= limit + a short marker."""
    t = type(obj)
    if (
        t in _SIMPLE
        or (t is int and obj.bit_length() < SHORT_INT_BITS)
        or (t is str and len(obj) * 4 < limit)
    ):
        return repr(obj), False  # the common case, without building a reprlib walker
    r = _Repr(limit)  # per call: it records whether it cut anything
    try:
        text = clean(r.repr(obj))
    except ExecutionTimeout:
        raise
    except BaseException as exc:  # a broken __repr__ is the user's; say so instead of failing the run
        text = f"<repr failed: {clean(type(exc).__name__)}>"
    if len(text) > limit:
        return _cut(text, limit)
    if r.cut:
        size = f"; len {len(obj):,}" if type(obj) in _LIMITED else ""
        return f"{text} [shortened{size}]", True
    return text, False


def value_repr(obj: Any, limit: int) -> tuple[str, bool]:
    """A trailing value as the model sees it: a summary for tables and big arrays, else the repr."""
    t = type(obj)
    if type(t) is type and t in _PLAIN:
        return bounded_repr(obj, limit)  # nothing to summarize: the common case, without looking
    summary = summarize(obj, limit, as_value=True)
    if summary is not None:
        return clean(summary), False
    return bounded_repr(obj, limit)


_PACKAGE = __name__.partition(".")[0]


def type_name(obj: Any) -> str:
    cls = type(obj)
    if type(cls) is type and cls in _PLAIN:
        return cls.__name__  # what the walk below finds for them, without it
    if isinstance(obj, types.ModuleType):
        return "module"  # also the policy's read-only module views: their class is ours, not the model's
    # The engine's own stand-ins (guards, views) are named by what they stand for: the first class
    # in their MRO that is not the engine's. Internal names never reach the model.
    for base in cls.__mro__:
        if not str(getattr(base, "__module__", "")).startswith(_PACKAGE):
            cls = base
            break
    module = getattr(cls, "__module__", "builtins")
    qual = clean(getattr(cls, "__qualname__", cls.__name__))
    # Classes the session defined live in its "__main__"; the prefix would only be noise.
    if module in ("builtins", "__main__", None):
        return qual
    return f"{clean(module) if isinstance(module, str) else '?'}.{qual}"


def _kind(obj: Any) -> str:
    if isinstance(obj, types.ModuleType):
        return "module"
    if isinstance(obj, type):
        return "class"
    if isinstance(obj, _FUNCTION_TYPES) or type(obj).__name__ == "partial":
        return "function"
    return "value"


def _callable_repr(name: str, obj: Any, kind: str) -> str:
    try:
        sig = clean(str(_inspect.signature(obj)))  # defaults are shown with their own __repr__
    except ExecutionTimeout:
        raise
    except BaseException:
        sig = "(...)"
    return f"class {name}{sig}" if kind == "class" else f"def {name}{sig}"


def describe(name: str, obj: Any, limit: int) -> VariableInfo:
    return VariableInfo.model_validate(describe_fields(name, obj, limit))


def describe_fields(name: str, obj: Any, limit: int) -> dict[str, Any]:
    """VariableInfo's fields as a dict (validated later, together with the result that holds it)."""
    name = variable_name(name, limit)
    t = type(obj)
    if t in _SCALARS:  # the common case (`x = 1`): no duck-typed probing needed
        text, truncated = bounded_repr(obj, limit)
        return {"name": name, "type": t.__name__, "repr": text, "repr_truncated": truncated}
    kind = _kind(obj)
    truncated = False
    tables = table_texts(obj, limit) if kind == "value" else None  # (repr, summary) of tables/arrays
    if kind in ("function", "class"):
        text, truncated = _cut(_callable_repr(name, obj, kind), limit)
    elif tables is not None and tables[0] is not None:
        text, truncated = _cut(clean(tables[0]), limit)
    else:
        text, truncated = bounded_repr(obj, limit)
    length = shape = dtype = size = None
    if kind == "value":
        length = _cheap_len(obj)
        shape = _shape(obj)
        if shape is not None:
            dtype = _attr_text(obj, "dtype")
            raw_size = _attr(obj, "size")
            size = raw_size if isinstance(raw_size, int) and not isinstance(raw_size, bool) else None
    return {
        "name": name,
        "type": type_name(obj),
        "kind": kind,
        "repr": text,
        "repr_truncated": truncated,
        "len": length,
        "shape": shape,
        "dtype": dtype,
        "size": size,
        "summary": clean(tables[1]) if tables is not None and tables[1] is not None else None,
    }


def variable_name(name: str, limit: int) -> str:
    """A namespace key as a result shows it: cleaned, and cut if it is longer than `limit`
    (code can bind any string with `globals()[...]`)."""
    if type(name) is str and len(name) <= limit and name.isascii():
        return name  # what cleaning and cutting leave of it, without the two calls
    return _cut(clean(name), limit)[0]


def _cut(text: str, limit: int) -> tuple[str, bool]:
    if len(text) > limit:
        return f"{text[:limit]}... [{len(text) - limit:,} more characters]", True
    return text, False


def _cheap_len(obj: Any) -> int | None:
    if not hasattr(type(obj), "__len__"):
        return None
    try:
        n = len(obj)
    except ExecutionTimeout:
        raise
    except BaseException:  # user-defined __len__ may raise anything; it is not our error
        return None
    return n


def _shape(obj: Any) -> list[int] | None:
    # Duck-typed: numpy arrays, pandas frames and the like expose `.shape` as a tuple of ints.
    if not hasattr(type(obj), "shape"):
        return None
    try:
        shape = obj.shape
    except ExecutionTimeout:
        raise
    except BaseException:
        return None
    if isinstance(shape, tuple) and all(isinstance(d, int) for d in shape):
        return list(shape)
    return None


def _attr(obj: Any, name: str) -> Any:
    try:
        return getattr(obj, name, None)
    except ExecutionTimeout:
        raise
    except BaseException:
        return None


def _attr_text(obj: Any, name: str) -> str | None:
    value = _attr(obj, name)
    if value is None:
        return None
    try:
        return clean(str(value))[:80]  # numpy/pandas dtypes print as 'int64', 'float32', ...
    except ExecutionTimeout:
        raise
    except BaseException:
        return None
