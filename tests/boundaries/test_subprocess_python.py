"""ReplEngine(boundary="subprocess", python=...): sessions run on another environment's interpreter, which
starts from its own paths (never this process's, whose compiled extensions are another version's)."""

from __future__ import annotations

import ast
import sys
import tempfile
from pathlib import Path

import pytest

from genpark_repl_tools import ReplEngine
from genpark_repl_tools._exceptions import BoundaryError

REPO = Path(__file__).resolve().parents[2]


def _other_version_venv() -> Path:
    """A venv of the checkout with another Python version than this one (the dev venvs of scripts/dev.py)."""
    own = f".venv-py{sys.version_info[0]}{sys.version_info[1]}"  # and its -full twin
    for name in (".venv-py312", ".venv-py313", ".venv-py310-full", ".venv-py310", ".venv-py311"):
        python = REPO / name / "bin" / "python"
        if python.exists() and not name.startswith(own):
            return python
    pytest.skip("no venv of another Python version with this package (python3 scripts/dev.py venvs)")


def test_a_session_runs_on_the_interpreter_and_packages_of_another_venv() -> None:
    python = _other_version_venv()
    engine = ReplEngine(boundary="subprocess", python=str(python), policy="trusted")
    try:
        result = engine.run(
            # C extensions of its own standard library and of its venv
            "import sys, sqlite3, decimal, pydantic_core\n"
            "(tuple(sys.version_info[:2]), sys.prefix, pydantic_core.__file__)",
            session="venv",
        )
        assert result.status == "ok", result.error
        assert result.value is not None
        version, prefix, extension = ast.literal_eval(result.value)
    finally:
        engine.close()
    assert tuple(version) != tuple(sys.version_info[:2])
    assert prefix == str(python.parent.parent)
    assert extension.startswith(prefix)


def test_an_interpreter_without_the_package_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import venv

    venv.create(tmp_path / "bare", with_pip=False)
    bare = tmp_path / "bare" / "bin" / "python"
    roots = tmp_path / "roots"
    roots.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(roots))  # where the boundary makes its workspace root
    with pytest.raises(
        BoundaryError, match=r"cannot import genpark_repl_tools .*install genpark-repl-tools=="
    ):
        ReplEngine(boundary="subprocess", python=str(bare))
    assert list(roots.iterdir()) == []  # the refused engine left no workspace root behind


def test_this_interpreter_given_by_name_is_started_as_before() -> None:
    engine = ReplEngine(boundary="subprocess", python=sys.executable)
    try:
        assert engine.run("1 + 1").value == "2"
    finally:
        engine.close()
