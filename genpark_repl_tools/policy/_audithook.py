"""Layer 2b, the audit-hook guard: refuses what the interpreter itself reports (PEP 578 events).

One `sys.addaudithook` hook for the whole process, installed on first use and never removed
(Python cannot remove audit hooks). It judges an event when sandboxed code is involved:

* while a restricted execution runs in this context (activated by the runtime), or
* when a frame of sandboxed code is anywhere on the current thread's stack (restricted code that
  the host calls back later, or code that left the execution's context with `Context().run`).

"Sandboxed code" is decided by code-object identity: the hook registers every code object it lets
a restricted execution run (the cell and everything nested in it, and code that libraries generate
for it after the hook verified it). Nothing a frame says about itself (`__name__` in its globals, a
class's `__module__`, a code object's name) is trusted; the import machinery and the stdlib helpers
the hook relies on are recognised by the identity of their code objects too. Which code objects
those are is learned when the hook is installed, by importing a module and evaluating an annotation
(never from a table of versions), and a self-test then shows the hook refuses and allows what it
should on this interpreter: if it does not, restricted policies refuse to start.

The hook's state (registered code, active executions, approved compilations) lives only in the
closure of the hook function, which no module attribute references. The runtime talks to it through
audit events of its own, which the hook accepts only when no sandboxed code is on the stack. Code
holding the real builtins therefore finds no switch to flip: not here, not in the runtime.

Refusals raise `PolicyViolation` (a PermissionError) out of the refused operation.
"""

from __future__ import annotations

import _thread
import ast
import collections
import contextvars
import functools
import inspect
import itertools
import os
import platform
import shutil
import site
import sys
import sysconfig
import tempfile
import threading
import unicodedata
import weakref
from collections.abc import Callable, Iterable, Iterator
from types import CodeType, FrameType
from typing import Any, NamedTuple

from ._context import session_workspace
from ._errors import PolicyViolation, UnsupportedInterpreter

__all__ = [
    "ACTIVATE",
    "MARK",
    "SandboxState",
    "activate",
    "deactivate",
    "install",
    "plain_path",
    "self_test",
    "write_stamp",
]

# Key in a restricted session's builtins dict; its value is that session's SandboxState (the guards
# read it). The hook does not trust it: frames are recognised by the identity of their code.
MARK = "__repl_sandbox__"

# The runtime's requests to the hook. Accepted only when no sandboxed code is on the stack.
ACTIVATE = "genpark_repl.sandbox.activate"
_PROBE = "genpark_repl.sandbox.installed"
_ADOPT = "genpark_repl.sandbox.adopt"
_WATCH = "genpark_repl.sandbox.watch"
_VERDICT = "genpark_repl.sandbox.verdict"

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC | getattr(os, "O_EXCL", 0)


class SandboxState:
    """What the session's guards need to know about their policy's files (the hook keeps its own copy)."""

    __slots__ = ("_workspace", "_workspace_fn", "files", "policy")

    def __init__(self, policy: str, files: bool, workspace: Callable[[], str]) -> None:
        self.policy = policy
        self.files = files
        self._workspace_fn = workspace
        self._workspace: str | None = None

    @property
    def workspace(self) -> str:
        override = session_workspace.get()  # the running session's own directory, if it has one
        if override is not None:
            return override
        if self._workspace is None:
            self._workspace = os.path.realpath(self._workspace_fn())
        return self._workspace

    def refuse(self, what: str, instead: str = "") -> PolicyViolation:
        tail = f"; {instead}" if instead else ""
        return PolicyViolation(f"{what} is not allowed under policy '{self.policy}'{tail}")


_install_lock = threading.Lock()
# How many executions' rules a shared code object remembers having been run under (see ran_by).
_RAN_KEPT = 8
# How many compilations of checked source the hook remembers (see approvals): a library runs what it
# compiled soon after, typing when it evaluates an annotation made earlier.
_APPROVALS_KEPT = 512

# workspace -> a stamp taken when the hook last let restricted code write there (open for writing,
# create, rename, remove, change a file's metadata: every allowed write goes through check_path). A
# stamp is never reused (one counter for all workspaces, next() is atomic), so a write after a
# reader looked always leaves a value that reader has not seen.
_write_stamps: dict[str, int] = {}
_next_stamp = itertools.count(1).__next__


def write_stamp(workspace: str) -> int:
    """The stamp of the last write restricted code was allowed to make in `workspace` (0: none).

    Host code asks it to learn, without looking at the directory, whether sandboxed code may have
    changed a workspace since the last time it asked (the engine's file reports). It counts only
    what the hook judges: code that runs without it (trusted, another process) is not counted.
    """
    return _write_stamps.get(workspace, 0)


def forget_writes(workspace: str) -> None:
    """Drop the stamp of `workspace` (its session is gone)."""
    _write_stamps.pop(workspace, None)


TESTED = "3.10-3.15"
# Why the hook could not even be built on this interpreter (then there is no hook to ask).
_unlearned: list[str] = []


def install(extra_probes: Iterable[Probe] = ()) -> None:
    """Add the process-wide hook once (idempotent, thread-safe) and run its self-test once.

    Whether it is installed, and the self-test's verdict, are asked of the hook itself: no module
    flag decides them (the verdict is set once, by host code). Raises UnsupportedInterpreter, every
    time it is called, if the self-test failed. `extra_probes` are run with the self-test's own
    (when it runs): a way to show what a failure does.
    """
    with _install_lock:
        if _unlearned:
            raise UnsupportedInterpreter(_unlearned[0])
        answers: list[str | None] = []
        sys.audit(_PROBE, answers)
        if not answers:
            try:
                facts = _learn()
            except _Unlearned as exc:
                _unlearned.append(_refusal_text([str(exc)]))
                raise UnsupportedInterpreter(_unlearned[0]) from None
            sys.addaudithook(_build_hook(facts))
            answers.append(None)
        verdict = answers[0]
        if verdict is None:
            failures = self_test(extra_probes)
            sys.audit(_VERDICT, _refusal_text(failures) if failures else "")
            answers.clear()
            sys.audit(_PROBE, answers)
            verdict = answers[0] if answers and answers[0] is not None else "the self-test left no verdict"
        if verdict:
            raise UnsupportedInterpreter(verdict)


def _refusal_text(failures: list[str]) -> str:
    version = ".".join(map(str, sys.version_info[:3]))
    return (
        f"the restricted policies cannot run on this Python ({platform.python_implementation()} "
        f"{version}): the audit hook's start-up self-test failed: {'; '.join(failures)}. They are "
        f'tested on CPython {TESTED}. Use policy="trusted" with boundary="subprocess" (in a '
        "container or VM for untrusted code), or a tested Python."
    )


def rules_spec(
    policy: str,
    files: bool,
    workspace: str | None,
    denied_attributes: Iterable[str],
    denied_prefixes: Iterable[str],
) -> tuple[Any, ...]:
    """What `activate` takes: build it once per runtime (the hook remembers it by identity)."""
    return (policy, files, workspace, frozenset(denied_attributes), tuple(denied_prefixes))


def activate(spec: tuple[Any, ...]) -> list[contextvars.Token[Any]]:
    """Judge this context's events by the rules `spec` describes until `deactivate` (host code only).

    The hook refuses the request when sandboxed code is on the stack, so session code cannot
    activate looser rules for itself. The execution is anchored at the caller of the function that
    raises the event: call this from the frame the execution runs under (the runtime's `enter`
    raises the event itself, one frame fewer for the hook to walk). Returns the hook's token (one
    per hook, should a second one ever have been added).
    """
    tokens: list[contextvars.Token[Any]] = []
    sys.audit(ACTIVATE, spec, tokens)
    if not tokens:  # the first activation in this process
        install()
        sys.audit(ACTIVATE, spec, tokens)
    if not tokens:
        raise RuntimeError("the sandbox audit hook did not answer")  # installed, so it always answers
    return tokens


def adopt(code: CodeType) -> None:
    """Judge `code` (and every code object nested in it) as the running execution's own, as the
    runner's `exec` of a cell does: for session code the host compiled from source and will call
    without `exec` (a snapshot's functions and class bodies). Host code only: the hook refuses the
    request when sandboxed code is on the stack; outside an execution it does nothing."""
    sys.audit(_ADOPT, code)


def deactivate(tokens: list[contextvars.Token[Any]]) -> None:
    for token in reversed(tokens):
        token.var.reset(token)


# ---- paths ------------------------------------------------------------------------------------------


def _data_roots() -> tuple[str, ...]:
    """Directories libraries may read their own data from (and write caches to while imported)."""
    found: set[str] = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    try:
        found.update(site.getsitepackages())
        found.add(site.getusersitepackages())
    except AttributeError:  # some virtualenv versions lack these
        pass
    found.update(p for p in sysconfig.get_paths().values() if p)
    try:
        import zoneinfo

        found.update(zoneinfo.TZPATH)
    except ImportError:
        pass
    home = os.path.expanduser("~")
    for sub in (".config/matplotlib", ".cache/matplotlib", ".cache/fontconfig"):
        found.add(os.path.join(home, sub))
    if os.environ.get("MPLCONFIGDIR"):
        found.add(os.environ["MPLCONFIGDIR"])
    found.update(("/usr/share/fonts", "/usr/local/share/fonts", "/usr/share/zoneinfo"))
    return tuple(sorted({os.path.realpath(p) for p in found if p and os.path.isabs(p)}))


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


