"""`--preload`, and what `genpark-repl mcp` preloads by default: the data stack its policy allows."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from genpark_repl_tools import cli
from genpark_repl_tools.policy import Policy

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="preloading is the sandbox's")


def installed(module: str) -> bool:
    return importlib.util.find_spec(module.partition(".")[0]) is not None


def test_the_server_preloads_what_its_policy_allows_and_what_is_installed() -> None:
    for policy in ("trusted", "standard", "strict"):
        chosen = cli._data_stack(policy)
        assert set(chosen) <= {"numpy", "pandas", "matplotlib.pyplot"}
        for module in ("numpy", "pandas", "matplotlib.pyplot"):
            rules = Policy.preset(policy)
            expected = installed(module) and (not rules.restricted or rules.allows_module(module))
            assert (module in chosen) is expected, (policy, module)
    assert "pandas" not in cli._data_stack("strict")
    if installed("pandas"):
        assert "pandas" in cli._data_stack("trusted") and "pandas" in cli._data_stack("standard")


def loaded_in_a_new_session(args: list[str], module: str, *, server: bool) -> str | None:
    parsed = cli.build_parser().parse_args(args)
    if server:
        cli._server_preload(parsed)
    with cli._make_engine(parsed) as engine:
        return engine.run(f"import sys\n{module!r} in sys.modules").value


def test_a_server_session_starts_with_the_data_stack_and_run_preloads_nothing() -> None:
    if not installed("numpy"):
        pytest.skip("numpy is not installed here")
    mcp = ["mcp", "--policy", "trusted"]
    assert loaded_in_a_new_session(mcp, "numpy", server=True) == "True"
    assert loaded_in_a_new_session([*mcp, "--no-preload"], "numpy", server=True) == "False"
    assert loaded_in_a_new_session(["--policy", "trusted", "run", "-"], "numpy", server=False) == "False"
    # --preload names exactly what to load, for any command.
    named = ["--policy", "trusted", "--preload", "colorsys", "run", "-"]
    assert loaded_in_a_new_session(named, "colorsys", server=False) == "True"


def test_an_in_process_server_preloads_nothing() -> None:
    parsed = cli.build_parser().parse_args(["mcp", "--boundary", "inprocess"])
    cli._server_preload(parsed)
    with cli._make_engine(parsed) as engine:
        assert engine.boundary.name == "inprocess"
    assert not hasattr(parsed, "preload")


def test_preload_is_refused_in_process() -> None:
    parsed = cli.build_parser().parse_args(["--boundary", "inprocess", "--preload", "colorsys", "run", "-"])
    with pytest.raises(cli.UsageError, match="--preload needs a sandboxed boundary"):
        cli._make_engine(parsed)
