"""Describe values without ever rendering a huge object in full.

Runs on the executing thread, inside the execution's guarded region: a user-defined `__repr__` or
`__len__` is user code, so it is subject to the same timeout and policy as the cell itself.

The guards stop what the code may *do*; they do not stop host code from *reading* the host. So
nothing here evaluates text the session controls or looks names up where the session points: a
callable's signature is built from its code object (never `inspect.signature`, which evaluates a
class's docstring signature, `__text_signature__`, in the module its `__module__` names and follows
`__signature__` and `__wrapped__`), and a class is named from `type`'s own slots, never through its
metaclass. A value that cannot be described reads `<unrepresentable Foo>`; the listing goes on.

Whatever a `__repr__` returns (a `str` subclass, lone surrogates, megabytes) or raises, the text
here is a plain, bounded `str` that encodes to UTF-8 (`_text.clean`), on every boundary alike.
"""

from __future__ import annotations

import array
import collections
import reprlib
import sys as _sys
import types
from typing import Any, ForwardRef

from ._models import VariableInfo
from ._rich import summarize, table_repr, table_texts
from ._text import clean
from ._watchdog import ExecutionTimeout

__all__ = [
    "bounded_repr",
    "class_name",
    "describe",
    "module_of",
    "short_type_name",
    "signature_text",
    "type_name",
    "unrepresentable",
    "value_repr",
    "variable_name",
]

_FUNCTION_TYPES = (
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.BuiltinMethodType,
)

# `type`'s own slots, read without the class's metaclass (whose `__getattribute__` or `__name__`
# property would be the session's code) and without entries of the class's dict shadowing them.
_type_name = type.__dict__["__name__"].__get__
_type_qualname = type.__dict__["__qualname__"].__get__
_type_module = type.__dict__["__module__"].__get__
_type_mro = type.__dict__["__mro__"].__get__
_type_dict = type.__dict__["__dict__"].__get__
_method_func = types.MethodType.__dict__["__func__"].__get__
_static_func = staticmethod.__dict__["__func__"].__get__
_builtin_text_signature = types.BuiltinFunctionType.__dict__["__text_signature__"].__get__
_forward_arg = ForwardRef.__dict__["__forward_arg__"].__get__  # a slot: no code of the session's runs
_CO_VARARGS = 0x04
_CO_VARKEYWORDS = 0x08


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
        if type(t) is not type or t not in _WALKED:
            return self.repr_instance(x, level)
        limit = _LIMITED.get(t)
        if limit is not None:
            n = len(x)
            if n > getattr(self, limit) or (level <= 0 and n):
                self.cut = True
        # reprlib picks its method by `type(x).__name__`: a metaclass's code, and a session class
        # named `dict` would be walked as one. Only the builtin containers are walked.
        method: Any = getattr(self, _WALKED[t])
        return str(method(x, level))

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
_SHORT_INT_BITS = 4000  # an int shorter than this is shown by its repr as it is
_SCALARS = frozenset({int, float, bool, complex, type(None)})
# Builtin types that are never a table or array and whose type name is their own `__name__`.
# Looked up only for classes whose metaclass is `type`: hashing any other class may run its code.
_PLAIN = _SCALARS | {str}

# The exact types reprlib walks itself, and its method for each. Anything else (subclasses too)
# shows its own repr, cut after (`repr_instance`).
_WALKED: dict[type, str] = {
    t: f"repr_{t.__name__}"
    for t in (tuple, list, set, frozenset, dict, str, int, array.array, collections.deque)
}

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
        or (t is int and obj.bit_length() < _SHORT_INT_BITS)
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
        name: str = _type_name(cls)  # what class_name finds for them, without its walk
        return name
    if issubclass(cls, types.ModuleType):
        return "module"  # also the policy's read-only module views: their class is ours, not the model's
    return class_name(cls)


def class_name(cls: type) -> str:
    """`module.Qualname` of a class, read from `type`'s slots: no code of the class or its metaclass runs.

    The engine's own stand-ins (guards, views) are named by what they stand for: the first class in
    their MRO that is not the engine's. Internal names never reach the model.
    """
    for base in _type_mro(cls):
        if not module_of(base).startswith(_PACKAGE):
            cls = base
            break
    module = module_of(cls)
    qual = _text_of(_type_qualname(cls))
    # Classes the session defined live in its "__main__"; the prefix would only be noise.
    if module in ("builtins", "__main__", "?"):
        return qual
    return f"{module}.{qual}"


def short_type_name(obj: Any) -> str:
    """The `__name__` of `obj`'s class, from `type`'s own slot: runs no code of the class or its metaclass."""
    return _text_of(_type_name(type(obj)))


