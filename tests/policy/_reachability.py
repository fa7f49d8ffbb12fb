"""A walk over everything restricted code can reach by attribute reads from its builtins and module views.

Starting from a session's builtins and the view of every module its policy admits, the walk
follows what code can read: public attributes (and the few private names the policy lets it
read), the submodules a view loads on first access, the origins and arguments of typing aliases,
down to a bounded depth. It reports each object that would hand code more than the policy grants:

* `module`: a real module object (views are fine);
* `frame`: a frame, traceback, code object, or generator/coroutine frame;
* `entry`: an exec/eval/compile/import/introspection entry point (by identity);
* `host-write`: an object whose attribute writes the guards would allow and which passes them on
  to something else (a forwarding `__setattr__`, such as typing's aliases);
* `format`: a format-capable wrapper (a class that applies a format string to objects by
  attribute lookups) that the policy hands out unguarded;
* `frame-depth`: a function that takes a frame depth or resolves names from frames;
* `global-setter`: a function that rebinds a module's globals, or a known setter of process-wide
  library state, handed out as is;
* `lock`: a lock or condition whose blocking wait the time limit cannot end;
* `shared-container`: a mutable container a module holds (item writes would change it for the host
  and every session), handed out as is instead of as a copy or a read-only view.
* `shared-setter`: a method of an object a module holds that sets the object's own attributes
  (`numpy.ma.masked_print_option.set_display`: a display setting of the whole process), handed out
  as is instead of through a per-session or read-only stand-in.

Reviewed exceptions are listed by identity in `REVIEWED`, each with the reason. The walk never
calls what it finds (beyond attribute reads, which run properties: it reads only what code could).
"""

from __future__ import annotations

import builtins
import dis
import sys
import threading
import types
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from genpark_repl_tools.policy import Policy
from genpark_repl_tools.policy._guards import SessionGuards, _shared_objects
from genpark_repl_tools.policy._imports import ModuleView
from genpark_repl_tools.policy._restricted import RestrictedRuntime

MAX_DEPTH = 6
MAX_OBJECTS = 250_000

_FRAME_TYPES = (types.FrameType, types.TracebackType, types.CodeType)
_FRAME_DEPTH_PARAMS = frozenset(
    {"level", "stacklevel", "depth", "frame", "_level", "stack_level", "n_frames"}
)
# Names a function uses when it resolves names from frames: its own frame walk, or pandas' scopes.
_FRAME_NAMES = frozenset(
    {
        "_getframe",
        "currentframe",
        "getouterframes",
        "f_back",
        "f_locals",
        "f_globals",
        "ensure_scope",
        "Scope",
        "_eval",
        "eval",
    }
)
_GLOBAL_STORES = frozenset({"STORE_GLOBAL", "DELETE_GLOBAL"})
_IMPORTS = frozenset({"IMPORT_NAME", "IMPORT_FROM"})
_MUTABLE = (dict, list, set, bytearray, deque)
_LOCK_TYPES = (
    type(threading.Lock()),
    type(threading.RLock()),
    threading.Condition,
    threading.Event,
    threading.Semaphore,
    threading.Barrier,
)


@dataclass(frozen=True)
class Finding:
    kind: str
    path: str
    what: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.path} -> {self.what}"


def _entry_points() -> dict[int, str]:
    import gc
    import importlib
    import inspect

    found: dict[int, str] = {}
    for name in (
        "exec",
        "eval",
        "compile",
        "__import__",
        "open",
        "breakpoint",
        "input",
        "globals",
        "locals",
        "vars",
        "help",
        "exit",
        "quit",
    ):
        found[id(getattr(builtins, name))] = f"builtins.{name}"
    for module, names in (
        (
            sys,
            ("_getframe", "settrace", "setprofile", "addaudithook", "modules", "exit", "setrecursionlimit"),
        ),
        (gc, ("get_objects", "get_referrers", "get_referents")),
        (importlib, ("import_module", "reload", "__import__")),
        (inspect, ("currentframe", "stack", "getouterframes", "getmembers")),
    ):
        for name in names:
            if hasattr(module, name):
                found[id(getattr(module, name))] = f"{module.__name__}.{name}"
    import os

    for name in (
        "system",
        "popen",
        "execv",
        "execve",
        "fork",
        "spawnv",
        "kill",
        "remove",
        "environ",
        "putenv",
    ):
        if hasattr(os, name):
            found[id(getattr(os, name))] = f"os.{name}"
    return found


