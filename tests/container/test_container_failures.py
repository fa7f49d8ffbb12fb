"""Docker missing or failing: a clear error or a 'crashed' result within seconds, never a hang, and no
container left behind."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from genpark_repl_tools import Limits, ReplEngine
from genpark_repl_tools._exceptions import BoundaryError

from .conftest import ENGINE_LABEL, containers

QUICK_S = 10.0  # "within seconds": a hang would run into the start timeout (30 s) or forever


def engine_id(engine: ReplEngine) -> str:
    return str(engine.boundary.container.engine_id)  # type: ignore[attr-defined]


def test_an_image_that_is_not_there_is_a_clear_error_at_construction(docker_image: str) -> None:
    started = time.monotonic()
    with pytest.raises(BoundaryError, match="image 'genpark-repl-absent:0' is not on this Docker host"):
        ReplEngine(boundary="docker", image="genpark-repl-absent:0", engine_id="absent-image-test")
    assert time.monotonic() - started < QUICK_S
    assert containers(f"{ENGINE_LABEL}=absent-image-test") == []


def test_no_docker_cli_is_a_clear_error() -> None:
    with pytest.raises(BoundaryError, match=r"docker CLI .* is not installed"):
        ReplEngine(boundary="docker", image="any:1", docker="/nonexistent/docker")


def test_an_unreachable_daemon_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    started = time.monotonic()
    with pytest.raises(BoundaryError, match="Docker daemon is not reachable"):
        ReplEngine(boundary="docker", image="any:1")
    assert time.monotonic() - started < QUICK_S


def test_a_container_killed_from_outside_gives_crashed_then_a_fresh_session(make_engine: Any) -> None:
    engine = make_engine(policy="trusted", limits=Limits(timeout_s=30))
    assert engine.run("x = 1", session="k").status == "ok"
    [container] = containers(f"{ENGINE_LABEL}={engine_id(engine)}")
    # Killed while a call runs: the call must end now, not at its 30 s deadline.
    killer = subprocess.Popen(["sh", "-c", f"sleep 1; docker kill {container}"], stdout=subprocess.DEVNULL)
    started = time.monotonic()
    result = engine.run("import time\ntime.sleep(25)", session="k")
    killer.wait(QUICK_S)
    assert result.status == "crashed"
    assert time.monotonic() - started < QUICK_S
    assert result.error is not None and "its container stopped" in result.error.message, result.error
    after = engine.run("'x' in dir()", session="k")
    assert (after.status, after.value, after.session_restarted) == ("ok", "False", True)
    assert container not in containers(f"{ENGINE_LABEL}={engine_id(engine)}")


def test_an_image_with_another_package_version_is_refused_by_name(docker_image: str, tmp_path: Path) -> None:
    """The worker in the image must speak this host's protocol: an image whose package differs by one
    line of source is refused when its container starts, with what to do."""
    tag = "genpark-repl-test-mismatch:latest"
    (tmp_path / "Dockerfile").write_text(
        f"FROM {docker_image}\n"
        'RUN sh -c \'echo "# changed" >> "$(python3 -c "import genpark_repl_tools._text as m; '
        'print(m.__file__)")"\'\n'
    )
    subprocess.run(
        ["docker", "build", "--network", "none", "--quiet", "--tag", tag, str(tmp_path)],
        check=True,
        capture_output=True,
        env={**os.environ, "DOCKER_BUILDKIT": "0"},
        timeout=300,
    )
    try:
        engine = ReplEngine(boundary="docker", image=tag, engine_id="mismatch-test")
        try:
            with pytest.raises(BoundaryError, match=r"protocol mismatch: .*rebuild the image"):
                engine.run("1", session="m")
        finally:
            engine.close()
        assert containers(f"{ENGINE_LABEL}=mismatch-test") == []
    finally:
        subprocess.run(["docker", "image", "rm", tag], capture_output=True, check=False)


def test_close_removes_every_container_the_engine_started(make_engine: Any) -> None:
    engine = make_engine()
    for session in ("one", "two"):
        assert engine.run("1 + 1", session=session).status == "ok"
    assert len(containers(f"{ENGINE_LABEL}={engine_id(engine)}")) == 2
    engine.close()
    assert containers(f"{ENGINE_LABEL}={engine_id(engine)}") == []


def test_closing_a_session_removes_its_container(make_engine: Any) -> None:
    engine = make_engine()
    assert engine.run("1", session="gone").status == "ok"
    assert engine.run("1", session="stays").status == "ok"
    engine.close("gone")
    left = containers(f"{ENGINE_LABEL}={engine_id(engine)}")
    assert len(left) == 1 and containers("genpark-repl.session=gone") == []


def _orphan(image: str, *labels: str) -> str:
    command = ["docker", "run", "-d", "--rm", "--network", "none"]
    for label in labels:
        command += ["--label", label]
    command += [image, "python3", "-c", "import time; time.sleep(120)"]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()


def test_a_later_engine_removes_containers_of_a_crashed_one(docker_image: str) -> None:
    """After a host crash: containers of this machine whose engine process is gone are removed, as are
    those of an earlier engine with the same engine_id; another live engine's stay."""
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], check=True, capture_output=True, text=True
    )
    host = socket.gethostname()
    crashed = _orphan(
        docker_image,
        f"{ENGINE_LABEL}=crashed-engine",
        f"genpark-repl.host={host}",
        f"genpark-repl.pid={dead.stdout}",
    )
    same_id = _orphan(
        docker_image, f"{ENGINE_LABEL}=reborn", f"genpark-repl.host={host}", f"genpark-repl.pid={os.getpid()}"
    )
    alive = _orphan(
        docker_image, f"{ENGINE_LABEL}=living", f"genpark-repl.host={host}", f"genpark-repl.pid={os.getpid()}"
    )
    try:
        ReplEngine(boundary="docker", image=docker_image, engine_id="reborn").close()
        remaining = containers(ENGINE_LABEL)
        assert crashed[:12] not in {c[:12] for c in remaining}
        assert same_id[:12] not in {c[:12] for c in remaining}
        assert alive[:12] in {c[:12] for c in remaining}
    finally:
        subprocess.run(["docker", "rm", "--force", crashed, same_id, alive], capture_output=True, check=False)
