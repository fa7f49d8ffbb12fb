"""The policy package imports as a tree: no module needs one that needs it back.

Every import counts, deferred ones inside functions included; only `if TYPE_CHECKING:` blocks are
left out (they never run).
"""

from __future__ import annotations

import ast
from pathlib import Path

import genpark_repl_tools.policy

PACKAGE = Path(genpark_repl_tools.policy.__file__).parent


def _imports(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)  # the body is type-only: it never runs
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module)
            else:
                found.update(alias.name for alias in node.names)
        stack.extend(ast.iter_child_nodes(node))
    return found


def graph(package: Path) -> dict[str, set[str]]:
    modules = {path.stem for path in package.glob("*.py")}
    return {
        path.stem: _imports(ast.parse(path.read_text())) & modules for path in sorted(package.glob("*.py"))
    }


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                found.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return found


def test_the_policy_package_has_no_import_cycles() -> None:
    edges = graph(PACKAGE)
    assert "_model" in edges and "_guards" in edges
    assert cycles(edges) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]


def test_deferred_imports_count_and_type_only_ones_do_not() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ._x import X\n"
        "def f():\n    from ._y import y\n"
        "from . import _z\n"
    )
    assert _imports(tree) == {"_y", "_z"}


def test_the_presets_live_apart_from_the_model() -> None:
    from genpark_repl_tools.policy import _model, _presets

    assert _model.Policy.strict().builtins == _presets.STRICT_BUILTINS
    assert "STDLIB_RULES" not in vars(_model) or vars(_model)["STDLIB_RULES"] is _presets.STDLIB_RULES
