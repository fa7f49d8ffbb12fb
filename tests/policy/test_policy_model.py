"""The Policy model: presets, derivation, validation, and how the engine reports the policy it ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from genpark_repl_tools import AuditReport, Policy, ReplEngine
from genpark_repl_tools.policy import ModuleRule, PolicyViolation, runtime_for


def test_presets_are_available_by_name() -> None:
    for name in ("strict", "standard", "trusted"):
        assert Policy.preset(name).name == name
    with pytest.raises(
        ValueError, match="unknown policy 'paranoid'; choose one of: standard, strict, trusted"
    ):
        Policy.preset("paranoid")


def test_strict_is_pure_computation() -> None:
    policy = Policy.strict()
    assert policy.restricted and not policy.files and not policy.threads
    assert policy.builtins is not None and "open" not in policy.builtins and "eval" not in policy.builtins
    assert policy.denied_builtins["eval"] == "it runs code the audit never saw; compute the value directly"
    assert policy.allows_module("math") and policy.allows_module("collections.abc")
    assert not policy.allows_module("numpy") and not policy.allows_module("os")


def test_standard_adds_the_data_stack_and_workspace_files() -> None:
    strict, standard = Policy.strict(), Policy.standard()
    assert standard.files and standard.builtins is not None and "open" in standard.builtins
    assert "open" not in standard.denied_builtins
    assert set(strict.allowed_modules()) < set(standard.allowed_modules())
    assert {"numpy", "pandas", "scipy", "matplotlib", "pathlib"} <= set(standard.allowed_modules())
    assert standard.allows_module("numpy.linalg")
    assert not standard.allows_module("numpy.ctypeslib")
    assert not standard.allows_module("pandas.core")


def test_trusted_restricts_nothing() -> None:
    policy = Policy.trusted()
    assert not policy.restricted and policy.files and policy.threads and policy.builtins is None


def test_module_rules_resolve_to_the_nearest_rule() -> None:
    policy = Policy.standard()
    rule = policy.module_rule("numpy.lib.stride_tricks")
    assert rule is not None and rule.only == (
        "sliding_window_view",
        "broadcast_to",
        "broadcast_arrays",
        "broadcast_shapes",
    )
    assert policy.module_rule("numpy.fft") == policy.module_rule("numpy")
    refused = policy.module_rule("numpy.ctypeslib.anything")
    assert refused is not None and not refused.allowed
    assert policy.module_rule("numpy._core") is None  # private parts are never admitted
    assert policy.module_rule("json.tool") is not None and not policy.allows_module("json.tool")
    assert policy.module_rule("pandas.core") is None  # pandas admits only its listed submodules


def test_policies_are_immutable_and_derive_new_ones(tmp_path: Path) -> None:
    base = Policy.strict()
    with pytest.raises(ValidationError):
        base.files = True  # type: ignore[misc]
    derived = base.allow_imports("sympy").with_workspace(tmp_path).with_files()
    assert derived is not base and not base.allows_module("sympy") and not base.files
    assert derived.allows_module("sympy") and derived.allows_module("sympy.core")
    assert derived.workspace == tmp_path and derived.files
    narrower = Policy.standard().deny_imports("pandas", reason="not in this product")
    assert not narrower.allows_module("pandas.api")
    rule = narrower.module_rule("pandas")
    assert rule == ModuleRule(name="pandas", allowed=False, note="not in this product")
    assert Policy.trusted().allow_imports("x") == Policy.trusted()


def test_restricted_policies_refuse_threads() -> None:
    data = Policy.strict().model_dump()
    data["threads"] = True
    with pytest.raises(ValidationError, match="threads=True needs restricted=False"):
        Policy.model_validate(data)


def test_policies_round_trip_as_json() -> None:
    policy = Policy.standard().allow_imports("sympy")
    assert Policy.model_validate_json(policy.model_dump_json()) == policy
    assert json.loads(policy.model_dump_json())["name"] == "standard"


def test_the_engine_accepts_names_and_policies_and_defaults_to_standard(tmp_path: Path) -> None:
    with ReplEngine(boundary="inprocess") as engine:
        assert engine.policy == Policy.standard()
        assert engine.run("1 + 1").policy == "standard"
    with ReplEngine(boundary="inprocess", policy="strict") as engine:
        assert engine.run("1 + 1").policy == "strict"
    custom = Policy.strict().allow_imports("colorsys")
    with ReplEngine(boundary="inprocess", policy=custom) as engine:
        assert engine.policy is custom
        result = engine.run("import colorsys\ncolorsys.rgb_to_hsv(0, 0, 1)")
        assert (result.status, result.policy) == ("ok", "strict")


def test_engine_audit_reports_without_running() -> None:
    with ReplEngine(boundary="inprocess", policy="strict") as engine:
        report = engine.audit("x = 1\nimport os\nx.__class__")
        assert isinstance(report, AuditReport)
        assert (report.policy, report.allowed) == ("strict", False)
        assert [(f.rule, f.line) for f in report.findings] == [("import", 2), ("attribute", 3)]
        assert report.describe().startswith("line 2:1: import of 'os' is not allowed under policy 'strict'")
        assert engine.audit("x = [i * i for i in range(3)]").allowed
        assert engine.sessions() == []  # nothing ran


def test_blocked_results_carry_their_findings() -> None:
    with ReplEngine(boundary="inprocess", policy="strict") as engine:
        result = engine.run("eval('1')")
        assert (result.status, result.policy) == ("blocked", "strict")
        assert result.error is not None and result.error.type == "PolicyViolation"
        dumped = result.model_dump(mode="json")
        assert dumped["findings"][0]["rule"] == "builtin"
        assert dumped["findings"][0]["source_line"] == "eval('1')"


def test_runtime_for_picks_the_runtime() -> None:
    assert runtime_for(Policy.trusted()).name == "trusted"
    strict = runtime_for(Policy.strict())
    assert strict.name == "strict"
    assert strict.cache_key == runtime_for(Policy.strict()).cache_key
    assert strict.cache_key != runtime_for(Policy.standard()).cache_key
    assert strict.cache_key != runtime_for(Policy.strict().allow_imports("sympy")).cache_key


def test_policy_violation_is_a_permission_error() -> None:
    assert issubclass(PolicyViolation, PermissionError)
    assert str(PolicyViolation("refused")) == "refused"
