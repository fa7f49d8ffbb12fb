"""Release hygiene: one version source per distribution, and the versions and ranges agree.

The core's version is `genpark_repl_tools.__version__` (pyproject.toml reads it); each adapter's is the
`version` in its pyproject.toml. Runs without either framework installed: the adapters' sources are
read, not imported.
"""

from __future__ import annotations

import ast
import importlib.metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import genpark_repl_tools

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

REPO = Path(genpark_repl_tools.__file__).resolve().parent.parent
CORE = "genpark-repl-tools"
FRAMEWORKS = {
    "langchain-genpark-repl": "langchain-core",
    "llama-index-tools-genpark-repl": "llama-index-core",
}
ADAPTERS = {
    # distribution: (directory, the module that may state __version__)
    "langchain-genpark-repl": ("integrations/langchain", "langchain_genpark_repl/__init__.py"),
    "llama-index-tools-genpark-repl": (
        "integrations/llamaindex",
        "llama_index/tools/genpark_repl/__init__.py",
    ),
}


def _pyproject(directory: str) -> dict[str, Any]:
    return tomllib.loads((REPO / directory / "pyproject.toml").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _stated_version(path: Path) -> str | None:
    """The string literal assigned to `__version__` in a module's source; None if there is none or
    it is read from the installed metadata (`metadata.version(...)`), which states nothing twice."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets
        ):
            if isinstance(node.value, ast.Call):
                called = ast.unparse(node.value.func)
                assert called.endswith("version"), f"__version__ comes from {called}, not the metadata"
                return None
            assert isinstance(node.value, ast.Constant), "__version__ must be a literal or come from metadata"
            return str(node.value.value)
    return None


def _adapter_version(distribution: str) -> Version:
    directory, _ = ADAPTERS[distribution]
    return Version(_pyproject(directory)["project"]["version"])


def _installed(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def test_the_core_version_has_one_source() -> None:
    project = _pyproject(".")
    assert "version" not in project["project"], "pyproject.toml must not state the version itself"
    assert "version" in project["project"]["dynamic"]
    source = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert source == f"{genpark_repl_tools.__name__}.__version__"
    assert _stated_version(Path(genpark_repl_tools.__file__)) == genpark_repl_tools.__version__
    assert Version(genpark_repl_tools.__version__) >= Version("0.2.0")


@pytest.mark.parametrize(
    "distribution",
    [
        "langchain-genpark-repl",
        "llama-index-tools-genpark-repl",
    ],
)
def test_an_adapter_states_its_version_once(distribution: str) -> None:
    directory, module = ADAPTERS[distribution]
    project = _pyproject(directory)["project"]
    assert "version" not in project.get("dynamic", [])
    stated = _stated_version(REPO / directory / module)
    assert stated is None or Version(stated) == _adapter_version(distribution)


@pytest.mark.parametrize("distribution", sorted(ADAPTERS))
def test_an_adapter_depends_on_a_bounded_range_that_holds_this_core(distribution: str) -> None:
    directory, _ = ADAPTERS[distribution]
    requirements = {r.name: r for r in map(Requirement, _pyproject(directory)["project"]["dependencies"])}
    core = Version(genpark_repl_tools.__version__)
    for name in (CORE, FRAMEWORKS[distribution]):
        operators = {spec.operator for spec in requirements[name].specifier}
        assert ">=" in operators, f"{name}: no lower bound"
        assert "<" in operators, f"{name}: no upper bound"
    assert requirements[CORE].specifier.contains(core), f"{CORE} {core} is outside {requirements[CORE]}"
    assert _adapter_version(distribution).release[:2] == core.release[:2], "adapters follow the core's minor"


@pytest.mark.parametrize("distribution", [CORE, *sorted(ADAPTERS)])
def test_the_installed_metadata_agrees(distribution: str) -> None:
    installed = _installed(distribution)
    if installed is None:
        pytest.skip(f"{distribution} is not installed here")
    expected = (
        Version(genpark_repl_tools.__version__) if distribution == CORE else _adapter_version(distribution)
    )
    assert Version(installed) == expected, (
        f"{distribution} is installed as {installed} but the source says {expected}: reinstall it "
        "(pip install -e ...; a stale *.egg-info directory in the checkout shadows the install)"
    )


def test_the_changelog_and_license_are_there() -> None:
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    versions = {genpark_repl_tools.__version__, *(str(_adapter_version(d)) for d in ADAPTERS)}
    for version in versions:
        assert f"## {version}" in changelog
    for directory in (".", *(d for d, _ in ADAPTERS.values())):
        license_text = (REPO / directory / "LICENSE").read_text(encoding="utf-8")
        assert license_text.startswith("MIT License")
        assert _pyproject(directory)["project"]["license"] == {"text": "MIT"}
