"""Parse, audit, transform and compile one cell; cached by (policy, source)."""

from __future__ import annotations

import ast
import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from types import CodeType

from ._models import AuditFinding, ErrorInfo
from .policy._runtime import PolicyRuntime

__all__ = ["CELL_PREFIX", "CompiledCell", "compile_cell"]

CELL_PREFIX = "<cell-"

# Calls that read or write the namespace by name at run time; a cell using them is diffed in full.
_DYNAMIC_NAMES = frozenset({"globals", "exec", "eval", "vars", "locals", "__builtins__"})
# Modules through which (trusted) code can change the host's builtins or working directory; cells
# that import them get both checked and restored.
_HOST_MODULES = frozenset({"builtins", "sys", "importlib", "os", "shutil", "pathlib", "subprocess"})

_GUARD_NAME = "__repl_check_timeout__"


@dataclass(frozen=True)
class CompiledCell:
    source: str
    filename: str
    lines: tuple[str, ...]
    body: CodeType | None = None
    expr: CodeType | None = None
    names: frozenset[str] = frozenset()
    global_names: frozenset[str] = frozenset()
    dynamic: bool = False
    touches_host: bool = False
    findings: tuple[AuditFinding, ...] = ()
    syntax_error: ErrorInfo | None = None


class _BoundNames(ast.NodeVisitor):
    """Every name the cell might bind or delete in the namespace (over-approximation is fine)."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.global_names: set[str] = set()
        self.dynamic = False
        self.touches_host = False

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self.names.add(node.id)
        elif node.id in _DYNAMIC_NAMES:
            self.dynamic = True

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.names.add(node.name)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.names.add(node.name)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        self.global_names.update(node.names)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.names.add(alias.asname or alias.name.partition(".")[0])
            self.touches_host |= alias.name.partition(".")[0] in _HOST_MODULES

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self.touches_host |= (node.module or "").partition(".")[0] in _HOST_MODULES
        for alias in node.names:
            if alias.name == "*":
                self.dynamic = True
            else:
                self.names.add(alias.asname or alias.name)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self.names.add(node.name)
        self.generic_visit(node)

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        if node.name:
            self.names.add(node.name)
        self.generic_visit(node)

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        if node.name:
            self.names.add(node.name)

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        if node.rest:
            self.names.add(node.rest)
        self.generic_visit(node)


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


def _compile(source: str, runtime: PolicyRuntime) -> CompiledCell:
    digest = hashlib.sha1(source.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    filename = f"{CELL_PREFIX}{digest}>"
    lines = tuple(source.splitlines())
    try:
        tree = ast.parse(source, filename, "exec")
    except (SyntaxError, ValueError) as exc:  # ValueError: source with NUL bytes
        return CompiledCell(source, filename, lines, syntax_error=syntax_error_info(exc, lines))

    findings = runtime.audit(tree, source)
    if findings:
        return CompiledCell(source, filename, lines, findings=tuple(findings))

    bound = _BoundNames()
    bound.visit(tree)
    tree = runtime.transform(tree)
    expr_node: ast.Expression | None = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = tree.body.pop()
        expr_node = ast.Expression(last.value)  # type: ignore[attr-defined]
        expr_node = _TimeoutGuards().visit(expr_node)
    tree = _TimeoutGuards().visit(tree)
    try:
        body = compile(tree, filename, "exec", dont_inherit=True) if tree.body else None
        expr = compile(expr_node, filename, "eval", dont_inherit=True) if expr_node is not None else None
    except SyntaxError as exc:  # errors only the compiler sees ('return' outside function, ...)
        return CompiledCell(source, filename, lines, syntax_error=syntax_error_info(exc, lines))
    return CompiledCell(
        source,
        filename,
        lines,
        body=body,
        expr=expr,
        names=frozenset(bound.names),
        global_names=frozenset(bound.global_names),
        dynamic=bound.dynamic,
        touches_host=bound.touches_host or bound.dynamic,
    )


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
