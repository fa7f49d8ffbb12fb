"""Warm containers: started ahead, taken by new sessions, replaced in the background, removed on close."""

from __future__ import annotations

import time
from typing import Any

from .conftest import ENGINE_LABEL, containers


def _wait_warm(engine: Any, count: int) -> None:
    deadline = time.monotonic() + 30
    while len(engine.boundary._pool._warm) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(engine.boundary._pool._warm) == count


def test_a_new_session_takes_a_warm_container_whose_folder_becomes_its_workspace(make_engine: Any) -> None:
    engine = make_engine(policy="trusted", warm_containers=1)
    label = f"{ENGINE_LABEL}={engine.boundary.container.engine_id}"
    _wait_warm(engine, 1)
    [warm] = containers(label)
    result = engine.run("open('made.txt', 'w').write('hi')\nimport os\nos.getcwd()", session="new")
    assert (result.status, result.value) == ("ok", "'/workspace'")
    assert warm in containers(label)  # the session runs in the container that was waiting
    workspace = engine.boundary.session_workspace("new")
    assert (workspace.path / "made.txt").read_text() == "hi"
    _wait_warm(engine, 1)  # a replacement was started
    assert len(containers(label)) == 2
    assert engine.describe()["container"]["warm_containers"] == 1


def test_a_session_whose_workspace_exists_starts_cold_and_keeps_its_files(make_engine: Any) -> None:
    engine = make_engine(policy="trusted", warm_containers=1)
    _wait_warm(engine, 1)
    engine.upload("seeded", "seed.txt", b"seeded")  # the workspace exists before the first call
    result = engine.run("open('seed.txt').read()", session="seeded")
    assert (result.status, result.value) == ("ok", "'seeded'")
    assert len(engine.boundary._pool._warm) == 1  # the warm one was not used