# Setters of process-wide library state that never rebind a global themselves (they change a shared
# object): handed out as is, each is a route. "module.attr" strings, resolved by identity.
_KNOWN_SETTERS = (
    "random.seed",
    "random.setstate",
    "calendar.setfirstweekday",
    "csv.register_dialect",
    "csv.field_size_limit",
    "zoneinfo.reset_tzpath",
    "locale.setlocale",
    "numpy.set_printoptions",
    "numpy.seterr",
    "numpy.seterrcall",
    "numpy.random.seed",
    "numpy.random.set_state",
    "numpy.random.mtrand.seed",
    "pandas.set_option",
    "pandas.reset_option",
    "pandas.option_context",
    "pandas.set_eng_float_format",
    "pandas.plotting.register_matplotlib_converters",
    "matplotlib.rc",
    "matplotlib.rcdefaults",
    "matplotlib.rc_context",
    "matplotlib.dates.set_epoch",
    "matplotlib.style.use",
)


def _known_setters() -> dict[int, str]:
    found: dict[int, str] = {}
    for dotted in _KNOWN_SETTERS:
        module, _, attr = dotted.rpartition(".")
        obj = getattr(sys.modules.get(module), attr, None)
        if obj is not None:
            found[id(obj)] = dotted
    return found


def _format_bases() -> tuple[type, ...]:
    import collections
    import string

    bases: list[type] = [string.Formatter, collections.UserString]
    logging = sys.modules.get("logging")
    if logging is not None:
        bases += [logging.Formatter, logging.StrFormatStyle]
    ticker = sys.modules.get("matplotlib.ticker")
    if ticker is not None:
        bases.append(ticker.StrMethodFormatter)
    return tuple(bases)


