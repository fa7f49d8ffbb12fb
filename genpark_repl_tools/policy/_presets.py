"""The presets' reviewed tables: builtins, modules and attribute rules of `strict` and `standard`.

Everything here is reviewed data: the builtins a profile keeps (with the reason beside each one it
drops), the modules it may import (with the names it withholds and why), the attribute rules and
the special methods a user class may define. Nothing in this module imports mechanism.
"""

from __future__ import annotations

import builtins as _builtins
from typing import Any

from ._schema import AttributeRules, ModuleRule

__all__ = ["ATTRIBUTE_RULES", "DENIED_BUILTINS", "STANDARD_RULES", "STDLIB_RULES", "STRICT_BUILTINS"]

_EXCEPTIONS = tuple(
    sorted(
        name
        for name, value in vars(_builtins).items()
        if isinstance(value, type) and issubclass(value, BaseException) and not name.startswith("_")
    )
)

# fmt: off
STRICT_BUILTINS: tuple[str, ...] = (
    "abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr",
    "classmethod", "complex", "dict", "dir", "divmod", "enumerate", "filter", "float", "format",
    "frozenset", "getattr", "hasattr", "hash", "hex", "id", "int", "isinstance", "issubclass",
    "iter", "len", "list", "map", "max", "memoryview", "min", "next", "object", "oct", "ord", "pow",
    "print", "property", "range", "repr", "reversed", "round", "set", "setattr", "delattr",
    "slice", "sorted", "staticmethod", "str", "sum", "super", "tuple", "type", "zip",
    "None", "True", "False", "Ellipsis", "NotImplemented",
    *_EXCEPTIONS,
)
# fmt: on

# Each builtin a restricted profile withholds, with the reason and what to use instead.
DENIED_BUILTINS: dict[str, str] = {
    "open": "no file access under this policy; use io.StringIO for text in memory",
    "eval": "it runs code the audit never saw; compute the value directly",
    "exec": "it runs code the audit never saw; write the code directly",
    "compile": "it builds code the audit never saw; write the code directly",
    "globals": "it exposes the session namespace and builtins; use the variables by name",
    "locals": "it exposes frame internals; use the variables by name",
    "vars": "it exposes an object's __dict__; use getattr(obj, name) or dataclasses.asdict(obj)",
    "input": "there is no interactive input; put the data in the code or a variable",
    "breakpoint": "there is no debugger; print the values you need",
    "help": "there is no interactive help; read the documentation you know",
    "__import__": "use the import statement",
    "exit": "it would close the host's stdin; raise an exception or let the code end",
    "quit": "it would close the host's stdin; raise an exception or let the code end",
    "copyright": "not available",
    "credits": "not available",
    "license": "it reads files outside the workspace",
    "aiter": "async code is not supported",
    "anext": "async code is not supported",
}

# Special methods a class defined by the code may have: value semantics, containers, operators.
_OPERATORS = (
    "add",
    "sub",
    "mul",
    "matmul",
    "truediv",
    "floordiv",
    "mod",
    "pow",
    "lshift",
    "rshift",
    "and",
    "xor",
    "or",
)
# fmt: off
_CLASS_DUNDERS: tuple[str, ...] = (
    "__init__", "__post_init__", "__repr__", "__str__", "__format__", "__bytes__", "__hash__",
    "__bool__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__len__",
    "__length_hint__", "__iter__", "__next__", "__reversed__", "__contains__", "__getitem__",
    "__setitem__", "__delitem__", "__missing__", "__call__", "__enter__", "__exit__", "__getattr__",
    "__index__", "__int__", "__float__", "__complex__", "__round__", "__trunc__", "__floor__",
    "__ceil__", "__neg__", "__pos__", "__abs__", "__invert__", "__divmod__", "__rdivmod__",
    *(f"__{op}__" for op in _OPERATORS),
    *(f"__r{op}__" for op in _OPERATORS),
    *(f"__i{op}__" for op in _OPERATORS),
)
# fmt: on

