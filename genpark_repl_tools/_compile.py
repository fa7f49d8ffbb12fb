"""Parse, audit, transform and compile one cell; cached by (policy, source)."""

from __future__ import annotations

import ast
import dis
import hashlib
import keyword
import re
import sys
import threading
from types import CodeType
from typing import Any, Literal, NamedTuple

from ._capture import redirect, route, unroute
from ._models import AuditFinding, ErrorInfo
from .policy._runtime import PolicyRuntime
from .policy._screen import REVIEWED_VERSIONS
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
    # What compiling it wrote to stderr (SyntaxWarnings), the cell named "<input>" as in tracebacks:
    # written to the stderr of every run of the cell, as the interpreter shows them when it compiles.
    warnings: str = ""


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
    """The compiler's warnings as a run shows them: the cell named as tracebacks name it, each
    warning once (the tree path may parse and compile a cell twice)."""
    lines = text.replace(filename, "<input>").splitlines()
    return "\n".join(dict.fromkeys(lines)) + "\n"


# CPython before 3.12 can fail with "SystemError: AST constructor recursion depth mismatch" when two
# threads parse at once (gh-106905); sessions compile on their callers' threads, so parses take turns.
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
    filename = _cell_filename(source)
    lines = tuple(source.splitlines())
    if _FAST and not _needs_tree(source):
        # compile() called here, not in a helper: with the audit hook installed, each frame between
        # the caller and compile() is one more step of the walk the hook makes for the event.
        try:
            code = compile(source, filename, "exec", dont_inherit=True)
        except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError):
            code = None  # the tree path reports it as it always has
        cell = None if code is None else _from_source(code, source, filename, lines, runtime)
        if cell is not None:
            return cell
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


# ---- the fast path: the code compile() makes from the source, when nothing needs the tree ---------
#
# A syntax tree costs a parse, an audit walk and a second compilation of the tree. A cell that needs
# no rewrite can run the code compiled from its source: no timeout guards to insert (no handler, no
# `with`), nothing the policy's audit or transform would act on (`runtime.screen`), and its trailing
# expression's value found in the code itself (`_store_value`). Where any of that cannot be shown
# from the code, the cell takes the tree path, which decides as before. Reviewed against the
# bytecode of 3.11 and 3.12 only (positions per instruction, inline caches, RETURN_CONST).

_FAST = sys.version_info[:2] in REVIEWED_VERSIONS
_OPS = {name: code for name, code in dis.opmap.items() if code < 256}
_POP_TOP = _OPS["POP_TOP"]
_NOP = _OPS["NOP"]
_LOAD_CONST = _OPS["LOAD_CONST"]
_STORE_NAME = _OPS["STORE_NAME"]
_CACHE = _OPS.get("CACHE", -1)
_EXTENDED_ARG = _OPS["EXTENDED_ARG"]
_RETURNS = tuple(_OPS[n] for n in ("RETURN_VALUE", "RETURN_CONST") if n in _OPS)
_RETURN_CONST = _OPS.get("RETURN_CONST", -1)
# Hard keywords that start a statement, never an expression: a statement beginning with one is
# not the cell's value (`from m import x` and `import a.b as c` end like an expression does).
_VALUE_WORDS = frozenset({"False", "None", "True", "await", "lambda", "not", "yield"})
_STATEMENT_WORDS = frozenset(keyword.kwlist) - _VALUE_WORDS
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NO_NAMES: frozenset[str] = frozenset()
# A code object's new co_code and co_names (see _with_value).
_Patch = tuple[bytes, tuple[str, ...]]


def _needs_tree(source: str) -> bool:
    # Handlers and `with` blocks get timeout guards; `global` and `import *` need the tree's reading
    # of the names bound; `\r` line ends are counted differently by str.splitlines.
    return "except" in source or "with" in source or "\r" in source or _needs_walk(source)


def _from_source(
    code: CodeType, source: str, filename: str, lines: tuple[str, ...], runtime: PolicyRuntime
) -> CompiledCell | None:
    """The cell from `code`, compiled from its source as it is, or None when the tree path must decide."""
    if not runtime.screen(code, source):
        return None
    names = _code_names(code)
    if not _DYNAMIC_NAMES.isdisjoint(names) or "__doc__" in code.co_names:
        return None  # dynamic reads of the namespace; a docstring (a value to the tree path)
    patch = _store_value(code, source)
    if patch is None:
        return None
    has_value = False
    if patch is not False:
        has_value = True
        names.add(VALUE_NAME)
        # code.replace() called here, one frame below _compile: with the audit hook installed, the
        # walk it makes for the event stops at _compile's frame, found clean for its compile().
        code = code.replace(co_code=patch[0], co_names=patch[1])
    host = "import" in source and any(n.partition(".")[0] in _HOST_MODULES for n in names)
    # Positional: a NamedTuple made with keywords costs a dict of them.
    return CompiledCell(source, filename, lines, code, has_value, frozenset(names), _NO_NAMES, False, host)


