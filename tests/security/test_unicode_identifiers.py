"""Unicode identifiers: names are compared after NFKC normalization, as Python itself compares them."""

# ruff: noqa: RUF001 - look-alike characters are what this file is about

from __future__ import annotations

import pytest
from _security import assert_import_refused, blocked, ok, refusal, run

from genpark_repl_tools import ReplEngine

FULLWIDTH_OPEN = "ｏｐｅｎ('/etc/passwd')"
FULLWIDTH_BUILTINS = "__ｂｕｉｌｔｉｎｓ__"
FULLWIDTH_ATTRIBUTE = "().__ｃｌａｓｓ__"
FULLWIDTH_IMPORT = "import ｏｓ"
FULLWIDTH_GETATTR = "getattr((), '__ｃｌａｓｓ__')"
FULLWIDTH_FORMAT = "template = '{0.__ｃｌａｓｓ__}'\ntemplate.format(1)"
FULLWIDTH_UNDERSCORE = "getattr((), '＿＿class＿＿')"
MATH_ITALIC_EVAL = "𝑒𝑣𝑎𝑙('1')"


def test_normalized_builtin_names_are_refused(engine: ReplEngine) -> None:
    assert blocked(run(engine, MATH_ITALIC_EVAL)).startswith(
        f"builtin 'eval' is not available under policy '{engine.policy.name}'"
    )


def test_normalized_open_is_refused(engine: ReplEngine) -> None:
    result = run(engine, FULLWIDTH_OPEN)
    if engine.policy.name == "strict":
        assert blocked(result).startswith("builtin 'open' is not available under policy 'strict'")
    else:
        assert refusal(result).startswith("opening '/etc/passwd' is not allowed under policy 'standard'")


def test_normalized_reserved_names_are_refused(engine: ReplEngine) -> None:
    assert blocked(run(engine, FULLWIDTH_BUILTINS)) == (
        f"name '__builtins__' is not allowed under policy '{engine.policy.name}': names starting with "
        "'__' are reserved"
    )


def test_normalized_attributes_are_refused(engine: ReplEngine) -> None:
    assert blocked(run(engine, FULLWIDTH_ATTRIBUTE)).startswith(
        f"attribute '__class__' is not allowed under policy '{engine.policy.name}'"
    )


def test_normalized_imports_are_refused(engine: ReplEngine) -> None:
    assert_import_refused(blocked(run(engine, FULLWIDTH_IMPORT)), "os", engine.policy.name)


@pytest.mark.parametrize("code", [FULLWIDTH_GETATTR, FULLWIDTH_UNDERSCORE])
def test_normalized_computed_names_are_refused(engine: ReplEngine, code: str) -> None:
    assert refusal(run(engine, code)).startswith(
        f"attribute '__class__' is not allowed under policy '{engine.policy.name}'"
    )


def test_normalized_format_fields_are_refused(engine: ReplEngine) -> None:
    assert refusal(run(engine, FULLWIDTH_FORMAT)).startswith(
        "format field '{0.__ｃｌａｓｓ__}': attribute '__class__'"
    )


def test_non_ascii_identifiers_work(engine: ReplEngine) -> None:
    assert ok(run(engine, "π = 3.14\nvélo = 2\nπ * vélo")).value == "6.28"
    assert ok(run(engine, "ｘ = 5\nx")).value == "5"  # the same name after normalization
