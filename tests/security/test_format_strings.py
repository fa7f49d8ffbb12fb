"""Format strings: str.format and format_map look attributes up by name, so their fields are checked."""

from __future__ import annotations

import pytest
from _security import blocked, ok, refusal, run

from genpark_repl_tools import ReplEngine

LITERAL = "'{0.__class__}'.format(1)"
VARIABLE = "template = '{0.__class__.__base__}'\ntemplate.format(1)"
UNBOUND = "str.format('{0.__class__}', 1)"
FORMAT_MAP = "template = '{x.__class__}'\ntemplate.format_map({'x': 1})"
VIA_GETATTR = "getattr('{0.__class__}', 'format')(1)"
VIA_MAP = "list(map(str.format, ['{0.__class__}'], [1]))"
NESTED_SPEC = "template = '{0:{1.__class__}}'\ntemplate.format(1, 2)"
METHODCALLER = "import operator\noperator.methodcaller('format', 1)('{0.__class__}')"
VIA_SUPER = "class S(str):\n    pass\ns = S('{0.__class__}')\nsuper(S, s).format(1)"
STR_SUBCLASS = (
    "class Sneaky(str):\n"
    "    def startswith(self, *args):\n"
    "        return False\n"
    "s = Sneaky('{0.__class__}')\n"
    "s.format(1)"
)
INTERNAL_FIELD = "g = (i for i in [1])\ntemplate = '{0.gi_frame}'\ntemplate.format(g)"
FORMATTER = "import string\nstring.Formatter().format('{0.__class__}', 1)"
FSTRING = "x = 1\nf'{x.__class__}'"

CLASS_FIELD = (
    "attribute '__class__' is not allowed under policy '{policy}': names starting with '_' are "
    "private; use type(obj)"
)


def test_literal_format_strings_are_checked_before_running(engine: ReplEngine) -> None:
    message = CLASS_FIELD.format(policy=engine.policy.name)
    assert blocked(run(engine, LITERAL)) == f"format field '{{0.__class__}}': {message}"


@pytest.mark.parametrize(
    ("code", "field"),
    [
        (VARIABLE, "0.__class__.__base__"),
        (UNBOUND, "0.__class__"),
        (FORMAT_MAP, "x.__class__"),
        (VIA_GETATTR, "0.__class__"),
        (VIA_MAP, "0.__class__"),
        (NESTED_SPEC, "1.__class__"),
        (METHODCALLER, "0.__class__"),
        (VIA_SUPER, "0.__class__"),
        (STR_SUBCLASS, "0.__class__"),
    ],
)
def test_computed_format_strings_are_checked_when_used(engine: ReplEngine, code: str, field: str) -> None:
    message = CLASS_FIELD.format(policy=engine.policy.name)
    assert refusal(run(engine, code)) == f"format field '{{{field}}}': {message}"


def test_internal_fields_are_refused(engine: ReplEngine) -> None:
    assert refusal(run(engine, INTERNAL_FIELD)) == (
        f"format field '{{0.gi_frame}}': attribute 'gi_frame' is not allowed under policy "
        f"'{engine.policy.name}': "
        "frame, code and traceback internals are not available"
    )


def test_string_formatter_is_not_available(engine: ReplEngine) -> None:
    result = run(engine, FORMATTER)
    assert result.status == "error"
    assert result.error is not None and result.error.type == "AttributeError"
    assert result.error.message == (
        f"'string.Formatter' is not available under policy '{engine.policy.name}': "
        "Formatter is left out: it looks attributes up by name"
    )


def test_f_strings_are_audited_like_code(engine: ReplEngine) -> None:
    assert blocked(run(engine, FSTRING)) == CLASS_FIELD.format(policy=engine.policy.name)


@pytest.mark.parametrize(
    ("code", "value"),
    [
        ("'{0} and {1[0]}'.format('a', ['b'])", "'a and b'"),
        ("template = '{:>8.2f}|{name}'\ntemplate.format(3.14159, name='pi')", "'    3.14|pi'"),
        ("template = '{p.real}'\ntemplate.format_map({'p': 2})", "'2'"),
        ("str.format('{}-{}', 1, 2)", "'1-2'"),
        ("fmt = '{0:{1}}'\nfmt.format(3, '>4')", "'   3'"),
        ("'%(a)s/%(b)d' % {'a': 'x', 'b': 2}", "'x/2'"),
        ("x = 3.5\nf'{x:.1f} {x!r}'", "'3.5 3.5'"),
        ("format(255, 'x')", "'ff'"),
        ("import string\nstring.Template('$who!').substitute(who='you')", "'you!'"),
        ("[template.format(i) for template in ['{}'] * 3 for i in range(1)]", "['0', '0', '0']"),
    ],
)
def test_ordinary_formatting_works(engine: ReplEngine, code: str, value: str) -> None:
    assert ok(run(engine, code)).value == value
