"""Helpers for the container boundary's tests. The `docker_image` fixture (a daemon, the base image and
the test image, set up once by scripts/docker_env.py) is in tests/conftest.py, shared with the CLI's."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from genpark_repl_tools import ReplEngine

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "docker_env.py"
# The module the test image holds and this host does not (scripts/docker_env.py writes it).
PROBE_MODULE = "genpark_image_probe"
# Labels every container of the boundary carries.
ENGINE_LABEL = "genpark-repl.engine"


def containers(label: str) -> list[str]:
    """Ids of the containers (running or not) carrying this label (KEY or KEY=VALUE)."""
    out = subprocess.run(
        ["docker", "ps", "--all", "--quiet", "--filter", f"label={label}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    return out.split()


@pytest.fixture
def make_engine(docker_image: str) -> Iterator[Any]:
    """make_engine(**ReplEngine kwargs) on the container boundary; closes each engine and checks that
    none left a container behind."""
    engines: list[ReplEngine] = []

    def make(**kwargs: Any) -> ReplEngine:
        kwargs.setdefault("image", docker_image)
        engines.append(ReplEngine(boundary="docker", **kwargs))
        return engines[-1]

    yield make
    for engine in engines:
        engine.close()
    for engine in engines:
        engine_id = engine.boundary.container.engine_id  # type: ignore[attr-defined]
        assert containers(f"{ENGINE_LABEL}={engine_id}") == []
