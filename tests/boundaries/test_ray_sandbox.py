"""The subprocess boundary's sandbox checks, run in Ray sessions that have a store.

A store-backed Ray session once ran in-process in its node's host actor (root, the node's network);
these are the checks of tests/boundaries/test_subprocess_sandbox.py that run from inside a session,
imported as they are and given Ray engines with a store as their `engine` and `limited` fixtures.
Left out: the checks of what a crash leaves behind (with a store the session comes back from it;
test_ray_store.py covers that) and those that build a local engine of their own.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _ray_cluster import NODE_ARGS, ray
from ray.cluster_utils import Cluster
from test_subprocess_sandbox import (  # noqa: F401 (the tests and fixtures pytest collects here)
    TIMEOUT_S,
    listener,
    open_dir,
    test_a_crash_kills_what_the_worker_started,
    test_a_timeout_kills_the_whole_process_tree,
    test_file_size_limit,
    test_host_unix_sockets_are_unreachable,
    test_in_process_pipes_still_work,
    test_limits_cannot_be_raised_by_the_code,
    test_loopback_listener_on_the_host_is_unreachable,
    test_memory_bomb_is_refused,
    test_memory_limit_is_reported,
    test_open_files_limit,
    test_pure_python_timeout_keeps_the_worker,
    test_reads_outside_system_paths_fail,
    test_the_host_cannot_be_signalled,
    test_the_process_group_cannot_be_left,
    test_writes_inside_the_workspace_work,
    test_writes_outside_the_workspace_fail,
)

from genpark_repl_tools import Limits, Policy, ReplEngine
from genpark_repl_tools.boundaries.ray import RayBoundary
from genpark_repl_tools.stores.sqlite import SQLiteStore

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox tests")

KEY = "ray-sandbox-test-key-0123456789"
STORES: dict[str, Path] = {}  # each engine fixture's store file


@pytest.fixture(scope="module")
def one_node() -> Iterator[Cluster]:
    cluster = Cluster(initialize_head=True, head_node_args={**NODE_ARGS, "include_dashboard": False})
    try:
        ray.init(address=cluster.address, namespace="genpark-repl", log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def _engine(path: Path, limits: Limits, **options: Any) -> ReplEngine:
    boundary = RayBoundary(
        Policy.preset("trusted"),
        limits,
        store=lambda: SQLiteStore(path),
        snapshot_key=KEY,
        **options,
    )
    return ReplEngine(boundary=boundary)


# As in test_subprocess_sandbox: checkpoints off, limits the same.
@pytest.fixture(scope="module")
def engine(one_node: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplEngine]:
    path = STORES["engine"] = tmp_path_factory.mktemp("ray-store") / "sessions.db"
    with _engine(path, Limits(timeout_s=TIMEOUT_S), checkpoints=False) as engine:
        yield engine


@pytest.fixture(scope="module")
def limited(one_node: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplEngine]:
    path = tmp_path_factory.mktemp("ray-store-limited") / "sessions.db"
    limits = Limits(timeout_s=5, memory_mb=768, max_open_files=64, max_file_size_mb=1)
    with _engine(path, limits) as engine:
        yield engine


def test_the_sessions_run_on_ray_and_are_saved(engine: ReplEngine, limited: ReplEngine) -> None:
    # What makes the imported checks mean something here.
    for each in (engine, limited):
        result = each.run("saved = 1", session="which")
        assert (result.status, result.boundary) == ("ok", "ray")
    with SQLiteStore(STORES["engine"]) as store:  # no checkpoints: saved after each call
        assert store.get("which") is not None


def test_describe_says_what_every_node_enforces(limited: ReplEngine) -> None:
    # The imported checks skip a protection describe() says is off: on Ray it must say what a local
    # subprocess boundary with the same limits says on this machine, so they skip only where the
    # local ones do.
    description = limited.describe()
    nodes = list(description["nodes"].values())
    assert len(nodes) == 1
    assert (description["enforced"], description["unavailable"]) == (
        nodes[0]["enforced"],
        nodes[0]["unavailable"],
    )
    with ReplEngine(policy="trusted", boundary="subprocess", limits=limited.limits) as local:
        assert description["enforced"] == local.describe()["enforced"]


def test_a_protection_one_node_lacks_is_not_claimed() -> None:
    from genpark_repl_tools.boundaries.ray import _everywhere

    full = {"enforced": {"network_isolation": "netns", "memory_limit": "768 MiB"}, "unavailable": {}}
    lacking = {
        "enforced": {"network_isolation": False, "memory_limit": "1024 MiB"},
        "unavailable": {"network_isolation": "no user namespaces"},
    }
    assert _everywhere([full, lacking]) == (
        {"network_isolation": False, "memory_limit": "differs by node (see nodes)"},
        {"network_isolation": "no user namespaces"},
    )
    assert _everywhere([full, full]) == (full["enforced"], {})


def test_a_session_cannot_reach_its_hosts_lane(engine: ReplEngine) -> None:
    # The lane runs code in any session of its host for whoever presents its token; the sessions
    # themselves must not even reach it (the driver does: its calls here take the lane).
    from test_subprocess_sandbox import _require

    _require(engine, "network_isolation")
    engine.run("1", session="lane")
    node = engine.boundary.describe()["placement"]["lane"]
    host = engine.boundary._hosts[node]  # type: ignore[attr-defined]
    path, _ = ray.get(host.lane.remote())
    code = f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({path!r})"
    result = engine.run(code, session="lane")
    assert result.error is not None and result.error.type == "PermissionError"
    assert engine.describe()["nodes"][node]["lane_calls"] >= 2
