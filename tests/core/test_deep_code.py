"""Code Python itself cannot compile for its depth is the run's error under every policy, never an
exception out of engine.run (the conformance suite checks every boundary under `trusted`)."""

from __future__ import annotations

import pytest

from genpark_repl_tools import ReplEngine


@pytest.mark.parametrize("policy", ["trusted", "standard", "strict"])
def test_deep_code_is_an_error_result_under_every_policy(policy: str) -> None:
    with ReplEngine(boundary="inprocess", policy=policy) as engine:
        for code in ("x = 1" + "+1" * 100_000, "x = " + "-" * 100_000 + "1", "y = a" + ".b" * 100_000):
            result = engine.run(code)
            assert result.status in ("error", "blocked"), (policy, code[:20], result.status)
            assert result.error is not None
            assert result.error.type in ("RecursionError", "MemoryError", "PolicyViolation")
            assert "nested too deeply" in result.error.message
        assert engine.run("z = 2\nz").value == "2"
