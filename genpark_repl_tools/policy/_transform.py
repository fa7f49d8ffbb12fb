"""The AST rewrite applied after the audit: route the few constructs static checks cannot decide.

Only rare constructs are rewritten, so ordinary code (loops, arithmetic, calls, attribute reads,
`self.x = ...` in methods) compiles to the same bytecode as without a policy:

* attribute reads whose name is in the policy's `routed` list (`x.format`, `x.register`, ...);
* attribute writes and deletes, except on a function's own parameters (`self.x = v`), which are
  checked once when the function starts (one set lookup for the session's own instances);
* in generators: `except` clauses and `with` blocks, which could otherwise run code when the
  generator is discarded later;
* `__getattr__` methods, which must not answer private names (libraries probe `__array_interface__`).

A cell with none of these compiles unchanged: the session's own per-session state (decimal's
context, numpy's settings) is switched by the runtime when the execution starts, not by the cell.

Every inserted name starts with `__repl_`, which the audit refuses in user code, so user code cannot
shadow or call the guards.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from ._audit import NEEDS_REWRITE, format_refusal, is_generator
from ._rules import StaticRules, nfkc
from ._walk import LEAVES, bound_names, dispatch_table

__all__ = ["GUARD_NAMES", "transform"]

ATTR = "__repl_attr__"
SETATTR = "__repl_setattr__"
TARGET = "__repl_target__"
TYPE = "__repl_type__"
OWNED = "__repl_owned__"
CHECK_TARGET = "__repl_check_target__"
GETATTR_NAME = "__repl_getattr_name__"
GEN_EXC = "__repl_gen_exc__"
GEN_CM = "__repl_gen_cm__"

GUARD_NAMES = (ATTR, SETATTR, TARGET, TYPE, OWNED, CHECK_TARGET, GETATTR_NAME, GEN_EXC, GEN_CM)


@dataclass
class _Scope:
    kind: str  # "module" | "function" | "class"
    native: frozenset[str] = frozenset()
    generator: bool = False
    stored: set[str] = field(default_factory=set)


def transform(tree: ast.Module, rules: StaticRules) -> ast.Module:
    if getattr(tree, NEEDS_REWRITE, True):
        _Rewriter(rules).generic_visit(tree)
    return tree


_LOCATION = ("lineno", "col_offset", "end_lineno", "end_col_offset")


def _place(new: ast.AST, old: ast.AST) -> None:
    """Give `new` and the nodes built with it `old`'s location (cheaper than fix_missing_locations)."""
    where = [getattr(old, attr, None) for attr in _LOCATION]
    if where[0] is None:
        where = [1, 0, 1, 0]
    stack = [new]
    while stack:
        node = stack.pop()
        if "lineno" in node._attributes:
            if getattr(node, "lineno", None) is not None:
                continue  # an original node: it and everything below it are placed already
            for attr, value in zip(_LOCATION, where, strict=True):
                setattr(node, attr, value)
        stack.extend(ast.iter_child_nodes(node))


def _call(name: str, node: ast.AST, *args: ast.expr) -> ast.Call:
    call = ast.Call(ast.Name(name, ast.Load()), list(args), [])
    _place(call, node)
    return call


def _const(value: str, node: ast.AST) -> ast.Constant:
    return ast.copy_location(ast.Constant(value), node)


