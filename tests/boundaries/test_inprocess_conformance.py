from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from genpark_repl_tools import ReplEngine
from genpark_repl_tools.testing import BoundaryConformance
from genpark_repl_tools.testing.conformance import MakeEngine


class TestInProcessConformance(BoundaryConformance):
    @pytest.fixture
    def make_engine(self) -> Iterator[MakeEngine]:
        engines: list[ReplEngine] = []

        def make(**kwargs: Any) -> ReplEngine:
            engines.append(ReplEngine(boundary="inprocess", **kwargs))
            return engines[-1]

        yield make
        for engine in engines:
            engine.close()
