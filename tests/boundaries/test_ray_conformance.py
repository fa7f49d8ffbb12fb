"""The boundary conformance suite, unchanged, on the Ray boundary over a two-node local cluster."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from _ray_cluster import ray_cluster_fixture  # noqa: F401 (the ray_cluster fixture)

from genpark_repl_tools import ReplEngine
from genpark_repl_tools.testing import BoundaryConformance


class TestRayConformance(BoundaryConformance):
    @pytest.fixture
    def make_engine(self, ray_cluster: Any) -> Iterator[Any]:
        engines: list[ReplEngine] = []

        def make(**kwargs: Any) -> ReplEngine:
            engines.append(ReplEngine(boundary="ray", **kwargs))
            return engines[-1]

        yield make
        for engine in engines:
            engine.close()

    @pytest.mark.xfail(
        strict=False,
        reason="open: once, on Python 3.10 with two suites sharing the machine, a slow tool's call on Ray "
        "ended as status 'error' (tool_ms 0) before the run's deadline instead of a timeout; not reproduced",
    )
    def test_a_slow_tool_times_the_run_out_and_the_session_goes_on(self, make_engine: Any) -> None:
        super().test_a_slow_tool_times_the_run_out_and_the_session_goes_on(make_engine)
