"""The policy as plain data: what executed code may use. Mechanism lives in the runtime modules.

Everything here is reviewed data: the builtins a profile keeps (with the reason beside each one it
drops), the modules it may import (with the names it withholds and why), the attribute rules and
the special methods a user class may define. Nothing in this module imports mechanism.
"""

from __future__ import annotations

import builtins as _builtins
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["AttributeRules", "ModuleRule", "Policy"]


class ModuleRule(BaseModel):
    """What one module (and, with `submodules`, the modules below it) may be imported for."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Dotted module name, e.g. 'json' or 'numpy.linalg'.")
    allowed: bool = Field(True, description="False refuses the module (and its submodules).")
    submodules: bool = Field(False, description="Also admit submodules that no other rule names.")
    only: tuple[str, ...] | None = Field(None, description="If set, the only public names exposed.")
    hidden: dict[str, str] = Field(
        default_factory=dict, description="Public names withheld from code, each with the reason."
    )
    note: str = Field("", description="Why the module is allowed or refused.")


class AttributeRules(BaseModel):
    """Which attribute names code may use, and which special methods its classes may define."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    readable_private: tuple[str, ...] = Field(
        description="Names starting with '_' that code may read: strings such as __name__, and "
        "namedtuple's public methods."
    )
    denied: tuple[str, ...] = Field(description="Public names refused anyway (frame and code internals).")
    denied_prefixes: tuple[str, ...] = Field(description="Prefixes of refused public names.")
    routed: tuple[str, ...] = Field(
        description="Attribute reads checked at run time (dynamic attribute lookups hide behind them)."
    )
    class_dunders: tuple[str, ...] = Field(
        description="Special methods a class defined by the code may have."
    )
    class_dunder_names: tuple[str, ...] = Field(description="Special names a class body may assign.")
    class_dunder_reasons: dict[str, str] = Field(
        default_factory=dict, description="Why notable special methods are refused."
    )