def _is_simple(node: ast.expr) -> bool:
    """A name or a chain of attribute reads: evaluating it has no visible side effect."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _params(args: ast.arguments) -> list[str]:
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    if args.vararg:
        names.append(args.vararg.arg)
    if args.kwarg:
        names.append(args.kwarg.arg)
    return [nfkc(n) for n in names]


def _docstring_end(body: list[ast.stmt]) -> int:
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        return 1 if isinstance(body[0].value.value, str) else 0
    return 0


class _Rewriter:
    """Rewrites in place; most nodes are only walked through (no copies, no location fixing)."""

    def __init__(self, rules: StaticRules) -> None:
        self.rules = rules
        self.scopes: list[_Scope] = [_Scope("module")]

    @property
    def scope(self) -> _Scope:
        return self.scopes[-1]

    def visit(self, node: Any) -> Any:
        method = _DISPATCH.get(type(node))
        if method is not None:
            return method(self, node)
        self.generic_visit(node)
        return node

    def generic_visit(self, node: ast.AST) -> ast.AST:
        for name in node._fields:
            value = getattr(node, name, None)
            if type(value) is list:
                for i, item in enumerate(value):
                    if isinstance(item, ast.AST) and type(item) not in _LEAVES:
                        new = self.visit(item)
                        if new is not item:
                            value[i] = new
            elif isinstance(value, ast.AST) and type(value) not in _LEAVES:
                new = self.visit(value)
                if new is not value:
                    setattr(node, name, new)
        return node

    # ---- scopes ----------------------------------------------------------------------------------

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        in_class = self.scope.kind == "class"
        node.decorator_list = [self.visit(d) for d in node.decorator_list]
        node.args = self.visit(node.args)
        if node.returns is not None:
            node.returns = self.visit(node.returns)
        params = _params(node.args)
        native = frozenset(params) - bound_names(node.body)
        scope = _Scope("function", native=native, generator=is_generator(node))
        self.scopes.append(scope)
        try:
            body: list[ast.stmt] = [self.visit(stmt) for stmt in node.body]
        finally:
            self.scopes.pop()
        prologue: list[ast.stmt] = []
        # Writes to these parameters stay native; check once, when the function starts, that none is
        # a host class, module or function (a method can be called unbound with any first argument).
        # Instances of the session's own classes (the usual `self`) pass with one set lookup.
        # Special methods need no check: code cannot reach them unbound (their names are private),
        # so Python only ever calls them with an instance of their class.
        # (A decorator could hand the raw function out, so decorated ones keep the check.)
        special = (
            in_class and node.name.startswith("__") and node.name.endswith("__") and not node.decorator_list
        )
        for name in [] if special else sorted(scope.stored):
            test = ast.Compare(
                _call(TYPE, node, ast.Name(name, ast.Load())), [ast.NotIn()], [ast.Name(OWNED, ast.Load())]
            )
            check = ast.Expr(_call(CHECK_TARGET, node, ast.Name(name, ast.Load())))
            guard = ast.If(test, [check], [])
            _place(guard, node)
            prologue.append(guard)
        if in_class and nfkc(node.name) == "__getattr__" and len(params) >= 2:
            check = ast.Expr(_call(GETATTR_NAME, node, ast.Name(params[1], ast.Load())))
            _place(check, node)
            prologue.append(check)
        start = _docstring_end(body)
        node.body = body[:start] + prologue + body[start:]
        return node

    def visit_Lambda(self, node: ast.Lambda) -> ast.Lambda:
        node.args = self.visit(node.args)
        self.scopes.append(_Scope("function", generator=is_generator(node)))
        try:
            node.body = self.visit(node.body)
        finally:
            self.scopes.pop()
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        node.decorator_list = [self.visit(d) for d in node.decorator_list]
        node.bases = [self.visit(b) for b in node.bases]
        node.keywords = [self.visit(k) for k in node.keywords]
        self.scopes.append(_Scope("class"))
        try:
            node.body = [self.visit(stmt) for stmt in node.body]
        finally:
            self.scopes.pop()
        return node

    # ---- attributes ------------------------------------------------------------------------------

    def _native_target(self, node: ast.Attribute) -> bool:
        value = node.value
        if isinstance(value, ast.Name) and nfkc(value.id) in self.scope.native:
            self.scope.stored.add(nfkc(value.id))
            return True
        return False

    def visit_Attribute(self, node: ast.Attribute) -> ast.expr:
        node.value = self.visit(node.value)
        attr = nfkc(node.attr)
        if isinstance(node.ctx, ast.Load):
            if attr not in self.rules.routed:
                return node
            if (
                attr in ("format", "format_map")
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
                and format_refusal(node.value.value, self.rules) is None
            ):
                return node  # a literal format string the audit has read: nothing to check later
            return _call(ATTR, node, node.value, _const(attr, node))
        if self._native_target(node):
            return node
        proxy = _call(TARGET, node, node.value, _const(attr, node))
        return ast.copy_location(ast.Attribute(proxy, "value", node.ctx), node)

    def visit_Constant(self, node: ast.Constant) -> ast.Constant:
        return node

    def visit_Assign(self, node: ast.Assign) -> ast.stmt:
        target = node.targets[0] if len(node.targets) == 1 else None
        if (
            isinstance(target, ast.Attribute)
            and _is_simple(target.value)
            and not (isinstance(target.value, ast.Name) and nfkc(target.value.id) in self.scope.native)
        ):
            obj = self.visit(target.value)
            value = self.visit(node.value)
            call = _call(SETATTR, node, obj, _const(nfkc(target.attr), node), value)
            return ast.copy_location(ast.Expr(call), node)
        self.generic_visit(node)
        return node

    def visit_arguments(self, node: ast.arguments) -> ast.arguments:
        self.generic_visit(node)
        return node

    # ---- generators ------------------------------------------------------------------------------

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> ast.ExceptHandler:
        self.generic_visit(node)
        if self.scope.generator and node.type is not None:
            node.type = _call(GEN_EXC, node.type, node.type)
        return node

    def visit_With(self, node: ast.With) -> ast.With:
        self.generic_visit(node)
        if self.scope.generator:
            for item in node.items:
                item.context_expr = _call(GEN_CM, item.context_expr, item.context_expr)
        return node


_LEAVES = LEAVES
_DISPATCH = dispatch_table(_Rewriter)
