from __future__ import annotations

from collections.abc import Iterator

import pytest

from genpark_repl_tools import Limits, ReplEngine


@pytest.fixture(scope="module")
def sub_engine() -> Iterator[ReplEngine]:
    """One subprocess-boundary engine (trusted policy: the OS sandbox is what refuses) per module."""
    limits = Limits(max_history_cells=20)
    with ReplEngine(policy="trusted", boundary="subprocess", limits=limits) as engine:
        yield engine
