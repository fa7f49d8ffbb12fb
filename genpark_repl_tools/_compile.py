"""Parse, audit, transform and compile one cell; cached by (policy, source)."""

from __future__ import annotations

import ast
import hashlib
import threading
from types import CodeType
from typing import NamedTuple

from ._capture import redirect, route, unroute
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
    # What compiling it wrote to stderr (SyntaxWarnings), the cell named "<input>" as in tracebacks:
    # written to the stderr of every run of the cell, as the interpreter shows them when it compiles.
    warnings: str = ""


class _CellFacts:
    """What the runner and the compiler need to know about a cell, read from its tree in one walk.

    `names`: every name the cell might bind or delete in the namespace (over-approximation is fine:
    the runner compares what they hold before and after); `global_names`: names a `global`
    statement declares; `dynamic`: it may read or bind names the tree does not show (`globals()`,
    `exec`, `import *`, ...); `touches_host`: it imports a module through which it could change the
    host's builtins or working directory; `catches`: it has an `except` handler or a `with` block,
    where a timeout could be swallowed (the policy's transform adds neither).
    """

    def __init__(self, tree: ast.AST) -> None:
        names: set[str] = set()
        global_names: set[str] = set()
        dynamic = touches_host = catches = False
        # An explicit stack with a type switch, skipping leaves (contexts, operators, constants):
        # `ast.walk` and NodeVisitor's per-node dispatch cost more than the rest of compiling a cell.
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
                catches |= kind is ast.ExceptHandler
            elif kind in _WITH:
                catches = True
        self.names = names
        self.global_names = global_names
        self.dynamic = dynamic
        self.touches_host = touches_host
        self.catches = catches


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
# Nodes that bind the name in their `name` (or, for mapping patterns, `rest`) field.
_NAMED = (ast.ExceptHandler, ast.MatchAs, ast.MatchStar, ast.MatchMapping)
_WITH = (ast.With, ast.AsyncWith)


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


# Two generations of plain dicts instead of an LRU: a hit in the young one (a cell run again soon) is
# one dict lookup without the lock (dict reads are atomic); a cell found in the old one moves back to
# the young one; when the young one is full it becomes the old one and the old one is dropped. So a
# cell run at least once every _GENERATION new cells stays, and at most 2 * _GENERATION are held.
_generations: list[dict[tuple[object, str], CompiledCell]] = [{}, {}]  # young, old
_cache_lock = threading.Lock()
_GENERATION = 512


def compile_cell(source: str, runtime: PolicyRuntime) -> CompiledCell:
    key = (runtime.cache_key, source)
    generations = _generations
    cell = generations[0].get(key)
    if cell is not None:
        return cell
    with _cache_lock:
        cell = generations[1].get(key)
    if cell is None:
        # The compiler's warnings go to sys.stderr: routed here (this context only), they become the
        # cell's, instead of text on the host's stderr that the model never sees. Inside a run
        # (run_cell compiles after its routing began) only this context's target changes.
        # Code nested too deeply (`1+1+...+1` 100,000 times) makes the parser or the compiler give up
        # with MemoryError or RecursionError: an error result, not cached (memory may be there later).
        compiling = _CompilerOutput()
        redirected = redirect(compiling)
        token = route(compiling) if redirected is None else None
        try:
            cell = _compile(source, runtime)
        except (MemoryError, RecursionError) as exc:
            return _uncompilable(source, exc)
        finally:
            if redirected is not None:
                redirected.var.reset(redirected)
            elif token is not None:
                unroute(token)
        if compiling.parts:
            cell = cell._replace(warnings=_warnings_text(compiling.getvalue(), cell.filename))
    with _cache_lock:
        young = generations[0]
        young[key] = cell
        if len(young) >= _GENERATION:
            generations[:] = [{}, young]
    return cell


class _CompilerOutput:
    """Both streams of a compile: the compiler's warnings (a few per cell, the first ones kept)."""

    __slots__ = ("parts",)
    truncated = False

    def __init__(self) -> None:
        self.parts: list[str] = []

    @property
    def stdout(self) -> _CompilerOutput:
        return self

    @property
    def stderr(self) -> _CompilerOutput:
        return self

    def write(self, text: str) -> None:
        if len(self.parts) < _WARNING_PARTS_KEPT:
            self.parts.append(text)

    def getvalue(self) -> str:
        return "".join(self.parts)