@functools.cache
def _path_types() -> frozenset[type]:
    import pathlib
    import posix

    from ._paths import SessionPath

    return frozenset(
        {
            SessionPath,
            pathlib.PurePath,
            pathlib.PurePosixPath,
            pathlib.PureWindowsPath,
            pathlib.Path,
            pathlib.PosixPath,
            pathlib.WindowsPath,
            posix.DirEntry,
        }
    )


def plain_path(raw: Any) -> str | None:
    """`raw` as a plain str path, or None if it is not one the checks can trust.

    str and bytes subclasses are copied to plain values (their methods could lie to the checks);
    only the standard library's own path classes are asked for their path, since a user-defined
    class could answer differently each time it is asked.
    """
    kind = type(raw)
    if kind is str:
        return raw  # type: ignore[no-any-return]
    if isinstance(raw, str):
        return str.__str__(raw)
    if isinstance(raw, bytes):
        return os.fsdecode(bytes.__getitem__(raw, slice(None)))
    if kind in _path_types():
        return os.fsdecode(os.fspath(raw))
    return None


# ---- what the hook knows about one restricted policy ------------------------------------------------


class _Rules(tuple):  # type: ignore[type-arg]
    """(policy, files, workspace, denied attribute names, denied prefixes): immutable by construction."""

    __slots__ = ()

    @property
    def policy(self) -> str:
        return self[0]  # type: ignore[no-any-return]

    @property
    def files(self) -> bool:
        return self[1]  # type: ignore[no-any-return]

    @property
    def workspace(self) -> str:
        return str(self[2] or "(none)")

    def refuse(self, what: str, instead: str = "") -> PolicyViolation:
        tail = f"; {instead}" if instead else ""
        return PolicyViolation(f"{what} is not allowed under policy '{self[0]}'{tail}")

    def name_refusal(self, name: str) -> str | None:
        """Why generated code may not use the attribute `name` (the session's own attribute rules)."""
        name = name if name.isascii() else unicodedata.normalize("NFKC", name)
        if not name.isidentifier():
            return f"{name!r}, which is not an identifier"
        if name.startswith("_"):
            return f"the private name '{name}'"
        if name in self[3] or name.startswith(self[4]):
            return f"the interpreter internal '{name}'"
        return None


_RULES_KEPT = 16384  # rules the hook honours at once: one per policy and workspace in use
_BUILT = "built at run time"
_EXEC_REFUSED = "running code built at run time (exec, eval, templates, string annotations)"


# ---- verification of code that libraries generate ---------------------------------------------------
#
# Libraries allowed under the restricted policies generate code from names the session chose:
# dataclasses (methods), collections.namedtuple (__new__), typing (string annotations). The hook
# runs such code only if every name in it is one the session could write itself and its shape is
# one those generators produce. Anything else is refused, whoever compiles it.

# Global names generated methods call: the builtins dataclasses and namedtuple use, with fixed arity.
_CALLS = {"type": 1, "hash": 1, "super": 2}
_GLOBALS = frozenset({*_CALLS, "NotImplemented", "_tuple_new"})
# Special attributes generated methods use, and where.
_READ_DUNDERS = frozenset({"__class__", "__qualname__"})
_OBJECT_SETTERS = frozenset({"__setattr__", "__delattr__"})
_FACTORY = "__create_fn__"
_OBJECT_PARAM = "__dataclass_builtins_object__"
_POST_INIT = "__post_init__"
_NODES = (
    ast.Module,
    ast.Expr,
    ast.FunctionDef,
    ast.arguments,
    ast.arg,
    ast.Return,
    ast.Assign,
    ast.If,
    ast.Raise,
    ast.Pass,
    ast.BoolOp,
    ast.And,
    ast.Or,
    ast.UnaryOp,
    ast.Not,
    ast.Name,
    ast.Attribute,
    ast.Call,
    ast.keyword,
    ast.Constant,
    ast.Tuple,
    ast.Set,
    ast.Compare,
    ast.IfExp,
    ast.JoinedStr,
    ast.FormattedValue,
    ast.BinOp,
    ast.Add,
    ast.Lambda,
    ast.Load,
    ast.Store,
    ast.Is,
    ast.IsNot,
    ast.In,
    ast.NotIn,
    ast.Eq,
    ast.NotEq,
    ast.Lt,
    ast.LtE,
    ast.Gt,
    ast.GtE,
)
_TYPE_NODES: tuple[type[ast.AST], ...] = (ast.Module, ast.Expr, ast.Name, ast.Attribute, ast.Subscript)
_TYPE_NODES += (ast.Tuple, ast.List, ast.Constant, ast.BinOp, ast.BitOr, ast.Load)


def _parse(source: Any) -> ast.AST | None:
    """`source` (text, bytes) parsed; None for anything else. Syntax trees handed to compile() by
    sandboxed code are not judged: their nodes could be objects of any class."""
    kind = type(source)
    if kind is bytes or kind is bytearray:
        text = bytes(source).decode("utf-8", "replace")
    elif issubclass(kind, str):
        text = str.__str__(source)
    else:
        return None
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def _tree_refusal(tree: ast.AST, rules: _Rules) -> str | None:
    """None if `tree` is generated code of a known shape using only names the session may use."""
    body = tree.body if isinstance(tree, ast.Module) else None
    if isinstance(tree, ast.Expression):
        body = [ast.Expr(tree.body)]
    if not body or len(body) != 1:
        return "it is not generated code of a known shape"
    top = body[0]
    if isinstance(top, ast.Expr) and not isinstance(top.value, ast.Lambda):
        return _type_expression_refusal(top.value, rules)
    checker = _GeneratedCode(rules)
    if isinstance(top, ast.Expr):  # namedtuple: lambda _cls, a, b: _tuple_new(_cls, (a, b))
        return checker.check_function(top.value, ())
    if (
        isinstance(top, ast.FunctionDef)
        and top.name == _FACTORY
        and len(top.body) == 2
        and isinstance(top.body[0], ast.FunctionDef)
        and isinstance(top.body[1], ast.Return)
        and isinstance(top.body[1].value, ast.Name)
        and top.body[1].value.id == top.body[0].name
        and not top.decorator_list
    ):  # dataclasses: def __create_fn__(<values>): def <method>(...): ...; return <method>
        outer = _params(top.args)
        if outer is None:
            return "its parameters are not plain names"
        if top.args.defaults or top.args.kw_defaults or top.returns is not None:
            return "its factory has defaults or annotations"
        return checker.check_function(top.body[0], outer)
    if isinstance(top, ast.FunctionDef) and top.name == _FACTORY and not top.decorator_list:
        # dataclasses on Python 3.13+: one factory makes every method and returns them as a tuple;
        # a method may be decorated by calling one of the factory's values (its recursive_repr).
        return _many_methods_refusal(top, checker)
    return "it is not generated code of a known shape"


def _many_methods_refusal(factory: ast.FunctionDef, checker: _GeneratedCode) -> str | None:
    *methods, last = factory.body
    names = [m.name for m in methods if isinstance(m, ast.FunctionDef)]
    if (
        not methods
        or len(names) != len(methods)
        or not isinstance(last, ast.Return)
        or not isinstance(last.value, ast.Tuple)
        or [e.id if isinstance(e, ast.Name) else None for e in last.value.elts] != names
    ):
        return "it is not generated code of a known shape"
    outer = _params(factory.args)
    if outer is None:
        return "its parameters are not plain names"
    if factory.args.defaults or factory.args.kw_defaults or factory.returns is not None:
        return "its factory has defaults or annotations"
    for method in methods:
        assert isinstance(method, ast.FunctionDef)
        for decorator in method.decorator_list:
            if not (
                isinstance(decorator, ast.Call)
                and isinstance(decorator.func, ast.Name)
                and decorator.func.id in outer
                and not decorator.args
                and not decorator.keywords
            ):
                return "a generated method is decorated by something the generator did not pass in"
        plain = ast.FunctionDef(
            name=method.name,
            args=method.args,
            body=method.body,
            decorator_list=[],
            returns=method.returns,
            type_comment=None,
            lineno=method.lineno,
            col_offset=method.col_offset,
        )
        refusal = checker.check_function(plain, outer)
        if refusal is not None:
            return refusal
    return None


def _type_expression_refusal(node: ast.AST, rules: _Rules) -> str | None:
    for sub in ast.walk(node):
        if not isinstance(sub, _TYPE_NODES):
            return f"a string annotation may only name types ({type(sub).__name__} found)"
        if isinstance(sub, ast.BinOp) and not isinstance(sub.op, ast.BitOr):
            return "a string annotation may only combine types with '|'"
        name = sub.id if isinstance(sub, ast.Name) else sub.attr if isinstance(sub, ast.Attribute) else None
        if name is not None:
            refusal = rules.name_refusal(name)
            if refusal is not None:
                return f"the annotation uses {refusal}"
    return None


def _params(args: ast.arguments) -> tuple[str, ...] | None:
    if args.vararg is not None or args.kwarg is not None:
        return None
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    if not all(n.isidentifier() for n in names):
        return None
    return tuple(names)


