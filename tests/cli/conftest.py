from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from genpark_repl_tools import ReplEngine, cli

WriteScript = Callable[..., str]


@pytest.fixture
def write_script(tmp_path: Path) -> WriteScript:
    """Write code to a file in tmp_path and return its path as the CLI takes it."""

    def write(code: str, name: str = "job.py") -> str:
        path = tmp_path / name
        path.write_text(code, encoding="utf-8")
        return str(path)

    return write


@pytest.fixture(params=["strict", "standard"])
def restricting_policy(request: pytest.FixtureRequest) -> str:
    """A preset whose audit refuses `import socket`: each restricting preset in turn."""
    name: str = request.param
    assert name in cli._known_policies()
    with ReplEngine(boundary="inprocess", policy=name) as engine:
        assert not engine.audit("import socket").allowed
    return name