_WARNING_PARTS_KEPT = 200


def _warnings_text(text: str, filename: str) -> str:
    """The compiler's warnings as a run shows them: the cell named as tracebacks name it, each one
    once, as Python's default warning filter shows the same warning for the same line (the compiler
    gives one per comparison: `a is 1 or b is 1` gets two)."""
    lines = text.replace(filename, "<input>").splitlines()
    return "\n".join(dict.fromkeys(lines)) + "\n"


# Before 3.12, CPython's conversion of a parsed module into `ast` objects keeps its recursion depth
# in a counter shared by the whole interpreter: when another thread parses in the middle of it (a
# garbage collection running a finalizer is enough to switch threads), the count comes out wrong and
# the parse fails with "SystemError: AST constructor recursion depth mismatch". Sessions compile on
# their callers' threads, so parses take turns. Compiling a tree does not check that counter.
_PARSE_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse` that is safe to call from many threads at once."""
    with _PARSE_LOCK:
        return ast.parse(source, filename, "exec")


def _cell_filename(source: str) -> str:
    """The name tracebacks and the compile cache know the cell by: `<cell-` and 12 hex digits."""
    return f"{CELL_PREFIX}{hashlib.sha1(source.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}>"


def _uncompilable(source: str, exc: MemoryError | RecursionError) -> CompiledCell:
    """The cell for source that is valid syntax but too deeply nested for Python to compile."""
    why = str(exc) if isinstance(exc, RecursionError) else "out of memory while compiling"
    return CompiledCell(
        source,
        _cell_filename(source),
        tuple(source.splitlines()),
        syntax_error=ErrorInfo(
            type=type(exc).__name__,
            message=f"Python could not compile the code: it is nested too deeply ({why})",
            hint="Split long chains (`a + b + ...`, `x.a.b...`, `- - x`) and deep nesting into several "
            "statements with intermediate variables. Nothing ran; the variables are unchanged.",
        ),
    )


def _compile(source: str, runtime: PolicyRuntime) -> CompiledCell:
    """The one way a cell is compiled: parse, audit, transform, compile the tree."""
    filename = _cell_filename(source)
    lines = tuple(source.splitlines())
    try:
        tree = parse(source, filename)
    except (SyntaxError, ValueError) as exc:  # ValueError: source with NUL bytes
        return CompiledCell(source, filename, lines, syntax_error=syntax_error_info(exc, lines))
    findings = runtime.audit(tree, source)
    if findings:
        return CompiledCell(source, filename, lines, findings=tuple(findings))
    facts = _CellFacts(tree)  # read from the cell as written, before the policy rewrites it
    tree = runtime.transform(tree)
    has_value = _store_trailing_value(tree)
    if facts.catches:
        tree = _TimeoutGuards().visit(tree)
    try:
        body = compile(tree, filename, "exec", dont_inherit=True) if tree.body else None
    except SyntaxError as exc:  # errors only the compiler sees ('return' outside function, ...)
        return CompiledCell(source, filename, lines, syntax_error=syntax_error_info(exc, lines))
    return CompiledCell(
        source,
        filename,
        lines,
        body=body,
        has_value=has_value,
        names=frozenset(facts.names),
        global_names=frozenset(facts.global_names),
        dynamic=facts.dynamic,
        touches_host=facts.touches_host or facts.dynamic,
    )


def _store_trailing_value(tree: ast.Module) -> bool:
    """Make a trailing expression an assignment to VALUE_NAME (REPL style); whether there was one.

    Compiled with the rest of the cell: one compilation and one `exec` per cell instead of two of
    each. Restricted cells cannot name VALUE_NAME themselves: the audit refuses `__` names.
    """
    last = tree.body[-1] if tree.body else None
    if not isinstance(last, ast.Expr):
        return False
    target = ast.copy_location(ast.Name(VALUE_NAME, ast.Store()), last)
    tree.body[-1] = ast.copy_location(ast.Assign([target], last.value), last)
    return True


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
