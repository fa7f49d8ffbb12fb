"""With a session store, a session whose node is lost comes back on another node from the store.

The store is SQLite on a path every node can reach (all nodes of the local cluster share this machine).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _ray_cluster import ray, ray_cluster_fixture, session_on_added_node  # noqa: F401 (the ray_cluster fixture)

from genpark_repl_tools import Limits, Policy, ReplEngine
from genpark_repl_tools.boundaries.ray import RayBoundary
from genpark_repl_tools.stores.sqlite import SQLiteStore

WAIT_S = 60.0
KEY = "ray-store-test-key-0123456789"


@pytest.fixture
def durable(ray_cluster: Any, tmp_path: Path) -> Iterator[tuple[ReplEngine, Any, str]]:
    path = tmp_path / "sessions.db"

    def make() -> ReplEngine:
        return ReplEngine(
            boundary=RayBoundary(
                Policy.preset("trusted"),
                Limits(timeout_s=5.0),
                store=lambda: SQLiteStore(path),
                snapshot_key=KEY,
            )
        )

    with session_on_added_node(ray_cluster, make, WAIT_S) as placed:
        yield placed


def test_session_is_restored_on_another_node_after_node_loss(
    ray_cluster: Any, durable: tuple[ReplEngine, Any, str]
) -> None:
    engine, node, session = durable
    assert engine.run("data = {'answer': 41}", session=session).status == "ok"
    ray_cluster.remove_node(node)
    deadline = time.monotonic() + WAIT_S
    while any(n["NodeID"] == node.node_id and n["Alive"] for n in ray.nodes()):
        assert time.monotonic() < deadline, "Ray never noticed the node was removed"
        time.sleep(0.01)
    result = engine.run("data['answer'] + 1", session=session)
    assert (result.status, result.value) == ("ok", "42")
    assert result.session_restored is not None and "data" in result.session_restored.restored
    assert result.session_restarted is False
    assert any("restored from the store" in note for note in result.notes)
    assert engine.boundary.describe()["placement"][session] != node.node_id


def test_store_must_be_a_factory(ray_cluster: Any, tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as store, pytest.raises(TypeError, match="function that opens"):
        RayBoundary(Policy.preset("trusted"), Limits(), store=store, snapshot_key=KEY)  # type: ignore[arg-type]


# What the session sees of its process: its network interfaces, and its effective capabilities.
SEEN = (
    "import socket\n"
    "caps = next(l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff:'))\n"
    "[n for _, n in socket.if_nameindex()], int(caps, 16)"
)


def test_store_backed_sessions_run_in_the_sandbox(ray_cluster: Any, tmp_path: Path) -> None:
    # They once ran in-process in the host actor: with the node's network and the actor's rights.
    path = tmp_path / "sessions.db"
    boundary = RayBoundary(
        Policy.preset("trusted"), Limits(timeout_s=10.0), store=lambda: SQLiteStore(path), snapshot_key=KEY
    )
    with ReplEngine(boundary=boundary) as engine:
        result = engine.run(SEEN, session="sandboxed")
        assert (result.status, result.value) == ("ok", "(['lo'], 0)")  # loopback only, no capabilities
        assert result.boundary == "ray"
        assert engine.run("x = 1", session="sandboxed").status == "ok"
    with SQLiteStore(path) as store:
        assert store.get("sandboxed") is not None  # and it is still saved to the store