_CLASS_DUNDER_REASONS: dict[str, str] = {
    "__del__": "a finalizer runs whenever the object is collected, outside the time limit",
    "__getattribute__": "it would intercept every attribute read, including the host's",
    "__setattr__": "it would intercept every attribute write, including the host's",
    "__delattr__": "it would intercept every attribute delete, including the host's",
    "__new__": "object-creation hooks are not available; use __init__",
    "__init_subclass__": "class-creation hooks are not available",
    "__class_getitem__": "class-creation hooks are not available",
    "__set_name__": "class-creation hooks are not available",
    "__prepare__": "class-creation hooks are not available",
    "__mro_entries__": "class-creation hooks are not available",
    "__instancecheck__": "it would run code inside the host's isinstance() checks",
    "__subclasscheck__": "it would run code inside the host's issubclass() checks",
    "__get__": "descriptors are not available; use property",
    "__set__": "descriptors are not available; use property",
    "__delete__": "descriptors are not available; use property",
    "__reduce__": "pickling is not available",
    "__reduce_ex__": "pickling is not available",
    "__getstate__": "pickling is not available",
    "__setstate__": "pickling is not available",
    "__array__": "array protocols hand raw data to C code",
    "__array_interface__": "array protocols hand raw memory addresses to C code",
    "__array_ufunc__": "array protocols are not available",
    "__array_function__": "array protocols are not available",
    "__buffer__": "buffer protocols hand raw memory to C code",
    "__fspath__": "path protocols are not available; pass a str",
    "__dir__": "dir() is answered by the policy",
    "__aenter__": "async code is not supported",
    "__aexit__": "async code is not supported",
    "__aiter__": "async code is not supported",
    "__anext__": "async code is not supported",
    "__await__": "async code is not supported",
}

ATTRIBUTE_RULES = AttributeRules(
    readable_private=(
        "__name__",
        "__qualname__",
        "__doc__",
        "__module__",
        "__version__",
        "_asdict",
        "_replace",
        "_fields",
        "_field_defaults",
        "_make",
    ),
    denied=(
        # frames: each of these leads to a frame's globals and builtins
        "f_back",
        "f_builtins",
        "f_code",
        "f_globals",
        "f_locals",
        "f_trace",
        "f_trace_lines",
        "f_trace_opcodes",
        "f_lasti",
        # closures and Python 2 spellings of function internals
        "cell_contents",
        "func_globals",
        "func_code",
        "func_closure",
        "func_defaults",
        "im_func",
        "im_self",
        "im_class",
    ),
    denied_prefixes=("co_", "gi_", "cr_", "ag_", "tb_"),
    routed=(
        # str.format / format_map look attributes up by name: "{0.__class__}".format(x)
        "format",
        "format_map",
        # ABCMeta.register changes isinstance() for everyone when the ABC belongs to the host
        "register",
        # numpy's ndarray.ctypes hands out ctypes objects (raw memory)
        "ctypes",
        # pandas' CategoricalDtype.type is a metaclass (it would build classes from any namespace)
        "type",
        # pandas' Styler applies format strings (attribute lookups by name) to any cell object
        "style",
        # pandas evaluates expression strings and dispatches on method names given as strings
        "query",
        "eval",
        "agg",
        "aggregate",
        "apply",
        "transform",
        "map",
        "applymap",
        # statistics.NormalDist.samples draws from the host's random generator unless seeded
        "samples",
        # a class's mro() lists host classes the session gets a guarded form of (checked subclasses)
        "mro",
        # matplotlib keeps these format strings and applies them later (str.format on tick values)
        "set_major_formatter",
        "set_minor_formatter",
        "bar_label",
        "clabel",
        "colorbar",
        # functools.cached_property.lock (Python 3.11) is shared by every instance of the host's class
        "lock",
        # pathlib's classes hold the real os.path module (posixpath, ntpath) as `parser` (Python 3.13+)
        # and, on 3.15, PureWindowsPath also as `ntpath` (imported in its class body)
        "parser",
        "ntpath",
        # ForwardRef.evaluate looks a bare name up in namespaces it picks and the real builtins (3.14+)
        "evaluate",
    ),
    class_dunders=_CLASS_DUNDERS,
    class_dunder_names=("__slots__", "__hash__"),
    class_dunder_reasons=_CLASS_DUNDER_REASONS,
)


def _rule(name: str, note: str = "", **kw: Any) -> ModuleRule:
    return ModuleRule(name=name, note=note, **kw)


_PROCESS_WIDE = "changes a process-wide setting shared with the host and other sessions"
_PANDAS_OPTIONS = (
    "pandas options are shared by the whole process (the host and other sessions); pass display "
    "arguments to the call instead (df.to_string(max_rows=...), df.round(2))"
)
_MPL_SETTINGS = (
    "it changes matplotlib's rcParams, shared by the whole process (the host and other sessions); pass "
    "style arguments to the plotting call instead (color=, linewidth=, figsize=, ...)"
)
_MPL_HIDDEN = {
    "rc": _MPL_SETTINGS,
    "rcdefaults": _MPL_SETTINGS,
    "rc_file": _MPL_SETTINGS,
    "rc_file_defaults": _MPL_SETTINGS,
    "rc_context": _MPL_SETTINGS,
    "xkcd": _MPL_SETTINGS,
    "interactive": _PROCESS_WIDE,
    "ion": _PROCESS_WIDE,
    "ioff": _PROCESS_WIDE,
    "install_repl_displayhook": _PROCESS_WIDE,
    "uninstall_repl_displayhook": _PROCESS_WIDE,
    "set_loglevel": _PROCESS_WIDE,
}

