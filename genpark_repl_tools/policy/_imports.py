"""Module views: what restricted code gets from `import`, instead of the host's module objects.

A view is a read-only module object holding the real module's public names (a snapshot, so reads
run at native speed), minus what the policy withholds. Attributes that are modules become views
themselves, or disappear when their module is not allowed (`dataclasses.sys`, `typing.sys`). A few
values are replaced by checked or per-session equivalents (see `_SPECIAL`): `random` functions use a
generator of the session's own, `time.sleep` can be interrupted, `functools.wraps` accepts only
the session's own objects, and so on. Views are per session, so nothing a session does through a
view reaches the host or another session.
"""

from __future__ import annotations

import builtins
import copy
import functools
import sys
from collections.abc import Callable
from types import FunctionType, MethodType, ModuleType
from typing import TYPE_CHECKING, Any

from ._blocking import stepped_queues
from ._errors import PolicyViolation
from ._sleep import interruptible_sleep

if TYPE_CHECKING:
    from ._guards import SessionGuards

__all__ = ["ModuleView", "build_view", "is_metaclass", "special_values"]

_real_type = type
_MUTABLE_CONTAINERS = (dict, list, set, bytearray)


class ModuleView(ModuleType):
    """A read-only, filtered stand-in for a module, as restricted code sees it.

    Security model: it holds references to the host's objects (functions, classes) but no way to
    reach the real module, and refuses every attribute assignment and deletion.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        raise PolicyViolation(_read_only(self, name))

    def __delattr__(self, name: str) -> None:
        raise PolicyViolation(_read_only(self, name))


# Code that looks at a view's class sees what it would see for a module (`type(m)`, "cannot pickle
# 'module' object", "Object of type module is not JSON serializable"), never the engine's private path.
# Nothing trusts a class's name or __module__ (see _audithook); checks use the class object itself.
ModuleView.__name__ = ModuleView.__qualname__ = "module"
ModuleView.__module__ = "builtins"


def _read_only(view: ModuleView, name: str) -> str:
    module = ModuleType.__getattribute__(view, "__name__")
    return (
        f"changing '{module}.{name}' is not allowed: modules are read-only for executed code "
        "(they are shared with the host); keep your own values in variables"
    )


def build_view(name: str, real: ModuleType, guards: SessionGuards) -> ModuleView:
    return _ViewBuilder(name, real, guards).build()


class _ViewBuilder:
    """Fills one view: public values now (native-speed reads), modules on first access (checked)."""

    def __init__(self, name: str, real: ModuleType, guards: SessionGuards) -> None:
        self.name = name
        self.real = real
        self.guards = guards
        self.rules = guards.rules
        self.rule = guards.policy.module_rule(name)
        rule = self.rule
        self.only = frozenset(rule.only) if rule is not None and rule.only is not None else None
        self.hidden = dict(rule.hidden) if rule is not None else {}
        self.specials = special_values()
        self.view = ModuleView(name, getattr(real, "__doc__", None))
        self.content: dict[str, Any] = ModuleType.__getattribute__(self.view, "__dict__")

    def exposed(self, attr: str) -> bool:
        return (
            not attr.startswith("_") and attr not in self.hidden and (self.only is None or attr in self.only)
        )

    def adapt(self, attr: str, value: Any) -> Any:
        special = self.specials.get(id(value))
        if special is not None and special[0] is value:
            return special[1](self.guards, value)
        local = self.guards.session_value(self.name, attr, value)
        if local is not None:
            return local
        if _real_type(value) in _MUTABLE_CONTAINERS:
            return copy.copy(value)  # module-level tables (keyword.kwlist, np.typecodes) stay the host's
        return value

    def build(self) -> ModuleView:
        content, real = self.content, self.real
        public: list[str] = []
        for attr, value in list(vars(real).items()):
            if not self.exposed(attr) or isinstance(value, ModuleType) or is_metaclass(value):
                continue  # modules are resolved (and checked) on first access; metaclasses never
            content[attr] = self.adapt(attr, value)
            public.append(attr)
        # From the module's own names; a computed one is read when code asks for it (`missing`):
        # Python 3.15's json and re answer __version__ with a DeprecationWarning, which must not
        # warn in every import.
        version = vars(real).get("__version__")
        if isinstance(version, str):
            content["__version__"] = version
        real_all = getattr(real, "__all__", None)
        names = real_all if isinstance(real_all, (list, tuple)) else public
        content["__all__"] = [a for a in names if isinstance(a, str) and self._star_importable(a)]
        content["__getattr__"] = self.missing
        return self.view

    def _star_importable(self, attr: str) -> bool:
        if not self.exposed(attr):
            return False
        value = vars(self.real).get(attr)
        if isinstance(value, ModuleType):
            return self.guards.policy.allows_module(value.__name__)
        return attr in self.content

    def missing(self, attr: str) -> Any:
        """The view's module-level __getattr__: names not copied at creation."""
        name, rules = self.name, self.rules
        if attr == "__version__":  # computed by the module (matplotlib's), or deprecated (see build)
            version = getattr(self.real, attr, None)
            if not isinstance(version, str):
                raise AttributeError(f"module '{name}' has no attribute '{attr}'")
            self.content[attr] = version
            return version
        if attr in self.hidden:
            raise AttributeError(
                f"'{name}.{attr}' is not available under policy '{rules.name}': {self.hidden[attr]}"
            )
        if not self.exposed(attr):
            rule = self.rule
            note = f": {rule.note}" if rule is not None and rule.note and self.only is not None else ""
            raise AttributeError(f"'{name}.{attr}' is not available under policy '{rules.name}'{note}")
        sub_rule = self.guards.policy.module_rule(f"{name}.{attr}")
        if sub_rule is not None and not sub_rule.allowed and sub_rule.name == f"{name}.{attr}":
            raise AttributeError(rules.import_refusal(f"{name}.{attr}"))
        try:
            value = getattr(self.real, attr)
        except AttributeError:
            raise AttributeError(f"module '{name}' has no attribute '{attr}'") from None
        if is_metaclass(value):
            raise AttributeError(
                f"'{name}.{attr}' is not available under policy '{rules.name}': it is a metaclass, which "
                "creates classes with arbitrary special attributes; subclass a class instead"
            )
        if isinstance(value, ModuleType):
            module_name = value.__name__
            refusal = rules.import_refusal(module_name)
            if refusal is not None:
                raise AttributeError(f"'{name}.{attr}' is the module '{module_name}': {refusal}")
            value = self.guards.view(module_name)
        else:
            value = self.adapt(attr, value)
        self.content[attr] = value
        return value


