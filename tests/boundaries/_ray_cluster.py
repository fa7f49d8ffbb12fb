"""A real local Ray cluster of two nodes (Ray's own cluster utilities), one per test module.

Small on purpose (the CI machine is shared): one CPU and 100 MB of object store per node, no
dashboard. The fixture shuts the driver and every node down whatever the tests did. Import
`ray_cluster_fixture` into a test module to use the `ray_cluster` fixture there.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed")

from ray.cluster_utils import Cluster  # noqa: E402

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