class _GeneratedCode:
    """The shapes of methods dataclasses and namedtuple generate, checked node by node."""

    def __init__(self, rules: _Rules) -> None:
        self.rules = rules

    def check_function(self, node: ast.AST, outer: tuple[str, ...]) -> str | None:
        if not isinstance(node, (ast.FunctionDef, ast.Lambda)):
            return "it is not a generated function"
        if isinstance(node, ast.FunctionDef) and node.decorator_list:
            return "a generated function is decorated"
        own = _params(node.args)
        if own is None:
            return "its parameters are not plain names"
        for name in own:
            if name.startswith("_") and name not in ("__dataclass_self__", "_cls"):
                refusal = self.rules.name_refusal(name)
                if refusal is not None:
                    return f"a parameter is {refusal}"
        bound = frozenset((*outer, *own))
        # Defaults and annotations may only name the factory's values.
        extras: list[ast.AST] = [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]
        extras += [a.annotation for a in (*node.args.args, *node.args.kwonlyargs) if a.annotation]
        if isinstance(node, ast.FunctionDef) and node.returns is not None:
            extras.append(node.returns)
        for extra in extras:
            if not (isinstance(extra, ast.Name) and extra.id in outer) and not (
                isinstance(extra, ast.Constant) and extra.value is None
            ):
                return "a default or annotation is not one of the generator's values"
        statements = [node.body] if isinstance(node, ast.Lambda) else node.body
        self_name = own[0] if own else ""
        for statement in statements:
            refusal = self._node(statement, bound, self_name)
            if refusal is not None:
                return refusal
        return None

    def _node(self, node: ast.AST, bound: frozenset[str], self_name: str) -> str | None:
        for sub in ast.walk(node):
            if not isinstance(sub, _NODES) or isinstance(sub, (ast.FunctionDef, ast.Lambda, ast.Module)):
                return f"it contains {type(sub).__name__}"
            if isinstance(sub, ast.Name):
                if sub.id not in bound and sub.id not in _GLOBALS:
                    return f"it uses the global name '{sub.id}'"
                if isinstance(sub.ctx, ast.Store):
                    return "it assigns a variable"
            elif isinstance(sub, ast.Attribute):
                refusal = self._attribute(sub, self_name)
                if refusal is not None:
                    return refusal
            elif isinstance(sub, ast.Call):
                refusal = self._call(sub, bound)
                if refusal is not None:
                    return refusal
            elif isinstance(sub, ast.Assign):
                for target in sub.targets:
                    if not (
                        isinstance(target, ast.Attribute)
                        and isinstance(target.value, ast.Name)
                        and target.value.id == self_name
                    ):
                        return "it assigns something other than its own fields"
            elif isinstance(sub, ast.FormattedValue) and sub.format_spec is not None:
                return "it uses a format specification"
            elif isinstance(sub, ast.Constant) and isinstance(sub.value, str) and _looks_private(sub.value):
                return f"it names '{sub.value}'"
        return None

    def _attribute(self, node: ast.Attribute, self_name: str) -> str | None:
        name = node.attr
        if name in _READ_DUNDERS and isinstance(node.ctx, ast.Load):
            return None
        if name in _OBJECT_SETTERS:
            return None  # checked with its call below: only as object's or super()'s own setter
        if name == _POST_INIT and isinstance(node.value, ast.Name) and node.value.id == self_name:
            return None
        refusal = self.rules.name_refusal(name)
        return None if refusal is None else f"it uses {refusal}"

    def _call(self, node: ast.Call, bound: frozenset[str]) -> str | None:
        func = node.func
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            return "it unpacks call arguments"
        if isinstance(func, ast.Name):
            if func.id in _CALLS and func.id not in bound:
                if len(node.args) != _CALLS[func.id] or node.keywords:
                    return f"it calls {func.id}() with other arguments than generated code does"
                if func.id == "super" and not all(isinstance(a, ast.Name) for a in node.args):
                    return "it calls super() with expressions"
            return None
        if isinstance(func, ast.Attribute) and func.attr in _OBJECT_SETTERS:
            owner = func.value
            if isinstance(owner, ast.Name) and owner.id == _OBJECT_PARAM and owner.id in bound:
                # object.__setattr__(self, 'field', value): the field must be a name the session may set
                if len(node.args) != 3 or not isinstance(node.args[1], ast.Constant):
                    return "it calls object's setter with a computed name"
                field = node.args[1].value
                refusal = self.rules.name_refusal(field) if isinstance(field, str) else "not a name"
                return None if refusal is None else f"it sets {refusal}"
            if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
                return None
            return "it calls a special setter"
        return None


def _looks_private(text: str) -> bool:
    return text.isidentifier() and text.startswith("__") and text.endswith("__")


def _codes(code: CodeType) -> Iterator[CodeType]:
    stack = [code]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(c for c in current.co_consts if isinstance(c, CodeType))


def _approval(tree: ast.AST) -> tuple[frozenset[str], frozenset[str]]:
    """(every name the checked source uses, those it reads as globals beyond the generators' own).
    The code compiled from it can use no other names."""
    names: set[str] = set()
    bound: set[str] = set()
    loaded: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return frozenset(names), frozenset(loaded - bound - _GLOBALS)


# ---- the hook -----------------------------------------------------------------------------------------


_TYPE_NAME = type.__dict__["__name__"]  # a class's name without asking its metaclass
# An identity key for objects: what id() gives, without the "builtins.id" audit event id() raises
# (the hook would be called again for each frame it looks at).
_key: Callable[[object], int] = object.__hash__


# ---- what the hook learns about the interpreter, by doing it --------------------------------------


class _Facts(NamedTuple):
    import_entry: CodeType  # the import machinery's outermost frame (the one the importer calls)
    machinery: frozenset[int]  # keys of every code object of the import machinery's modules
    evaluator: CodeType  # the code that evaluates a string annotation's compiled code
    evaluator_globals: str  # its local variable holding the namespace the annotation is read in
    # The code that makes a function of an `__annotate__` function's code with other globals, to read
    # annotations as forward references (Python 3.14+: annotationlib), and its local variable holding
    # those globals; None where annotations are evaluated eagerly.
    annotation_maker: CodeType | None
    annotation_maker_globals: str


class _Unlearned(Exception):
    """A fact the hook needs could not be learned on this interpreter."""


_LEARNING_MODULE = """\
import sys
chain = []
frame = sys._getframe()
while frame is not None:
    chain.append((frame.f_code, frame.f_globals))
    frame = frame.f_back
del frame
"""


class _ProbeFinder:
    """Finds one module, by name, in one file: imports for the self-test that change no search path."""

    def __init__(self, name: str, path: str) -> None:
        self.name, self.path = name, path

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != self.name:
            return None
        import importlib.util

        return importlib.util.spec_from_file_location(name, self.path)


def _import_probe(name: str, path: str) -> Any:
    finder = _ProbeFinder(name, path)
    sys.meta_path.insert(0, finder)
    try:
        return __import__(name)  # the interpreter calls the machinery, as for an import statement
    finally:
        sys.meta_path.remove(finder)
        sys.modules.pop(name, None)


_probe_names = itertools.count()


def _probe_module(directory: str, source: str) -> tuple[str, str]:
    name = f"_genpark_hook_probe_{os.getpid()}_{next(_probe_names)}"
    path = os.path.join(directory, name + ".py")
    with open(path, "w", encoding="utf-8") as file:
        file.write(source)
    return name, path


