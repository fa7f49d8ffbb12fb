"""Layer 1, the static audit: a deny-by-default review of the code's syntax tree before it runs.

Every node type the auditor accepts has been reviewed; new syntax is refused until it is reviewed
too. The audit refuses what it can see (imports, private and internal names, forbidden builtins,
special methods, finalizer-like constructs, obviously huge constants) and leaves the rest to the
runtime guards. Statically refused code never runs, so these rules cost nothing at run time.
"""

from __future__ import annotations

import _string  # type: ignore[import-not-found]  # the parser str.format itself uses
import ast
import math
from dataclasses import dataclass, field

from .._models import AuditFinding
from ._rules import GEN_UNSAFE_EXCEPTIONS, StaticRules, nfkc
from ._walk import bound_names, dispatch_table, push_children

__all__ = ["NEEDS_REWRITE", "audit", "format_refusal", "is_generator", "routed_refusal"]

_MAX_FINDINGS = 10

# Node types reviewed for restricted code. Anything else (new syntax included) is refused.
_REVIEWED: frozenset[type[ast.AST]] = frozenset(
    {
        ast.Module,
        ast.Expr,
        ast.Assign,
        ast.AugAssign,
        ast.AnnAssign,
        ast.For,
        ast.While,
        ast.If,
        ast.With,
        ast.Raise,
        ast.Try,
        ast.Assert,
        ast.Delete,
        ast.Pass,
        ast.Break,
        ast.Continue,
        ast.Return,
        ast.FunctionDef,
        ast.ClassDef,
        ast.Import,
        ast.ImportFrom,
        ast.Global,
        ast.Nonlocal,
        ast.Match,
        ast.BoolOp,
        ast.NamedExpr,
        ast.BinOp,
        ast.UnaryOp,
        ast.Lambda,
        ast.IfExp,
        ast.Dict,
        ast.Set,
        ast.ListComp,
        ast.SetComp,
        ast.DictComp,
        ast.GeneratorExp,
        ast.Yield,
        ast.YieldFrom,
        ast.Compare,
        ast.Call,
        ast.FormattedValue,
        ast.JoinedStr,
        ast.Constant,
        ast.Attribute,
        ast.Subscript,
        ast.Starred,
        ast.Name,
        ast.List,
        ast.Tuple,
        ast.Slice,
        ast.comprehension,
        ast.ExceptHandler,
        ast.arguments,
        ast.arg,
        ast.keyword,
        ast.alias,
        ast.withitem,
        ast.match_case,
        ast.MatchValue,
        ast.MatchSingleton,
        ast.MatchSequence,
        ast.MatchMapping,
        ast.MatchClass,
        ast.MatchStar,
        ast.MatchAs,
        ast.MatchOr,
        ast.Load,
        ast.Store,
        ast.Del,
    }
)
_OPERATOR_BASES = (ast.operator, ast.boolop, ast.cmpop, ast.unaryop, ast.expr_context)

_UNSUPPORTED = {
    "AsyncFunctionDef": "'async def' is not supported (no event loop is available)",
    "Await": "'await' is not supported (no event loop is available)",
    "AsyncFor": "'async for' is not supported (no event loop is available)",
    "AsyncWith": "'async with' is not supported (no event loop is available)",
    "TryStar": "'except*' is not supported; use except",
}


@dataclass
class _Scope:
    kind: str  # "module" | "function" | "class"
    generator: bool = False
    # One entry per enclosing `finally` body in this scope: loops entered since it began.
    finally_loops: list[int] = field(default_factory=list)


# Set on an audited tree: False when it holds nothing the transform rewrites (most small cells).
NEEDS_REWRITE = "genpark_needs_rewrite"


def audit(tree: ast.Module, source: str, rules: StaticRules) -> list[AuditFinding]:
    auditor = _Auditor(rules, source)
    setattr(tree, NEEDS_REWRITE, True)
    try:
        auditor.visit(tree)
        setattr(tree, NEEDS_REWRITE, auditor.rewrite)
    except RecursionError:
        auditor.findings.append(
            AuditFinding(rule="nesting", message="the code is nested too deeply to review; flatten it")
        )
    except _Enough:
        pass
    # In reading order: `().__class__.__base__` reports __class__ first.
    return sorted(auditor.findings, key=lambda f: (f.line or 0, f.column or 0))


