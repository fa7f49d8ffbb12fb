"""Model-facing names and hints: internal class names never leak; a typo gets the suggestion alone."""

from __future__ import annotations

import pytest

from genpark_repl_tools import ReplEngine


@pytest.mark.parametrize("policy", ["strict", "standard", "trusted"])
def test_module_views_are_modules_in_results_and_listings(policy: str) -> None:
    with ReplEngine(boundary="inprocess", policy=policy) as engine:
        result = engine.run("import math\nmath")
        assert result.value_type == "module"
        (info,) = [v for v in engine.variables(include_hidden=True) if v.name == "math"]
        assert info.type == "module"
        assert "genpark_repl_tools" not in result.model_dump_json()
        assert "genpark_repl_tools" not in engine.inspect("math").model_dump_json()


def test_a_typo_gets_the_suggestion_without_the_define_it_first_hint() -> None:
    with ReplEngine(boundary="inprocess", policy="standard") as engine:
        engine.run("prices = [1, 2]")
        typo = engine.run("sum(price)")
        assert typo.error is not None
        assert "Did you mean: 'prices'?" in typo.error.message
        assert typo.error.hint is None
        unknown = engine.run("sum(zzz)")
        assert unknown.error is not None
        assert unknown.error.hint is not None and "define it first" in unknown.error.hint
