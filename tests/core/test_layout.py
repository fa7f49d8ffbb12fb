"""The package's layout holds: no import cycles among its modules.

Imports are read from the source with `ast`, so nothing is imported to check them. An import inside a
function counts (a lazy import is still a dependency, and the cycle it closes is the same); one under
`if TYPE_CHECKING:` does not (it never runs: annotations only).
"""

from __future__ import annotations

import ast
from pathlib import Path

import genpark_repl_tools

PACKAGE = genpark_repl_tools.__name__
ROOT = Path(genpark_repl_tools.__file__).parent
POLICY = f"{PACKAGE}.policy"


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


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


def imports_of(module: str) -> set[str]:
    """The package's modules `module` imports (a submodule named in `from pkg import sub` counts as
    sub, not as pkg's __init__)."""
    path = MODULES[module]
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
        submodules = {f"{source}.{alias.name}" for alias in node.names} & MODULES.keys()
        targets.update(submodules if len(submodules) == len(node.names) else {source, *submodules})
    return {t for t in targets if t in MODULES and t != module}


def import_graph(modules: set[str]) -> dict[str, set[str]]:
    return {m: imports_of(m) & modules for m in modules}


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


def _in_policy(module: str) -> bool:
    return module == POLICY or module.startswith(f"{POLICY}.")


def test_the_reader_sees_the_imports_it_must() -> None:
    # The checks below are only as good as the import reader: a lazy import, a relative import of a
    # sibling and a TYPE_CHECKING-only import, each on a module known to have one.
    assert f"{PACKAGE}._observation" in imports_of(f"{PACKAGE}._models")  # inside to_observation()
    assert f"{PACKAGE}._session" in imports_of(f"{PACKAGE}._runner")
    assert f"{PACKAGE}._models" not in imports_of(f"{PACKAGE}._observation")  # annotations only
    assert f"{PACKAGE}.boundaries._subprocess._zygote" in imports_of(
        f"{PACKAGE}.boundaries._subprocess._host"
    )


def test_cycles_are_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"a", "e"}, "f": {"g"}, "g": {"f"}}
    assert cycles(graph) == [["a", "b", "c"], ["f", "g"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_outside_policy() -> None:
    assert cycles(import_graph({m for m in MODULES if not _in_policy(m)})) == []


def test_no_import_cycles_inside_policy() -> None:
    assert cycles(import_graph({m for m in MODULES if _in_policy(m)})) == []


def test_no_module_is_named_by_a_string() -> None:
    # A module path in a string goes stale silently when the module moves: derive it from the module
    # object instead. What is left is listed here, each with its owner's reason.
    allowed = {
        # owned by the rich-output work: the matplotlib backend and hook are named for matplotlib
        "_rich.py",
        "_mpl_backend.py",
        # owned by the security work: the policy's allowlist of exec callers
        "policy/_restricted.py",
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