class _Enough(Exception):
    """Stops the walk once enough findings are collected."""


def format_refusal(fmt: str, rules: StaticRules, depth: int = 0) -> str | None:
    """Why `fmt.format(...)` would be refused (an attribute field such as '{0.__class__}'), or None."""
    try:
        parsed = list(_string.formatter_parser(fmt))
    except ValueError:  # malformed: str.format raises the same error itself
        return None
    for _literal, field_name, spec, _conversion in parsed:
        if field_name is None:
            continue
        try:
            _first, rest = _string.formatter_field_name_split(field_name)
            parts = list(rest)
        except ValueError:
            return None
        for is_attr, key in parts:
            if is_attr:
                refusal = rules.attribute_refusal(str(key))
                if refusal is None and nfkc(str(key)) in rules.routed:
                    refusal = routed_refusal(str(key), "a format field")
                if refusal is not None:
                    return f"format field '{{{field_name}}}': {refusal}"
        if spec and depth < 2:
            nested = format_refusal(spec, rules, depth + 1)
            if nested is not None:
                return nested
    return None


def routed_refusal(name: str, where: str) -> str:
    """Why `where` (a format field, a pandas expression) may not read the routed attribute `name`:
    its reads are checked at run time (pathlib's `parser` is the os.path module), and `where` looks
    attributes up itself, past the check."""
    return (
        f"attribute '{name}' is checked when code reads it, and {where} would skip the check; "
        "read it in code first and use the value"
    )


def is_generator(node: ast.FunctionDef | ast.Lambda) -> bool:
    """Whether `node`'s own scope yields (nested functions and classes are their own scopes)."""
    # An explicit stack over the fields (no ast.iter_child_nodes generators), skipping leaves that
    # cannot hold a yield: this runs for every function of a cell, in the audit and the rewrite.
    stack: list[ast.AST] = [node.body] if isinstance(node, ast.Lambda) else list(node.body)
    pop, push = stack.pop, stack.append
    while stack:
        sub = pop()
        if isinstance(sub, (ast.Yield, ast.YieldFrom)):
            return True
        if not isinstance(sub, _OWN_SCOPES):
            push_children(sub, push)
    return False


_OWN_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.GeneratorExp)