def unrepresentable(obj: Any) -> str:
    """What a value reads as when describing it failed or ran out of time."""
    return f"<unrepresentable {short_type_name(obj)}>"


def module_of(cls: type) -> str:
    """A class's `__module__` as text ('?' if it is not a str), read from `type`'s own slot."""
    # Whatever the class body stored as `__module__`: read as text, never called or compared as is.
    return _text_of(_type_module(cls))


def _text_of(value: Any) -> str:
    """`value` as plain text if it is a str (a subclass read without its methods), else "?"."""
    return clean(value) if issubclass(type(value), str) else "?"


def _kind(obj: Any) -> str:
    # issubclass on type(obj), not isinstance: isinstance asks an object of another type for its
    # `__class__`, which may be the session's code.
    t = type(obj)
    if issubclass(t, types.ModuleType):
        return "module"
    if issubclass(t, type):
        return "class"
    if issubclass(t, _FUNCTION_TYPES) or _type_name(t) == "partial":
        return "function"
    return "value"


def signature_text(obj: Any, limit: int) -> str:
    """A callable's signature as `inspect.signature` prints it, built without evaluating any text.

    Python functions, methods and classes (through their `__new__`/`__init__`, or a metaclass's
    `__call__`) from their code object, defaults and annotations; builtins from their C text
    signature, as written; anything else "(...)". Defaults and annotations are shown by their
    bounded repr (the session's code, run here under the guards), each cut at `limit`.
    """
    t = type(obj)
    if t is types.FunctionType:
        return _function_signature(obj, 0, limit)
    if t is types.MethodType:
        func = _method_func(obj)
        return _function_signature(func, 1, limit) if type(func) is types.FunctionType else "(...)"
    if t is types.BuiltinFunctionType:
        return _builtin_signature(obj)
    if issubclass(t, type):
        return _class_signature(obj, limit)
    return "(...)"


def _class_signature(cls: type, limit: int) -> str:
    meta = type(cls)
    if meta is not type:  # a metaclass's own __call__ decides what calling the class takes
        for base in _type_mro(meta):
            if base is type:
                break
            call = _type_dict(base).get("__call__")
            if call is not None:
                return _function_signature(call, 1, limit) if type(call) is types.FunctionType else "(...)"
    for base in _type_mro(cls):
        if base is object:
            return "()"
        namespace = _type_dict(base)
        new, init = namespace.get("__new__"), namespace.get("__init__")
        if type(new) is staticmethod:
            new = _static_func(new)
        if type(new) is types.FunctionType:
            return _function_signature(new, 1, limit)
        if type(init) is types.FunctionType:
            return _function_signature(init, 1, limit)
        if new is not None or init is not None:
            return "(...)"  # made in C (a builtin base): no code object to read it from
    return "(...)"


_NO_DEFAULT: Any = object()


def _function_signature(fn: types.FunctionType, skip: int, limit: int) -> str:
    code = fn.__code__  # the function type's own slots: `fn` is exactly a function
    defaults = fn.__defaults__ or ()
    kwdefaults = fn.__kwdefaults__ or {}
    annotations: Any = fn.__annotations__  # 3.14 computes them here: the session's code, guarded
    if not issubclass(type(annotations), dict):
        annotations = {}
    names = code.co_varnames
    positional = code.co_argcount
    keyword_only = code.co_kwonlyargcount
    first_default = positional - len(defaults)
    parts: list[str] = []
    for i in range(positional):
        default = defaults[i - first_default] if i >= first_default else _NO_DEFAULT
        parts.append(_parameter(names[i], annotations, default, limit))
        if i + 1 == code.co_posonlyargcount:
            parts.append("/")
    index = positional + keyword_only
    if code.co_flags & _CO_VARARGS:
        parts.append("*" + _parameter(names[index], annotations, _NO_DEFAULT, limit))
        index += 1
    elif keyword_only:
        parts.append("*")
    for name in names[positional : positional + keyword_only]:
        parts.append(_parameter(name, annotations, dict.get(kwdefaults, name, _NO_DEFAULT), limit))
    if code.co_flags & _CO_VARKEYWORDS:
        parts.append("**" + _parameter(names[index], annotations, _NO_DEFAULT, limit))
    if skip:  # the bound first parameter (self, cls), and a "/" right after it
        parts = parts[1:]
        if parts and parts[0] == "/":
            parts = parts[1:]
    text = f"({', '.join(parts)})"
    returns = dict.get(annotations, "return", _NO_DEFAULT)
    return text if returns is _NO_DEFAULT else f"{text} -> {_annotation(returns, limit)}"