# Reviewed standard-library modules for pure computation. Module attributes that are modules not
# admitted here are hidden automatically; private names are always hidden.
STDLIB_RULES: tuple[ModuleRule, ...] = (
    _rule("math"),
    _rule("cmath"),
    _rule("statistics"),
    _rule("decimal", "contexts are per session (DefaultContext and friends are session copies)"),
    _rule("fractions"),
    _rule("numbers"),
    _rule("random", "module functions use a per-session generator; seed() affects only the session"),
    _rule("json", submodules=True),
    _rule("json.tool", allowed=False, note="a command-line tool that reads files and sys.argv"),
    _rule("re"),
    _rule("datetime"),
    _rule("zoneinfo", hidden={"reset_tzpath": _PROCESS_WIDE}),
    _rule(
        "calendar",
        "module functions and setfirstweekday() use a calendar of the session's own",
        hidden={
            "LocaleTextCalendar": "it changes the process-wide locale",
            "LocaleHTMLCalendar": "it changes the process-wide locale",
            "different_locale": "it changes the process-wide locale",
            "main": "a command-line tool that reads sys.argv",
        },
    ),
    _rule(
        "time",
        "sleep() is interruptible so the time limit can stop it",
        only=(
            "time",
            "time_ns",
            "perf_counter",
            "perf_counter_ns",
            "monotonic",
            "monotonic_ns",
            "process_time",
            "process_time_ns",
            "thread_time",
            "thread_time_ns",
            "sleep",
            "strftime",
            "strptime",
            "gmtime",
            "localtime",
            "mktime",
            "asctime",
            "ctime",
            "struct_time",
            "timezone",
            "altzone",
            "daylight",
            "tzname",
            "get_clock_info",
        ),
    ),
    _rule("collections", submodules=True),
    _rule("itertools"),
    _rule("functools", "wraps/update_wrapper and total_ordering accept only the session's own objects"),
    _rule("operator", "attrgetter and methodcaller check attribute names like getattr()"),
    _rule(
        "string",
        "Formatter is left out: it looks attributes up by name",
        only=(
            "ascii_letters",
            "ascii_lowercase",
            "ascii_uppercase",
            "digits",
            "hexdigits",
            "octdigits",
            "punctuation",
            "printable",
            "whitespace",
            "capwords",
            "Template",
        ),
    ),
    _rule("textwrap"),
    _rule("heapq"),
    _rule("bisect"),
    _rule("dataclasses", "dataclass() and make_dataclass() accept only the session's own names and classes"),
    _rule(
        "enum",
        "the functional API refuses private member names",
        hidden={
            "EnumType": "a metaclass creates classes with arbitrary special attributes; subclass Enum",
            "EnumMeta": "a metaclass creates classes with arbitrary special attributes; subclass Enum",
            "global_enum": "it writes into the host's __main__ module",
            "global_enum_repr": "only meaningful with global_enum",
            "global_flag_repr": "only meaningful with global_enum",
            "global_str": "only meaningful with global_enum",
            "pickle_by_enum_name": "pickling is not available",
            "pickle_by_global_name": "pickling is not available",
        },
    ),
    _rule("typing", hidden={"Type": "it exposes the real metaclass 'type'; use type[...]"}),
    _rule(
        "abc",
        only=(
            "ABC",
            "abstractmethod",
            "abstractproperty",
            "abstractclassmethod",
            "abstractstaticmethod",
        ),
    ),
    _rule("copy"),
    _rule("pprint"),
    _rule("queue"),
    _rule(
        "io",
        "in-memory streams only",
        only=(
            "StringIO",
            "BytesIO",
            "TextIOWrapper",
            "UnsupportedOperation",
            "SEEK_SET",
            "SEEK_CUR",
            "SEEK_END",
        ),
    ),
    _rule(
        "csv",
        hidden={
            "register_dialect": _PROCESS_WIDE,
            "unregister_dialect": _PROCESS_WIDE,
            "field_size_limit": _PROCESS_WIDE,
        },
    ),
    _rule("difflib"),
    _rule("graphlib"),
    _rule("keyword"),
    _rule("unicodedata"),
    _rule("base64"),
    _rule("binascii"),
    _rule("struct"),
    _rule("array"),
    _rule("hashlib"),
    _rule("hmac"),
    _rule("secrets"),
    _rule("uuid"),
    _rule("html", submodules=True),
    _rule("colorsys"),
)