class _Auditor(ast.NodeVisitor):
    def __init__(self, rules: StaticRules, source: str) -> None:
        self.rules = rules
        self.lines = source.splitlines()
        self.findings: list[AuditFinding] = []
        self.scopes: list[_Scope] = [_Scope("module")]
        self.bound: set[str] | None = None
        self.tree: ast.AST = ast.Module(body=[], type_ignores=[])
        self.rewrite = False

    # ---- reporting -------------------------------------------------------------------------------

    def refuse(self, node: ast.AST, rule: str, message: str) -> None:
        line = getattr(node, "lineno", None)
        column = getattr(node, "col_offset", None)
        if isinstance(node, ast.Attribute) and node.end_lineno == line and node.end_col_offset is not None:
            # point at the attribute's name, not at the start of `obj.attr`
            column = node.end_col_offset - len(node.attr.encode("utf-8"))
        source_line = self.lines[line - 1] if line and 0 < line <= len(self.lines) else None
        if source_line is not None and column is not None:
            # ast columns count UTF-8 bytes; findings count characters.
            column = len(source_line.encode("utf-8")[:column].decode("utf-8", "ignore"))
        self.findings.append(
            AuditFinding(rule=rule, message=message, line=line, column=column, source_line=source_line)
        )
        if len(self.findings) >= _MAX_FINDINGS:
            raise _Enough

    @property
    def scope(self) -> _Scope:
        return self.scopes[-1]

    # ---- dispatch --------------------------------------------------------------------------------

    def visit(self, node: ast.AST) -> None:
        kind = type(node)
        method = _DISPATCH.get(kind)
        if method is not None:
            method(self, node)
        elif kind in _REVIEWED:
            self.generic_visit(node)
        elif not isinstance(node, _OPERATOR_BASES):
            message = _UNSUPPORTED.get(kind.__name__, f"syntax '{kind.__name__}' is not reviewed")
            self.refuse(node, "syntax", f"{message} under policy '{self.rules.name}'")

    def generic_visit(self, node: ast.AST) -> None:
        # ast.NodeVisitor's version, minus generators and visits of leaves that need no review.
        push_children(node, self.visit)

    def visit_Module(self, node: ast.Module) -> None:
        self.tree = node
        self.generic_visit(node)

    def bound_names(self) -> set[str]:
        if self.bound is None:
            self.bound = bound_names([self.tree])
        return self.bound

    # ---- names -----------------------------------------------------------------------------------

    def check_name(self, node: ast.AST, raw: str, *, store: bool) -> None:
        name = nfkc(raw)
        if name.startswith("__"):
            if not store and name == "__name__":
                return
            if store and self.scope.kind == "class" and name in self.rules.class_dunder_names:
                return
            self.refuse(
                node,
                "private-name",
                f"name '{name}' is not allowed under policy '{self.rules.name}': "
                "names starting with '__' are reserved",
            )
        elif store and self.scope.kind == "class" and _is_sunder(name):
            self.refuse(
                node,
                "private-name",
                f"class attribute '{name}' is not allowed under policy '{self.rules.name}': "
                "names like _x_ are hooks of the host's libraries",
            )
        elif not store and name in self.rules.denied_builtins and name not in self.bound_names():
            message = self.rules.builtin_refusal(name)
            self.refuse(node, "builtin", f"{message} (if '{name}' is your own variable, rename it)")

    def visit_Name(self, node: ast.Name) -> None:
        name = node.id
        load = isinstance(node.ctx, ast.Load)
        # Most names: plain ASCII, no leading underscore (so NFKC leaves them alone and neither the
        # private-name nor the class-hook rule applies), and not a refused builtin when read.
        plain = type(name) is str and name.isascii() and name[:1] != "_"
        if plain and (not load or name not in self.rules.denied_builtins):
            return
        self.check_name(node, name, store=not load)

    def visit_Global(self, node: ast.Global) -> None:
        for name in node.names:
            self.check_name(node, name, store=True)

    visit_Nonlocal = visit_Global  # type: ignore[assignment]

    def visit_alias(self, node: ast.alias) -> None:
        if node.asname is not None:
            self.check_name(node, node.asname, store=True)

    # ---- attributes ------------------------------------------------------------------------------

    def visit_Attribute(self, node: ast.Attribute) -> None:
        store = not isinstance(node.ctx, ast.Load)
        attr = nfkc(node.attr)
        if store or attr in self.rules.routed:
            self.rewrite = True
        if not (not store and _is_zero_arg_super(node.value) and attr in self.rules.class_dunders):
            refusal = self.rules.attribute_refusal(attr, store=store)
            if refusal is not None:
                self.refuse(node, "attribute", refusal)
        if (
            attr in ("format", "format_map")
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            refusal = format_refusal(node.value.value, self.rules)
            if refusal is not None:
                self.refuse(node, "format", f"{refusal}")
        self.visit(node.value)

    # ---- definitions -----------------------------------------------------------------------------

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.rewrite = True
        name = nfkc(node.name)
        in_class = self.scope.kind == "class"
        if in_class and name == "__getattr__" and not _plain_getattr(node):
            self.refuse(
                node,
                "special-method",
                f"this '__getattr__' is not allowed under policy '{self.rules.name}': define it undecorated "
                "as def __getattr__(self, name) (libraries ask objects for private protocol names "
                "through it)",
            )
        if name.startswith("__"):
            if not (in_class and name in self.rules.class_dunders):
                if in_class and name.endswith("__"):
                    self.refuse(node, "special-method", self.rules.class_dunder_refusal(name))
                else:
                    self.check_name(node, name, store=True)
        elif in_class and _is_sunder(name):
            self.check_name(node, name, store=True)
        for decorator in node.decorator_list:
            self.visit(decorator)
        self.visit(node.args)
        if node.returns is not None:
            self.visit(node.returns)
        self.scopes.append(_Scope("function", generator=is_generator(node)))
        try:
            for stmt in node.body:
                self.visit(stmt)
        finally:
            self.scopes.pop()

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.visit(node.args)
        self.scopes.append(_Scope("function", generator=is_generator(node)))
        try:
            self.visit(node.body)
        finally:
            self.scopes.pop()

    def visit_arg(self, node: ast.arg) -> None:
        self.check_name(node, node.arg, store=True)
        if node.annotation is not None:
            self.visit(node.annotation)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.check_name(node, node.name, store=True)
        for decorator in node.decorator_list:
            self.visit(decorator)
        for base in node.bases:
            self.visit(base)
        for keyword in node.keywords:
            self.visit(keyword)
        self.scopes.append(_Scope("class"))
        try:
            for stmt in node.body:
                self.visit(stmt)
        finally:
            self.scopes.pop()

    def visit_keyword(self, node: ast.keyword) -> None:
        if node.arg is not None and nfkc(node.arg).startswith("__"):
            self.refuse(
                node,
                "private-name",
                f"keyword '{node.arg}' is not allowed under policy '{self.rules.name}': "
                "names starting with '__' are reserved",
            )
        self.visit(node.value)

    # ---- imports ---------------------------------------------------------------------------------

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            refusal = self.rules.import_refusal(alias.name)
            if refusal is not None:
                self.refuse(node, "import", refusal)
            self.visit_alias(alias)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or node.module is None:
            self.refuse(
                node,
                "import",
                f"relative imports are not available under policy '{self.rules.name}': "
                "import modules by their absolute name",
            )
            return
        refusal = self.rules.import_refusal(node.module)
        if refusal is not None:
            self.refuse(node, "import", refusal)
            return
        for alias in node.names:
            refusal = self.rules.imported_name_refusal(node.module, alias.name)
            if refusal is not None:
                self.refuse(node, "import", refusal)
            self.visit_alias(alias)

    # ---- control flow that could outlive the time limit --------------------------------------------

    def visit_Try(self, node: ast.Try) -> None:
        if node.finalbody and self.scope.generator:
            self.refuse(
                node,
                "generator-finally",
                f"'finally' inside a generator is not allowed under policy '{self.rules.name}': "
                "it runs when the generator is discarded, possibly later and outside the time limit; "
                "release resources outside the generator",
            )
        for stmt in node.body:
            self.visit(stmt)
        for handler in node.handlers:
            self.visit(handler)
        for stmt in node.orelse:
            self.visit(stmt)
        if node.finalbody:
            self.scope.finally_loops.append(0)
            try:
                for stmt in node.finalbody:
                    self.visit(stmt)
            finally:
                self.scope.finally_loops.pop()

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if self.scope.generator and _may_catch_generator_exit(node.type):
            self.refuse(
                node,
                "generator-except",
                f"catching {_handler_label(node.type)} inside a generator is not allowed under policy "
                f"'{self.rules.name}': the handler would run when the generator is discarded, outside "
                "the time limit; catch Exception or a narrower class",
            )
        if node.name:
            self.check_name(node, node.name, store=True)
        if node.type is not None:
            self.visit(node.type)
        for stmt in node.body:
            self.visit(stmt)

    def _loop(self, node: ast.For | ast.While) -> None:
        if isinstance(node, ast.For):
            self.visit(node.target)
            self.visit(node.iter)
        else:
            self.visit(node.test)
        loops = self.scope.finally_loops
        if loops:
            loops[-1] += 1
        try:
            for stmt in node.body:
                self.visit(stmt)
        finally:
            if loops:
                loops[-1] -= 1
        # `break` in a loop's else clause leaves the enclosing loop, not this one.
        for stmt in node.orelse:
            self.visit(stmt)

    visit_For = _loop
    visit_While = _loop

    def _exit_in_finally(self, node: ast.stmt, word: str) -> None:
        loops = self.scope.finally_loops
        if loops and (word == "return" or loops[-1] == 0):
            self.refuse(
                node,
                "finally-exit",
                f"'{word}' inside 'finally' is not allowed under policy '{self.rules.name}': "
                "it would swallow the time limit; move it after the try statement",
            )

    def visit_Return(self, node: ast.Return) -> None:
        self._exit_in_finally(node, "return")
        self.generic_visit(node)

    def visit_Break(self, node: ast.Break) -> None:
        self._exit_in_finally(node, "break")

    def visit_Continue(self, node: ast.Continue) -> None:
        self._exit_in_finally(node, "continue")

    def visit_comprehension(self, node: ast.comprehension) -> None:
        if node.is_async:
            self.refuse(
                node.target,
                "syntax",
                f"async comprehensions are not supported under policy '{self.rules.name}'",
            )
        self.generic_visit(node)

    # ---- patterns --------------------------------------------------------------------------------

    def visit_MatchClass(self, node: ast.MatchClass) -> None:
        for attr in node.kwd_attrs:
            refusal = self.rules.attribute_refusal(attr)
            if refusal is not None:
                self.refuse(node, "attribute", refusal)
        self.generic_visit(node)

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        if node.name:
            self.check_name(node, node.name, store=True)
        self.generic_visit(node)

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        if node.name:
            self.check_name(node, node.name, store=True)

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        if node.rest:
            self.check_name(node, node.rest, store=True)
        self.generic_visit(node)

    # ---- obviously huge constants ----------------------------------------------------------------

    def visit_BinOp(self, node: ast.BinOp) -> None:
        try:
            _estimate(node, self.rules)
        except _TooBig as big:
            culprit = big.node or node
            segment = ast.get_source_segment("\n".join(self.lines), culprit) or "the expression"
            self.refuse(
                culprit,
                "constant-size",
                f"{segment} is too large to compute under policy '{self.rules.name}' ({big}); "
                "use smaller numbers or a lazy approach (range, generators)",
            )
            return
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if (
            isinstance(node.func, ast.Name)
            and node.func.id == "pow"
            and len(node.args) == 2
            and not node.keywords
        ):
            fake = ast.BinOp(node.args[0], ast.Pow(), node.args[1])
            try:
                _estimate(fake, self.rules)
            except _TooBig as big:
                self.refuse(
                    node,
                    "constant-size",
                    f"this pow() is too large to compute under policy '{self.rules.name}' ({big})",
                )
                return
        self.generic_visit(node)


_DISPATCH = dispatch_table(_Auditor)


def _plain_getattr(node: ast.FunctionDef) -> bool:
    """`def __getattr__(self, name)`: the transform can make it refuse private names."""
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    return (
        not node.decorator_list
        and len(positional) == 2
        and args.vararg is None
        and args.kwarg is None
        and not args.kwonlyargs
    )


def _is_sunder(name: str) -> bool:
    return len(name) > 2 and name[0] == "_" and name[-1] == "_" and name[1] != "_" and name[-2] != "_"


def _is_zero_arg_super(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "super"
        and not node.args
        and not node.keywords
    )


def _may_catch_generator_exit(node: ast.expr | None) -> bool:
    if node is None:
        return True
    if isinstance(node, ast.Tuple):
        return any(_may_catch_generator_exit(elt) for elt in node.elts)
    return isinstance(node, ast.Name) and nfkc(node.id) in GEN_UNSAFE_EXCEPTIONS


def _handler_label(node: ast.expr | None) -> str:
    return "everything (bare except)" if node is None else (ast.unparse(node) or "it")


class _TooBig(Exception):
    node: ast.AST | None = None  # the smallest expression found too large


@dataclass
class _Est:
    bits: int | None = None  # integers: size in bits
    value: int | None = None  # integers: exact value when small
    length: int | None = None  # sequences: number of items or characters


# Values are kept exactly up to the size the compiler folds constant expressions to (128 bits), so
# what it folds into a small constant is estimated as that constant (`(0 * 2**70) * [0]` is `[]`).
_EXACT_BITS = 128


def _estimate(node: ast.expr, rules: StaticRules) -> _Est | None:
    """Size of a constant expression without computing it; raises _TooBig over the limits."""
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool):
            return _Est(bits=1, value=int(value))
        if isinstance(value, int):
            return _Est(bits=max(1, value.bit_length()), value=value)
        if isinstance(value, (str, bytes)):
            return _Est(length=len(value))
        return None
    if isinstance(node, (ast.List, ast.Tuple)):
        if any(isinstance(e, ast.Starred) for e in node.elts):
            return None
        return _Est(length=len(node.elts))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Invert)):
        inner = _estimate(node.operand, rules)
        if inner is None or inner.bits is None:
            return None
        value = inner.value
        if value is not None:
            value = (
                -value
                if isinstance(node.op, ast.USub)
                else ~value
                if isinstance(node.op, ast.Invert)
                else value
            )
        return _Est(bits=inner.bits, value=value)
    if not isinstance(node, ast.BinOp):
        return None
    try:
        return _estimate_binop(node, rules)
    except _TooBig as big:
        if big.node is None:
            big.node = node
        raise