@dataclass
class Walk:
    """One walk from `roots` (name -> object) for the session whose guards are `guards`."""

    guards: SessionGuards
    roots: dict[str, Any]
    reviewed: dict[int, str] = field(default_factory=dict)
    max_depth: int = MAX_DEPTH
    findings: list[Finding] = field(default_factory=list)
    seen: set[int] = field(default_factory=set)
    _keep: list[Any] = field(default_factory=list)

    def run(self) -> list[Finding]:
        self._entries = _entry_points()
        self._setters = _known_setters()
        self._format_bases = _format_bases()
        # Breadth first: every object is judged and expanded at the shortest path that reaches it.
        queue: deque[tuple[str, Any, int, str]] = deque(
            (name, obj, 0, "") for name, obj in self.roots.items()
        )
        while queue and len(self.seen) < MAX_OBJECTS:
            path, obj, depth, holder = queue.popleft()
            if id(obj) in self.seen or _atomic(obj):
                continue
            self.seen.add(id(obj))
            self._keep.append(obj)  # ids stay unique while the walk runs
            stop = id(obj) not in self.reviewed and self.judge(path, obj, holder)
            if stop or depth >= self.max_depth:
                continue
            for name, child in self.children(obj):
                where = f"{path}{'' if name.startswith('[') else '.'}{name}"
                queue.append((where, child, depth + 1, _module_of(obj)))
        return self.findings

    def report(self, kind: str, path: str, what: str) -> None:
        self.findings.append(Finding(kind, path, what))

    # ---- what counts as a route ---------------------------------------------------------------------

    def judge(self, path: str, obj: Any, holder: str = "") -> bool:
        """Report `obj` (reached from an object of module `holder`) if it is a route; True stops the walk."""
        if isinstance(obj, types.ModuleType) and not isinstance(obj, ModuleView):
            self.report("module", path, f"the real module '{obj.__name__}'")
            return True
        if isinstance(obj, _FRAME_TYPES):
            self.report("frame", path, type(obj).__name__)
            return True
        if id(obj) in self._entries:
            self.report("entry", path, self._entries[id(obj)])
            return True
        if id(obj) in self._setters:
            self.report("global-setter", path, self._setters[id(obj)])
            return True
        if isinstance(obj, _LOCK_TYPES) and not _stepped(obj):
            self.report("lock", path, type(obj).__name__)
        if isinstance(obj, _MUTABLE) and _shared_objects.holds(obj):
            held = f" held by {holder}" if holder else ""
            self.report("shared-container", path, f"{type(obj).__module__}.{type(obj).__qualname__}{held}")
        if isinstance(obj, type):
            if issubclass(obj, self._format_bases) and not _guarded_class(obj):
                self.report("format", path, f"class {obj.__module__}.{obj.__qualname__}")
            return False
        if isinstance(obj, self._format_bases) and id(type(obj)) not in self.reviewed:
            self.report("format", path, f"instance of {type(obj).__qualname__}")
        if self._write_passes_on(obj):
            self.report("host-write", path, f"{type(obj).__module__}.{type(obj).__qualname__}")
        func = _python_function(obj)
        if func is not None and not _is_guard(func):
            self._judge_function(path, func)
            owner = obj.__self__ if isinstance(obj, types.MethodType) else None
            if self._shared_setter(owner, func):
                held = f" held by {holder}" if holder else ""
                self.report("shared-setter", path, f"{func.__module__}.{func.__qualname__}{held}")
        return False

    def _shared_setter(self, owner: Any, func: types.FunctionType) -> bool:
        """A method that sets attributes of an object a module holds (not a class: writes to those are
        checked by the guards)."""
        if owner is None or isinstance(owner, type) or id(owner) in self.reviewed:
            return False
        return _stores_on_self(func.__code__) and _shared_objects.holds(owner)

    def _write_passes_on(self, obj: Any) -> bool:
        setter = getattr(type(obj), "__setattr__", object.__setattr__)
        if setter is object.__setattr__ or not isinstance(setter, types.FunctionType):
            return False
        try:
            self.guards.check_target(obj, "x")
        except PermissionError:
            return False  # the guards refuse writes through it
        from genpark_repl_tools.policy._guards import _instance_writes_stay_local

        return not _instance_writes_stay_local(type(obj))

    def _judge_function(self, path: str, func: types.FunctionType) -> None:
        code = func.__code__
        names = set(code.co_names)
        params = set(code.co_varnames[: code.co_argcount + code.co_kwonlyargcount])
        params |= {
            c for c in code.co_consts if isinstance(c, str) and c in _FRAME_DEPTH_PARAMS
        }  # kwargs["level"]
        if names & _FRAME_NAMES and params & _FRAME_DEPTH_PARAMS:
            self.report("frame-depth", path, f"{func.__module__}.{func.__qualname__}")
        if _stores_globals(code):
            self.report("global-setter", path, f"{func.__module__}.{func.__qualname__}")

    # ---- what code can read -------------------------------------------------------------------------

    def children(self, obj: Any) -> Iterator[tuple[str, Any]]:
        if isinstance(obj, ModuleView):
            yield from self._view_children(obj)
            return
        if isinstance(obj, dict):
            for key, value in list(obj.items())[:500]:
                yield f"[{key!r}]", value
            return
        if isinstance(obj, (list, tuple, set, frozenset)):
            for i, value in enumerate(list(obj)[:200]):
                yield f"[{i}]", value
            return
        origin = getattr(obj, "__origin__", None) if _is_typing_alias(obj) else None
        if origin is not None:
            yield "__origin__", origin
            yield from ((f"__args__[{i}]", a) for i, a in enumerate(getattr(obj, "__args__", ())))
        rules = self.guards.rules
        for name in _public_names(obj):
            if rules.attribute_refusal(name) is not None:
                continue  # refused by name wherever code writes it
            try:
                value = (
                    self.guards.getattr(obj, name) if name in self.guards.rules.routed else getattr(obj, name)
                )
            except Exception:
                continue
            yield name, value

    def _view_children(self, view: ModuleView) -> Iterator[tuple[str, Any]]:
        content = types.ModuleType.__getattribute__(view, "__dict__")
        missing = content.get("__getattr__")
        for name, value in list(content.items()):
            if not name.startswith("_"):
                yield name, value
        real = sys.modules.get(types.ModuleType.__getattribute__(view, "__name__"))
        for name, value in list(vars(real).items()) if real is not None else ():
            if name.startswith("_") or name in content:
                continue
            if isinstance(value, types.ModuleType) or callable(missing):
                try:
                    yield name, missing(name)  # type: ignore[misc]
                except (AttributeError, PermissionError, ImportError):
                    continue


