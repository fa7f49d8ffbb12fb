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


# Streaming landed after the Ray boundary: a session-host actor does not forward output while the code
# runs (the output callback does not cross to the actor), so these four tests of the shared suite fail
# on Ray. They stay in the run as strict xfails: the day the actor streams, they pass and CI says so.
_NOT_STREAMED = (
    "the Ray boundary does not forward output while the code runs yet (output comes with the result)"
)
for _name in (
    "test_stream_delivers_each_chunk_while_the_code_runs",
    "test_astream_gives_the_same_events",
    "test_leaving_the_stream_cancels_the_code",
    "test_progress_bar_redraws_collapse",
):
    _test = getattr(BoundaryConformance, _name)

    def _xfailed(self: Any, *args: Any, _test: Any = _test, **kwargs: Any) -> None:
        _test(self, *args, **kwargs)

    _xfailed.__name__ = _name
    _xfailed.__signature__ = __import__("inspect").signature(_test)  # type: ignore[attr-defined]
    setattr(TestRayConformance, _name, pytest.mark.xfail(strict=True, reason=_NOT_STREAMED)(_xfailed))
