"""The container settings, each checked from inside a session (and against Docker's own record)."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from genpark_repl_tools import Limits, ReplEngine

from .conftest import ENGINE_LABEL, PROBE_MODULE, containers

MEMORY_MB = 300


@pytest.fixture(scope="module")
def engine(docker_image: str) -> Iterator[ReplEngine]:
    """One engine for the module (each session costs a container start); trusted, so that the code can
    try what the container must refuse: the policy is not what stops it here."""
    engine = ReplEngine(
        boundary="docker",
        image=docker_image,
        policy="trusted",
        limits=Limits(timeout_s=20, memory_mb=MEMORY_MB),
    )
    yield engine
    engine_id = engine.boundary.container.engine_id  # type: ignore[attr-defined]
    engine.close()
    assert containers(f"{ENGINE_LABEL}={engine_id}") == []


def value(engine: ReplEngine, code: str, session: str = "s") -> Any:
    result = engine.run(code, session=session)
    assert result.status == "ok", result.error
    assert result.value is not None
    return ast.literal_eval(result.value)


def inspect(engine: ReplEngine, session: str) -> dict[str, Any]:
    engine_id = engine.boundary.container.engine_id  # type: ignore[attr-defined]
    ids = containers(f"{ENGINE_LABEL}={engine_id}")
    records = json.loads(
        subprocess.run(["docker", "inspect", *ids], capture_output=True, text=True, check=True).stdout
    )
    mine = [r for r in records if r["Config"]["Labels"].get("genpark-repl.session") == session]
    assert len(mine) == 1, [r["Config"]["Labels"] for r in records]
    return dict(mine[0])


def test_the_only_network_interface_is_loopback(engine: ReplEngine) -> None:
    assert value(engine, "import socket\n[name for _, name in socket.if_nameindex()]") == ["lo"]
    devices = value(engine, "[line.split(':')[0].strip() for line in open('/proc/net/dev').readlines()[2:]]")
    assert devices == ["lo"]
    assert inspect(engine, "s")["HostConfig"]["NetworkMode"] == "none"


def test_the_session_runs_as_an_unprivileged_user(engine: ReplEngine) -> None:
    uid, gid, caps = value(
        engine,
        "import os\n"
        "caps = [l.split()[1] for l in open('/proc/self/status') if l.startswith(('CapEff', 'CapPrm'))]\n"
        "(os.getuid(), os.getgid(), caps)",
    )
    assert (uid, gid) == (65534, 65534)
    assert caps == ["0000000000000000", "0000000000000000"]
    config = inspect(engine, "s")
    assert config["Config"]["User"] == "65534:65534"
    assert config["HostConfig"]["CapDrop"] == ["ALL"]


WRITE = (
    "import errno\n"
    "def attempt(path):\n"
    "    try:\n"
    "        with open(path, 'w') as f:\n"
    "            f.write('x')\n"
    "    except OSError as exc:\n"
    "        return errno.errorcode.get(exc.errno, str(exc.errno))\n"
    "    return 'written'\n"
)


@pytest.mark.parametrize(
    "path", ["/etc/genpark-test", "/genpark-test", "/opt/genpark-test", "/tmp/genpark-test"]
)
def test_a_write_outside_the_workspace_is_refused(engine: ReplEngine, path: str) -> None:
    outcome = value(engine, WRITE + f"attempt({path!r})")
    assert outcome in ("EACCES", "EROFS", "EPERM"), outcome


def test_the_workspace_is_writable_and_is_the_session_folder_on_the_host(engine: ReplEngine) -> None:
    assert value(engine, WRITE + "import os\n(attempt('/workspace/kept.txt'), os.getcwd())") == (
        "written",
        "/workspace",
    )
    workspace = engine.boundary.session_workspace("s")
    assert workspace is not None
    assert (workspace.path / "kept.txt").read_text() == "x"
    assert inspect(engine, "s")["HostConfig"]["ReadonlyRootfs"] is True


def test_the_memory_limit_is_hit_and_reported(engine: ReplEngine) -> None:
    result = engine.run(f"block = bytearray({MEMORY_MB * 2} * 1024 * 1024)", session="mem")
    assert result.status == "error" and result.error is not None
    assert result.error.type == "MemoryError"
    # The container's own cap: the session's memory plus the zygote's headroom, and no swap beyond it.
    config = inspect(engine, "mem")["HostConfig"]
    assert config["Memory"] == config["MemorySwap"] == (MEMORY_MB + 128) * 1024 * 1024
    assert engine.describe()["container"]["memory_mb"] == MEMORY_MB + 128
    # The session lives on: the allocation failed, the worker did not.
    assert value(engine, "len(bytearray(1024))", session="mem") == 1024


def test_process_count_and_cpu_are_capped(engine: ReplEngine) -> None:
    config = inspect(engine, "s")["HostConfig"]
    assert config["PidsLimit"] == 256
    assert config["NanoCpus"] == 1_000_000_000


def test_two_sessions_run_in_two_containers_that_cannot_see_each_other(engine: ReplEngine) -> None:
    host_a = value(engine, "import socket\nopen('mine.txt', 'w').write('a')\nsocket.gethostname()", "a")
    host_b, seen = value(engine, "import os, socket\n(socket.gethostname(), sorted(os.listdir('.')))", "b")
    assert host_a != host_b
    assert "mine.txt" not in seen
    a, b = inspect(engine, "a"), inspect(engine, "b")
    assert a["Id"] != b["Id"]
    # What each has of the host: its own workspace (and the directory of its control socket, read-only).
    folders = {name: engine.boundary.session_workspace(name) for name in ("a", "b")}
    for record, name in ((a, "a"), (b, "b")):
        mounts = {m["Destination"]: (m["Source"], m["RW"]) for m in record["Mounts"]}
        assert mounts["/workspace"] == (str(folders[name].path), True)  # type: ignore[union-attr]
        assert set(mounts) == {"/workspace", "/run/genpark"} and mounts["/run/genpark"][1] is False


def test_a_package_only_in_the_image_imports_in_a_session(engine: ReplEngine) -> None:
    assert importlib.util.find_spec(PROBE_MODULE) is None  # not on this host
    assert value(engine, f"import {PROBE_MODULE}\n{PROBE_MODULE}.WHERE") == "image"


def test_describe_reports_the_container_settings(engine: ReplEngine, docker_image: str) -> None:
    container = engine.describe()["container"]
    assert container["image"] == docker_image
    assert (container["network"], container["read_only_root"], container["user"]) == (
        "none",
        True,
        "65534:65534",
    )
    assert container["pids_limit"] == 256 and container["workspace"] == "/workspace"
    assert engine.describe()["enforced"]["privileges"].startswith("the container's user (65534:65534)")
