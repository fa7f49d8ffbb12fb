"""Test support shipped with the library: the boundary conformance suite.

    from genpark_repl_tools.testing import BoundaryConformance

    class TestMyBoundary(BoundaryConformance):
        @pytest.fixture
        def make_engine(self):
            engines = []
            def make(**kwargs):
                engines.append(ReplEngine(boundary=MyBoundary(...), **kwargs))
                return engines[-1]
            yield make
            for e in engines:
                e.close()

Importing this module imports pytest.
"""

from __future__ import annotations

from .conformance import BoundaryConformance

__all__ = ["BoundaryConformance"]