def _learn() -> _Facts:
    directory = tempfile.mkdtemp(prefix="genpark-hook-")
    try:
        entry, machinery = _learn_imports(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    evaluator, name = _learn_evaluator()
    return _Facts(entry, machinery, evaluator, name, *_learn_annotation_maker())


def _learn_imports(directory: str) -> tuple[CodeType, frozenset[int]]:
    """The import machinery is whatever runs between an importer and the module's code."""
    try:
        module = _import_probe(*_probe_module(directory, _LEARNING_MODULE))
        chain: list[tuple[CodeType, dict[str, Any]]] = module.chain
    except Exception as exc:
        raise _Unlearned(f"importing a module failed ({type(exc).__name__}: {exc})") from None
    importer = _import_probe.__code__
    at = next((i for i, (code, _) in enumerate(chain) if code is importer), 0)
    if at < 2:
        raise _Unlearned("the import machinery's frames were not found below an imported module")
    modules = {_key(namespace): namespace for _, namespace in chain[1:at]}
    import zipimport

    modules[_key(vars(zipimport))] = vars(zipimport)
    found: set[int] = set()

    def add(value: Any) -> None:
        for raw in (value, getattr(value, "__func__", None), getattr(value, "fget", None)):
            code = getattr(raw, "__code__", None)
            if isinstance(code, CodeType):
                found.update(_key(c) for c in _codes(code))

    for namespace in modules.values():
        for value in list(namespace.values()):
            add(value)
            if isinstance(value, type):
                for member in vars(value).values():
                    add(member)
    entry = chain[at - 1][0]
    if any(_key(code) not in found for code, _ in chain[1:at]):
        raise _Unlearned("the import machinery runs code that its modules do not hold")
    return entry, frozenset(found)


def _learn_evaluator() -> tuple[CodeType, str]:
    """The frame that runs a string annotation's code, and its variable holding the annotation's
    globals: found by evaluating one that reads a property."""
    import typing

    seen: list[FrameType] = []

    class Probe:
        @property
        def kind(self) -> type:
            seen.append(sys._getframe(1).f_back)  # type: ignore[arg-type]  # the annotation's caller
            return int

    namespace: dict[str, Any] = {"probe": Probe()}

    def annotated() -> None:
        return None

    annotated.__annotations__ = {"return": "probe.kind"}
    try:
        typing.get_type_hints(annotated, globalns=namespace, localns={})
    except Exception as exc:
        raise _Unlearned(f"evaluating a string annotation failed ({type(exc).__name__})") from None
    if not seen or seen[0] is None:
        raise _Unlearned("the code that evaluates string annotations was not found")
    frame = seen.pop()
    names = sorted(k for k, v in frame.f_locals.items() if v is namespace)
    code = frame.f_code
    del frame
    if not names:
        raise _Unlearned("the code that evaluates string annotations holds no namespace the hook can check")
    return code, names[0]


def _learn_annotation_maker() -> tuple[CodeType | None, str]:
    """The frame that makes a function of an `__annotate__` function's code, with globals of its own,
    and its variable holding them: found by asking for annotations as forward references of a
    function whose `__annotate__` supports only plain values, as the compiler's do."""
    try:
        import annotationlib  # type: ignore[import-not-found,unused-ignore]  # Python 3.14+
    except ImportError:
        return None, ""  # annotations are evaluated when they are defined: no annotate functions
    forward_refs = annotationlib.Format.FORWARDREF
    seen: list[tuple[FrameType | None, dict[str, Any]]] = []

    def annotate(format: int, /) -> dict[str, Any]:
        if format == forward_refs:
            raise NotImplementedError(format)
        frame = sys._getframe()
        seen.append((frame.f_back, frame.f_globals))
        return {}

    try:
        annotationlib.call_annotate_function(annotate, forward_refs)
    except Exception as exc:
        raise _Unlearned(f"reading annotations as forward references failed ({type(exc).__name__})") from None
    if not seen or seen[0][0] is None:
        raise _Unlearned("the code that reads annotations as forward references was not found")
    frame, namespace = seen.pop()
    assert frame is not None
    names = sorted(k for k, v in frame.f_locals.items() if v is namespace)
    code = frame.f_code
    del frame
    if not names or namespace is globals():
        raise _Unlearned(
            "the code that reads annotations as forward references gives them no namespace of its own"
        )
    return code, names[0]


_FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
_WRITE_EVENTS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "os.remove": ((0,), (1,)),
    "os.rename": ((0, 1), (2, 3)),
    "os.mkdir": ((0,), (2,)),
    "os.rmdir": ((0,), (1,)),
    "os.chmod": ((0,), (2,)),
    "os.chown": ((0,), (3,)),
    "os.link": ((0, 1), (2, 3)),
    "os.truncate": ((0,), ()),
    "os.utime": ((0,), (3,)),
    "os.setxattr": ((0,), ()),
    "os.removexattr": ((0,), ()),
    "shutil.copyfile": ((0, 1), ()),
    "shutil.copymode": ((0, 1), ()),
    "shutil.copystat": ((0, 1), ()),
    "shutil.copytree": ((0, 1), ()),
    "shutil.move": ((0, 1), ()),
    "shutil.rmtree": ((0,), (1,)),
    "shutil.chown": ((0,), ()),
    "shutil.unpack_archive": ((0, 1), ()),
    "tempfile.mkstemp": ((0,), ()),
    "tempfile.mkdtemp": ((0,), ()),
}
_READ_EVENTS = {"os.getxattr": (0,), "os.listxattr": (0,)}


def _make_realpath() -> Callable[[str], str]:
    """os.path.realpath from the C primitives, captured now: patching `os`, `posixpath` or `stat`
    later does not change what the hook believes a path is."""
    import _stat
    import posix

    lstat, readlink, getcwd, is_link = posix.lstat, posix.readlink, posix.getcwd, _stat.S_ISLNK

    def realpath(path: str) -> str:
        if not path.startswith("/"):
            path = getcwd() + "/" + path
        pending = path.split("/")
        pending.reverse()
        resolved = ""
        links = 0
        while pending:
            name = pending.pop()
            if name in ("", "."):
                continue
            if name == "..":
                resolved = resolved.rpartition("/")[0]
                continue
            candidate = resolved + "/" + name
            try:
                mode = lstat(candidate).st_mode
            except OSError:
                resolved = candidate  # does not exist (yet): taken literally, as realpath() does
                continue
            if not is_link(mode):
                resolved = candidate
                continue
            links += 1
            if links > 40:  # a loop: whatever it is, it is not a path inside anything
                return "/\x00link-loop"
            target = readlink(candidate)
            if target.startswith("/"):
                resolved = ""
            parts = target.split("/")
            parts.reverse()
            pending.extend(parts)
        return resolved or "/"

    return realpath


def _build_hook(facts: _Facts) -> Callable[[str, tuple[Any, ...]], None]:
    """The hook function. Everything it decides by is a local of this call, reachable only from it.

    Its functions are created with a private copy of the builtins, and the path checks use only
    primitives captured here: code that patches `builtins`, `os.path` or this module's globals later
    does not change how the hook judges files, processes and network.
    """
    module_globals = globals()
    shared_builtins = module_globals["__builtins__"]
    module_globals["__builtins__"] = dict(vars(sys.modules["builtins"]))
    try:
        return _define_hook(facts)
    finally:
        module_globals["__builtins__"] = shared_builtins


