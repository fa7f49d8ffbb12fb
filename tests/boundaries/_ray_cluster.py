"""A real local Ray cluster of two nodes (Ray's own cluster utilities), one per test module.

Small on purpose (the CI machine is shared): one CPU and 100 MB of object store per node, no
dashboard. The fixture shuts the driver and every node down whatever the tests did. Import
`ray_cluster_fixture` into a test module to use the `ray_cluster` fixture there.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

# requirements/dev.txt installs Ray only where it has a release: the reason says which case this is.
NO_RAY = (
    "Ray has no release for Python 3.15 yet (requirements/dev.txt installs it below 3.15)"
    if sys.version_info >= (3, 15)
    else "the ray extra is not installed"
)
ray = pytest.importorskip("ray", reason=NO_RAY)

from ray.cluster_utils import Cluster  # noqa: E402

if TYPE_CHECKING:
    from genpark_repl_tools import ReplEngine

NODE_ARGS: dict[str, Any] = {"num_cpus": 1, "object_store_memory": 100 * 1024 * 1024}


@pytest.fixture(scope="module", name="ray_cluster")
def ray_cluster_fixture() -> Iterator[Cluster]:
    cluster = Cluster(initialize_head=True, head_node_args={**NODE_ARGS, "include_dashboard": False})
    try:
        cluster.add_node(**NODE_ARGS)
        cluster.wait_for_nodes(timeout=60)
        ray.init(address=cluster.address, namespace="genpark-repl", log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@contextlib.contextmanager
def session_on_added_node(
    cluster: Cluster, make_engine: Callable[[], ReplEngine], wait_s: float = 60.0
) -> Iterator[tuple[ReplEngine, Any, str]]:
    """Adds a node, makes the engine and starts three sessions (least-loaded placement puts one on
    each node); yields the engine, the added node and the session placed on it. Afterwards the engine
    is closed and the node removed, if the test left it."""
    node = cluster.add_node(**NODE_ARGS)
    cluster.wait_for_nodes(timeout=wait_s)
    engine = make_engine()
    try:
        for i in range(3):
            engine.run(f"tag = {i}", session=f"s{i}")
        placement = engine.boundary.describe()["placement"]
        session = next(s for s, n in placement.items() if n == node.node_id)
        yield engine, node, session
    finally:
        engine.close()
        if node in cluster.worker_nodes:
            cluster.remove_node(node)
