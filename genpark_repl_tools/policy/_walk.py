"""What the audit, the rewrite and the compiler's reading of a cell share about walking a syntax tree."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from typing import Any

from ._rules import nfkc

__all__ = ["LEAVES", "bound_names", "dispatch_table", "push_children"]

# Leaves that need no review or rewrite and bind no name: skipping them keeps the walks cheap on big cells.
LEAVES: frozenset[type] = frozenset(
    {ast.Load, ast.Store, ast.Del, ast.Constant}
    | {cls for base in (ast.operator, ast.boolop, ast.cmpop, ast.unaryop) for cls in base.__subclasses__()}
)


def push_children(node: ast.AST, push: Callable[[ast.AST], object]) -> None:
    """Hand each child of `node` that is not one of LEAVES to `push` (an explicit stack's append:
    cheaper than `ast.walk`, a generator over `iter_child_nodes`)."""
    for field in node._fields:
        value = getattr(node, field, None)
        if type(value) is list:
            for item in value:
                if isinstance(item, ast.AST) and type(item) not in LEAVES:
                    push(item)
        elif isinstance(value, ast.AST) and type(value) not in LEAVES:
            push(value)


def dispatch_table(visitor: type) -> dict[type, Any]:
    """Node type -> the visitor's `visit_<Node>` function, looked up once instead of per node."""
    return {
        getattr(ast, name[len("visit_") :]): method
        for name, method in vars(visitor).items()
        if name.startswith("visit_") and hasattr(ast, name[len("visit_") :])
    }


def bound_names(nodes: Iterable[ast.AST]) -> set[str]:
    """Every name bound, deleted or declared global/nonlocal anywhere in `nodes`, nested scopes included.

    An over-approximation on purpose: both callers only become more cautious with more names.
    """
    names: set[str] = set()
    for node in nodes:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and not isinstance(sub.ctx, ast.Load):
                names.add(nfkc(sub.id))
            elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(nfkc(sub.name))
            elif isinstance(sub, ast.arg):
                names.add(nfkc(sub.arg))
            elif isinstance(sub, ast.alias):
                names.add(nfkc(sub.asname or sub.name.partition(".")[0]))
            elif isinstance(sub, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and sub.name:
                names.add(nfkc(sub.name))
            elif isinstance(sub, ast.MatchMapping) and sub.rest:
                names.add(nfkc(sub.rest))
            elif isinstance(sub, (ast.Global, ast.Nonlocal)):
                names.update(nfkc(n) for n in sub.names)
    return names
