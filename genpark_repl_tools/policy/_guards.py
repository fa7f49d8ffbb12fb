"""Layer 2a, the runtime guards: one session's builtins, import function and dynamic-access checks.

`SessionGuards` builds a restricted session's builtins dict. The names the audit cannot check
statically go through it: computed attribute names (`getattr`, `setattr`, `str.format` fields,
`operator.attrgetter`), imports (module views only), class creation (the session's classes are
recorded; metaclasses are refused), attribute writes on objects that might be the host's (classes,
modules, functions). Attribute reads, calls and arithmetic never pass through a guard.
"""

from __future__ import annotations

import builtins
import contextvars
import copy
import functools
import os
import sys
import threading
import types
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import BuiltinFunctionType, FunctionType, MethodType, ModuleType
from typing import Any

from ._audit import format_refusal, routed_refusal
from ._audithook import _EXEC_REFUSED, MARK, SandboxState, plain_path
from ._errors import PolicyViolation
from ._imports import (
    ModuleView,
    build_view,
    is_function_of,
    is_metaclass,
    module_of_callable,
    real_import,
    special_values,
)
from ._model import Policy
from ._rules import StaticRules, exact, nfkc
from ._transform import (
    ATTR,
    CHECK_TARGET,
    GEN_CM,
    GEN_EXC,
    GETATTR_NAME,
    OWNED,
    SETATTR,
    TARGET,
    TYPE,
)

__all__ = ["Execution", "SessionGuards", "current_execution"]

_real_type = builtins.type
_real_getattr = builtins.getattr
_real_setattr = builtins.setattr
_real_delattr = builtins.delattr
_real_build_class = builtins.__build_class__
_STR_FORMAT = str.format
_STR_FORMAT_MAP = str.format_map
_CLASS_NAMESPACE_KEYS = frozenset({"__qualname__", "__doc__", "__slots__"})
_OBJECT_SETATTR = object.__setattr__
_OBJECT_DELATTR = object.__delattr__
# Host classes whose Python-level __setattr__/__delattr__ keep writes on the instance itself (reviewed).
# Any other Python-level one may pass the write on to another object (typing's aliases forward it to
# the class they alias, pandas' options to the process-wide settings), so writes through it are refused.
_INSTANCE_LOCAL_SETTERS = frozenset(
    {
        ("pandas.core.generic", "NDFrame.__setattr__"),
        ("pandas.core.base", "NoNewAttributesMixin.__setattr__"),
        ("numpy._core.records", "recarray.__setattr__"),
        ("numpy._core.records", "record.__setattr__"),
        ("numpy.ma.core", "MaskedArray.__setattr__"),
        ("numpy.ma.core", "MaskedConstant.__setattr__"),
        ("uuid", "UUID.__setattr__"),
    }
)
_PANDAS_EXPRESSIONS = frozenset({"query", "eval"})


class Execution:
    """The host's context-local library settings, saved when an execution starts, put back at its end.

    decimal's context, and numpy's error state, buffer size and print options (numpy >= 2 keeps
    them in context variables) are per session: a cell sees its session's own, and whatever it
    sets stays with the session; the host and other sessions never see it.
    """

    __slots__ = ("context_values", "decimal", "numpy_errstate", "session")

    def __init__(self) -> None:
        decimal = sys.modules.get("decimal")
        self.decimal = decimal.getcontext() if decimal is not None else None
        self.context_values = [(var, var.get()) for var in library_context_vars()]
        numpy = sys.modules.get("numpy")
        legacy = numpy is not None and not self.context_values
        self.numpy_errstate = numpy.geterr() if legacy and numpy is not None else None
        self.session: SessionGuards | None = None

    def enter_session(self, session: SessionGuards) -> None:
        self.session = session

    def restore(self) -> None:
        decimal = sys.modules.get("decimal")
        if decimal is not None:
            decimal.setcontext(self.decimal if self.decimal is not None else decimal.Context())
        variables = library_context_vars()
        if variables:
            if self.session is not None:
                self.session.context_values = {var: var.get() for var in variables}
            host = dict(self.context_values)
            for var in variables:
                # A library the cell imported had no value in the host's context: its default.
                var.set(host[var] if var in host else contextvars.Context().run(var.get))
            return
        numpy = sys.modules.get("numpy")
        if numpy is not None:  # numpy < 2: error state only (print options are refused there)
            if self.session is not None:
                self.session.numpy_errstate = numpy.geterr()
            if self.numpy_errstate is not None:
                numpy.seterr(**self.numpy_errstate)
            else:
                numpy.seterr(all="warn", under="ignore")  # numpy's defaults: it was imported by the cell


def library_context_vars() -> list[contextvars.ContextVar[Any]]:
    """The context variables that hold allowed libraries' settings (numpy >= 2), once imported."""
    if _context_vars_found:
        return _context_vars_found
    if "numpy" not in sys.modules:
        return []
    found: list[contextvars.ContextVar[Any]] = []
    for module, attr in _LIBRARY_CONTEXT_VARS:
        var = getattr(sys.modules.get(module), attr, None)
        if isinstance(var, contextvars.ContextVar):
            found.append(var)
    if len(found) == len(_LIBRARY_CONTEXT_VARS):
        _context_vars_found.extend(found)  # a library's context variables never change
    return found


_context_vars_found: list[contextvars.ContextVar[Any]] = []
_LIBRARY_CONTEXT_VARS = (
    ("numpy._core.umath", "_extobj_contextvar"),  # seterr(), setbufsize()
    ("numpy._core.printoptions", "format_options"),  # set_printoptions(), printoptions()
)


current_execution: contextvars.ContextVar[Execution | None] = contextvars.ContextVar(
    "genpark_repl_execution", default=None
)


class _Target:
    """The object behind `obj.attr` when it is an assignment target: `__repl_target__(o, "a").value = v`."""

    __slots__ = ("_guards", "_name", "_obj")

    def __init__(self, guards: SessionGuards, obj: Any, name: str) -> None:
        self._guards = guards
        self._obj = obj
        self._name = name

    @property
    def value(self) -> Any:
        return _real_getattr(self._obj, self._name)

    @value.setter
    def value(self, value: Any) -> None:
        self._guards.store(self._obj, self._name, value)

    @value.deleter
    def value(self) -> None:
        self._guards.check_target(self._obj, self._name)
        _real_delattr(self._obj, self._name)


