"""Parse, audit, transform and compile one cell; cached by (policy, source)."""

from __future__ import annotations

import ast
import hashlib
import threading
from collections import OrderedDict
from types import CodeType
from typing import Any, NamedTuple

from ._models import AuditFinding, ErrorInfo
from .policy._runtime import PolicyRuntime
from .policy._walk import push_children

__all__ = ["CELL_PREFIX", "VALUE_NAME", "CompiledCell", "compile_cell", "parse"]

CELL_PREFIX = "<cell-"

# Calls that read or write the namespace by name at run time; a cell using them is diffed in full.
_DYNAMIC_NAMES = frozenset({"globals", "exec", "eval", "vars", "locals", "__builtins__"})
# Modules through which (trusted) code can change the host's builtins or working directory; cells
# that import them get both checked and restored.
_HOST_MODULES = frozenset({"builtins", "sys", "importlib", "os", "shutil", "pathlib", "subprocess"})

_GUARD_NAME = "__repl_check_timeout__"
_STORE = ast.Store()  # contexts carry no state: one instance serves every tree
# Where a cell leaves its trailing expression's value for the runner (which pops it at once).
VALUE_NAME = "__repl_value__"


class CompiledCell(NamedTuple):
    """One compiled cell, shared by every session of its policy (immutable; a tuple: cheap to make)."""

    source: str
    filename: str
    lines: tuple[str, ...]
    body: CodeType | None = None
    # The body ends by storing its trailing expression's value in VALUE_NAME (REPL style).
    has_value: bool = False
    names: frozenset[str] = frozenset()
    global_names: frozenset[str] = frozenset()
    dynamic: bool = False
    touches_host: bool = False
    findings: tuple[AuditFinding, ...] = ()
    syntax_error: ErrorInfo | None = None


class _BoundNames:
    """Every name the cell might bind or delete in the namespace (over-approximation is fine).

    One flat `ast.walk` with a type switch: NodeVisitor's per-node method dispatch costs more than
    the rest of compiling a small cell.
    """

    def __init__(self, tree: ast.AST) -> None:
        names: set[str] = set()
        global_names: set[str] = set()
        dynamic = touches_host = False
        # An explicit stack instead of `ast.walk` (a generator over `iter_child_nodes`), skipping
        # leaves (contexts, operators, constants) that bind nothing: a third of the cost of a new cell.
        stack: list[ast.AST] = [tree]
        pop, push = stack.pop, stack.append
        while stack:
            node = pop()
            kind = type(node)
            push_children(node, push)
            if kind is ast.Name:
                if type(node.ctx) is not ast.Load:  # type: ignore[attr-defined]
                    names.add(node.id)  # type: ignore[attr-defined]
                elif node.id in _DYNAMIC_NAMES:  # type: ignore[attr-defined]
                    dynamic = True
            elif kind in _DEFS:
                names.add(node.name)  # type: ignore[attr-defined]
            elif kind is ast.Global:
                global_names.update(node.names)  # type: ignore[attr-defined]
            elif kind is ast.Import:
                for alias in node.names:  # type: ignore[attr-defined]
                    top = alias.name.partition(".")[0]
                    names.add(alias.asname or top)
                    touches_host |= top in _HOST_MODULES
            elif kind is ast.ImportFrom:
                touches_host |= (node.module or "").partition(".")[0] in _HOST_MODULES  # type: ignore[attr-defined]
                for alias in node.names:  # type: ignore[attr-defined]
                    if alias.name == "*":
                        dynamic = True
                    else:
                        names.add(alias.asname or alias.name)
            elif kind in _NAMED:
                name = getattr(node, "name", None) or getattr(node, "rest", None)
                if name:
                    names.add(name)
        self.names = names
        self.global_names = global_names
        self.dynamic = dynamic
        self.touches_host = touches_host


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
# Nodes that bind the name in their `name` (or, for mapping patterns, `rest`) field.
_NAMED = (ast.ExceptHandler, ast.MatchAs, ast.MatchStar, ast.MatchMapping)


class _TimeoutGuards(ast.NodeTransformer):
    """Make the watchdog's timeout impossible to swallow.

    Each `except` handler starts by re-raising a pending timeout, and each `with` block is followed
    by the same check (a context manager's `__exit__` may suppress it). Both run only when an
    exception was caught or a block ended, so loops pay nothing.
    """

    def _check(self, node: ast.AST) -> ast.stmt:
        call = ast.Expr(ast.Call(ast.Name(_GUARD_NAME, ast.Load()), [], []))
        return ast.copy_location(call, node)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> ast.ExceptHandler:
        self.generic_visit(node)
        node.body.insert(0, self._check(node))
        ast.fix_missing_locations(node)
        return node

    def _after(self, node: ast.With | ast.AsyncWith) -> list[ast.stmt]:
        self.generic_visit(node)
        check = self._check(node)
        ast.fix_missing_locations(check)
        return [node, check]

    visit_With = _after
    visit_AsyncWith = _after


_cache: OrderedDict[tuple[object, str], CompiledCell] = OrderedDict()
_cache_lock = threading.Lock()
_CACHE_SIZE = 1024


def compile_cell(source: str, runtime: PolicyRuntime) -> CompiledCell:
    key = (runtime.cache_key, source)
    with _cache_lock:
        cell = _cache.get(key)
        if cell is not None:
            _cache.move_to_end(key)
            return cell
    cell = _compile(source, runtime)
    with _cache_lock:
        _cache[key] = cell
        if len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return cell


