"""The package's layout holds: no import cycles among its modules, subpackages included.

Imports are read from the source with `ast`, so nothing is imported to check them. An import inside a
function counts (a lazy import is still a dependency, and the cycle it closes is the same); one under
`if TYPE_CHECKING:` does not (it never runs: annotations only).
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

import genpark_repl_tools

PACKAGE = genpark_repl_tools.__name__
ROOT = Path(genpark_repl_tools.__file__).parent


def _modules(root: Path) -> dict[str, Path]:
    """Module name -> file, for the package whose directory is `root`."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = _modules(ROOT)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
        else:
            stack.extend(ast.iter_child_nodes(node))
    return found


def imports_of(module: str, modules: dict[str, Path] = MODULES) -> set[str]:
    """The package's modules `module` imports (a submodule named in `from pkg import sub` counts as
    sub, not as pkg's __init__)."""
    path = modules[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        if node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        submodules = {f"{source}.{alias.name}" for alias in node.names} & modules.keys()
        targets.update(submodules if len(submodules) == len(node.names) else {source, *submodules})
    return {t for t in targets if t in modules and t != module}


def import_graph(modules: dict[str, Path] = MODULES) -> dict[str, set[str]]:
    return {m: imports_of(m, modules) for m in modules}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_the_reader_sees_the_imports_it_must() -> None:
    # The checks below are only as good as the import reader: a lazy import, a relative import of a
    # sibling and a TYPE_CHECKING-only import, each on a module known to have one.
    assert f"{PACKAGE}._observation" in imports_of(f"{PACKAGE}._models")  # inside to_observation()
    assert f"{PACKAGE}._session" in imports_of(f"{PACKAGE}._runner")
    assert f"{PACKAGE}._models" not in imports_of(f"{PACKAGE}._observation")  # annotations only
    assert f"{PACKAGE}.boundaries._subprocess._zygote" in imports_of(
        f"{PACKAGE}.boundaries._subprocess._spawn"
    )


def test_the_reader_counts_deferred_imports_and_not_type_only_ones() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ._x import X\nelse:\n    from ._w import w\n"
        "def f():\n    from ._y import y\n"
        "from . import _z\n"
    )
    found = [(n.module if isinstance(n, ast.ImportFrom) else None) or n.names[0].name for n in _imports(tree)]
    assert sorted(found) == ["_w", "_y", "_z", "typing"]


def test_cycles_are_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"a", "e"}, "f": {"g"}, "g": {"f"}}
    assert cycles(graph) == [["a", "b", "c"], ["f", "g"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    graph = import_graph()
    assert f"{PACKAGE}.policy._audit" in graph and f"{PACKAGE}._compile" in graph  # policy included
    assert cycles(graph) == []


@pytest.mark.parametrize(
    ("module", "planted"),
    [
        # a lazy import across the package boundary closes a cycle with _compile
        ("policy/_walk.py", "def _late():\n    from .._compile import parse\n"),
        # an absolute import inside policy closes one within it
        ("policy/_rules.py", "import genpark_repl_tools.policy._walk\n"),
    ],
)
def test_a_planted_cycle_fails_the_check(tmp_path: Path, module: str, planted: str) -> None:
    copy = tmp_path / PACKAGE
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert cycles(import_graph(_modules(copy))) == cycles(import_graph())  # the copy reads the same
    with (copy / module).open("a", encoding="utf-8") as file:
        file.write(planted)
    found = cycles(import_graph(_modules(copy)))
    changed = module.removesuffix(".py").replace("/", ".")
    assert any(f"{PACKAGE}.{changed}" in group for group in found), found


def test_the_presets_live_apart_from_the_model() -> None:
    from genpark_repl_tools.policy import _model, _presets

    # The presets' data is defined in _presets; the model only uses it.
    assert _model.Policy.strict().builtins == _presets.STRICT_BUILTINS
    assert "STDLIB_RULES" not in vars(_model) or vars(_model)["STDLIB_RULES"] is _presets.STDLIB_RULES


def test_no_module_is_named_by_a_string() -> None:
    # A module path in a string goes stale silently when the module moves: derive it from the module
    # object instead. What is left is listed here, each with its owner's reason.
    allowed = {
        # owned by the rich-output work: the matplotlib backend and hook are named for matplotlib
        "_rich.py",
        "_mpl_backend.py",
    }
    offenders = []
    for module, path in MODULES.items():
        relative = path.relative_to(ROOT).as_posix()
        if relative in allowed:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and f"{PACKAGE}." in node.value
            ):
                offenders.append(f"{module}:{node.lineno}: {node.value[:80]!r}")
    assert offenders == []
