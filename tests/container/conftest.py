"""Docker for the container boundary's tests: a daemon, the base image and the test image, set up once.

scripts/docker_env.py does the work (installing docker.io, starting a daemon, building the images) and
skips what is already done, so after the first run on a machine this takes about a second. Without
Docker the tests skip here; under CI (the CI environment variable set) they fail instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
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


@pytest.fixture(scope="session")
def docker_image() -> str:
    try:
        done = subprocess.run(
            [sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=900, check=False
        )
        reason = done.stderr[-3000:]
        image = json.loads(done.stdout.strip().splitlines()[-1])["test_image"] if done.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError, KeyError) as exc:
        image, reason = "", f"{type(exc).__name__}: {exc}"
    if not image:
        message = f"Docker could not be set up for the container boundary's tests: {reason}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return str(image)


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
