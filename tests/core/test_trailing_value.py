"""A cell's value is its last statement's, when that statement is an expression (REPL style).

Each shape runs under every policy: the value is read from the cell's syntax tree, so a constant the
compiler would drop, a branch, a statement after the expression or an expression inside a block
must all read as Python's own interactive mode reads them.
"""

from __future__ import annotations

import keyword
import sys

import pytest

from genpark_repl_tools import ReplEngine

POLICIES = ["trusted", "standard", "strict"]

# (cell, its value's repr; None: no value). `a` is 2 and `b` is 3 in the session.
CELLS = [
    ("a * 21", "42"),
    ("a;", "2"),
    ("a  # a comment", "2"),
    ("x = 1 # c\na # c2\n\n# trailing comment\n", "2"),
    ("x = 1; y = x * 2; y", "2"),
    ("'text'", "'text'"),
    ("x = 1\n'doc'", "'doc'"),  # a string last: a value, not a docstring
    ('"""docstring"""\nx = 1', None),
    ("42", "42"),
    ("-1", "-1"),
    ("(1, 2)", "(1, 2)"),
    ("x = 1\n(1,\n 2)", "(1, 2)"),
    ("...", "Ellipsis"),
    ("not True", "False"),
    ("None", None),
    ("a if b else 0", "2"),
    ("0 if b else a", "0"),
    ("a and b or 0", "3"),
    ("(q := 5)", "5"),
    ("[i * i for i in range(3)]", "[0, 1, 4]"),
    ("(lambda: 7)()", "7"),
    ("def f(v):\n    return v\nf(a)", "2"),
    ("x = 1", None),
    ("a += 1\na -= 1", None),
    ("x = y = a", None),
    ("import math", None),
    ("import math\nmath.floor(2.5)", "2"),
    ("from math import pi", None),
    ("del a\na = 2", None),
    ("pass", None),
    ("if a:\n    b", None),
    ("if a: x = 1; b", None),
    ("for i in range(2):\n    i", None),
    ("while False:\n    a\nb", "3"),
    ("def f():\n    return 1", None),
    ("a\nx = 1", None),
    ("a\npass", None),
    ("try:\n    a\nexcept NameError:\n    b", None),
    ("try:\n    1 / 0\nexcept ZeroDivisionError:\n    pass\nb", "3"),
    ("f'{a}-{b}'", "'2-3'"),
    ("x = (1,\n2); b", "3"),
    ("x = 1 + \\\n2; b", "3"),
    ("print('a;b'); b", "3"),
]


@pytest.mark.parametrize("policy", POLICIES)
def test_the_value_is_the_last_statements_when_it_is_an_expression(policy: str) -> None:
    wrong = []
    with ReplEngine(boundary="inprocess", policy=policy) as engine:
        for cell, value in CELLS:
            assert engine.run("a = 2\nb = 3").status == "ok"
            result = engine.run(cell)
            if result.status != "ok" or result.value != value:
                wrong.append((cell, result.status, result.value, value))
    assert wrong == []


# Keywords, soft keywords and names that look like them, each alone on the cell's last line.
NAMES = [*keyword.kwlist, *keyword.softkwlist, "__debug__", "y", "df", "x1", "print"]


def _interactive(before: str, last: str) -> tuple[str, str | None]:
    """What Python's interactive mode shows for `last` after `before`: (status, the value's repr)."""
    shown: list[object] = []
    namespace: dict[str, object] = {}
    hook = sys.displayhook
    sys.displayhook = shown.append  # what the interactive prompt would print, without printing it
    try:
        exec(compile(before, "<input>", "exec"), namespace)
        exec(compile(last, "<input>", "single"), namespace)
    except Exception:  # `raise` alone, `return` outside a function, an unbound name: an error
        return "error", None
    finally:
        sys.displayhook = hook
    return "ok", repr(shown[0]) if shown and shown[0] is not None else None


@pytest.mark.parametrize("name", NAMES)
def test_a_bare_name_last_reads_as_the_interactive_mode_reads_it(name: str) -> None:
    with ReplEngine(boundary="inprocess", policy="trusted") as engine:
        for before in ["", "x = 1\n", "# note\n", f"{name} = 7\n"]:
            if _interactive(before, "pass")[0] == "error":
                continue  # `if = 7`: not Python
            result = engine.run(f"{before}{name}\n")
            assert (result.status, result.value) == _interactive(before, name), (before, name)