def _module_of(obj: Any) -> str:
    """The module an object belongs to: a module's (view's) name, a class's module, or its class's."""
    if isinstance(obj, types.ModuleType):
        return str(types.ModuleType.__getattribute__(obj, "__name__"))
    cls = obj if isinstance(obj, type) else type(obj)
    return str(getattr(cls, "__module__", "") or "")


def _atomic(obj: Any) -> bool:
    return obj is None or isinstance(obj, (str, bytes, int, float, complex, bool, range, slice, type(...)))


def _guarded_class(cls: type) -> bool:
    """A stand-in the guards built: its entry point is the guards' own code."""
    call = vars(cls).get("__call__")
    return isinstance(call, types.FunctionType) and _is_guard(call)


def _stepped(lock: Any) -> bool:
    from genpark_repl_tools.policy._blocking import SteppedCondition, SteppedLock

    return isinstance(lock, (SteppedLock, SteppedCondition))


def _python_function(obj: Any) -> types.FunctionType | None:
    func = obj.__func__ if isinstance(obj, (types.MethodType, staticmethod, classmethod)) else obj
    return func if isinstance(func, types.FunctionType) else None


def _is_guard(func: types.FunctionType) -> bool:
    return func.__module__.startswith("genpark_repl_tools.policy")


_global_store_cache: dict[types.CodeType, bool] = {}


def _stores_globals(code: types.CodeType) -> bool:
    """Whether `code` rebinds a global, or writes an item or attribute of an object it loads as a global
    (`registry[key] = value`, `settings.flag = value`): state of the module, shared by everyone.

    A lazy import (`global heapq; import heapq` in Counter.most_common, `from _sha2 import sha512 as
    _sha512` in Random.seed) binds what the import system returns, the same for every caller: not a
    setter."""
    hit = _global_store_cache.get(code)
    if hit is None:
        ops = [ins for ins in dis.get_instructions(code) if ins.opname not in ("CACHE", "EXTENDED_ARG")]
        hit = any(
            (ins.opname in _GLOBAL_STORES and not (i >= 1 and ops[i - 1].opname in _IMPORTS))
            or (ins.opname == "STORE_ATTR" and i >= 1 and ops[i - 1].opname == "LOAD_GLOBAL")
            or (ins.opname == "STORE_SUBSCR" and _container_is_global(ops, i))
            for i, ins in enumerate(ops)
        )
        _global_store_cache[code] = hit
    return hit


def _stores_on_self(code: types.CodeType) -> bool:
    """Whether a method's code sets an attribute of its first argument (`self.x = value`)."""
    if code.co_argcount < 1:
        return False
    first = code.co_varnames[0]
    ops = [ins for ins in dis.get_instructions(code) if ins.opname not in ("CACHE", "EXTENDED_ARG")]
    return any(
        ins.opname == "STORE_ATTR" and i >= 1 and _last_local(ops[i - 1]) == first
        for i, ins in enumerate(ops)
    )


def _last_local(ins: dis.Instruction) -> str | None:
    """The local an instruction leaves on top of the stack, if it loads locals: Python 3.13+ loads the
    value and the owner of `self.x = value` with one instruction, whose argval names both."""
    if not ins.opname.startswith("LOAD_FAST"):
        return None
    return str(ins.argval[-1] if isinstance(ins.argval, tuple) else ins.argval)


def _container_is_global(ops: list[dis.Instruction], i: int) -> bool:
    """For `container[key] = value` at ops[i]: whether the container is a global (or an attribute of one)."""
    j, need = i - 1, 1  # skip the key expression: instructions whose net stack effect is +1
    while need > 0 and j >= 0:
        try:
            need -= dis.stack_effect(
                ops[j].opcode, ops[j].arg if ops[j].opcode >= dis.HAVE_ARGUMENT else None
            )
        except ValueError:
            return False
        j -= 1
    if need < 0:
        # The key's last instruction pushed the container too: a superinstruction that loads two
        # locals at once (3.13's LOAD_FAST_LOAD_FAST for `data[mask] = value`). Anything else that
        # pushes two values counts as a global container, so the walk errs towards reporting.
        return not ops[j + 1].opname.startswith("LOAD_FAST")
    while j >= 0 and ops[j].opname == "LOAD_ATTR":
        j -= 1
    return j >= 0 and ops[j].opname == "LOAD_GLOBAL"


