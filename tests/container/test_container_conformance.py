"""The boundary conformance suite, unchanged, on the container boundary."""

from __future__ import annotations

from genpark_repl_tools.testing import BoundaryConformance


class TestContainerConformance(BoundaryConformance):
    """make_engine comes from tests/container/conftest.py (one container per session)."""