def _store_value(code: CodeType, source: str) -> _Patch | Literal[False] | None:
    """What makes `code` store its trailing expression's value in VALUE_NAME (its new co_code and
    co_names), False if the cell does not end with an expression, or None if the code alone cannot
    tell.

    The module's implicit `return None` follows its last statement on every path that reaches the
    end. When that statement is an expression, the return usually follows the POP_TOP that discards
    its value (one per branch of an `a if b else c`); those POP_TOPs become STORE_NAMEs (same size:
    offsets, line and exception tables stay valid). Not always: the compiler drops constant
    statements and (3.12) constant branches, so without those POP_TOPs only a recognised statement
    (an assignment, an import, a block) means "no value"; anything else is the tree's to read.
    Which statement is last is read from the source: from its last line when that line shows it,
    else from the positions of the instructions before the returns.
    """
    raw = code.co_code
    ops = raw[::2]
    consts = code.co_consts
    befores: list[int] = []  # code units of the instructions right before each return
    returns: list[int] = []
    popped = True
    for op in _RETURNS:
        unit = ops.find(op)
        while unit >= 0:
            before = unit - 1
            if op != _RETURN_CONST:  # RETURN_VALUE: after LOAD_CONST None
                if before < 0 or ops[before] != _LOAD_CONST:
                    return None
                load, before = before, before - 1
            else:
                load = unit
            if before >= 0 and ops[before] == _EXTENDED_ARG:
                return None  # a constant index over 255: rare, the tree path reads it
            if consts[raw[2 * load + 1]] is not None:
                return None  # module code returns only None: something unexpected
            while before >= 0 and ops[before] == _CACHE:
                before -= 1  # the inline caches of the instruction before
            if before < 0:
                return None
            if ops[before] != _POP_TOP:
                popped = False
            befores.append(before)
            returns.append(unit)
            unit = ops.find(op, unit + 1)
    if not befores:
        return None  # the cell always raises: nothing tells the tree path's reading apart
    text = source.split("\n")
    kind = _last_line(text)
    if kind is _EXPRESSION:
        return _with_value(code, raw, befores) if popped else None
    if kind is not None:
        return False
    positions = list(code.co_positions())  # type: ignore[attr-defined]  # 3.11+: _FAST
    if not popped:
        stores = [positions[b][0] for b in befores if ops[b] in _STORES]
        return False if _ends_with_assignment(text, stores, len(befores)) else None
    for before, unit in zip(befores, returns, strict=True):
        if positions[before] != positions[unit]:
            # A return placed after another statement's POP_TOP keeps its own position: the last
            # statement left no code of its own (a constant the compiler dropped).
            return None
    where = [positions[unit] for unit in befores]
    if any(None in p for p in where):
        return None
    head = min((p[0], p[2]) for p in where)
    tail = max((p[1], p[3]) for p in where)
    kind = _last_statement((head[0], tail[0], head[1], tail[1]), text)
    if kind is not _EXPRESSION:
        return None if kind is None else False
    return _with_value(code, raw, befores)


def _with_value(code: CodeType, raw: bytes, pops: list[int]) -> _Patch | None:
    """The co_code and co_names of `code` with the POP_TOPs at `pops` storing the value in
    VALUE_NAME instead."""
    names = code.co_names
    index = names.index(VALUE_NAME) if VALUE_NAME in names else len(names)
    if index > 255:
        return None  # would need an EXTENDED_ARG: not the same size
    patched = bytearray(raw)
    for unit in pops:
        patched[2 * unit] = _STORE_NAME
        patched[2 * unit + 1] = index
    if index == len(names):
        names = (*names, VALUE_NAME)
    return bytes(patched), names