def _define_hook(facts: _Facts) -> Callable[[str, tuple[Any, ...]], None]:
    # Nested functions take their builtins from the module globals at the moment they are created:
    # _build_hook() has put a private copy there.
    roots = _data_roots()
    write_stamps, next_stamp = _write_stamps, _next_stamp
    realpath = _make_realpath()
    fspath = os.fspath
    encoding = sys.getfilesystemencoding()
    write_events = dict(_WRITE_EVENTS)
    read_events = dict(_READ_EVENTS)

    # The helpers below live in this module's globals, which code holding the real builtins could
    # rebind: the hook keeps its own references. (Their insides only verify generated code, which
    # such code would not need.)
    parse, tree_refusal, approval_of = _parse, _tree_refusal, _approval
    code_type = CodeType

    def codes_of(code: CodeType) -> list[CodeType]:
        """`code` and every code object nested in it (registration must not depend on module state)."""
        found = [code]
        index = 0
        while index < len(found):
            for const in found[index].co_consts:
                if type(const) is code_type:
                    found.append(const)
            index += 1
        return found

    def code_names(code: CodeType) -> tuple[str | None, frozenset[str]]:
        """(why the code object may not run, the names it uses: globals, attributes and imports
        alike). co_names is where every version's compiler keeps them, whatever its opcodes are
        called; which of them are globals is read from the checked source instead (`_approval`)."""
        names: set[str] = set()
        for current in codes_of(code):
            for name in (*current.co_varnames, *current.co_cellvars, *current.co_freevars):
                if not name.isidentifier():
                    return f"its variable {name!r} is not an identifier", frozenset()
            names.update(current.co_names)
        return None, frozenset(names)

    def inside(path: str, root: str) -> bool:
        return path == root or path.startswith(root.rstrip("/") + "/")

    def decode(raw: bytes) -> str:
        return bytes.decode(raw, encoding, "surrogateescape")

    path_types = _path_types()
    importlib_codes, find_and_load = facts.machinery, facts.import_entry
    parse_code = ast.parse.__code__
    evaluate, evaluate_globals = facts.evaluator, facts.evaluator_globals
    make_annotate, make_annotate_globals = facts.annotation_maker, facts.annotation_maker_globals
    real_builtins = (sys.modules["builtins"], vars(sys.modules["builtins"]))

    # (rules, the frame that activated them): no sandboxed code was above that frame when it did.
    active: contextvars.ContextVar[tuple[_Rules, FrameType] | None] = contextvars.ContextVar(
        "genpark_sandbox", default=None
    )
    # Every _Rules the hook made and still honours, by value, and by identity key. A record's rules
    # count only when made_ids maps its key to that very object: made_ids holds them, so a key is not
    # reused while it is there. At most _RULES_KEPT are kept (one per policy and workspace: a server
    # makes a workspace per session); the least recently activated go first. Forgetting fails closed:
    # an execution still running under forgotten rules is refused everything from then on.
    rules_made: dict[tuple[Any, ...], _Rules] = {}
    made_ids: collections.OrderedDict[int, _Rules] = collections.OrderedDict()  # oldest activation first
    shared: dict[Any, Any] = {}  # one denied-names set / prefix tuple for all workspaces of a policy
    by_spec: dict[int, tuple[Any, _Rules]] = {}  # the runtimes' specs (held, so keys stay unique)
    sandboxed: dict[int, tuple[Any, _Rules]] = {}  # _key(code) -> (weakref to it, its rules)
    # _key(code) -> the rules of the executions whose runner executed it (the last _RAN_KEPT): a cell
    # the compile cache shares between sessions is registered under their merged rules, and each
    # session's next exec of it is its own code again.
    ran_by: dict[int, tuple[_Rules, ...]] = {}
    key_of = _key
    lock = threading.Lock()
    ever = [False]  # rebinding a list item: set once, never reset
    sweep_at = [1024]
    strictest: dict[str, _Rules] = {}
    # Source text the hook let a library compile for restricted code (generated methods, string
    # annotations): (rules, filename, the names it uses, those it reads as globals), newest last.
    # A code object no execution registered runs only if one of these could have compiled to it.
    approvals: collections.deque[tuple[_Rules, str, frozenset[str], frozenset[str]]]
    approvals = collections.deque(maxlen=_APPROVALS_KEPT)
    watching: list[set[str] | None] = [None]  # the self-test's record of events no handler judges
    verdict: list[str | None] = [None]  # the self-test's: "" passed, else why not (set once)

    # ---- frames --------------------------------------------------------------------------------------

    def entry_of(code: CodeType) -> _Rules | None:
        entry = sandboxed.get(key_of(code))
        if entry is None or entry[0]() is not code:  # a dead entry whose id was reused
            return None
        return entry[1]

    # Frames already found clean, per thread (see sandbox_rules). Security rests on one invariant:
    # every frame stored here was, when stored, a frame of a plain function (never a generator or
    # coroutine) with no sandboxed code in it or anywhere below it, and it is held here, so its
    # identity cannot pass to another frame. A plain function's frame runs exactly once: while it is
    # still on the stack it has not returned, so the frames below it are the very frames (running
    # the very code) that were checked. Code objects are registered before they first run (the
    # runner's cell, generated code, adopted code), so no frame below can have started running
    # sandboxed code since. A generator's frame is never stored: it can be resumed from anywhere.
    # A walk stops at the first stored frame it meets; frames stored above that one have returned
    # (or it would have met them first) and are dropped, so the store only keeps frames of the
    # thread's current stack and of its last walk. The host's own frames (this package) and the
    # frames above them end with each run, and holding them after it would keep a session's objects
    # alive: they are stored while a run compiles its cell (the compile, its code object and the
    # activation then share one walk) and dropped when the run activates its execution, whose own
    # walk does not store them.
    clean = _thread._local()  # .depths: {key of frame: depth}; .frames: [frame or None by depth]
    # .host_at: the depth of the first stored frame of this package (None: none is stored)
    suspendable = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
    suspendable |= inspect.CO_ITERABLE_COROUTINE
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

    def sandbox_rules(
        frame: FrameType | None, keep_host: bool = True, first_code: CodeType | None = None
    ) -> _Rules | None:
        """The rules of the innermost frame of sandboxed code on the stack, or None.

        `keep_host`: also store the frames of this package found clean (see `clean`). `first_code`:
        `frame.f_code`, if the caller read it already (each read is an audit event: a call of the hook)."""
        state = clean.__dict__
        depths: dict[int, int] = state.get("depths") or {}
        frames: list[FrameType | None] = state.get("frames") or []
        path: list[tuple[FrameType, CodeType]] = []
        below = -1  # the depth of the stored frame the walk stopped at; -1: the walk reached the bottom
        while frame is not None:
            depth = depths.get(key_of(frame))
            if depth is not None and depth < len(frames) and frames[depth] is frame:
                if not path and depth == len(frames) - 1:
                    return None  # the newest stored frame: nothing walked, nothing to drop
                below = depth
                break
            if first_code is not None:  # `frame` is still the first frame: its code, read by the caller
                code, first_code = first_code, None
            else:
                code = frame.f_code
            if key_of(code) in sandboxed:
                found = entry_of(code)
                if found is not None:
                    return found  # nothing is stored: the frames walked are above sandboxed code
            path.append((frame, code))
            frame = frame.f_back
        # Clean from the first frame walked down: store what may be stored, drop what has returned.
        kept = frames[: below + 1]
        host_at = state.get("host_at")
        if host_at is not None and host_at >= len(kept):
            host_at = None  # the stored frames of this package have all returned
        for walked, code in reversed(path):  # oldest first, each one's depth is len(kept)
            filename = code.co_filename
            if type(filename) is str and filename.startswith(package):
                if not keep_host:
                    break  # the package's frames (and whatever they call) end with the run
                if host_at is None:
                    host_at = len(kept)
            kept.append(None if code.co_flags & suspendable else walked)
        if len(depths) > 4 * len(kept) + 256:  # stale keys are harmless (see above), but bounded
            depths = {key_of(f): d for d, f in enumerate(kept) if f is not None}
        else:
            for d in range(below + 1, len(kept)):
                stored = kept[d]
                if stored is not None:
                    depths[key_of(stored)] = d
        state["frames"] = kept
        state["depths"] = depths
        state["host_at"] = host_at
        return None

    def forget_host() -> None:
        """Drop the stored frames of this package (and those above them) on this thread."""
        state = clean.__dict__
        at = state.get("host_at")
        if at is not None:
            state["frames"] = state["frames"][:at]  # their keys in .depths are stale: harmless
            state["host_at"] = None

    def is_sandboxed(frame: FrameType) -> bool:
        return entry_of(frame.f_code) is not None

    def host_direct(
        frame: FrameType | None, keep_host: bool = True, first_code: CodeType | None = None
    ) -> bool:
        """No sandboxed code on the stack: walked up to the frame that activated the execution (the
        stack above it was checked then), or to the bottom. `first_code`: as for `sandbox_rules`."""
        record = active.get()
        stop = record[1] if record is not None else None
        if stop is None:
            return sandbox_rules(frame, keep_host, first_code) is None
        if frame is not None and frame is not stop and first_code is not None:
            if entry_of(first_code) is not None:
                return False
            frame = frame.f_back
        while frame is not None and frame is not stop:
            if entry_of(frame.f_code) is not None:
                return False
            frame = frame.f_back
        return True

    def importing(frame: FrameType | None, *, machinery_only: bool) -> bool:
        """An import is running below `frame` with no sandboxed code (or, strictly, only importlib)."""
        while frame is not None:
            code = frame.f_code
            if code is find_and_load:
                return True
            if entry_of(code) is not None or (machinery_only and key_of(code) not in importlib_codes):
                return False
            frame = frame.f_back
        return False

    def register(code: CodeType, rules: _Rules) -> None:
        # Weak references without callbacks: no Python code of ours runs inside the collector.
        with lock:
            if len(sandboxed) > sweep_at[0]:
                for key in [k for k, (ref, _) in sandboxed.items() if ref() is None]:
                    del sandboxed[key]
                    ran_by.pop(key, None)
                sweep_at[0] = max(1024, 2 * len(sandboxed))
            for current in codes_of(code):
                key = key_of(current)
                entry = sandboxed.get(key)
                if entry is None or entry[0]() is not current:
                    sandboxed[key] = (weakref.ref(current), rules)
                    ran_by.pop(key, None)  # a key of a code object that is gone
                elif entry[1] is not rules:
                    sandboxed[key] = (entry[0], merge(entry[1], rules))

    def note_ran(code: CodeType, rules: _Rules) -> None:
        """The runner of an execution under `rules` executed `code` (registered first)."""
        key = key_of(code)
        with lock:
            seen = ran_by.get(key, ())
            for known in seen:
                if known is rules:
                    return
            ran_by[key] = (*seen[1 - _RAN_KEPT :], rules) if len(seen) >= _RAN_KEPT else (*seen, rules)

    def ran_under(code: CodeType, rules: _Rules) -> bool:
        """`code` is registered, and the runner of an execution under `rules` executed it before."""
        key = key_of(code)
        entry = sandboxed.get(key)
        if entry is None or entry[0]() is not code:
            return False
        return entry[1] is rules or any(known is rules for known in ran_by.get(key, ()))

    def merge(first: _Rules, second: _Rules) -> _Rules:
        """Code shared by two sessions (the compile cache): outside an execution, the stricter reading."""
        if first[0] == second[0] and first[1:] == second[1:]:
            return first
        key = f"{first[0]}|{second[0]}"
        found = strictest.get(key)
        if found is None:
            found = strictest[key] = _Rules(
                (first[0], False, None, first[3] | second[3], tuple({*first[4], *second[4]}))
            )
        return found

    # ---- paths ---------------------------------------------------------------------------------------

    def resolve(rules: _Rules, raw: Any, what: str) -> tuple[str, str]:
        """(the path as given, as a str; where it leads). Only exact types and the types' own
        C-level methods are used: no code of the argument's class runs."""
        kind = type(raw)
        if issubclass(kind, int):
            raise rules.refuse(f"{what} by file descriptor", "use a path inside the workspace")
        path: str
        if issubclass(kind, str):
            path = str.__str__(raw)
        elif issubclass(kind, bytes):
            path = decode(bytes.__getitem__(raw, slice(None)))
        elif any(kind is t for t in path_types):
            given = fspath(raw)
            path = given if type(given) is str else decode(given)
        else:
            name = _TYPE_NAME.__get__(kind)
            raise rules.refuse(f"{what} a {name} path", "pass a str or a pathlib path")
        return path, realpath(path)

    def check_path(rules: _Rules, raw: Any, frame: FrameType, *, write: bool, what: str) -> None:
        given, path = resolve(rules, raw, what)
        workspace = rules[2]
        files = rules[1]
        if files and workspace is not None and inside(path, workspace):
            if write:
                write_stamps[workspace] = next_stamp()
            return
        if any(inside(path, r) for r in roots):
            if not write:
                return  # libraries read their own data (fonts, time zones, config) even from C code
            if importing(frame, machinery_only=False):
                return  # a library initializing its cache (matplotlib's font list) while it is imported
        # The message names the path as given (normalized), never where its links lead: a refusal
        # must not answer the question "where does /proc/self/cwd point?".
        shown = os.path.normpath(given) if given.startswith("/") else given
        if not files:
            raise rules.refuse(f"{what} '{shown}'", "this policy has no file access")
        instead = f"files are allowed only inside the workspace '{rules.workspace}'"
        # A relative path is this thread's directory's: in a cell the workspace where a thread can
        # have a directory of its own (policy/_paths.py), then it just left the workspace ('../x');
        # else the host's, and the message names the path to use.
        if not given.startswith("/") and workspace is not None and realpath(".") != workspace:
            suggestion = os.path.join(workspace, given)
            instead += "; relative paths given to libraries resolve against the host's directory"
            instead += f", use '{suggestion}'"
        raise rules.refuse(f"{what} '{shown}'", instead)

    # ---- handlers: (rules, event, args, caller frame) ------------------------------------------------

    def on_open(rules: _Rules, event: str, args: tuple[Any, ...], frame: FrameType) -> None:
        path, mode, flags = (*args, None, None, None)[:3]
        # Event arguments may come from sys.audit() with objects of any class: only exact types are
        # looked at, so no code of theirs runs inside the hook.
        if type(flags) is int:
            write = bool(flags & _WRITE_FLAGS)
        else:
            write = type(mode) is not str or any(c in mode for c in "wax+")
        if key_of(frame.f_code) in importlib_codes and importing(frame, machinery_only=True):
            if write:  # bytecode caches; the import machinery handles the refusal as an OSError
                raise rules.refuse("writing bytecode caches")
            if not issubclass(type(path), int):
                return
        check_path(rules, path, frame, write=write, what="writing to" if write else "opening")

    def on_listdir(rules: _Rules, event: str, args: tuple[Any, ...], frame: FrameType) -> None:
        if key_of(frame.f_code) in importlib_codes and importing(frame, machinery_only=True):
            return
        path = args[0] if args and args[0] is not None else "."
        check_path(rules, path, frame, write=False, what="listing directory")

    def on_write(rules: _Rules, event: str, args: tuple[Any, ...], frame: FrameType) -> None:
        if key_of(frame.f_code) in importlib_codes:
            raise rules.refuse("writing bytecode caches")
        paths, fds = write_events[event]
        for i in fds:
            given = args[i] if i < len(args) else None
            if given is not None and not (type(given) is int and given == -1):  # -1: no dir_fd given
                raise rules.refuse(
                    f"{event} relative to a directory descriptor", "use a path inside the workspace"
                )
        for i in paths:
            if i < len(args) and args[i] is not None:
                check_path(rules, args[i], frame, write=True, what=f"{event} on")

    def on_read(rules: _Rules, event: str, args: tuple[Any, ...], frame: FrameType) -> None:
        for i in read_events[event]:
            if i < len(args) and args[i] is not None:
                check_path(rules, args[i], frame, write=False, what=f"{event} on")

    def on_compile(rules: _Rules, event: str, args: tuple[Any, ...], frame: FrameType) -> None:
        if importing(frame, machinery_only=False):
            return  # a library's own code, while it is imported
        tree = parse(args[0])
        refusal = "it is not valid Python text" if tree is None else tree_refusal(tree, rules)
        if refusal is not None:
            raise rules.refuse(_EXEC_REFUSED, f"{refusal}; write the code directly")
        filename = args[1] if len(args) > 1 else None
        if type(filename) is str and tree is not None:
            with lock:
                approvals.append((rules, filename, *approval_of(tree)))

    def approved_globals(code: CodeType, names: frozenset[str], rules: _Rules) -> frozenset[str] | None:
        """The globals `code` reads, per the checked source it was compiled from (None: no such source)."""
        filename = code.co_filename
        with lock:
            candidates = list(approvals)
        for approved_rules, approved_file, approved_names, approved_globals in reversed(candidates):
            if approved_rules is rules and approved_file == filename and names <= approved_names:
                return names & approved_globals
        return None

    def on_exec(rules: _Rules, event: str, args: tuple[Any, ...], frame: FrameType) -> None:
        code = args[0] if args else None
        if type(code) is not CodeType:
            raise rules.refuse(_EXEC_REFUSED)
        if ran_under(code, rules):
            return  # the session's own code again (a cached cell): its frames are judged as the session's
        if host_direct(frame):
            # Host code executing a code object during an execution: the runner running its cell
            # (strings are judged when they are compiled). Its frames are the session's from now on.
            record = active.get()
            if record is not None and record[0] is rules:
                register(code, rules)
                note_ran(code, rules)
            return
        if code.co_name == "<module>" and importing(frame, machinery_only=False):
            filename = code.co_filename
            # '<string>' and the like name no file: code a library compiled from text at import time
            # (resolved against the cwd, which is the workspace in a worker, it would look like one).
            pseudo = filename.startswith("<") and filename.endswith(">")
            origin = realpath(filename)
            workspace = rules[2]
            if not pseudo and workspace is not None and inside(origin, workspace):
                raise rules.refuse(f"importing modules from the workspace ('{origin}')")
            return  # module code the import machinery (or a library at import time) runs
        refusal, names = code_names(code)
        if refusal is None:
            free_globals = approved_globals(code, names, rules)
            if free_globals is None:
                refusal = "it was not compiled from text the policy checked"
            elif free_globals:
                refusal = annotation_refusal(frame, free_globals, rules)
        if refusal is not None:
            raise rules.refuse(_EXEC_REFUSED, f"{refusal}; write the code directly")
        register(code, rules)  # generated for the session: its frames are the session's

    def annotation_refusal(frame: FrameType, names: frozenset[str], rules: _Rules) -> str | None:
        """Global names are only for typing's evaluation of string annotations, in the session's globals."""
        if frame.f_code is not evaluate:
            return f"it reads the global names {sorted(names)}"
        namespace: Any = frame.f_locals.get(evaluate_globals)
        # A dict subclass too: the session's typing gives one (Python 3.14+); dict.get reads its own
        # items, the builtins the compiled annotation gets.
        table = dict.get(namespace, "__builtins__") if issubclass(type(namespace), dict) else None
        if table is None or any(table is b for b in real_builtins):
            return (
                "a string annotation would be evaluated in a module of the host; write annotations "
                "without quotes or give get_type_hints() a namespace of your own"
            )
        for name in names:
            refusal = rules.name_refusal(name)
            if refusal is not None:
                return f"the annotation uses {refusal}"
        return None

    def on_marshal(rules: _Rules, event: str, args: tuple[Any, ...], frame: FrameType) -> None:
        if not importing(frame, machinery_only=True):
            raise rules.refuse("loading code objects (marshal)")

    def on_getframe(rules: _Rules, event: str, args: tuple[Any, ...], frame: FrameType) -> None:
        if is_sandboxed(frame):
            raise rules.refuse("reading interpreter frames")
        given = args[0] if args else None
        if type(given) is not FrameType or is_sandboxed(given):
            return
        # A library asks for a frame for the session: only frames between it and the session's code.
        current: FrameType | None = frame
        while current is not None:
            if current is given:
                return
            if is_sandboxed(current):
                break
            current = current.f_back
        if sandbox_rules(frame) is not None:
            raise rules.refuse("reading the host's frames (a frame depth beyond your own code)")

    def on_getattr(rules: _Rules, event: str, args: tuple[Any, ...], frame: FrameType) -> None:
        name = args[1] if len(args) > 1 and type(args[1]) is str else "?"
        if is_sandboxed(frame) or (name in _FRAME_ATTRIBUTES and sandbox_rules(frame) is not None):
            raise rules.refuse(f"reading internal attribute '{name}'")

    def on_setattr(rules: _Rules, event: str, args: tuple[Any, ...], frame: FrameType) -> None:
        name = args[1] if len(args) > 1 and type(args[1]) is str else "?"
        if is_sandboxed(frame) or (name == "__code__" and sandbox_rules(frame) is not None):
            verb = "setting" if event == "object.__setattr__" else "deleting"
            raise rules.refuse(f"{verb} internal attribute '{name}'")

    def on_function_new(rules: _Rules, event: str, args: tuple[Any, ...], frame: FrameType) -> None:
        # The host may make functions of session code it compiled from source and adopted (a
        # snapshot's restore); nothing else may make a function from a code object during a run,
        # but annotationlib reading annotations as forward references (Python 3.14+: it runs an
        # `__annotate__` function's code with globals of its own): a library's, while it is
        # imported (typing.TypedDict and NamedTuple classes), and the session's own.
        code = args[0] if args else None
        if type(code) is CodeType:
            if entry_of(code) is not None and host_direct(frame):
                return
            if make_annotate is not None and frame.f_code is make_annotate:
                if entry_of(code) is not None:
                    if session_annotate_allowed(frame):
                        return
                    raise rules.refuse(
                        "reading annotations as strings (or after evaluating them failed)",
                        "read them as values: typing.get_type_hints(obj), with every name they use defined",
                    )
                if importing(frame, machinery_only=False):
                    return
        raise rules.refuse(f"creating functions from code objects ({event})")

    def session_annotate_allowed(frame: FrameType) -> bool:
        """Whether annotationlib may run a session's code with the globals it made for it. The code
        runs as the session's own, judged as such, with whatever values the globals hold (the
        session's, or placeholders); only the builtins matter: the session's, or none, since a
        function made with globals that lack `__builtins__` gets those of annotationlib's module,
        the host's, whose `__import__` and `__build_class__` an `import` or `class` statement uses."""
        namespace: Any = frame.f_locals.get(make_annotate_globals)
        table = dict.get(namespace, "__builtins__") if issubclass(type(namespace), dict) else None
        return table is not None and not any(table is b for b in real_builtins)

    def always(what: str, instead: str = "") -> Callable[..., None]:
        def handler(rules: _Rules, event: str, args: tuple[Any, ...], frame: FrameType) -> None:
            raise rules.refuse(f"{what} ({event})", instead)

        return handler

    def unless_importing(what: str) -> Callable[..., None]:
        """Refused for restricted code, allowed while a library initializes (numpy sets env vars)."""

        def handler(rules: _Rules, event: str, args: tuple[Any, ...], frame: FrameType) -> None:
            if not importing(frame, machinery_only=False):
                raise rules.refuse(f"{what} ({event})")

        return handler

    processes = always("starting or signalling processes")
    network = always("network access")
    native = always("native code and raw memory (ctypes)")
    introspection = always("interpreter introspection")
    tracing = always("tracing and profiling hooks")
    settings = unless_importing("changing process-wide settings")
    databases = always("opening databases")
    # Threads (audited from Python 3.12; 3.10 and 3.11 raise no event, and there the import guard
    # alone keeps `threading`/`_thread` from restricted code). Allowed only while a library is being
    # imported, with no sandboxed frame between the thread start and the import machinery:
    # matplotlib's "building the font cache" timer, started when a fresh worker (or a host without a
    # cache) first imports it. Why that cannot start a thread for the session: importing() walks from
    # the caller down and answers False at the first frame of sandboxed code, so the start comes from a
    # module's top-level code (never a module from the workspace: on_exec refuses those) and what it
    # calls; the thread's function is the library's choice, not the session's. Were session code ever
    # to run in such a thread, its frames are still judged by identity (sandbox_rules walks that
    # thread's stack); only the time limit would not reach it, which on the subprocess boundary the
    # worker's CPU limit and kill do. Any other start (session code, or a library function the session
    # calls, `matplotlib.font_manager.FontManager()`) is refused on both boundaries:
    # tests/security/test_threads.py.
    threads = unless_importing("starting threads")
    handlers: dict[str, Callable[..., None]] = {
        "open": on_open,
        "os.listdir": on_listdir,
        "os.scandir": on_listdir,
        **dict.fromkeys(write_events, on_write),
        **dict.fromkeys(read_events, on_read),
        "os.symlink": always("creating symbolic links"),
        "shutil.make_archive": always("creating archives"),
        "compile": on_compile,
        "exec": on_exec,
        "marshal.load": on_marshal,
        "marshal.loads": on_marshal,
        "pickle.find_class": always("loading pickles", "pickles can run arbitrary code"),
        "code.__new__": always("creating code objects"),
        "function.__new__": on_function_new,
        "sys._getframe": on_getframe,
        "object.__getattr__": on_getattr,
        "object.__setattr__": on_setattr,
        "object.__delattr__": on_setattr,
        "sys._current_frames": introspection,
        "sys._current_exceptions": introspection,
        "gc.get_objects": introspection,
        "gc.get_referrers": introspection,
        "gc.get_referents": introspection,
        "sys.addaudithook": always("adding audit hooks"),
        "sys.settrace": tracing,
        "sys.setprofile": tracing,
        "sys._settraceallthreads": tracing,
        "sys._setprofileallthreads": tracing,
        "sys.monitoring.register_callback": tracing,
        "sys.set_asyncgen_hook_firstiter": tracing,
        "sys.set_asyncgen_hook_finalizer": tracing,
        "sys.remote_exec": tracing,
        "builtins.input": always("reading the host's stdin"),
        "builtins.breakpoint": always("starting a debugger"),
        "pdb.Pdb": always("starting a debugger"),
        "_thread.start_new_thread": threads,  # audited from 3.12
        "_thread.start_joinable_thread": threads,  # threading's route from 3.13
        "subprocess.Popen": processes,
        "os.system": processes,
        "os.exec": processes,
        "os.posix_spawn": processes,
        "os.spawn": processes,
        "os.fork": processes,
        "os.forkpty": processes,
        "os.kill": processes,
        "os.killpg": processes,
        "os.startfile": processes,
        "pty.spawn": processes,
        "signal.pthread_kill": processes,
        "webbrowser.open": processes,
        "ensurepip.bootstrap": processes,
        "os.chdir": settings,
        "os.putenv": settings,
        "os.unsetenv": settings,
        "resource.setrlimit": settings,
        "resource.prlimit": settings,
        "os.lockf": settings,
        "fcntl.fcntl": settings,
        "fcntl.ioctl": settings,
        "fcntl.flock": settings,
        "fcntl.lockf": settings,
        "syslog.openlog": settings,
        "syslog.syslog": settings,
        "syslog.setlogmask": settings,
        "syslog.closelog": settings,
        "mmap.__new__": always("mapping memory"),
        "sqlite3.connect": databases,
        "sqlite3.connect/handle": databases,
        "sqlite3.enable_load_extension": native,
        "sqlite3.load_extension": native,
        "urllib.Request": network,
        "http.client.connect": network,
        "http.client.send": network,
        **{
            f"{mod}.{what}": network
            for mod, whats in {
                "ftplib": ("connect", "sendcmd"),
                "smtplib": ("connect", "send"),
                "poplib": ("connect", "putline"),
                "imaplib": ("open", "send"),
                "nntplib": ("connect", "putline"),
                "telnetlib": ("Telnet.open", "Telnet.write"),
            }.items()
            for what in whats
        },
        **{
            f"socket.{what}": network
            for what in (
                "__new__",
                "bind",
                "connect",
                "getaddrinfo",
                "gethostbyaddr",
                "gethostbyname",
                "gethostname",
                "getnameinfo",
                "getservbyname",
                "getservbyport",
                "sendmsg",
                "sendto",
                "sethostname",
            )
        },
        **{
            f"ctypes.{what}": native
            for what in (
                "PyObj_FromPtr",
                "addressof",
                "call_function",
                "cdata",
                "cdata/buffer",
                "create_string_buffer",
                "create_unicode_buffer",
                "dlopen",
                "dlsym",
                "dlsym/handle",
                "get_errno",
                "get_last_error",
                "set_errno",
                "set_exception",
                "set_last_error",
                "string_at",
                "wstring_at",
                "seh_exception",
            )
        },
    }
    lookup = handlers.get
    getframe = sys._getframe

    def on_activate(args: tuple[Any, ...], frame: FrameType) -> None:
        if not host_direct(frame, keep_host=False):
            raise PolicyViolation("activating sandbox rules from sandboxed code is not allowed")
        forget_host()  # what the run's compile walk stored: not held past the run
        if len(args) != 2:
            raise ValueError("malformed sandbox activation")
        spec, tokens = args
        known = by_spec.get(key_of(spec))
        rules = None
        if known is not None and known[0] is spec:
            try:
                made_ids.move_to_end(key_of(known[1]))
                rules = known[1]
            except KeyError:  # forgotten since: made again below
                pass
        if rules is None:
            policy, files, workspace, denied, prefixes = spec
            key = (
                str(policy),
                bool(files),
                None if workspace is None else str(workspace),
                frozenset(map(str, denied)),
                tuple(map(str, prefixes)),
            )
            with lock:
                made = rules_made.get(key)
                if made is None:
                    while len(made_ids) >= _RULES_KEPT:
                        del rules_made[made_ids.popitem(last=False)[1]]
                    key = (*key[:3], shared.setdefault(key[3], key[3]), shared.setdefault(key[4], key[4]))
                    made = rules_made[key] = _Rules(key)
                made_ids[key_of(made)] = made
                made_ids.move_to_end(key_of(made))
                rules = made
                if type(spec) is tuple:  # immutable: its rules cannot change behind the hook's back
                    if len(by_spec) >= min(4096, _RULES_KEPT):  # a shortcut: forgotten, it costs a lookup
                        by_spec.clear()
                    by_spec[key_of(spec)] = (spec, rules)
        ever[0] = True
        # The frame the execution runs under (the runtime's caller): it stays on the stack while the
        # execution runs, and the walks of host_direct() stop there.
        anchor = frame.f_back or frame  # the caller of the runtime's enter(), which raised the event
        tokens.append(active.set((rules, anchor)))

    def probe(args: tuple[Any, ...], frame: FrameType) -> None:
        if len(args) == 1 and type(args[0]) is list:
            list.append(args[0], verdict[0])  # "a hook is installed", and its self-test's verdict

    def set_verdict(args: tuple[Any, ...], frame: FrameType) -> None:
        if not host_direct(frame):
            raise PolicyViolation("setting the self-test's verdict from sandboxed code is not allowed")
        if verdict[0] is None and len(args) == 1 and type(args[0]) is str:
            verdict[0] = args[0]

    def watch(args: tuple[Any, ...], frame: FrameType) -> None:
        if not host_direct(frame):
            raise PolicyViolation("watching audit events from sandboxed code is not allowed")
        if len(args) == 1 and (args[0] is None or type(args[0]) is set):
            watching[0] = args[0]

    def on_adopt(args: tuple[Any, ...], frame: FrameType) -> None:
        if not host_direct(frame):
            raise PolicyViolation("adopting code from sandboxed code is not allowed")
        record = active.get()
        if record is not None and len(args) == 1 and type(args[0]) is CodeType:
            register(args[0], record[0])

    handlers[ACTIVATE] = on_activate
    handlers[_PROBE] = probe
    handlers[_ADOPT] = on_adopt
    handlers[_WATCH] = watch
    handlers[_VERDICT] = set_verdict
    own_requests = (on_activate, on_adopt, probe, watch, set_verdict)  # the runtime's requests

    def hook(event: str, args: tuple[Any, ...]) -> None:
        # Arguments may come from sys.audit() with objects of any class: the hook looks only at exact
        # types, so none of their code runs while its frame (and its state) is on the stack.
        # The hottest event first: reading a frame's f_code raises it, and every walk reads f_code.
        if event == "object.__getattr__":
            if len(args) > 1 and type(args[1]) is str and args[1] in ("f_code", "gi_code"):
                return  # code objects are harmless to read; the hook reads f_code itself
            handler: Callable[..., None] = on_getattr
        else:
            found = lookup(event)
            if found is None:
                seen = watching[0]
                if seen is not None:
                    set.add(seen, event)
                return
            handler = found
            if handler is on_getframe:
                # The hook looking at its own frame. By its globals (f_globals is not audited, f_code
                # is: one event fewer per judged event): only this module's functions run with this
                # module's dict, and of those only the hook asks for frames.
                if args and type(args[0]) is FrameType and args[0].f_globals is own_globals:
                    return
            elif handler in own_requests:
                handler(args, getframe(0).f_back)
                return
        record = active.get()
        frame: FrameType
        # The caller's code, where this function needs it, read once and passed on: each read of
        # f_code is an audit event, that is one more call of this hook.
        caller_code: CodeType | None = None
        if record is None:
            if not ever[0]:
                return  # no restricted code ever ran in this process
            frame = getframe(0).f_back  # type: ignore[assignment]
            if event == "compile":
                caller_code = frame.f_code
                if caller_code is parse_code:
                    return  # ast.parse only builds a tree; compiling that tree is judged again
            rules = sandbox_rules(frame, first_code=caller_code)
            if rules is None:
                return  # no sandboxed code on the stack: the host's own event
        else:
            rules = record[0]
            if made_ids.get(key_of(rules)) is not rules:
                rules = _Rules(("unknown", False, None, frozenset(), ()))  # not made here: deny everything
            elif event == "exec" and args and type(args[0]) is CodeType:
                # on_exec's first case, before the frame is fetched: the session's own code again
                # (a cached cell), registered under the rules of this very execution.
                entry = sandboxed.get(key_of(args[0]))
                if (
                    entry is not None
                    and entry[0]() is args[0]
                    and (entry[1] is rules or ran_under(args[0], rules))
                ):
                    return
            frame = getframe(0).f_back  # type: ignore[assignment]
            if event == "compile":
                caller_code = frame.f_code
                if caller_code is parse_code:
                    return  # ast.parse only builds a tree; compiling that tree is judged again
        if (
            event == "compile"
            and args
            and issubclass(type(args[0]), ast.AST)
            and host_direct(frame, first_code=caller_code)
        ):
            # The host compiling a cell's tree (a snapshot's save and restore compile cells while an
            # execution's rules are active): that tree was audited before it was compiled.
            return
        try:
            handler(rules, event, args, frame)
        except PolicyViolation:
            raise
        except Exception as exc:  # a bug here must not open the sandbox: refuse instead
            raise rules.refuse(f"{event} (policy check failed: {type(exc).__name__})") from None

    own_globals = hook.__globals__
    return hook


