"""Obviously huge constants: refused before they run (C code computing them cannot be interrupted)."""

from __future__ import annotations

import pytest
from _security import blocked, ok, run

from genpark_repl_tools import Policy, ReplEngine

POWER_TOWER = "10**10**8"
STRING_REPEAT = "'a' * 10**10"
LIST_REPEAT = "[0] * 10**9"
SHIFT = "1 << 10**10"
POW_CALL = "pow(10, 10**8)"
NESTED = "(10**5)**(10**5)"
IN_EXPRESSION = "x = 1\ny = x + 2**10**7"


@pytest.mark.parametrize(
    ("code", "segment", "size"),
    [
        (POWER_TOWER, "10**10**8", "about 100,000,001 digits; the limit is 1,000,000 bits"),
        (STRING_REPEAT, "'a' * 10**10", "10,000,000,000 items or characters; the limit is 10,000,000"),
        (LIST_REPEAT, "[0] * 10**9", "1,000,000,000 items or characters; the limit is 10,000,000"),
        (SHIFT, "1 << 10**10", "about 3,010,299,957 digits; the limit is 1,000,000 bits"),
        (NESTED, "(10**5)**(10**5)", "about 500,001 digits; the limit is 1,000,000 bits"),
        (IN_EXPRESSION, "2**10**7", "about 3,010,300 digits; the limit is 1,000,000 bits"),
    ],
)
def test_huge_constant_expressions_are_refused(
    engine: ReplEngine, code: str, segment: str, size: str
) -> None:
    assert blocked(run(engine, code)) == (
        f"{segment} is too large to compute under policy '{engine.policy.name}' ({size}); "
        "use smaller numbers or a lazy approach (range, generators)"
    )


def test_huge_pow_calls_are_refused(engine: ReplEngine) -> None:
    assert blocked(run(engine, POW_CALL)) == (
        f"this pow() is too large to compute under policy '{engine.policy.name}' "
        "(about 100,000,001 digits; the limit is 1,000,000 bits)"
    )


@pytest.mark.parametrize(
    ("code", "value"),
    [
        ("len(str(2**1000))", "302"),
        ("len('ab' * 1000)", "2000"),
        ("len([0] * 10**6)", "1000000"),
        ("10**-3", "0.001"),
        ("1 << 100 > 0", "True"),
        ("len(range(10**18))", "1000000000000000000"),
        ("2.5 ** 100 > 1", "True"),
    ],
)
def test_reasonable_constants_work(engine: ReplEngine, code: str, value: str) -> None:
    assert ok(run(engine, code)).value == value


def test_the_refusal_points_at_the_huge_part(engine: ReplEngine) -> None:
    finding = run(engine, IN_EXPRESSION).findings[0]
    assert (finding.line, finding.column) == (2, 8)


def test_the_limits_are_policy_data() -> None:
    policy = Policy.strict().model_copy(update={"max_constant_bits": 4_000_000})
    with ReplEngine(boundary="inprocess", policy=policy) as engine:
        assert ok(run(engine, "big = 2**3_000_000\nbig.bit_length()")).value == "3000001"