# ---- checked and per-session replacements -----------------------------------------------------------

Factory = Callable[["SessionGuards", Any], Any]


@functools.cache
def special_values() -> dict[int, tuple[Any, Factory]]:
    """Real object id -> (object, factory of its replacement). Keyed by identity, so a function
    re-exported by another module is replaced there too."""
    import abc
    import dataclasses
    import functools
    import operator
    import pathlib
    import time
    import typing

    from ._paths import SessionPath

    table: dict[int, tuple[Any, Factory]] = {}

    def add(obj: Any, factory: Factory) -> None:
        table[id(obj)] = (obj, factory)

    add(time.sleep, lambda g, real: interruptible_sleep)
    add(functools.update_wrapper, lambda g, real: g.update_wrapper)
    add(functools.wraps, lambda g, real: g.wraps)
    add(functools.total_ordering, lambda g, real: g.owned_only(real, "functools.total_ordering"))
    add(dataclasses.dataclass, lambda g, real: g.dataclass)
    add(dataclasses.make_dataclass, lambda g, real: g.make_dataclass)
    add(abc.abstractmethod, lambda g, real: g.abstractmethod)
    add(operator.attrgetter, lambda g, real: g.attrgetter)
    add(operator.methodcaller, lambda g, real: g.methodcaller)
    add(typing.get_origin, lambda g, real: g.get_origin)
    # Where typing has evaluate_forward_ref (3.14+), forward references are looked up, not compiled,
    # so the hook never sees them: the session's own evaluation (see SessionGuards) replaces typing's.
    if hasattr(typing, "evaluate_forward_ref"):
        add(typing.get_type_hints, lambda g, real: g.get_type_hints)
        add(typing.evaluate_forward_ref, lambda g, real: g.evaluate_forward_ref)  # type: ignore[attr-defined,unused-ignore]
    # Path metadata (stat, readlink, owner) raises no audit event: the session's paths answer it
    # only inside its workspace.
    add(pathlib.Path, _constant(SessionPath))
    add(type(pathlib.Path()), _constant(SessionPath))
    for cls, safe in _safe_enums().items():
        add(cls, _constant(safe))
    for cls, stepped in stepped_queues().items():
        add(cls, _constant(stepped))
    return table


