"""Internal class names never reach the model: a module view is a `module`, a stand-in its real type."""

from __future__ import annotations

import pytest

from genpark_repl_tools import ReplEngine


@pytest.mark.parametrize("policy", ["strict", "standard", "trusted"])
def test_module_views_are_modules_in_results_and_listings(policy: str) -> None:
    with ReplEngine(policy=policy) as engine:
        result = engine.run("import math\nmath")
        assert result.value_type == "module"
        (info,) = [v for v in engine.variables(include_hidden=True) if v.name == "math"]
        assert info.type == "module"
        assert "genpark_repl_tools" not in result.model_dump_json()
        assert "genpark_repl_tools" not in engine.inspect("math").model_dump_json()
