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


@pytest.fixture
def restricting_policy() -> str:
    """A preset whose audit refuses `import socket`; skips until one exists (only 'trusted' did at first)."""
    for name in cli._known_policies():
        try:
            with ReplEngine(policy=name) as engine:
                if not engine.audit("import socket").allowed:
                    return name
        except NotImplementedError:
            continue
    pytest.skip("no preset refuses 'import socket' yet (only the trusted policy exists)")