# CPython before 3.12 can fail with "SystemError: AST constructor recursion depth mismatch" when two
# threads parse at once (gh-106905); sessions compile on their callers' threads, so parses take turns.
_PARSE_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse` that is safe to call from many threads at once."""
    with _PARSE_LOCK:
        return ast.parse(source, filename, "exec")


def _compile(source: str, runtime: PolicyRuntime) -> CompiledCell:
    digest = hashlib.sha1(source.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    filename = f"{CELL_PREFIX}{digest}>"
    lines = tuple(source.splitlines())
    try:
        tree = parse(source, filename)
    except (SyntaxError, ValueError) as exc:  # ValueError: source with NUL bytes
        return CompiledCell(source, filename, lines, syntax_error=syntax_error_info(exc, lines))

    findings = runtime.audit(tree, source)
    if findings:
        return CompiledCell(source, filename, lines, findings=tuple(findings))

    # Without `global`, `import *` or a name that reads the namespace dynamically in the source, the
    # compiled code itself names what the cell may bind (read after compiling, below): no tree walk.
    bound = _BoundNames(tree) if _needs_walk(source) else None
    tree = runtime.transform(tree)
    # Handlers and `with` blocks are the only places a timeout could be swallowed; without the
    # keywords in the source there is nothing to guard and the tree walk is skipped.
    guard = "except" in source or "with" in source
    # A trailing expression becomes an assignment to VALUE_NAME, compiled with the rest: one
    # compilation and one `exec` per cell instead of two of each (with the audit hook installed,
    # each one is an audit event it judges). User code cannot name it: the audit refuses `__` names.
    last = tree.body[-1] if tree.body else None
    has_value = isinstance(last, ast.Expr)
    if isinstance(last, ast.Expr):
        # What ast.copy_location copies, without its per-attribute checks (an Expr has all four).
        where: dict[str, Any] = {
            "lineno": last.lineno,
            "col_offset": last.col_offset,
            "end_lineno": last.end_lineno,
            "end_col_offset": last.end_col_offset,
        }
        tree.body[-1] = ast.Assign([ast.Name(VALUE_NAME, _STORE, **where)], last.value, **where)
    if guard:
        tree = _TimeoutGuards().visit(tree)
    try:
        body = compile(tree, filename, "exec", dont_inherit=True) if tree.body else None
    except SyntaxError as exc:  # errors only the compiler sees ('return' outside function, ...)
        return CompiledCell(source, filename, lines, syntax_error=syntax_error_info(exc, lines))
    if bound is None and body is not None:
        names = _code_names(body)
        if _DYNAMIC_NAMES.isdisjoint(names):
            host = "import" in source and any(n.partition(".")[0] in _HOST_MODULES for n in names)
            return CompiledCell(
                source, filename, lines, body=body, has_value=has_value, names=frozenset(names),
                touches_host=host,
            )  # fmt: skip
        bound = _BoundNames(parse(source, filename))  # `x.eval(...)` and the like: the exact reading
    if bound is None:
        return CompiledCell(source, filename, lines, body=body, has_value=has_value)
    return CompiledCell(
        source,
        filename,
        lines,
        body=body,
        has_value=has_value,
        names=frozenset(bound.names),
        global_names=frozenset(bound.global_names),
        dynamic=bound.dynamic,
        touches_host=bound.touches_host or bound.dynamic,
    )


def _needs_walk(source: str) -> bool:
    return "global" in source or ("import" in source and "*" in source)


def _code_names(code: CodeType) -> set[str]:
    """Every name the cell's code objects store, delete or read as a global or attribute.

    Over-approximates what the cell may bind in the namespace (reads and attribute names are in
    `co_names` too), which is what the runner needs; function locals are not there (`co_varnames`).
    Nested code is included: a comprehension's `:=` stores a global.
    """
    names = set(code.co_names)
    stack = [c for c in code.co_consts if type(c) is CodeType]
    while stack:
        nested = stack.pop()
        names.update(nested.co_names)
        stack.extend(c for c in nested.co_consts if type(c) is CodeType)
    return names


def syntax_error_info(exc: SyntaxError | ValueError, lines: tuple[str, ...]) -> ErrorInfo:
    if not isinstance(exc, SyntaxError):
        return ErrorInfo(type="SyntaxError", message=str(exc), hint="Remove NUL bytes from the code.")
    line = exc.lineno
    column = exc.offset - 1 if exc.offset else None
    end_column = None
    end_offset = getattr(exc, "end_offset", None)
    if end_offset and exc.end_lineno == line and column is not None and end_offset - 1 > column:
        end_column = end_offset - 1
    source_line = lines[line - 1] if line and 0 < line <= len(lines) else None
    message = exc.msg
    text = f'  File "<input>", line {line}\n' if line else ""
    if source_line is not None:
        text += f"    {source_line}\n"
        if column is not None:
            width = max(1, (end_column or column + 1) - column)
            text += "    " + " " * column + "^" * width + "\n"
    text += f"{type(exc).__name__}: {message}"
    return ErrorInfo(
        type=type(exc).__name__,
        message=message,
        line=line,
        column=column,
        end_column=end_column,
        source_line=source_line,
        traceback=text,
        hint=_syntax_hint(message),
    )


def _syntax_hint(message: str) -> str | None:
    if "was never closed" in message or "unexpected EOF" in message:
        return "Close the bracket or string and send the whole cell again."
    if "indent" in message:
        return "Fix the indentation: use 4 spaces per level, no tabs mixed in."
    return None


GUARD_NAME = _GUARD_NAME
