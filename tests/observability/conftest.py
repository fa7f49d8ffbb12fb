from __future__ import annotations

from collections.abc import Iterator

import pytest

from genpark_repl_tools import ReplEngine


@pytest.fixture(scope="module")
def sub_engine() -> Iterator[ReplEngine]:
    """One subprocess-boundary engine (trusted policy: the OS sandbox is what refuses) per module."""
    with ReplEngine(policy="trusted", boundary="subprocess") as engine:
        yield engine