_EXPRESSION = "expression"
_STATEMENT = "statement"
# A plain assignment to names: `x = ...`, `a, b = ...`, `n += 1` (not `==`, `:=`, targets with dots
# or subscripts).
_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*\s*(?:[-+*/%&|^@]|//|\*\*|>>|<<)?=(?!=)")
# Headers of the blocks a cell can end with (with, try and except take the tree path anyway).
# What keeps a line from showing its statements by itself: strings, comments, colons (a compound
# statement, or a lambda, slice or dict whose extent the text does not show), backslashes.
_UNREADABLE = re.compile(r"['\"#:\\]")
_BLOCKS = frozenset({"for", "while", "if", "elif", "else", "def", "class", "async"})
_STORES = frozenset(_OPS[n] for n in ("STORE_NAME", "STORE_GLOBAL"))


def _last_code_line(text: list[str]) -> int:
    """The index of the cell's last line holding code (not blank, not only a comment), or -1."""
    last = len(text) - 1
    while last >= 0 and (not text[last].strip() or text[last].lstrip()[0] == "#"):
        last -= 1
    return last


def _last_line(text: list[str]) -> str | None:
    """What the cell's last line shows its last statement to be, without positions: an expression
    (_EXPRESSION), a statement that is not one (_STATEMENT: an assignment to names, an import, a
    keyword's statement, a block), or None when the line alone does not show it.

    It shows it when the line is a whole logical line at the margin: not continued from the line
    before, with no string, comment, colon or backslash (so its brackets count exactly and balance,
    and no compound statement is on it), its last `;`-separated statement starting with a name. A
    block shows itself by its header: the last line at the margin, starting with the block's
    keyword and ending with a colon, every line after it indented.
    """
    last = _last_code_line(text)
    if last < 0 or (last and text[last - 1].endswith("\\")):
        return None
    line = text[last]
    if line.isascii() and line.isidentifier():  # a bare name (`df`, `result`): what the rest reads
        if line in _STATEMENT_WORDS:
            return _STATEMENT  # `pass`, `break`, ...
        return None if line in _VALUE_WORDS or line == "__debug__" else _EXPRESSION
    if line[0] in " \t\f":
        header = last
        while header >= 0 and (text[header][:1] in (" ", "\t", "\f", "") or text[header].lstrip()[:1] == "#"):
            header -= 1
        if header < 0 or (header and text[header - 1].endswith("\\")):
            return None
        words = text[header]
        if "'" in words or '"' in words:
            return None
        words = words.partition("#")[0].rstrip()
        word = _WORD.match(words)
        return _STATEMENT if word is not None and word.group() in _BLOCKS and words.endswith(":") else None
    if _UNREADABLE.search(line) is not None:
        return None
    if line.count("(") + line.count("[") + line.count("{") != (
        line.count(")") + line.count("]") + line.count("}")
    ):
        return None  # the line continues a bracket opened earlier (or the cell does not compile)
    statement = line.rstrip().removesuffix(";").rpartition(";")[2].lstrip()
    word = _WORD.match(statement)
    if word is None:
        return None  # `(a, b)`, `-x`, `[...]`, a constant: the positions tell
    if word.group() in _STATEMENT_WORDS:
        return _STATEMENT  # `import x`, `del x`, `pass`, `assert x`, ...
    if word.group() in _VALUE_WORDS or word.group() == "__debug__":
        return None  # `None`, `not x`, ...: perhaps a constant the compiler dropped
    return _STATEMENT if _ASSIGNMENT.match(statement) else _EXPRESSION


def _ends_with_assignment(text: list[str], stores: list[int | None], returns: int) -> bool:
    """Whether the cell certainly ends with a plain assignment: its last line is one, and each
    return follows a store on that very line (not a call continued from an earlier line,
    `f(a,\nx = 1)`)."""
    last = _last_code_line(text)
    if last < 0 or (last and text[last - 1].endswith("\\")):
        return False
    line = text[last]
    if line[0] in " \t\f" or ";" in line or "#" in line or _ASSIGNMENT.match(line) is None:
        return False
    return len(stores) == returns and all(n == last + 1 for n in stores)


def _last_statement(span: tuple[int | None, ...], text: list[str]) -> str | None:
    """What the code at the positions `span` is: the cell's last statement and an expression
    (_EXPRESSION), its last statement and an import (_STATEMENT), or None when the text does not
    show it.

    Shown from the text for the usual shape: the statement is on one line, after nothing or after
    `;`-separated simple statements (no strings, comments, colons, no bracket closed that this line
    did not open), nothing but comments follows. Anything else is parsed (the tail from its line).
    """
    first, last, start, end = span
    if first is None or last is None or start is None or end is None:
        return None
    if first > 1 and text[first - 2].endswith("\\"):
        return None  # a continued line: its statement began earlier
    line = text[first - 1]
    if first != last or not line.isascii() or ":" in line[start:end]:
        return _parsed_statement(span, text)  # (positions count UTF-8 bytes)
    rest = line[end:].lstrip()
    if rest[:1] == ";":  # `y;` ends the statement; anything after the `;` is another one
        rest = rest[1:].lstrip()
    if rest and rest[0] != "#":
        return _parsed_statement(span, text)
    for following in text[last:]:
        after = following.lstrip()
        if after and after[0] != "#":
            return None  # code after it (a statement the compiler dropped): the tree decides
    if start:
        head = line[:start]
        if head.isspace():
            return None  # indented: inside a block, not the cell's last statement
        if head.rstrip()[-1] != ";" or "'" in head or '"' in head or "#" in head or ":" in head:
            return _parsed_statement(span, text)
        # Without strings and comments brackets count exactly: the `;` is outside any, so more
        # closing than opening ones would mean the line continues an earlier one.
        if head.count("(") + head.count("[") + head.count("{") != (
            head.count(")") + head.count("]") + head.count("}")
        ):
            return None
    word = _WORD.match(line, start)
    if word is None or word.group() not in _STATEMENT_WORDS:
        return _EXPRESSION
    # `from m import x` and `import a.b as c` end the way an expression does.
    return _STATEMENT if word.group() in ("from", "import") else None


def _parsed_statement(span: tuple[int | None, ...], text: list[str]) -> str | None:
    first, last, start, end = span
    assert first is not None
    try:
        tree = parse("\n".join(text[first - 1 :]))
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None  # its line does not begin a statement
    node = tree.body[-1] if tree.body else None
    if (
        node is None
        or (node.lineno + first - 1, node.col_offset) != (first, start)
        or node.end_lineno is None
        or (node.end_lineno + first - 1, node.end_col_offset) != (last, end)
    ):
        return None
    return _EXPRESSION if isinstance(node, ast.Expr) else None


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
