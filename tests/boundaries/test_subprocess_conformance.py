"""The boundary conformance suite, unchanged, on the subprocess boundary."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from genpark_repl_tools import ReplEngine
from genpark_repl_tools.testing import BoundaryConformance


class TestSubprocessConformance(BoundaryConformance):
    @pytest.fixture
    def make_engine(self) -> Iterator[Any]:
        engines: list[ReplEngine] = []

        def make(**kwargs: Any) -> ReplEngine:
            engines.append(ReplEngine(boundary="subprocess", **kwargs))
            return engines[-1]

        yield make
        for engine in engines:
            engine.close()