# The data stack (admitted when installed) and files inside the workspace.
STANDARD_RULES: tuple[ModuleRule, ...] = (
    _rule("pathlib", "paths outside the workspace are refused when used"),
    _rule(
        "numpy",
        submodules=True,
        hidden={
            "seterrcall": "the callback would run wherever numpy reports errors later",
            "add_docstring": "it changes the host's objects",
            "add_newdoc": "it changes the host's objects",
            "add_newdoc_ufunc": "it changes the host's objects",
            "test": "it runs the test suite in subprocesses",
        },
    ),
    _rule("numpy.ctypeslib", allowed=False, note="raw memory access through ctypes"),
    _rule("numpy.testing", allowed=False, note="builds and runs extension modules"),
    _rule("numpy.f2py", allowed=False, note="compiles code in subprocesses"),
    _rule("numpy.distutils", allowed=False, note="compiles code in subprocesses"),
    _rule("numpy.core", allowed=False, note="internal; use the numpy namespace"),
    _rule("numpy.lib.format", allowed=False, note="low-level file format internals; use numpy.load/save"),
    _rule(
        "numpy.lib.stride_tricks",
        "as_strided can address memory outside the array",
        only=("sliding_window_view", "broadcast_to", "broadcast_arrays", "broadcast_shapes"),
    ),
    _rule(
        "numpy.lib",
        submodules=True,
        hidden={
            "add_docstring": "it changes the host's objects",
            "add_newdoc": "it changes the host's objects",
            "test": "it runs the test suite in subprocesses",
        },
    ),
    _rule(
        "pandas",
        "expression strings and string method names are checked like attribute names",
        hidden={
            "set_option": _PANDAS_OPTIONS,
            "reset_option": _PANDAS_OPTIONS,
            "option_context": _PANDAS_OPTIONS,
            "set_eng_float_format": _PANDAS_OPTIONS,
        },
    ),
    _rule("pandas.api"),
    _rule("pandas.api.types"),
    _rule("pandas.api.indexers"),
    _rule("pandas.api.typing"),
    _rule(
        "pandas.plotting",
        hidden={
            "register_matplotlib_converters": _PROCESS_WIDE,
            "deregister_matplotlib_converters": _PROCESS_WIDE,
            "plot_params": _PROCESS_WIDE,
        },
    ),
    _rule("pandas.tseries", submodules=True),
    _rule("pandas.errors"),
    _rule("pandas.arrays"),
    _rule("pandas.testing"),
    _rule("pandas.api.extensions", allowed=False, note="registering accessors changes the host's classes"),
    _rule(
        "scipy",
        submodules=True,
        hidden={
            "LowLevelCallable": "it calls native function pointers",
            "test": "it runs the test suite in subprocesses",
        },
    ),
    _rule("scipy.special.cython_special", allowed=False, note="native function pointers"),
    _rule("scipy.linalg.cython_blas", allowed=False, note="native function pointers"),
    _rule("scipy.linalg.cython_lapack", allowed=False, note="native function pointers"),
    _rule("scipy.optimize.cython_optimize", allowed=False, note="native function pointers"),
    _rule("matplotlib", submodules=True, hidden={"test": "it runs the test suite", **_MPL_HIDDEN}),
    _rule("matplotlib.pyplot", "rcParams is read-only", hidden=_MPL_HIDDEN),
    _rule("matplotlib.style", allowed=False, note=_MPL_SETTINGS),
    _rule("matplotlib.dates", hidden={"set_epoch": _PROCESS_WIDE}),
    _rule("matplotlib.scale", hidden={"register_scale": _PROCESS_WIDE}),
    _rule("matplotlib.projections", hidden={"register_projection": _PROCESS_WIDE}),
    _rule("matplotlib.backend_bases", hidden={"register_backend": _PROCESS_WIDE}),
    _rule(
        "matplotlib.colors",
        hidden={
            "ColorConverter": "its color table is process-wide; use matplotlib.colors.to_rgba()",
            "colorConverter": "its color table is process-wide; use matplotlib.colors.to_rgba()",
        },
    ),
    _rule("matplotlib.testing", allowed=False, note="test helpers that start subprocesses"),
    _rule("matplotlib.sphinxext", allowed=False, note="documentation build helpers"),
    _rule("mpl_toolkits", submodules=True),
)