def _is_typing_alias(obj: Any) -> bool:
    import typing

    return isinstance(
        obj,
        (
            types.GenericAlias,
            getattr(typing, "_GenericAlias", ()),
            getattr(typing, "_SpecialGenericAlias", ()),
        ),
    )


def _public_names(obj: Any) -> list[str]:
    try:
        names = object.__dir__(obj) if not isinstance(obj, type) else dir(obj)
    except Exception:
        return []
    return [n for n in names if isinstance(n, str) and not n.startswith("_")][:400]


def session_roots(policy: Policy) -> tuple[SessionGuards, dict[str, Any]]:
    """A fresh session's guards, and its builtins plus the view of every module the policy admits."""
    runtime = RestrictedRuntime(policy)
    table = runtime.new_builtins()
    guards: SessionGuards = table["getattr"].__self__
    roots: dict[str, Any] = {f"builtins.{k}": v for k, v in table.items() if not k.startswith("__repl")}
    for module in admitted_modules(policy):
        try:
            roots[module] = guards.view(module)
        except ImportError:
            continue  # not installed here
    roots.update(sample_instances(guards))
    return guards, roots


def sample_instances(guards: SessionGuards) -> dict[str, Any]:
    """Objects code gets by calling what it can reach (the walk itself never calls anything): a few
    typical ones per module, made through the session's own views."""
    made: dict[str, Any] = {}
    recipes: dict[str, Any] = {
        "collections": lambda m: {"user_string": m.UserString("x"), "counter": m.Counter("ab")},
        "queue": lambda m: {"queue": m.Queue(), "simple_queue": m.SimpleQueue()},
        "random": lambda m: {"random": m.Random(1)},
        "decimal": lambda m: {"context": m.Context()},
        "calendar": lambda m: {"calendar": m.TextCalendar(), "html_calendar": m.HTMLCalendar()},
        "textwrap": lambda m: {"wrapper": m.TextWrapper()},
        "numpy": lambda m: {
            "array": m.zeros(3),
            "generator": m.random.default_rng(1),
            "finfo": m.finfo(float),
        },
        "pandas": lambda m: {"frame": m.DataFrame({"a": [1, 2]}), "series": m.Series([1.0])},
        "matplotlib.pyplot": lambda m: dict(zip(("figure", "axes"), m.subplots(), strict=True)),
    }
    for module, recipe in recipes.items():
        if not guards.policy.allows_module(module):
            continue
        try:
            made.update({f"<{name}>": value for name, value in recipe(guards.view(module)).items()})
        except ImportError:
            continue  # not installed here
    axes = made.get("<axes>")
    if axes is not None:
        made["<line>"] = axes.plot([1, 2])[0]
    return made


def admitted_modules(policy: Policy) -> Iterable[str]:
    for rule in policy.imports:
        if rule.allowed and not any(p.startswith("_") for p in rule.name.split(".")):
            yield rule.name