def _parameter(name: str, annotations: dict[str, Any], default: Any, limit: int) -> str:
    text = clean(name)
    annotation = dict.get(annotations, name, _NO_DEFAULT)
    if annotation is not _NO_DEFAULT:
        text = f"{text}: {_annotation(annotation, limit)}"
        return text if default is _NO_DEFAULT else f"{text} = {bounded_repr(default, limit)[0]}"
    return text if default is _NO_DEFAULT else f"{text}={bounded_repr(default, limit)[0]}"


def _annotation(annotation: Any, limit: int) -> str:
    # As inspect.formatannotation shows them: a class by its name, a forward reference by the text it
    # refers to (typing.NamedTuple's fields are ones, and from Python 3.14 any name not defined when
    # the annotations are read; inspect shows them so from 3.14), anything else by its repr.
    t = type(annotation)
    if issubclass(t, type) and not issubclass(t, types.GenericAlias):
        return class_name(annotation)
    if t is ForwardRef:
        text = _forward_arg(annotation)
        if type(text) is str:
            return _cut(clean(text), limit)[0]
    text = bounded_repr(annotation, limit)[0]
    return text if t is str else text.replace("typing.", "")


def _builtin_signature(fn: Any) -> str:
    # The C function's own text (a session cannot make a builtin function), shown as written: its
    # defaults are never evaluated. `$module` / `$self` name the bound first parameter.
    text = _builtin_text_signature(fn)
    if type(text) is not str:
        return "(...)"
    if text.startswith("($"):
        rest = text.partition(",")[2].lstrip()
        text = "(" + rest if rest else "()"
        if text.startswith("(/, "):
            text = "(" + text[4:]
        elif text == "(/)":
            text = "()"
    return clean(text)


def _callable_repr(name: str, obj: Any, kind: str, limit: int) -> str:
    sig = signature_text(obj, limit)
    return f"class {name}{sig}" if kind == "class" else f"def {name}{sig}"


def describe(name: str, obj: Any, limit: int) -> VariableInfo:
    return VariableInfo.model_validate(describe_fields(name, obj, limit))


def describe_fields(name: str, obj: Any, limit: int) -> dict[str, Any]:
    """VariableInfo's fields as a dict (validated later, together with the result that holds it).

    Never raises but for the deadline: a value whose description fails reads `<unrepresentable Foo>`.
    """
    name = variable_name(name, limit)
    t = type(obj)
    if type(t) is type and t in _SCALARS:  # the common case (`x = 1`): no duck-typed probing needed
        text, truncated = bounded_repr(obj, limit)
        return {"name": name, "type": _type_name(t), "repr": text, "repr_truncated": truncated}
    try:
        return _fields(name, obj, limit)
    except ExecutionTimeout:
        raise
    except BaseException:  # the value's own code failed where no guard expected it to
        return unrepresentable_fields(name, obj)


def unrepresentable_fields(name: str, obj: Any) -> dict[str, Any]:
    """The fields of a value that could not be described (failed, or ran out of time)."""
    return {"name": name, "type": short_type_name(obj), "repr": unrepresentable(obj), "repr_truncated": True}


def _fields(name: str, obj: Any, limit: int) -> dict[str, Any]:
    kind = _kind(obj)
    truncated = False
    tables = table_texts(obj, limit) if kind == "value" else None  # (repr, summary) of tables/arrays
    if kind in ("function", "class"):
        text, truncated = _cut(_callable_repr(name, obj, kind, limit), limit)
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
            size = raw_size if issubclass(type(raw_size), int) and type(raw_size) is not bool else None
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


def _defines(cls: type, name: str) -> bool:
    """Whether a class in `cls`'s MRO defines `name` (read from their dicts, not through the metaclass)."""
    return any(name in _type_dict(base) for base in _type_mro(cls))


def _cheap_len(obj: Any) -> int | None:
    if not _defines(type(obj), "__len__"):
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
    if not _defines(type(obj), "shape"):
        return None
    try:
        shape = obj.shape
    except ExecutionTimeout:
        raise
    except BaseException:
        return None
    if type(shape) is tuple and all(issubclass(type(d), int) for d in shape):
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


def prepare_data() -> None:
    """Do now what a process's first table would do (pandas' lazy paths, the summary and the variable
    listing of a frame): a fork template calls it after preloading, so each process it forks shows
    its first table without paying for them. Nothing is kept; failing here leaves it to that table."""
    pd = _sys.modules.get("pandas")
    if pd is None:
        return
    try:
        frame = pd.DataFrame({"a": [1, 2, 3], "b": [4.0, 5.0, 6.0], "c": ["x", "y", "z"]})
        for value in (frame, frame.describe(), frame["a"]):
            value_repr(value, 2000)
            describe("value", value, 200)
    except Exception:
        pass