def _constant(value: Any) -> Factory:
    def factory(guards: SessionGuards, real: Any) -> Any:
        return value

    return factory


def _safe_enums() -> dict[type, type]:
    """Enum bases whose functional API (`Enum("E", names)`) refuses private member names.

    `EnumType._create_` builds a class from a mapping of names; with a name like
    '__array_interface__' it would give restricted code a class attribute it may not define.
    """
    import enum

    bases = [getattr(enum, n) for n in ("Enum", "IntEnum", "Flag", "IntFlag", "StrEnum") if hasattr(enum, n)]
    safe: dict[type, type] = {}
    for base in bases:
        create = getattr(type(base), "_create_", None)
        if create is None:  # a Python without the functional-API hook: leave the class as is
            continue
        meta = type(base)
        namespace = meta.__prepare__(base.__name__, (base,))
        namespace["__module__"] = "enum"
        namespace["__qualname__"] = base.__qualname__
        cls = meta(base.__name__, (base,), namespace)
        type.__setattr__(cls, "_create_", classmethod(_checked_create(create)))
        safe[base] = cls
    return safe


def _checked_create(create: Callable[..., Any]) -> Callable[..., Any]:
    # Not positional-only: Python 3.13's Enum() passes class_name and names by keyword.
    def _create_(cls: Any, class_name: str, names: Any, *args: Any, **kw: Any) -> Any:
        if args or kw.get("module") is not None or kw.get("qualname") is not None:
            # module= and qualname= (or the same positionally) would let the class claim a host module
            raise PolicyViolation(
                "Enum(..., module=/qualname=) is not allowed: the class belongs to this session"
            )
        return create(cls, class_name, _checked_member_names(names), **kw)

    return _create_


def _checked_member_names(names: Any) -> Any:
    """`names` as given to the functional API, rebuilt with plain, checked str member names.

    The enum class is built from these names as dictionary keys: a str subclass could pass the
    check as 'A' and then hash and compare equal to '__array_interface__'.
    """
    if isinstance(names, str):
        return [_member_name(item) for item in str.__str__(names).replace(",", " ").split()]
    if hasattr(names, "keys"):
        return {_member_name(key): names[key] for key in list(names.keys())}
    plain: list[Any] = []
    for item in list(names):  # an iterator is consumed here, so hand the enum a list
        if isinstance(item, str):
            plain.append(_member_name(item))
        elif isinstance(item, tuple) and len(item) == 2:
            plain.append((_member_name(item[0]), item[1]))
        else:
            raise PolicyViolation(f"enum member {item!r} is not allowed: give names or (name, value) pairs")
    return plain


def _member_name(item: Any) -> str:
    name = str.__str__(item) if isinstance(item, str) else None
    if name is None or name.lstrip().startswith("_"):
        raise PolicyViolation(
            f"enum member name {item!r} is not allowed: names starting with '_' are private"
        )
    return name


def is_metaclass(value: Any) -> bool:
    """A class whose instances are classes: calling it builds a class from any namespace."""
    return isinstance(value, type) and issubclass(value, type)


def is_function_of(obj: Any, table: dict[str, Any]) -> bool:
    """Whether `obj` is a plain function defined by the session whose builtins are `table`."""
    return isinstance(obj, FunctionType) and getattr(obj, "__builtins__", None) is table


def module_of_callable(obj: Any) -> str:
    func = obj.__func__ if isinstance(obj, MethodType) else obj
    module = getattr(func, "__module__", None)
    return module if isinstance(module, str) else ""


_REAL_IMPORT = builtins.__import__


def real_import(name: str, fromlist: tuple[str, ...]) -> ModuleType:
    module: ModuleType = _REAL_IMPORT(name, None, None, fromlist, 0)
    return sys.modules.get(name, module)
