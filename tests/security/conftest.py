"""The security suite runs every attack under both restricted profiles, strict and standard."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from genpark_repl_tools import Limits, ReplEngine


@pytest.fixture(scope="module", params=["strict", "standard"])
def engine(request: pytest.FixtureRequest) -> Iterator[ReplEngine]:
    with ReplEngine(policy=request.param, limits=Limits(timeout_s=5)) as e:
        yield e