# ---- the self-test -----------------------------------------------------------------------------------


class Probe(NamedTuple):
    """Code run as a restricted execution's own, and whether the hook must refuse it (None: either,
    where the interpreter may not report the operation at all)."""

    what: str
    source: str
    refused: bool | None


# What the hook needs the interpreter to report, each with its allowed neighbour. The namespace gives
# `inside` (a missing file in the workspace), `outside` (an existing file beyond it), `module` (the
# name of a module that, while imported, reads its file and changes a process setting), `host_code`
# and `host_function` (the hook's own: code and annotations of the host), `host_annotated` (a host
# function with annotations read when asked for), `started` (the native ids of threads started).
PROBES = (
    Probe("writing a file outside the workspace", "open(outside, 'a')", True),
    Probe(
        "opening a file in the workspace",
        "try:\n    open(inside)\nexcept FileNotFoundError:\n    pass",
        False,
    ),
    Probe("compiling text that is not generated code", "compile('import os', '<probe>', 'exec')", True),
    Probe("running a code object no checked text compiled to", "exec(host_code, {})", True),
    Probe("making a code object", "host_code.replace()", True),
    Probe("reading an interpreter frame", "sys._getframe()", True),
    Probe("changing a process setting", "os.chdir(os.getcwd())", True),
    Probe("importing a module that changes a process setting", "__import__(module)", False),
    Probe(
        "defining a dataclass",
        "@dataclasses.dataclass(order=True)\nclass P:\n    x: int\n    y: int = 0\n"
        "assert P(1) < P(2) and repr(P(1)) == 'P(x=1, y=0)'",
        False,
    ),
    Probe("making a namedtuple", "assert collections.namedtuple('N', 'a b')(1, 2).b == 2", False),
    Probe(
        "evaluating a string annotation",
        "def f(a: 'int') -> 'list[int]':\n    pass\nassert typing.get_type_hints(f)['a'] is int",
        False,
    ),
    Probe("evaluating a host module's string annotations", "typing.get_type_hints(host_function)", True),
    Probe(
        "defining a typing.NamedTuple and a TypedDict with a forward reference",
        "class N(typing.NamedTuple):\n    a: 'Later'\n    b: int = 0\n"
        "class D(typing.TypedDict):\n    a: 'Later'\nassert N(1).b == 0 and D(a=1) == {'a': 1}",
        False,
    ),
    Probe(
        "starting a thread",
        "thread = threading.Thread(target=lambda: started.append(threading.get_native_id()))\n"
        "thread.start()\nthread.join()",
        None,
    ),
)
# Where annotations are read lazily (annotationlib, Python 3.14+): a function made of a host's
# annotation code, run with globals of the session's choosing.
_LAZY_PROBES = (
    Probe(
        "reading a host function's annotations as forward references",
        "annotationlib.call_annotate_function(host_annotated.__annotate__, annotationlib.Format.FORWARDREF)",
        True,
    ),
)
_IMPORTED_MODULE = "import os\nos.chdir(os.getcwd())\n"