class Policy(BaseModel):
    """What code run by the engine may do.

    Derive one from a preset rather than building it field by field:
    `Policy.standard().allow_imports("sympy").with_workspace("/data/run-7")`.
    Policies are immutable; `with_*`/`allow_*`/`deny_*` methods return a new one.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Preset name this policy derives from, shown in every result.")
    restricted: bool = Field(description="False: full Python (namespace isolation and telemetry only).")
    builtins: tuple[str, ...] | None = Field(
        None, description="Builtin names the code may use; None means all of them (trusted)."
    )
    denied_builtins: dict[str, str] = Field(
        default_factory=dict, description="Builtins withheld, each with the reason and what to use instead."
    )
    imports: tuple[ModuleRule, ...] = Field((), description="Modules the code may import (restricted only).")
    attributes: AttributeRules | None = Field(None, description="Attribute rules (restricted only).")
    workspace: Path | None = Field(
        None,
        description="Directory the code may use for files. None with files=True: a temporary "
        "directory per engine, removed with it.",
    )
    files: bool = Field(False, description="Whether the code may open files (inside the workspace only).")
    threads: bool = Field(False, description="Whether the code may start threads (trusted only).")
    max_constant_bits: int = Field(
        1_000_000, gt=0, description="Largest integer a constant expression may produce, in bits."
    )
    max_constant_length: int = Field(
        10_000_000, gt=0, description="Longest string/bytes/list a constant expression may produce."
    )

    @model_validator(mode="after")
    def _consistent(self) -> Policy:
        if self.restricted and self.threads:
            raise ValueError(
                "threads=True needs restricted=False: code on another thread runs outside the guards"
            )
        if self.restricted and (self.builtins is None or self.attributes is None):
            raise ValueError("a restricted policy needs explicit builtins and attribute rules")
        return self

    # ---- presets ----------------------------------------------------------------------------------

    @classmethod
    def trusted(cls) -> Policy:
        """Full Python: no audit, no guards; sessions are still isolated, captured and time-limited."""
        return cls(name="trusted", restricted=False, files=True, threads=True)

    @classmethod
    def strict(cls) -> Policy:
        """Pure computation: reviewed builtins, a reviewed stdlib allowlist, no files, no threads."""
        return cls(
            name="strict",
            restricted=True,
            builtins=_STRICT_BUILTINS,
            denied_builtins=dict(_DENIED_BUILTINS),
            imports=_STDLIB_RULES,
            attributes=_ATTRIBUTE_RULES,
            files=False,
        )

    @classmethod
    def standard(cls) -> Policy:
        """Strict plus the data stack when installed, and files inside the workspace."""
        denied = dict(_DENIED_BUILTINS)
        del denied["open"]
        return cls(
            name="standard",
            restricted=True,
            builtins=(*_STRICT_BUILTINS, "open"),
            denied_builtins=denied,
            imports=(*_STDLIB_RULES, *_STANDARD_RULES),
            attributes=_ATTRIBUTE_RULES,
            files=True,
        )

    @classmethod
    def preset(cls, name: str) -> Policy:
        presets = {"strict": cls.strict, "standard": cls.standard, "trusted": cls.trusted}
        try:
            return presets[name]()
        except KeyError:
            known = ", ".join(sorted(presets))
            raise ValueError(f"unknown policy {name!r}; choose one of: {known}") from None

    # ---- derivation -------------------------------------------------------------------------------

    def with_workspace(self, path: str | Path) -> Policy:
        """Use `path` as the workspace (file access there needs `files`, which standard has)."""
        return self.model_copy(update={"workspace": Path(path)})

    def with_files(self, enabled: bool = True) -> Policy:
        """Allow (or refuse) opening files inside the workspace."""
        return self.model_copy(update={"files": enabled})

    def allow_imports(self, *names: str, submodules: bool = True) -> Policy:
        """Admit more modules (with their submodules unless `submodules=False`).

        Modules admitted here get no per-name review: their public API is exposed as is. The
        runtime still hides private names, refuses writes to the module, and its audit hook still
        refuses processes, network and files outside the workspace.
        """
        if not self.restricted:
            return self
        added = tuple(
            ModuleRule(name=n, submodules=submodules, note="allowed by allow_imports()") for n in names
        )
        kept = tuple(r for r in self.imports if r.name not in names)
        return self.model_copy(update={"imports": (*kept, *added)})

    def deny_imports(self, *names: str, reason: str = "refused by deny_imports()") -> Policy:
        """Refuse modules (and their submodules) even if a broader rule admits them."""
        if not self.restricted:
            return self
        refused = tuple(ModuleRule(name=n, allowed=False, note=reason) for n in names)
        kept = tuple(r for r in self.imports if r.name not in names)
        return self.model_copy(update={"imports": (*kept, *refused)})

    # ---- lookups (pure functions of the data) -----------------------------------------------------

    def module_rule(self, name: str) -> ModuleRule | None:
        """The rule that decides `name`: its own, or the nearest ancestor's with submodules=True.

        A refusing ancestor refuses every module below it. Private modules (any part starting
        with '_') are never admitted.
        """
        if any(part.startswith("_") or not part for part in name.split(".")):
            return None
        rules = {r.name: r for r in self.imports}
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            rule = rules.get(".".join(parts[:i]))
            if rule is not None and not rule.allowed:
                return rule
        for i in range(len(parts), 0, -1):
            rule = rules.get(".".join(parts[:i]))
            if rule is None:
                continue
            if not rule.allowed:
                return rule
            if i == len(parts) or rule.submodules:
                return rule
            return None
        return None

    def allows_module(self, name: str) -> bool:
        rule = self.module_rule(name)
        return rule is not None and rule.allowed

    def allowed_modules(self) -> list[str]:
        """Top-level modules code may import, for messages."""
        return sorted({r.name.split(".")[0] for r in self.imports if r.allowed and "." not in r.name})


# ---- reviewed data ----------------------------------------------------------------------------------

_EXCEPTIONS = tuple(
    sorted(
        name
        for name, value in vars(_builtins).items()
        if isinstance(value, type) and issubclass(value, BaseException) and not name.startswith("_")
    )
)

# fmt: off
_STRICT_BUILTINS: tuple[str, ...] = (
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
_DENIED_BUILTINS: dict[str, str] = {
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

_ATTRIBUTE_RULES = AttributeRules(
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
    ),
    class_dunders=_CLASS_DUNDERS,
    class_dunder_names=("__slots__", "__hash__"),
    class_dunder_reasons=_CLASS_DUNDER_REASONS,
)


def _rule(name: str, note: str = "", **kw: Any) -> ModuleRule:
    return ModuleRule(name=name, note=note, **kw)


_PROCESS_WIDE = "changes a process-wide setting shared with the host and other sessions"

# Reviewed standard-library modules for pure computation. Module attributes that are modules not
# admitted here are hidden automatically; private names are always hidden.
_STDLIB_RULES: tuple[ModuleRule, ...] = (
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
        hidden={
            "setfirstweekday": _PROCESS_WIDE,
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
_STANDARD_RULES: tuple[ModuleRule, ...] = (
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
    _rule("pandas", "expression strings and string method names are checked like attribute names"),
    _rule("pandas.api"),
    _rule("pandas.api.types"),
    _rule("pandas.api.indexers"),
    _rule("pandas.api.typing"),
    _rule("pandas.plotting"),
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
    _rule("matplotlib", submodules=True, hidden={"test": "it runs the test suite"}),
    _rule("matplotlib.testing", allowed=False, note="test helpers that start subprocesses"),
    _rule("matplotlib.sphinxext", allowed=False, note="documentation build helpers"),
    _rule("mpl_toolkits", submodules=True),
)