# Reviewed routes: "module.qualname" -> why handing it out is fine.
REVIEWED: dict[str, str] = {
    "numpy.ma.masked": "the masked constant: its class refuses every attribute write on this singleton "
    "(MaskedConstant.__setattr__), so its mask and fill-value setters raise",
    "uuid.getnode": "caches the host's MAC address in a module global: the same value for everyone",
    "uuid.uuid1": "calls getnode() (above)",
    "uuid.uuid6": "keeps the last timestamp in module globals so that the process's ids stay unique and "
    "ordered: shared by design, and a session's calls only advance it, as any caller's do",
    "uuid.uuid7": "keeps the last timestamp and counter in module globals so that the process's ids stay "
    "unique and ordered: shared by design, and a session's calls only advance them, as any caller's do",
    "urllib.parse.quote_from_bytes": "memoizes quoters per set of safe characters in a module global "
    "(Python 3.10's pathlib exposes it as pathlib.urlquote_from_bytes): the same result for everyone",
    "base64.b85encode": "builds its lookup tables once in module globals",
    "base64.b85decode": "builds its lookup tables once in module globals",
    "base64.a85encode": "builds its lookup tables once in module globals",
    "base64.a85decode": "builds its lookup tables once in module globals",
    "collections.UserString": "its format() and format_map() are guarded like str's (routed names)",
    "numpy.set_printoptions": "per session: numpy >= 2 keeps print options in a context variable that each "
    "execution saves and restores (numpy < 2: the view refuses it)",
    "numpy.seterr": "per session: the execution saves and restores numpy's error state",
    "matplotlib.use": "the engine chooses the backend before every execution (docs/rich_outputs.md); a "
    "headless backend chosen by a session is kept (listed there)",
    "matplotlib.colors.to_rgba": "memoizes color conversions (same result for everyone)",
    "matplotlib.backend_bases.get_registered_canvas_class": "memoizes the canvas class for a file format",
    "numpy._core.getlimits.iinfo.max.fget": "memoizes integer limits in a class-level cache",
    "numpy._core.getlimits.iinfo.min.fget": "memoizes integer limits in a class-level cache",
    "numpy.info": "caches an index of numpy's names in module globals",
    "matplotlib.dates.get_epoch": "sets the default epoch from rcParams on first use (set_epoch is withheld)",
    "pandas.util._exceptions.find_stack_level": "counts pandas' own frames for warnings; returns an int",
    "matplotlib._pylab_helpers.Gcf.figs": "pyplot's figure registry is process-wide by design (like "
    "plt.close('all')); the engine tags figures by session (docs/rich_outputs.md)",
    "matplotlib.pyplot.switch_backend": "the engine chooses the backend before every execution "
    "(docs/rich_outputs.md); a headless backend chosen by a session is kept (listed there)",
}


# Reviewed by kind and path suffix: objects each instance has of its own.
REVIEWED_PATHS: dict[tuple[str, str], str] = {
    ("lock", ".bit_generator.lock"): "each numpy generator's own lock (an RLock: re-entrant in the one "
    "thread a session has); the session's generators are its own",
}

# Known gaps, by kind and path prefix, each with the reason it is not closed (docs/security.md lists them).
KNOWN_GAPS: dict[tuple[str, str], str] = {
    ("shared-container", "matplotlib."): "matplotlib's class-level tables and colormap data (markers, line "
    "styles, locator defaults, colormap color lists) can be changed in place by standard-policy code, which "
    "changes plots of the host and other sessions; matplotlib builds its own objects from them, so they "
    "cannot be swapped per session. Use the subprocess boundary where that matters.",
    ("shared-setter", "matplotlib."): "matplotlib's registered colormaps (set_bad, set_under, set_over, "
    "set_extremes) and its font manager (set_default_weight) are process-wide objects matplotlib looks up "
    "itself, so they cannot be swapped per session; the same gap as its shared tables above.",
}


def known_gap(finding: Finding) -> str | None:
    for (kind, suffix), why in REVIEWED_PATHS.items():
        if finding.kind == kind and finding.path.endswith(suffix):
            return why
    for (kind, prefix), why in KNOWN_GAPS.items():
        if finding.kind == kind and (finding.path.startswith(prefix) or f" held by {prefix}" in finding.what):
            return why
    return None


def reviewed_ids() -> dict[int, str]:
    """REVIEWED resolved to the objects themselves (by identity), for the modules imported."""
    found: dict[int, str] = {}
    for dotted, why in REVIEWED.items():
        module, _, qualname = dotted.partition(".")
        obj: Any = sys.modules.get(module)
        for part in qualname.split("."):
            obj = getattr(obj, part, None)
        if obj is not None:
            found[id(obj)] = why
    return found


def walk(policy: Policy, max_depth: int = MAX_DEPTH) -> tuple[Walk, list[Finding]]:
    """The walk for `policy`, and its findings that are not known gaps."""
    guards, roots = session_roots(policy)
    walker = Walk(guards, roots, reviewed_ids(), max_depth=max_depth)
    try:
        return walker, [f for f in walker.run() if known_gap(f) is None]
    finally:
        figure = roots.get("<figure>")
        if figure is not None:  # pyplot keeps figures process-wide: close the one made for the walk
            sys.modules["matplotlib.pyplot"].close(figure)