class SessionGuards:
    """The guards of one restricted session; its builtins dict closes over them.

    Security model: every check here is independent of the execution context, so code of the
    session that the host calls back later is checked the same way. What it cannot see (C code
    doing attribute lookups by name, library global state) is listed in docs/security.md.
    """

    # Slots: no instance dict (a few hundred bytes per idle session).
    __slots__ = (
        "_calendar",
        "_classes",
        "_format_cache",
        "_numpy_random",
        "_random",
        "context_values",
        "decimal_context",
        "numpy_errstate",
        "owned",
        "policy",
        "rules",
        "state",
        "table",
        "type_guard",
        "views",
        "writable",
    )

    def __init__(self, policy: Policy, rules: StaticRules, state: SandboxState) -> None:
        self.policy = policy
        self.rules = rules
        self.state = state
        # The session's classes, and those whose instances take attribute writes on themselves:
        # writes to them skip every check (the transform's fast path tests membership in
        # `writable`). Both start as one shared empty frozenset, replaced by the session's own sets
        # when it makes its first class (`own`): most idle sessions never make one. A frozenset
        # cannot be changed, so sharing it carries nothing from one session to another.
        self.owned: set[type] | frozenset[type] = _NOTHING_OWNED
        self.writable: set[type] | frozenset[type] = _NOTHING_OWNED
        self.views: dict[str, ModuleView] = {}
        self.decimal_context: Any = None
        self.numpy_errstate: dict[str, str] | None = None
        # Replaced (never changed in place) by Execution.restore: the shared empty mapping is safe.
        self.context_values: Mapping[contextvars.ContextVar[Any], Any] = _NO_CONTEXT_VALUES
        self.table: dict[str, Any] = {}
        # Shared by every session of a policy (see _type_guard_for): it keeps no state of its own
        # and finds the session it acts for when it needs one.
        self.type_guard = _type_guard_for(rules.name)
        self._format_cache: dict[str, str | None] | None = None  # made on the first checked format
        self._random: Any = None
        self._numpy_random: Any = None
        self._calendar: Any = None
        self._classes: dict[type, type] | None = None  # made on the first checked library class

    # ---- builtins --------------------------------------------------------------------------------

    def builtins(self) -> dict[str, Any]:
        table = self.table
        for name in self.rules.builtins:
            if name in builtins.__dict__:
                table[name] = builtins.__dict__[name]
        table.update(
            getattr=self.getattr,
            setattr=self.setattr,
            delattr=self.delattr,
            dir=self.dir,
            type=self.type_guard,
            __build_class__=self.build_class,
            __import__=self.import_,
        )
        for name in self.rules.denied_builtins:
            if not name.startswith("__"):
                # Reached only when the audit could not see the name (a variable the session bound
                # earlier, then deleted): say why instead of a NameError.
                table[name] = _refused_builtin(self.rules.builtin_refusal(name))
        if "open" in self.rules.builtins:
            table["open"] = self.open
        table.update(
            {
                MARK: self.state,
                ATTR: self.routed,
                SETATTR: self.store,
                TARGET: self.target,
                TYPE: _real_type,
                OWNED: self.writable,
                CHECK_TARGET: self.check_target,
                GETATTR_NAME: _getattr_name,
                GEN_EXC: self.generator_exception,
                GEN_CM: self.generator_context,
                # How the shared type guard finds the session whose code calls it (see
                # _calling_session). Restricted code cannot name it (the audit refuses names
                # starting with '__'), nor reach the table (`__builtins__`, globals(), vars() and
                # frames are refused).
                SESSION: self,
            }
        )
        return table

    def refuse(self, what: str, instead: str = "") -> PolicyViolation:
        tail = f"; {instead}" if instead else ""
        return PolicyViolation(f"{what} is not allowed under policy '{self.rules.name}'{tail}")

    # ---- attribute reads -------------------------------------------------------------------------

    def getattr(self, obj: Any, name: str, *default: Any) -> Any:
        if not isinstance(name, str):
            return _real_getattr(obj, name, *default)  # raises the usual TypeError
        name = exact(name)
        refusal = self.rules.attribute_refusal(name)
        if refusal is not None:
            raise PolicyViolation(refusal)
        if nfkc(name) in self.rules.routed:
            name = nfkc(name)
            try:
                return self.routed(obj, name)
            except AttributeError:
                if default:
                    return default[0]
                raise
        value = _real_getattr(obj, name, *default)
        if is_metaclass(value):
            if value is type:
                return self.type_guard
            raise self._metaclass_refusal(name, value)
        return value

    def _metaclass_refusal(self, name: str, value: type) -> PolicyViolation:
        return self.refuse(
            f"reading '{name}': it is the metaclass '{value.__qualname__}'",
            "metaclasses create classes with arbitrary special attributes",
        )

    def routed(self, obj: Any, name: str) -> Any:
        """Attribute reads the policy routes here: look, then hand out a checked version if needed."""
        value = _real_getattr(obj, name)
        if is_metaclass(value):
            if value is type:
                return self.type_guard
            raise self._metaclass_refusal(name, value)
        if isinstance(value, ModuleType) and not isinstance(value, ModuleView):
            return self._module_attribute(name, value)
        if name in ("format", "format_map"):
            checked = self._checked_format(value, name)
            if checked is not value:
                return checked
        if name == "register":
            owner = getattr(value, "__self__", None)
            if isinstance(owner, type) and isinstance(owner, _abc_meta()) and owner not in self.owned:
                raise self.refuse(
                    f"registering classes with '{owner.__qualname__}'",
                    "it would change isinstance() for the host and other sessions; subclass it instead",
                )
            if _is_dispatcher(obj) and not is_function_of(_dispatched(obj), self.table):
                raise self.refuse(
                    "registering implementations with a single-dispatch function not defined by this session"
                )
            if owner is not None and _real_type(owner) not in self.owned and _shared_objects.holds(owner):
                raise self.refuse(
                    f"registering with the process-wide '{_real_type(owner).__qualname__}'",
                    "it is shared with the host and other sessions; pass the object to the call that uses it",
                )
            return value
        if name == "style" and (
            module_of_callable(_real_type(value)).startswith("pandas")
            or module_of_callable(getattr(value, "fget", None)).startswith("pandas")
        ):
            raise self.refuse(
                "pandas' Styler",
                "it applies format strings to arbitrary cell objects; use df.round(), df.to_string() or "
                "f-strings",
            )
        if name == "samples":
            return self._session_samples(value)
        if name == "evaluate" and _is_forward_ref(obj):
            return self._forward_ref_evaluate(obj)
        if name == "evaluate" and _is_forward_ref(obj, of_class=True):  # ForwardRef.evaluate(ref, ...)
            return lambda ref, /, **kw: (
                self._forward_ref_evaluate(ref)(**kw) if _is_forward_ref(ref) else value(ref, **kw)
            )
        if name == "mro" and isinstance(obj, type):
            return functools.partial(self._guarded_mro, obj)
        if name in _FORMAT_SINKS:
            return self._format_sink(value, name)
        if name == "lock" and isinstance(obj, functools.cached_property):
            # A lock shared by every instance of the host's class (Python 3.11): held, it would
            # block the host's own reads of the property.
            raise self.refuse("reading the lock of a cached_property")
        if name == "ctypes":
            if module_of_callable(_real_type(value)).startswith("numpy"):
                raise self.refuse("raw memory access through ndarray.ctypes")
            return value
        if callable(value) and module_of_callable(value).startswith("pandas."):
            return self._checked_pandas(value, name)
        return value

    def _module_attribute(self, name: str, module: ModuleType) -> ModuleView:
        """An attribute that is a real module (pathlib's `parser` is os.path): its view, as a module
        view gives for its own module attributes, or refused when the policy does not admit it."""
        module_name = str(module.__name__)
        refusal = self.rules.import_refusal(module_name)
        if refusal is not None:
            raise PolicyViolation(
                f"reading '{name}' is not allowed under policy '{self.rules.name}': it is the module "
                f"'{module_name}', which the policy does not admit; use the object's own methods instead"
            )
        return self.view(module_name)

    def _format_sink(self, value: Any, name: str) -> Any:
        """matplotlib calls that keep a format string and apply it later (tick formatters, labels)."""
        if not (callable(value) and module_of_callable(value).startswith(("matplotlib", "mpl_toolkits"))):
            return value

        def checked(*args: Any, **kwargs: Any) -> Any:
            for text in _strings(args, kwargs):
                self._check_format(text)
            return value(*args, **kwargs)

        return checked

    def _checked_constructor(self, cls: type) -> type:
        """A library class whose constructor keeps format strings: its str arguments are checked."""
        guards = self
        real_init = _real_getattr(cls, "__init__")

        def __init__(instance: Any, *args: Any, **kwargs: Any) -> None:
            for text in _strings(args, kwargs):
                guards._check_format(text)
            real_init(instance, *args, **kwargs)

        namespace = {"__init__": __init__, "__module__": cls.__module__, "__doc__": cls.__doc__}
        return _guarded_class(cls, namespace)

    def _namedtuple(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def namedtuple(typename: str, field_names: Any, **kwargs: Any) -> Any:
            if kwargs.get("module") is not None:
                raise self.refuse("namedtuple(module=...)", "the class belongs to this session")
            # Named as a class statement in a cell would be; namedtuple would otherwise take the
            # module of its caller, which is this wrapper.
            return real(typename, field_names, module="__main__", **kwargs)

        return namedtuple

    def _session_samples(self, value: Any) -> Any:
        """statistics.NormalDist.samples() draws from the host's `random` unless seeded: use the session's."""
        statistics = sys.modules.get("statistics")
        real = getattr(getattr(statistics, "NormalDist", None), "samples", None)
        if real is None:
            return value
        session_random = self._session_random()

        def samples(dist: Any, n: int, *, seed: Any = None) -> list[float]:
            import random

            gauss = session_random.gauss if seed is None else random.Random(seed).gauss
            mu, sigma = dist.mean, dist.stdev
            return [gauss(mu, sigma) for _ in range(n)]

        if value is real:
            return samples
        if isinstance(value, MethodType) and value.__func__ is real:
            return functools.partial(samples, value.__self__)
        return value

    def _checked_format(self, value: Any, name: str) -> Any:
        real = _STR_FORMAT if name == "format" else _STR_FORMAT_MAP
        if value is real:  # unbound: str.format(fmt, ...)

            def unbound(fmt: str, *args: Any, **kwargs: Any) -> Any:
                if isinstance(fmt, str):
                    self._check_format(fmt)
                return real(fmt, *args, **kwargs)

            return unbound
        target = getattr(value, "__self__", None)
        if isinstance(target, str) and getattr(value, "__name__", None) == name:
            fmt = target

            def bound(*args: Any, **kwargs: Any) -> Any:
                self._check_format(fmt)
                return real(fmt, *args, **kwargs)

            return bound
        wrapper = _user_string()
        if value is _real_getattr(wrapper, name, None):  # unbound: UserString.format(us, ...)
            return lambda us, *args, **kwargs: self._wrapped_format(us, name)(*args, **kwargs)
        if isinstance(target, wrapper) and isinstance(value, MethodType):
            return self._wrapped_format(target, name)
        func = value.__func__ if isinstance(value, MethodType) else value
        if isinstance(func, FunctionType) and not is_function_of(func, self.table) and not _repr_format(func):
            # A library's own format(): it may apply a format string to objects by attribute lookups.
            raise self.refuse(
                f"the library method '{func.__qualname__}'",
                "it may apply a format string by attribute lookups; format plain str values instead",
            )
        return value

    def _wrapped_format(self, wrapper: Any, name: str) -> Callable[..., Any]:
        """format()/format_map() of a string wrapper: the wrapped value's, checked like any other."""

        def call(*args: Any, **kwargs: Any) -> Any:
            return self.routed(_real_getattr(wrapper, "data"), name)(*args, **kwargs)

        return call

    def _check_format(self, fmt: str) -> None:
        fmt = exact(fmt)  # the cache must not compare user-defined str subclasses
        if "{" not in fmt:
            return  # no replacement field, nothing looked up
        cache = self._format_cache
        if cache is None:
            cache = self._format_cache = {}
        if fmt in cache:
            refusal = cache[fmt]
        else:
            refusal = format_refusal(fmt, self.rules)
            if len(fmt) <= 4096:  # long strings are checked each time rather than kept alive
                if len(cache) > 512:
                    cache.clear()
                cache[fmt] = refusal
        if refusal is not None:
            raise PolicyViolation(refusal)

    def _checked_pandas(self, method: Any, name: str) -> Any:
        def checked(*args: Any, **kwargs: Any) -> Any:
            for value in map(exact, _strings(args, kwargs)):
                if name in _PANDAS_EXPRESSIONS:
                    refusal = _expression_refusal(value, self.rules)
                elif nfkc(value).startswith("_"):
                    refusal = self.rules.attribute_refusal(value)  # a method name dispatched by string
                else:
                    # pandas applies format strings to cell values itself (Styler.format)
                    refusal = format_refusal(value, self.rules)
                if refusal is not None:
                    raise PolicyViolation(f"pandas {name}(): {refusal}")
            if name in _PANDAS_EXPRESSIONS:
                self._expression_scope(name, kwargs, sys._getframe(1))
            # pandas looks the checked names up itself: hand it the plain strs that were checked.
            args = tuple(_plain_strings(a) for a in args)
            kwargs = {k: _plain_strings(v) for k, v in kwargs.items()}
            return method(*args, **kwargs)

        return checked

    def _expression_scope(self, name: str, kwargs: dict[str, Any], caller: Any) -> None:
        """pandas resolves names ('@name' too) in the frame `level` above it: hand it the caller's
        namespace instead, and only if the caller is this session's code; no frame depth from the code."""
        if "level" in kwargs:
            raise self.refuse(
                f"pandas {name}() with level=",
                "names resolve in the calling code; pass local_dict= for others",
            )
        own = caller.f_builtins is self.table
        if kwargs.get("local_dict") is None:
            kwargs["local_dict"] = dict(caller.f_locals) if own else {}
        if kwargs.get("global_dict") is None:
            kwargs["global_dict"] = caller.f_globals if own else {}
        kwargs["level"] = 1  # both dicts are given: pandas reads no frame's names

    def dir(self, *args: Any) -> list[str]:
        # Without an argument: the caller's names (the cell's namespace), like the real dir().
        names = builtins.dir(*args) if args else list(sys._getframe(1).f_locals)
        return sorted(n for n in names if not n.startswith("_"))

    # ---- attribute writes ------------------------------------------------------------------------

    def setattr(self, obj: Any, name: str, value: Any) -> None:
        if isinstance(name, str):
            name = exact(name)
            refusal = self.rules.attribute_refusal(name, store=True)
            if refusal is not None:
                raise PolicyViolation(refusal)
        self.store(obj, name, value)

    def delattr(self, obj: Any, name: str) -> None:
        if isinstance(name, str):
            name = exact(name)
            refusal = self.rules.attribute_refusal(name, store=True)
            if refusal is not None:
                raise PolicyViolation(refusal)
        self.check_target(obj, name)
        _real_delattr(obj, name)

    def store(self, obj: Any, name: str, value: Any) -> None:
        if _real_type(obj) not in self.writable:  # instances of the session's plain classes: no check
            self.check_target(obj, name)
            if isinstance(value, str):
                # Library objects may apply a string they hold as a format string (a tick
                # formatter's .fmt): checked like str.format's.
                self._check_format(value)
        _real_setattr(obj, name, value)

    def target(self, obj: Any, name: str) -> _Target:
        return _Target(self, obj, name)

    def check_target(self, obj: Any, name: str | None = None) -> None:
        """Refuse writing attributes of objects the host shares: its classes, modules, functions."""
        where = f" '{name}'" if name else ""
        if isinstance(obj, type):
            if obj in self.owned:
                return
            raise self.refuse(
                f"changing attribute{where} of class '{obj.__qualname__}'",
                "it is shared with the host, not defined by this session; subclass it and change that",
            )
        if isinstance(obj, ModuleType):
            raise self.refuse(
                f"changing attribute{where} of a module",
                "modules are shared; keep your own values in variables",
            )
        if isinstance(obj, FunctionType):
            if is_function_of(obj, self.table):
                return
            raise self.refuse(
                f"changing attribute{where} of function '{obj.__qualname__}'",
                "it is not defined by this session",
            )
        if isinstance(obj, (BuiltinFunctionType, MethodType, functools.partial)):
            raise self.refuse(f"changing attribute{where} of a built-in or bound function")
        cls = _real_type(obj)
        if cls in self.writable:
            return
        if not _instance_writes_stay_local(cls):
            raise self.refuse(
                f"changing attribute{where} of a '{cls.__qualname__}' object",
                "its class passes attribute writes on to objects shared with the host (a class it "
                "stands for, or process-wide settings)",
            )
        if isinstance(obj, _dataclass_field()):
            raise self.refuse(
                f"changing attribute{where} of a dataclass field",
                "fields are fixed when the class is made; pass the options to field(...)",
            )
        if cls not in self.owned:
            shared = _shared_role(obj, cls)
            if shared:
                raise self.refuse(
                    f"changing attribute{where} of {shared} '{cls.__qualname__}'",
                    "it is shared with the host and other sessions; keep your own values in variables",
                )

    # ---- classes ---------------------------------------------------------------------------------

    def build_class(self, func: Any, name: str, *bases: Any, **kwargs: Any) -> Any:
        for base in bases:
            if isinstance(base, _TypeMeta) or (isinstance(base, type) and issubclass(base, type)):
                raise self.refuse(
                    f"defining the metaclass '{name}' (a subclass of 'type')", "define ordinary classes"
                )
        meta = kwargs.get("metaclass")
        if isinstance(meta, _TypeMeta):  # any session's `type` (one per policy) means the real one
            kwargs["metaclass"] = type
        elif meta is not None and not (isinstance(meta, type) and issubclass(meta, type)):
            # A callable "metaclass" could return an existing (host) class, which would then be
            # recorded as the session's own.
            raise self.refuse(
                f"metaclass={_real_type(meta).__name__} for class '{name}'", "metaclasses must be classes"
            )
        cls = _real_build_class(func, name, *bases, **kwargs)
        if isinstance(cls, type):
            self.own(cls)
        return cls

    def own(self, cls: type) -> None:
        """Record `cls` as the session's; its instances take writes natively if they stay on them."""
        if any(_real_type(key) is not str for key in vars(cls)):
            # Every route to a class namespace hands it plain str keys; this holds if one is missed.
            raise self.refuse(f"the class '{cls.__name__}' with attribute names that are not plain str")
        owned, writable = self.owned, self.writable
        if not isinstance(owned, set) or not isinstance(writable, set):
            owned, writable = self._own_sets()
        owned.add(cls)
        if _instance_writes_stay_local(cls):
            writable.add(cls)

    def _own_sets(self) -> tuple[set[type], set[type]]:
        """The session's first class: its own `owned` and `writable` sets replace the shared empty one."""
        with _first_class_lock:  # two threads making the session's first classes get one pair of sets
            owned, writable = self.owned, self.writable
            if not isinstance(owned, set) or not isinstance(writable, set):
                owned, writable = set(), set()
                self.owned, self.writable = owned, writable
                self.table[OWNED] = writable  # what the transform's fast path reads by name
            return owned, writable

    def new_class(self, name: str, bases: tuple[Any, ...], namespace: dict[str, Any], **kwargs: Any) -> type:
        """type(name, bases, namespace): the same checks as a class statement."""
        checked: dict[str, Any] = {}
        for raw, value in dict(namespace).items():
            # The class gets plain str keys: a str subclass (or any object) with its own __hash__ and
            # __eq__ could pass as 'x' here and be found later as '__array_interface__'.
            if not isinstance(raw, str):
                raise self.refuse(
                    f"type(): the class attribute {_real_type(raw).__name__} key", "names must be str"
                )
            key = nfkc(exact(raw))
            # Special methods need the audit and rewrite a class statement gets (a __getattr__ must
            # not answer private names), so type() takes none of them; nor a __module__ of its own
            # (library code looks modules up by it).
            if key.startswith("_") and key not in _CLASS_NAMESPACE_KEYS:
                raise self.refuse(
                    f"type(): the class attribute '{key}'", "define special methods in a class statement"
                )
            checked[key] = exact(value) if key == "__qualname__" and isinstance(value, str) else value
        for base in bases:
            if isinstance(base, _TypeMeta) or (isinstance(base, type) and issubclass(base, type)):
                raise self.refuse("type(): defining metaclasses")
        checked["__module__"] = "__main__"  # what a class statement in a cell gets
        cls = _real_type(exact(name) if isinstance(name, str) else name, bases, checked, **kwargs)
        self.own(cls)
        return cls

    def owned_only(self, real: Callable[..., Any], label: str) -> Callable[..., Any]:
        def checked(cls: Any, *args: Any, **kwargs: Any) -> Any:
            if not (isinstance(cls, type) and cls in self.owned):
                raise self.refuse(f"{label}() on a class not defined by this session")
            return real(cls, *args, **kwargs)

        return checked

    def dataclass(self, cls: Any = None, /, **kwargs: Any) -> Any:
        import dataclasses

        def wrap(target: Any) -> Any:
            if not (isinstance(target, type) and target in self.owned):
                raise self.refuse("dataclass() on a class not defined by this session")
            made: type = dataclasses.dataclass(target, **kwargs)
            if made is not target:  # slots=True makes a new class
                self.own(made)
            return made

        return wrap if cls is None else wrap(cls)

    def make_dataclass(self, cls_name: str, fields: Iterable[Any], **kwargs: Any) -> type:
        import dataclasses

        # dataclasses pastes the names into generated source and class namespaces: hand it plain
        # strs, checked, never the objects given (a str subclass formats and hashes as it likes).
        cls_name = self._plain_name(cls_name)
        plain: list[Any] = []
        for spec in fields:
            if isinstance(spec, str):
                plain.append(self._plain_name(spec))
            elif isinstance(spec, tuple) and spec:
                plain.append((self._plain_name(spec[0]), *spec[1:]))
            else:
                raise TypeError(f"Invalid field: {spec!r}")
        namespace = kwargs.get("namespace")
        if namespace is not None:
            kwargs["namespace"] = {self._plain_name(k): v for k, v in dict(namespace).items()}
        if "module" in kwargs:
            raise self.refuse("make_dataclass(module=...)", "the class belongs to this session")
        cls = dataclasses.make_dataclass(cls_name, plain, **kwargs)
        type.__setattr__(cls, "__module__", "__main__")
        self.own(cls)
        return cls

    def _plain_name(self, name: Any) -> str:
        if not isinstance(name, str) or nfkc(exact(name)).startswith("_"):
            raise self.refuse(f"make_dataclass(): the name {name!r}", "names starting with '_' are private")
        return nfkc(exact(name))

    def _owned_object(self, obj: Any) -> bool:
        return is_function_of(obj, self.table) or obj in self.owned or _real_type(obj) in self.owned

    def update_wrapper(
        self,
        wrapper: Any,
        wrapped: Any,
        assigned: Iterable[str] = functools.WRAPPER_ASSIGNMENTS,
        updated: Iterable[str] = functools.WRAPPER_UPDATES,
    ) -> Any:
        # Plain strs: a str subclass could compare equal to '__doc__' and still name '__globals__'.
        assigned = tuple(exact(a) for a in assigned)
        updated = tuple(exact(u) for u in updated)
        if not set(assigned) <= set(functools.WRAPPER_ASSIGNMENTS) or not set(updated) <= set(
            functools.WRAPPER_UPDATES
        ):
            raise self.refuse("update_wrapper()/wraps() with custom attribute names")
        if not self._owned_object(wrapper):
            raise self.refuse("update_wrapper()/wraps() on an object not defined by this session")
        return functools.update_wrapper(wrapper, wrapped, assigned, updated)

    def wraps(
        self,
        wrapped: Any,
        assigned: Iterable[str] = functools.WRAPPER_ASSIGNMENTS,
        updated: Iterable[str] = functools.WRAPPER_UPDATES,
    ) -> Callable[[Any], Any]:
        assigned, updated = tuple(assigned), tuple(updated)

        def decorate(wrapper: Any) -> Any:
            return self.update_wrapper(wrapper, wrapped, assigned, updated)

        return decorate

    def abstractmethod(self, func: Any) -> Any:
        import abc

        if isinstance(func, FunctionType) and not is_function_of(func, self.table):
            raise self.refuse("abstractmethod() on a function not defined by this session")
        return abc.abstractmethod(func)

    def get_origin(self, tp: Any) -> Any:
        import typing

        origin = typing.get_origin(tp)
        return self.type_guard if origin is type else origin

    # ---- string annotations (Python 3.14+) ------------------------------------------------------
    #
    # From 3.14 typing evaluates a string annotation that is a bare name by looking it up (locals, the
    # globals, then the real builtins module) without compiling it, so the hook, which judges every
    # compiled annotation, never sees it; and get_type_hints() looks a forward reference that names
    # a module (TypedDict's do) up in that module, whatever namespace it is given. The session's
    # get_type_hints(), evaluate_forward_ref() and ForwardRef.evaluate() evaluate every forward
    # reference in the names of the namespace Python would use, when it is the session's: its
    # globals and builtins table (see _AnnotationNames); a host module's is refused as the hook does.

    def get_type_hints(
        self,
        obj: Any,
        globalns: Any = None,
        localns: Any = None,
        include_extras: bool = False,
        *,
        format: Any = None,
    ) -> dict[str, Any]:
        import typing

        import annotationlib  # type: ignore[import-not-found,unused-ignore]  # Python 3.14+

        Format = annotationlib.Format
        if format is None:
            format = Format.VALUE
        real: Any = typing.get_type_hints  # `format` is 3.14+
        if format == Format.STRING or getattr(obj, "__no_type_check__", None):
            return real(obj, globalns, localns, include_extras, format=format)  # type: ignore[no-any-return]
        is_class = isinstance(obj, type)
        is_argument = not is_class and not isinstance(obj, ModuleType)
        hints: dict[str, Any] = {}
        for source in reversed(obj.__mro__) if is_class else (obj,):
            annotations = annotationlib.get_annotations(source, format=format)
            if is_argument and not annotations and not callable(obj) and not _annotatable(obj):
                raise TypeError(f"{obj!r} is not a module, class, or callable.")
            names = self._annotation_names(
                globalns if globalns is not None else _annotation_globals(source),
                localns,
                getattr(source, "__type_params__", ()),
            )
            for name, annotation in annotations.items():
                value = annotation
                if isinstance(value, str):
                    value = typing._make_forward_ref(value, is_argument=is_argument, is_class=is_class)  # type: ignore[attr-defined]
                # Not get_type_hints' preference for a forward reference's own module: only `names`.
                value = typing._eval_type(value, names, {}, (), format=format, owner=obj)  # type: ignore[attr-defined]
                hints[name] = type(None) if value is None else value
        if include_extras:
            return hints
        return {k: typing._strip_annotations(t) for k, t in hints.items()}  # type: ignore[attr-defined]

    def evaluate_forward_ref(
        self, forward_ref: Any, *, owner: Any = None, globals: Any = None, **kw: Any
    ) -> Any:
        import typing

        names, kw = self._forward_ref_names(forward_ref, owner, globals, kw)
        return typing.evaluate_forward_ref(forward_ref, owner=owner, globals=names, **kw)  # type: ignore[attr-defined]

    def _forward_ref_evaluate(self, forward_ref: Any) -> Callable[..., Any]:
        def evaluate(*, owner: Any = None, globals: Any = None, **kw: Any) -> Any:
            names, kw = self._forward_ref_names(forward_ref, owner, globals, kw)
            return forward_ref.evaluate(owner=owner, globals=names, **kw)

        return evaluate

    def _forward_ref_names(
        self, ref: Any, owner: Any, namespace: Any, kw: dict[str, Any]
    ) -> tuple[_AnnotationNames, dict[str, Any]]:
        """The names for evaluating `ref` with the keyword arguments `kw` of ForwardRef.evaluate(),
        and those arguments without the namespaces: the names are the only ones."""
        if namespace is None:  # where ForwardRef.evaluate() looks, in its order
            module = ref.__forward_module__
            if module is not None:
                namespace = getattr(sys.modules.get(module), "__dict__", None)
            elif ref.__globals__ is not None:
                namespace = ref.__globals__
            else:
                namespace = _annotation_globals(owner if owner is not None else ref.__owner__)
        type_params = kw.pop("type_params", None)
        if type_params is None:
            type_params = getattr(owner if owner is not None else ref.__owner__, "__type_params__", ())
        names = self._annotation_names(namespace, kw.pop("locals", None), type_params)
        return names, {**kw, "locals": {}, "type_params": ()}

    def _annotation_names(self, namespace: Any, local: Any, type_params: Any) -> _AnnotationNames:
        table = dict.get(namespace, "__builtins__") if issubclass(type(namespace), dict) else None
        if type(table) is not dict or table is builtins.__dict__:
            return _AnnotationNames(self, _ANNOTATION_IN_HOST)
        names = _AnnotationNames(self, "")
        names.update(table)
        # With its `__builtins__`: what the hook checks where typing compiles an annotation.
        names.update(namespace)
        names.update({param.__name__: param for param in type_params or ()})
        if local is not None:
            names.update(local)
        return names

    def attrgetter(self, attr: str, *attrs: str) -> Any:
        import operator

        attr, attrs = exact(attr), tuple(exact(a) for a in attrs)
        for name in (attr, *attrs):
            if not isinstance(name, str):
                raise TypeError("attribute name must be a string")
            for part in name.split("."):
                refusal = self.rules.attribute_refusal(part)
                if refusal is not None:
                    raise PolicyViolation(refusal)
                if part in self.rules.routed:
                    return _GuardedAttrGetter(self, (attr, *attrs))
        return operator.attrgetter(attr, *attrs)

    def methodcaller(self, name: str, /, *args: Any, **kwargs: Any) -> Any:
        import operator

        if not isinstance(name, str):
            raise TypeError("method name must be a string")
        name = exact(name)
        refusal = self.rules.attribute_refusal(name)
        if refusal is not None:
            raise PolicyViolation(refusal)
        if name in self.rules.routed:
            return lambda obj: self.getattr(obj, name)(*args, **kwargs)
        return operator.methodcaller(name, *args, **kwargs)

    # ---- generators ------------------------------------------------------------------------------

    def generator_exception(self, spec: Any) -> Any:
        for item in spec if isinstance(spec, tuple) else (spec,):
            if isinstance(item, type) and issubclass(item, BaseException) and not issubclass(item, Exception):
                raise self.refuse(
                    f"catching {item.__name__} inside a generator",
                    "the handler would run when the generator is discarded, outside the time limit",
                )
        return spec

    def generator_context(self, manager: Any) -> Any:
        exit_ = getattr(_real_type(manager), "__exit__", None)
        if _real_type(manager) in self.owned or is_function_of(exit_, self.table):
            raise self.refuse(
                "a 'with' block of your own context manager inside a generator",
                "its __exit__ would run when the generator is discarded, outside the time limit",
            )
        return manager

    # ---- imports, files, per-session state -------------------------------------------------------

    def import_(
        self,
        name: str,
        globals: dict[str, Any] | None = None,
        locals: dict[str, Any] | None = None,
        fromlist: Iterable[str] | None = (),
        level: int = 0,
    ) -> Any:
        if isinstance(fromlist, list) and not level:
            # PyImport_Import(): C code (numpy's lazy imports, time.strptime) importing for itself
            # through the builtins of the calling frame; it passes a list, the import statement a
            # tuple or None. Executed code cannot call __import__ itself, and the module goes to
            # the C caller, not to the code.
            return real_import(name, ())
        if level:
            raise self.refuse("relative import", "import modules by their absolute name")
        fromlist = tuple(fromlist or ())
        if name == "__future__":
            return real_import(name, fromlist)
        refusal = self.rules.import_refusal(name)
        if refusal is not None:
            raise PolicyViolation(refusal)
        for item in fromlist:
            if item == "*":
                continue
            refusal = self.rules.imported_name_refusal(name, item)
            if refusal is not None:
                raise PolicyViolation(refusal)
        real_import(name, fromlist)
        return self.view(name if fromlist else name.partition(".")[0])

    def view(self, name: str) -> ModuleView:
        view = self.views.get(name)
        if view is None:
            real = sys.modules.get(name)
            if real is None:
                real = real_import(name, ())
            view = self.views[name] = build_view(name, real, self)
            if name == "decimal":
                self.use_own_settings()  # from now on decimal arithmetic uses the session's own context
        return view

    def session_value(self, module: str, attr: str, value: Any) -> Any:
        """Per-session stand-ins for module-level state shared with the host (None: keep `value`)."""
        if module == "random" and getattr(value, "__self__", None) is _real_getattr(
            sys.modules["random"], "_inst"
        ):
            return _real_getattr(self._session_random(), attr)
        if module == "decimal" and attr in ("DefaultContext", "BasicContext", "ExtendedContext"):
            return value.copy()
        if module in ("numpy.random", "numpy.random.mtrand") and attr != "RandomState":
            legacy = self._session_numpy_random()
            if legacy is not None and callable(value) and hasattr(_real_type(legacy), attr):
                return _real_getattr(legacy, attr)
        if module == "calendar":
            own = self._session_calendar(attr, value)
            if own is not None:
                return own
        if module == "pandas" and attr == "options":
            return _ReadOnlyOptions(value, "pandas.options")
        if _is_masked_print_option(value):
            return _ReadOnlyDisplay(value, f"{module}.{attr}", _MASKED_PRINT_SETTERS, _MASKED_PRINT_HINT)
        if module == "numpy" and attr in _NUMPY_PRINT_SETTERS and not _numpy_print_options_are_local():
            return _refused_builtin(
                f"numpy.{attr}() is not available under policy '{self.rules.name}' with this numpy "
                "(before 2.0 print options are process-wide); format values with f-strings or np.round()"
            )
        if module.startswith("matplotlib") and attr in _FORMAT_SINKS:
            return self._format_sink(value, attr)
        if isinstance(value, type) and value in _guarded_classes():
            return self.guarded_form(value)
        if module == "collections" and attr == "namedtuple":
            return self._namedtuple(value)
        if (module.startswith("matplotlib") and attr in _MATPLOTLIB_SETTINGS) or _is_rc_params(value):
            hint = _MATPLOTLIB_SETTINGS.get(attr, _RC_HINT)
            return _ReadOnlySettings(value, f"{module}.{attr}", hint)
        if module == "pandas" and attr == "eval":
            return self._checked_pandas(value, "eval")
        return None

    def _guarded_mro(self, cls: type) -> list[type]:
        """cls.mro() with each host class that has a guarded form replaced by it (listed once)."""
        shown: list[type] = []
        for base in _real_type.mro(cls):
            if base in _guarded_forms:
                continue  # a guarded form is listed where its host class is
            form = self.guarded_form(base)
            if form not in shown:
                shown.append(form)
        return shown

    def guarded_form(self, cls: type) -> type:
        """The class the session gets for the host class `cls`, however it reaches it: a module's
        attribute, `type(obj)` of an object a library made, `mro()`. `cls` itself if it has none."""
        kind = _guarded_classes().get(cls)
        if kind is None:
            return cls
        if kind == "special":
            made: type = special_values()[id(cls)][1](self, cls)
            return made
        classes = self._classes
        if classes is None:
            classes = self._classes = {}
        made = classes.get(cls)  # type: ignore[assignment]
        if made is None:
            if kind == "tables":
                made = classes[cls] = self._session_class(cls)
            elif kind == "format":
                made = classes[cls] = _checked_str_method_formatter(self, cls)
            else:
                made = classes[cls] = self._checked_constructor(cls)
        return made

    def _session_class(self, cls: type) -> type:
        """A reviewed host class whose class-level tables (lists, dicts) are copies of the session's own."""
        tables = {
            name: copy.copy(value)
            for name, value in vars(cls).items()
            if not name.startswith("_") and _real_type(value) in (list, dict, set)
        }
        namespace = {**tables, "__module__": cls.__module__, "__doc__": cls.__doc__}
        return _guarded_class(cls, namespace)

    def _session_calendar(self, attr: str, value: Any) -> Any:
        """calendar's module functions work on one shared TextCalendar: give the session its own."""
        import calendar

        if self._calendar is None:
            self._calendar = calendar.TextCalendar()
        own = self._calendar
        if attr == "c":
            return own
        if attr == "setfirstweekday":

            def setfirstweekday(firstweekday: int) -> None:
                if not calendar.MONDAY <= firstweekday <= calendar.SUNDAY:
                    raise calendar.IllegalWeekdayError(firstweekday)
                own.firstweekday = firstweekday

            return setfirstweekday
        if getattr(value, "__self__", None) is _real_getattr(calendar, "c"):
            return _real_getattr(own, value.__name__)
        return None

    def _session_random(self) -> Any:
        if self._random is None:
            import random

            self._random = random.Random()
        return self._random

    def _session_numpy_random(self) -> Any:
        if self._numpy_random is None:
            mtrand = sys.modules.get("numpy.random.mtrand")
            if mtrand is None:
                return None
            self._numpy_random = mtrand.RandomState()
        return self._numpy_random

    def enter(self, execution: Execution) -> None:
        """When an execution of this session starts (the runtime's `enter`, host code): make it the
        execution's session and switch the context-local settings of libraries to the session's.

        decimal's context and numpy's error state live in context variables of the caller's
        context; the execution restores the host's when it ends (see `Execution`).
        """
        execution.enter_session(self)
        self.use_own_settings()

    def use_own_settings(self) -> None:
        """Switch decimal's context and numpy's settings in this context to the session's own."""
        if self.decimal_context is None and "decimal" in self.views:
            import decimal

            self.decimal_context = decimal.Context()
        if self.decimal_context is not None:
            import decimal

            decimal.setcontext(self.decimal_context)
        for var, value in self.context_values.items():
            var.set(value)
        numpy = sys.modules.get("numpy")
        if numpy is not None and self.numpy_errstate is not None:
            numpy.seterr(**self.numpy_errstate)

    def open(  # the signature of the builtin open()
        self,
        file: Any,
        mode: str = "r",
        buffering: int = -1,
        encoding: str | None = None,
        errors: str | None = None,
        newline: str | None = None,
        closefd: bool = True,
        opener: Any = None,
    ) -> Any:
        if opener is not None:
            raise self.refuse("open() with an opener")
        path = plain_path(file)
        if path is None:
            raise self.refuse(
                f"open() of a {_real_type(file).__name__}", "pass a str or pathlib path inside the workspace"
            )
        workspace = self.state.workspace
        if not os.path.isabs(path):
            path = os.path.join(workspace, path)  # relative paths are relative to the workspace
        real = os.path.realpath(path)
        if not (self.policy.files and (real == workspace or real.startswith(workspace + os.sep))):
            if not self.policy.files:
                raise self.refuse(f"opening '{real}'", "this policy has no file access")
            raise self.refuse(
                f"opening '{real}'", f"files are allowed only inside the workspace '{workspace}'"
            )
        return builtins.open(real, mode, buffering, encoding, errors, newline, closefd)


# Library calls that keep a format string and apply it later (routed by attribute name).
_FORMAT_SINKS = frozenset({"set_major_formatter", "set_minor_formatter", "bar_label", "clabel", "colorbar"})


def _repr_format(func: FunctionType) -> bool:
    """Library format() methods that take no format string (reviewed, by identity)."""
    import pprint

    return func is pprint.PrettyPrinter.format


def _user_string() -> type:
    import collections

    return collections.UserString


def _checked_str_method_formatter(guards: SessionGuards, real: type) -> type:
    """matplotlib.ticker.StrMethodFormatter whose format string is checked whenever it is applied."""

    def __call__(self: Any, x: Any, pos: Any = None) -> Any:
        fmt = self.fmt
        if isinstance(fmt, str):
            guards._check_format(fmt)
        return real.__call__(self, x, pos)

    namespace = {"__call__": __call__, "__module__": real.__module__, "__doc__": real.__doc__}
    return _guarded_class(real, namespace)


_NUMPY_PRINT_SETTERS = frozenset({"set_printoptions", "printoptions", "set_string_function"})
_RC_HINT = "pass style arguments to the plotting call instead (color=, linewidth=, figsize=, ...)"
_MATPLOTLIB_SETTINGS = {
    "rcParams": _RC_HINT,
    "rcParamsDefault": _RC_HINT,
    "rcParamsOrig": _RC_HINT,
    "registry": "register converters on the axis instead (ax.xaxis.set_units / converter=)",
}


def _is_rc_params(value: Any) -> bool:
    """matplotlib's rcParams, under whatever module name re-exports it (mpl_toolkits does)."""
    matplotlib = sys.modules.get("matplotlib")
    return matplotlib is not None and value is getattr(matplotlib, "rcParams", None)


# Host classes whose public class-level tables code could change for everyone (found by the
# reachability audit): the session gets a subclass holding copies. "module.qualname" strings,
# resolved by identity.
_SHARED_TABLE_CLASSES = ("calendar.HTMLCalendar", "textwrap.TextWrapper")


# Host classes the session gets a checked subclass of, besides those with shared tables:
# "module.qualname" -> kind ("format": its format string is checked when applied; "constructor": the
# str arguments of its constructor are).
_CHECKED_CLASSES = {
    "matplotlib.ticker.StrMethodFormatter": "format",
    "matplotlib.colorbar.Colorbar": "constructor",
    "matplotlib.colorbar.ColorbarBase": "constructor",
}
_guarded_found: dict[type, str] = {}
_guarded_modules = [-1]


def _guarded_classes() -> dict[type, str]:
    """Every host class that has a guarded form -> its kind ("special", "tables", "format",
    "constructor"), by identity. Looked up again when modules were imported since the last time."""
    if _guarded_modules[0] == len(sys.modules):
        return _guarded_found
    found: dict[type, str] = {}
    for obj, _factory in special_values().values():
        if isinstance(obj, type):
            found[obj] = "special"
    for dotted in _SHARED_TABLE_CLASSES:
        found.update(_class_named(dotted, "tables"))
    for dotted, kind in _CHECKED_CLASSES.items():
        found.update(_class_named(dotted, kind))
    _guarded_found.clear()
    _guarded_found.update(found)
    _guarded_modules[0] = len(sys.modules)
    return _guarded_found


def _class_named(dotted: str, kind: str) -> dict[type, str]:
    module, _, name = dotted.rpartition(".")
    cls = getattr(sys.modules.get(module), name, None)  # only once its module is imported
    return {cls: kind} if isinstance(cls, type) else {}


class _GuardedMeta(type):
    """The metaclass of a host class's guarded form (a subclass of it): instances of the host class
    (made by the library, which uses the real class) pass isinstance() checks against it."""

    def __instancecheck__(cls, obj: Any) -> bool:
        if cls in _guarded_forms:
            return isinstance(obj, cls.__mro__[1])
        return type.__instancecheck__(cls, obj)  # a session's subclass of a guarded form

    def __subclasscheck__(cls, sub: Any) -> bool:
        if cls in _guarded_forms:
            return issubclass(sub, cls.__mro__[1])
        return type.__subclasscheck__(cls, sub)


_guarded_forms: weakref.WeakSet[type] = weakref.WeakSet()


def _guarded_class(real: type, namespace: dict[str, Any]) -> type:
    namespace = {**namespace, "__qualname__": real.__qualname__}
    meta = _GuardedMeta if _real_type(real) is type else _real_type(real)
    made: type = meta(real.__name__, (real,), namespace)
    _guarded_forms.add(made)
    return made


def _numpy_print_options_are_local() -> bool:
    return isinstance(
        getattr(sys.modules.get("numpy._core.printoptions"), "format_options", None), contextvars.ContextVar
    )


class _ReadOnlySettings(Mapping[Any, Any]):
    """A process-wide settings mapping (matplotlib.rcParams, ...) as restricted code sees it: read-only.

    Reads go to the real mapping, so they are always current; every write is refused with the reason.
    """

    __slots__ = ("_hint", "_label", "_real")

    def __init__(self, real: Any, label: str, hint: str) -> None:
        self._real = real
        self._label = label
        self._hint = hint

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise PolicyViolation(
            f"changing {self._label} is not allowed: it is shared by the whole process (the host and "
            f"other sessions); {self._hint}"
        )

    __setitem__ = __delitem__ = update = setdefault = pop = popitem = clear = __ior__ = _refuse

    def __getitem__(self, key: Any) -> Any:
        return self._real[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._real)

    def __len__(self) -> int:
        return len(self._real)

    def copy(self) -> Any:
        return self._real.copy()

    def find_all(self, pattern: str) -> Any:
        return self._real.find_all(pattern)

    def __repr__(self) -> str:
        return repr(self._real)


class _ReadOnlyOptions:
    """pandas.options as restricted code sees it: reads go to the real options, writes are refused."""

    __slots__ = ("_label", "_real")

    def __init__(self, real: Any, label: str) -> None:
        object.__setattr__(self, "_real", real)
        object.__setattr__(self, "_label", label)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "d":
            raise AttributeError(name)
        value = getattr(self._real, name)
        if _real_type(value) is _real_type(self._real):
            return _ReadOnlyOptions(value, f"{self._label}.{name}")
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise PolicyViolation(
            f"changing {self._label}.{name} is not allowed: pandas options are shared by the whole process "
            "(the host and other sessions); pass display arguments to the call instead "
            "(df.to_string(max_rows=...), df.round(2))"
        )

    __delattr__ = __setattr__  # type: ignore[assignment]

    def __dir__(self) -> list[str]:
        return [name for name in dir(self._real) if name != "d"]

    def __repr__(self) -> str:
        return repr(self._real)


def _is_masked_print_option(value: Any) -> bool:
    core = sys.modules.get("numpy.ma.core")
    return core is not None and value is getattr(core, "masked_print_option", None)


_MASKED_PRINT_SETTERS = frozenset({"set_display", "enable"})
_MASKED_PRINT_HINT = "choose how masked values show per array instead: arr.filled('--'), arr.tolist()"


class _ReadOnlyDisplay:
    """A process-wide display object (numpy.ma.masked_print_option) as restricted code sees it: its
    readers work, its setters are refused (every masked array's repr, the host's included, uses it)."""

    __slots__ = ("_hint", "_label", "_real", "_setters")

    def __init__(self, real: Any, label: str, setters: frozenset[str], hint: str) -> None:
        object.__setattr__(self, "_real", real)
        object.__setattr__(self, "_label", label)
        object.__setattr__(self, "_setters", setters)
        object.__setattr__(self, "_hint", hint)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._setters:
            raise PolicyViolation(
                f"{self._label}.{name}() is not allowed: it is shared by the whole process (the host and "
                f"other sessions); {self._hint}"
            )
        return getattr(self._real, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise PolicyViolation(
            f"changing {self._label}.{name} is not allowed: it is shared by the whole process (the host and "
            f"other sessions); {self._hint}"
        )

    __delattr__ = __setattr__  # type: ignore[assignment]

    def __dir__(self) -> list[str]:
        return [name for name in dir(self._real) if not name.startswith("_") and name not in self._setters]

    def __str__(self) -> str:
        return str(self._real)

    def __repr__(self) -> str:
        return repr(self._real)


class _GuardedAttrGetter:
    """operator.attrgetter for names the policy routes (format, register, ...)."""

    __slots__ = ("_guards", "_names")

    def __init__(self, guards: SessionGuards, names: tuple[str, ...]) -> None:
        self._guards = guards
        self._names = names

    def __call__(self, obj: Any) -> Any:
        values = []
        for name in self._names:
            value = obj
            for part in name.split("."):
                value = self._guards.getattr(value, part)
            values.append(value)
        return values[0] if len(values) == 1 else tuple(values)


_ANNOTATION_IN_HOST = (  # the hook's words for the same namespaces where it judges a compiled annotation
    "a string annotation would be evaluated in a module of the host; write annotations "
    "without quotes or give get_type_hints() a namespace of your own"
)


class _AnnotationNames(dict):  # type: ignore[type-arg]
    """The names a forward reference of the session may use (Python 3.14+): its namespace's own and
    its builtins table's, given to typing as the globals, with empty locals. Every name of the real
    builtins counts as present, so typing's lookup never falls through to the real builtins module:
    one the session lacks is a NameError. Private names (the table's internals among them) are
    refused, as the hook refuses them in a compiled annotation. With `refusal` set the namespace is a
    host module's, or has no builtins of the session's, and looking any name up is refused; compiled,
    such an annotation gets the real builtins, which the hook refuses."""

    __slots__ = ("guards", "refusal")

    def __init__(self, guards: SessionGuards, refusal: str) -> None:
        super().__init__()
        self.guards, self.refusal = guards, refusal

    def __contains__(self, name: object) -> bool:
        if self.refusal:
            raise self.guards.refuse(_EXEC_REFUSED, self.refusal)
        if isinstance(name, str) and nfkc(exact(name)).startswith("_"):
            raise self.guards.refuse(_EXEC_REFUSED, f"the annotation uses the private name '{name}'")
        return dict.__contains__(self, name) or name in builtins.__dict__

    def __missing__(self, name: str) -> Any:
        raise NameError(f"name {name!r} is not defined")  # no name=: it would suggest the real builtin


def _is_forward_ref(obj: Any, of_class: bool = False) -> bool:
    """A ForwardRef (or the class), whose evaluate() looks names up without compiling them (Python 3.14+)."""
    cls = getattr(sys.modules.get("annotationlib"), "ForwardRef", None)
    return cls is not None and (obj is cls if of_class else _real_type(obj) is cls)


def _annotatable(obj: Any) -> bool:
    return hasattr(obj, "__annotations__") or hasattr(obj, "__annotate__")


def _annotation_globals(owner: Any) -> Any:
    """The globals Python evaluates `owner`'s annotations in (a class's are its module's)."""
    if isinstance(owner, type):
        return getattr(sys.modules.get(owner.__module__), "__dict__", None)
    if isinstance(owner, ModuleType):
        return owner.__dict__
    seen = {id(owner)}
    while hasattr(owner, "__wrapped__"):  # as get_type_hints() unwraps
        owner = owner.__wrapped__
        if id(owner) in seen:
            raise ValueError("wrapper loop when unwrapping an annotated object")
        seen.add(id(owner))
    return getattr(owner, "__globals__", None)


@functools.lru_cache(maxsize=1024)
def _refused_builtin(message: str) -> Callable[..., Any]:
    # Shared by every session of a policy (the message is the whole state): ~6 KiB less per session.
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise PolicyViolation(message)

    return refused


def _getattr_name(name: Any) -> None:
    """First statement of a user-defined __getattr__: private names are never answered."""
    if isinstance(name, str) and nfkc(exact(name)).startswith("_"):
        raise AttributeError(name)


_local_writes: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()


def _instance_writes_stay_local(cls: type) -> bool:
    found = _local_writes.get(cls)
    if found is None:
        found = _local_writes[cls] = _writes_stay_local(cls)
    return found


def _writes_stay_local(cls: type) -> bool:
    """Whether an attribute write on an instance of `cls` lands on the instance (or fails).

    Decided by identity, never by names a class could choose: the reviewed setters are looked up
    in their real modules and compared with what `cls` has.
    """
    for attr, plain in (("__setattr__", _OBJECT_SETATTR), ("__delattr__", _OBJECT_DELATTR)):
        found = _real_getattr(cls, attr, plain)
        if found is plain or not isinstance(found, FunctionType):
            continue  # object's own, or a C type's slot (reviewed by the reachability audit)
        if found is _ReadOnlyOptions.__setattr__ or found is _ReadOnlyDisplay.__setattr__:  # refuse, say why
            continue
        if not (_reviewed_setter(found) or _frozen_dataclass_setter(cls, attr, found)):
            return False
    return True


def _reviewed_setter(func: FunctionType) -> bool:
    key = (func.__module__, func.__qualname__)
    if key not in _INSTANCE_LOCAL_SETTERS:
        return False
    value: Any = sys.modules.get(key[0])
    for part in key[1].split("."):
        value = vars(value).get(part) if hasattr(value, "__dict__") else None
    return value is func


def _frozen_dataclass_setter(cls: type, attr: str, func: FunctionType) -> bool:
    """The __setattr__/__delattr__ of frozen=True dataclasses: it raises, or writes the instance."""
    for owner in cls.__mro__:
        if vars(owner).get(attr) is func:
            params = vars(owner).get("__dataclass_params__")
            return params is not None and bool(getattr(params, "frozen", False))
    return False


def _shared_role(obj: Any, cls: type) -> str:
    """How `obj` is shared with the host ('' if it is not): part of a class or module of the host."""
    if _real_getattr(cls, "__get__", None) is not None:
        return "the descriptor"  # property, cached_property, classmethod, ...: part of a class
    enum = sys.modules.get("enum")
    if enum is not None and isinstance(obj, enum.Enum):
        return "a member of the enum"
    if _shared_objects.holds(obj):
        return "the module-level object"
    return ""


class _SharedObjects:
    """Objects held by the host's modules (module globals, and values in their classes' namespaces).

    Scanned incrementally as modules are imported; the objects are kept referenced, so an id is
    never mistaken for a later object's.
    """

    def __init__(self) -> None:
        self._objects: dict[int, Any] = {}
        self._scanned: set[str] = set()
        self._count = 0
        self._lock = threading.Lock()

    def holds(self, obj: Any) -> bool:
        if len(sys.modules) != self._count:
            self._scan()
        return self._objects.get(id(obj)) is obj

    def _scan(self) -> None:
        with self._lock:
            modules = list(sys.modules.items())
            self._count = len(modules)
            for name, module in modules:
                if name in self._scanned:
                    continue
                self._scanned.add(name)
                namespace = getattr(module, "__dict__", None)
                for value in list(namespace.values()) if isinstance(namespace, dict) else ():
                    self._add(value)
                    if isinstance(value, type):
                        for member in list(vars(value).values()):
                            self._add(member)

    def _add(self, value: Any) -> None:
        if not isinstance(value, _NOT_SHARED_STATE):
            self._objects[id(value)] = value


# Values a write cannot reach shared state through (immutable, or checked before this point).
_NOT_SHARED_STATE = (
    type(None),
    str,
    bytes,
    int,
    float,
    complex,
    tuple,
    frozenset,
    type,
    ModuleType,
    FunctionType,
    BuiltinFunctionType,
)
_shared_objects = _SharedObjects()


def _dataclass_field() -> type:
    import dataclasses

    return dataclasses.Field


def _is_dispatcher(obj: Any) -> bool:
    """functools.singledispatch functions and singledispatchmethod objects."""
    return (callable(obj) and hasattr(obj, "registry") and hasattr(obj, "dispatch")) or (
        _real_type(obj) is functools.singledispatchmethod
    )


def _dispatched(obj: Any) -> Any:
    if _real_type(obj) is functools.singledispatchmethod:
        return obj.func
    return getattr(obj, "__wrapped__", None)


def _abc_meta() -> type:
    import abc

    return abc.ABCMeta


def _strings(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterable[str]:
    stack: list[Any] = [*args, *kwargs.values()]
    seen = 0
    while stack and seen < 10_000:
        seen += 1
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())


def _plain_strings(value: Any, depth: int = 0) -> Any:
    """`value` with str subclass instances replaced by plain strs, inside lists, tuples and dicts too."""
    if isinstance(value, str):
        return exact(value)
    if depth > 3:
        return value
    if _real_type(value) in (list, tuple):
        return _real_type(value)(_plain_strings(v, depth + 1) for v in value)
    if _real_type(value) is dict:
        return {_plain_strings(k, depth + 1): _plain_strings(v, depth + 1) for k, v in value.items()}
    return value


def _expression_refusal(expr: str, rules: StaticRules) -> str | None:
    """pandas expressions resolve names and attributes themselves: refuse private and internal ones,
    and routed attributes (`@p.parser`; a column named like one, `type == 'a'`, is still a name)."""
    word, attribute, last = "", False, ""
    for ch in nfkc(expr) + " ":
        if ch.isalnum() or ch == "_":
            if not word:
                attribute = last == "."
            word += ch
            continue
        if word and not word[0].isdigit():
            if word.startswith("_"):
                return rules.attribute_refusal(word) or f"name '{word}' is not allowed"
            refusal = rules.attribute_refusal(word)
            if refusal is None and attribute and word in rules.routed:
                refusal = routed_refusal(word, "a pandas expression")
            if refusal is not None:
                return refusal
        last = ch if not ch.isspace() else "a" if word else last  # the last token's last character
        word = ""
    return None


# The key under which a restricted session's builtins table holds its SessionGuards.
SESSION = "__repl_session__"
# What `owned`/`writable` are until a session makes its first class (immutable, so shareable).
_NOTHING_OWNED: frozenset[type] = frozenset()
_NO_CONTEXT_VALUES: Mapping[contextvars.ContextVar[Any], Any] = types.MappingProxyType({})
_first_class_lock = threading.Lock()


def _calling_session(frame: types.FrameType | None) -> SessionGuards | None:
    """The session a shared guard acts for: the one whose code called it.

    First the caller's frame: its builtins table is the session's own (frames get it from their
    function or cell, fixed when the session made them), so the class goes where it went when
    every session had its own guard, even for a function of one session run while another's
    execution is current. Restricted code cannot choose a frame's builtins: it cannot name
    `__builtins__`, make functions with other globals, or reach frames. When a library called the
    guard (its frame has the host's builtins), the session whose cell runs in this context (the
    current execution, whose session the runtime sets when it starts one of the session's cells;
    a variable's description runs under an execution without one). None outside both: the caller
    refuses.
    """
    if frame is not None:
        found = frame.f_builtins.get(SESSION)
        if _real_type(found) is SessionGuards:
            return found
    execution = current_execution.get()
    return None if execution is None else execution.session


class _TypeMeta(type):
    """The metaclass of the sessions' `type`: type(x) never hands out a metaclass; type(name, bases,
    ns) is checked. One class for the whole process, stateless.

    With the real `type` (or any metaclass) code could create classes whose special attributes it
    may not define, such as `__array_interface__` with a raw memory address for numpy.
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs:
            found = _real_type(args[0])
            if found is type or found is _TypeMeta or found is _GuardedMeta:
                return cls
            if found in _guarded_classes():
                # An object a library made with the host class: the session gets the guarded form
                # (its checks) whichever way it reaches the class.
                guards = _calling_session(sys._getframe(1))
                return found if guards is None else guards.guarded_form(found)
            if issubclass(found, type):
                raise PolicyViolation(
                    f"type() of class '{args[0].__qualname__}' (its metaclass) is not allowed under policy "
                    f"'{_type_guard_policy.get(cls, '?')}'; use isinstance() checks"
                )
            return found
        if len(args) == 3:
            guards = _calling_session(sys._getframe(1))
            if guards is None:
                raise PolicyViolation(
                    "type(name, bases, namespace) outside a session's own code is not allowed under policy "
                    f"'{_type_guard_policy.get(cls, '?')}'; use a class statement"
                )
            return guards.new_class(*args, **kwargs)
        raise TypeError("type() takes 1 or 3 arguments")

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, type)

    def __subclasscheck__(cls, sub: Any) -> bool:
        return sub is cls or (isinstance(sub, type) and issubclass(sub, type))

    def __repr__(cls) -> str:
        return "<class 'type'>"


def _class_getitem(cls: Any, params: Any) -> Any:
    return types.GenericAlias(cls, params)


# The policy name each guard's refusals give (kept outside the class: nothing to read or change).
_type_guard_policy: weakref.WeakKeyDictionary[type, str] = weakref.WeakKeyDictionary()


@functools.lru_cache(maxsize=64)
def _type_guard_for(policy_name: str) -> type:
    """The `type` every restricted session of a policy gets (one per session cost ~5 KiB each).

    Shared safely because it holds nothing of a session: the one-argument form needs no session,
    and type(name, bases, ns) finds the calling session (`_calling_session`) and uses that
    session's `new_class`, whose rules and class records are the session's own. Restricted code
    cannot change the shared class: writes to any class it did not define are refused
    (`check_target`), `_TypeMeta` is not reachable (type(type) is the guard itself), and no
    guard can be a base or metaclass of a session's class (`build_class`, `new_class`).
    """
    guard = _TypeMeta(
        "type", (), {"__module__": "builtins", "__class_getitem__": classmethod(_class_getitem)}
    )
    _type_guard_policy[guard] = policy_name
    return guard
