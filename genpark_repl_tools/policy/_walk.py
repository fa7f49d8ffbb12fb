"""What the audit and the rewrite share about walking a syntax tree."""

from __future__ import annotations

import ast
from typing import Any

__all__ = ["LEAVES", "dispatch_table"]

# Leaves that need no review or rewrite: skipping them keeps both walks cheap on big cells.
LEAVES: frozenset[type] = frozenset(
    {ast.Load, ast.Store, ast.Del, ast.Constant}
    | {cls for base in (ast.operator, ast.boolop, ast.cmpop, ast.unaryop) for cls in base.__subclasses__()}
)


def dispatch_table(visitor: type) -> dict[type, Any]:
    """Node type -> the visitor's `visit_<Node>` function, looked up once instead of per node."""
    return {
        getattr(ast, name[len("visit_") :]): method
        for name, method in vars(visitor).items()
        if name.startswith("visit_") and hasattr(ast, name[len("visit_") :])
    }