def _estimate_binop(node: ast.BinOp, rules: StaticRules) -> _Est | None:
    left = _estimate(node.left, rules)
    right = _estimate(node.right, rules)
    if left is None or right is None:
        return None
    op = node.op
    if isinstance(op, ast.Pow) and left.bits is not None and right.bits is not None:
        if right.value is not None and right.value < 0:
            return None
        if left.value in (0, 1, -1):  # 0, 1 or -1 to any power
            if right.value is not None:
                return _Est(bits=1, value=left.value**right.value)  # what the compiler folds it to
            return _Est(bits=1, value=None if left.value == -1 else left.value)
        # log2 of the exact base when known: 10**n has n*3.32 bits, not n*4
        base_bits = math.log2(abs(left.value)) if left.value is not None else float(left.bits)
        if right.value is None:  # the exponent alone has more than _EXACT_BITS bits
            raise _TooBig(f"an exponent of about {2 ** min(right.bits, 1023):.3g} or more")
        return _int_result(math.ceil(base_bits * right.value), rules, left, right, op)
    if isinstance(op, ast.LShift) and left.bits is not None and right.value is not None and right.value >= 0:
        if left.value == 0:
            return _Est(bits=1, value=0)  # 0 << n is 0 (the compiler folds it, whatever n is)
        return _int_result(left.bits + right.value, rules, left, right, op)
    if isinstance(op, ast.Mult):
        if left.bits is not None and right.bits is not None:
            return _int_result(left.bits + right.bits, rules, left, right, op)
        seq, count = (left, right) if left.length is not None else (right, left)
        if seq.length is not None and count.bits is not None:
            if count.value is None:
                if seq.length:
                    raise _TooBig(f"about {2 ** min(count.bits, 1023):.3g} items")
                return _Est(length=0)
            length = seq.length * max(0, count.value)
            if length > rules.max_length:
                raise _TooBig(f"{length:,} items or characters; the limit is {rules.max_length:,}")
            return _Est(length=length)
        return None
    if isinstance(op, ast.Add):
        if left.length is not None and right.length is not None:
            return _Est(length=left.length + right.length)
        if left.bits is not None and right.bits is not None:
            return _int_result(max(left.bits, right.bits) + 1, rules, left, right, op)
    return None


def _int_result(bits: int, rules: StaticRules, left: _Est, right: _Est, op: ast.operator) -> _Est:
    if bits > rules.max_bits:
        digits = int(bits * math.log10(2)) + 1
        raise _TooBig(f"about {digits:,} digits; the limit is {rules.max_bits:,} bits")
    value = None
    if bits <= _EXACT_BITS and left.value is not None and right.value is not None:
        if isinstance(op, ast.Pow):
            value = left.value**right.value
        elif isinstance(op, ast.LShift):
            value = left.value << right.value
        elif isinstance(op, ast.Mult):
            value = left.value * right.value
        elif isinstance(op, ast.Add):
            value = left.value + right.value
    return _Est(bits=bits, value=value)
