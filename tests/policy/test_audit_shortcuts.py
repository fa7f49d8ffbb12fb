"""The static audit's shortcuts give the answers of the full checks they skip.

Plain names skip the NFKC and private-name checks, import refusals are remembered per module name,
and the generator test walks fields without ast's generators. Each shortcut next to the cases that
must still take the full path.
"""

from __future__ import annotations

import ast

import pytest

from genpark_repl_tools import Policy
from genpark_repl_tools.policy._audit import audit, is_generator
from genpark_repl_tools.policy._rules import StaticRules

POLICIES = ["strict", "standard"]
MODULES = ["math", "os", "os.path", "collections.abc", "_thread", "json", "numpy.ctypeslib", "nosuch", "math"]


def _rules(policy: str) -> StaticRules:
    return StaticRules(Policy.preset(policy))


@pytest.mark.parametrize("policy", POLICIES)
def test_remembered_import_refusals_are_the_fresh_ones(policy: str) -> None:
    remembered = _rules(policy)
    for _ in range(3):
        for module in MODULES:
            assert remembered.import_refusal(module) == _rules(policy).import_refusal(module), module
    assert remembered.import_refusal("math") is None
    assert remembered.import_refusal("os") is not None


def _findings(code: str, policy: str) -> list[str]:
    return [f.rule for f in audit(ast.parse(code), code, _rules(policy))]


@pytest.mark.parametrize("policy", POLICIES)
def test_names_off_the_plain_path_are_still_checked(policy: str) -> None:
    assert _findings("x = 1\ny = x", policy) == []
    assert _findings("eval('1')", policy) == ["builtin"]
    assert _findings("\uff45\uff56\uff41\uff4c('1')", policy) == ["builtin"]  # fullwidth: NFKC makes it eval
    assert _findings("__import__('os')", policy) == ["private-name"]
    assert _findings("class A:\n    _missing_ = 1", policy) == ["private-name"]
    assert _findings("eval = len\neval('1')", policy) == []  # the session's own variable


@pytest.mark.parametrize("policy", POLICIES)
def test_generators_are_found_through_every_field(policy: str) -> None:
    def first(code: str) -> ast.FunctionDef | ast.Lambda:
        node = ast.parse(code).body[0]
        if isinstance(node, ast.Expr):
            assert isinstance(node.value, ast.Lambda)
            return node.value
        assert isinstance(node, ast.FunctionDef)
        return node

    assert is_generator(first("def g():\n    with a:\n        print(x[(yield 1)])"))
    assert is_generator(first("def g():\n    return {1: [(yield from h())]}"))
    assert is_generator(first("lambda: (yield)"))
    assert not is_generator(first("def f():\n    def g():\n        yield 1\n    return (x for x in g())"))
    code = "def g():\n    try:\n        pass\n    finally:\n        print((yield 1))"
    assert _findings(code, policy) == ["generator-finally"]