def _host_function(path: os.PathLike[str]) -> os.PathLike[str]:
    return path


def _host_code() -> object:
    return os.environ


def _host_annotated() -> Callable[..., Any]:
    """A host function whose annotations are evaluated when read (this module's are strings)."""
    namespace: dict[str, Any] = {}
    exec(
        compile("def f(a: int) -> None:\n    pass\n", "<hook self-test>", "exec", dont_inherit=True),
        namespace,
    )
    return namespace["f"]  # type: ignore[no-any-return]


def self_test(extra_probes: Iterable[Probe] = ()) -> list[str]:
    """Run PROBES (and `extra_probes`) under a restricted policy's rules: what went other than
    expected, one line each (empty: the hook works on this interpreter). The hook must be installed."""
    import builtins
    import collections as collections_module
    import dataclasses
    import typing

    try:
        import annotationlib  # type: ignore[import-not-found,unused-ignore]  # Python 3.14+
    except ImportError:
        annotationlib = None
    failures: list[str] = []
    started: list[int] = []
    directory = os.path.realpath(tempfile.mkdtemp(prefix="genpark-hook-"))
    try:
        outside = os.path.join(directory, "outside.txt")
        with open(outside, "w", encoding="utf-8"):
            pass
        workspace = os.path.join(directory, "workspace")
        name, path = _probe_module(directory, _IMPORTED_MODULE)
        namespace = {
            "__name__": "__genpark_hook_self_test__",
            "__builtins__": dict(vars(builtins)),  # a session's own, as the runtime gives it
            "os": os,
            "sys": sys,
            "threading": threading,
            "collections": collections_module,
            "dataclasses": dataclasses,
            "typing": typing,
            "annotationlib": annotationlib,
            "host_annotated": _host_annotated(),
            "inside": os.path.join(workspace, "missing.txt"),
            "outside": outside,
            "module": name,
            "host_code": _host_code.__code__,
            "host_function": _host_function,
            "started": started,
        }
        spec = rules_spec("self-test", True, workspace, (), ())
        unjudged: set[str] = set()
        finder = _ProbeFinder(name, path)
        sys.meta_path.insert(0, finder)
        sys.audit(_WATCH, unjudged)
        try:
            for probe in (*PROBES, *(_LAZY_PROBES if annotationlib else ()), *extra_probes):
                failure = _run_probe(probe, spec, namespace)
                if failure is not None:
                    failures.append(failure)
        finally:
            sys.audit(_WATCH, None)
            sys.meta_path.remove(finder)
            sys.modules.pop(name, None)
        # A thread started without an event the hook judges: a name it does not know.
        unknown = sorted(event for event in unjudged if "thread" in event.lower())
        if unknown:
            failures.append(f"the interpreter reports events the hook does not judge: {', '.join(unknown)}")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        _until_gone(started)
    return failures


def _until_gone(threads: list[int]) -> None:
    """Wait until threads the self-test started have left the process, not only joined: a zygote
    counts its threads before it forks (a second of waiting at most)."""
    import time

    for _ in range(1000):
        if not any(os.path.exists(f"/proc/self/task/{tid}") for tid in threads):
            return
        time.sleep(0.001)


def _run_probe(probe: Probe, spec: tuple[Any, ...], namespace: dict[str, Any]) -> str | None:
    try:
        code = compile(probe.source, "<hook self-test>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        return f"{probe.what}: the probe does not compile ({exc})"
    outcome: BaseException | None = None
    tokens = activate(spec)
    try:
        exec(code, dict(namespace))
    except Exception as exc:
        outcome = exc
    finally:
        deactivate(tokens)
    refused = isinstance(outcome, PolicyViolation)
    if (probe.refused is None or refused is probe.refused) and (refused or outcome is None):
        return None
    expected = {True: "refused", False: "allowed", None: "refused or allowed"}[probe.refused]
    got = "allowed" if outcome is None else f"{type(outcome).__name__}: {outcome}"
    return f"{probe.what}: expected {expected}, got {got}"
