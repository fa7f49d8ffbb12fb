"""The compile fast path against the tree path it replaces, on a corpus of cells.

The fast path (`_compile._from_source`: code compiled from the source, `CodeScreen` for the
restricted policies, the trailing value found in the bytecode) must never say yes where the tree
path would say something else:

* screen: whenever `CodeScreen.clean` accepts a cell, the tree audit finds nothing in it and the
  rewrite leaves its tree unchanged (the soundness the whole fast path rests on);
* compile: whenever the fast path compiles a cell, it makes the very code the tree path makes
  (bytecode, names, constants, nested code) and the same reading of it (value, bound names).

The corpus: every string in the security and policy test suites that parses as Python (the attacks
the policies refuse, and their legitimate neighbours), the hand-written shapes below (where the
bytecode reading has edge cases), and generated cells mixing them. Nothing here is executed.
"""

from __future__ import annotations

import ast
import copy
import dis
import random
import re
import sys
from pathlib import Path
from types import CodeType

import pytest

from genpark_repl_tools import _compile
from genpark_repl_tools._compile import CompiledCell
from genpark_repl_tools.policy import Policy, runtime_for
from genpark_repl_tools.policy._screen import ENABLED, REVIEWED_VERSIONS

pytestmark = pytest.mark.skipif(
    not ENABLED, reason=f"the fast path is reviewed for {REVIEWED_VERSIONS} only; others use the tree"
)

TESTS = Path(__file__).resolve().parent.parent

# Shapes where reading the bytecode has edge cases: trailing values, constants the compiler drops,
# dead code, imports, and what the audit refuses next to what it allows.
SHAPES = [
    "x = 1; y = x * 2; y",
    "x = 1",
    "y",
    "y;",
    "y  # a comment",
    "x = 1 # c\ny # c2\n\n# trailing comment\n",
    "print(1)",
    "42",
    "-1",
    "(1, 2)",
    "'text'",
    "x = 1\n'doc'",
    '"""docstring"""\nx = 1',
    "None",
    "...",
    "not True",
    "1 + 2",
    "x = 1\n(1,\n 2)",
    "(None,\nNone)",
    "f(1,\n  2)",
    "(a +\n b)",
    "x = (1,\n2); y",
    "x = [\n1]; y",
    "x = 1 + \\\n2; y",
    "if a: x; y",
    "if 1: x; y",
    "if a:\n    b\nelse:\n    c",
    "if a:\n    b",
    "for i in r:\n    f(i)",
    "while x:\n    y",
    "while True:\n    break\ny",
    "x = 1\n\nif x:\n    pass\ny",
    "def f(a):\n    return a\nf(2)",
    "def f():\n    yield 1\nlist(f())",
    "def f():\n    yield from g()\n",
    "g = (i for i in range(3))\nsum(g)",
    "[i * i for i in range(4)]",
    "{k: v for k, v in d.items()}",
    "{i for i in s}",
    "(lambda: 1)()",
    "lambda: 1",
    "x = lambda a, b=2: a + b",
    "d = {'a': 1}\nd['a']",
    "d = {'a': 1}; d['a']",
    "xs[1:3]",
    "xs[::2]",
    "a if b else c",
    "(x := 5)",
    "[y := f(x), y ** 2]",
    "f'{x!r:>{w}}'",
    "f'{x:.2f}'",
    "print(f'{a}-{b}')",
    "type(x)",
    "map(str, [1])",
    "x.type",
    "x.map(f)",
    "s.format(1)",
    "'{0.__class__}'.format(1)",
    "'{}'.format(1)",
    "format(x, '>3')",
    "f(__x=1)",
    "f(_x=1)",
    "f(**{'__x': 1})",
    "__name__",
    "_private = 1",
    "x._private",
    "x.__class__",
    "x.__doc__",
    "x.f_globals",
    "x.gi_frame",
    "x.co_code",
    "a.b = 1",
    "a.b += 1",
    "del a.b",
    "a[0] = 1",
    "del a[0]",
    "del x",
    "x: int = 1",
    "a.b: int",
    "a.b: (\nint\n)",
    "import math",
    "import math\nmath.sqrt(4)",
    "import os",
    "import os.path",
    "import collections.abc as cabc",
    "from math import sqrt\nsqrt(4)",
    "from math import sqrt as s, pi",
    "from os import path",
    "from math import _private",
    "from . import x",
    "from math import *",
    "from __future__ import annotations\nx = 1",
    "import numpy as np\nnp.arange(3)",
    "import pandas as pd",
    "import matplotlib.pyplot as plt",
    "__import__('os')",
    "open('f')",
    "eval('1')",
    "exec('x = 1')",
    "globals()",
    "vars()",
    "pow(2, 10)",
    "pow(10, 10 ** 10)",
    "x = [0] * 10",
    "x = [0] * n",
    "x = [0] * 10 ** 10",
    "x = [0] * 100000 * 100000",
    "x = 'a' * 10 ** 8",
    "x = 'ab' * 3",
    "x = (0,) * 200",
    "x = 10 ** 100000",
    "x = 10 ** 10 ** 10",
    "x = 1 << 10 ** 7",
    "x = 2 ** 64 * 2 ** 64",
    "y = -x * 2",
    "y = x * -2",
    "y = 2 * x",
    "x *= 10 ** 9",
    "x = (0 ** 10 ** 9) * (0,)",
    "x = (0 * 2 ** 70) * (0,)",
    "x = [0] * (0 * 2 ** 70)",
    "x = 4294967296 * 4294967296 * 0 * (0,)",
    "x = (1 ** 10 ** 9) * (0,)",
    "x = ((-1) ** 10 ** 9) * (0,)",
    "x = 2 ** 200 * 0 * (0,)",
    "x = 'ab' * 2 ** 11",
    "x = 'ab' * 2 ** 12",
    "x = (0,) * 2 ** 8",
    "x = (0,) * 2 ** 9",
    "x = 1 << 127",
    "x = 1 << 129",
    "(0 << 10 ** 9)",
    "x = '' * 10 ** 9",
    "x = (1, 2) * 0 * 10 ** 9",
    "if False:\n    import os\nx",
    "if False:\n    open('f')",
    "if 0:\n    x.__class__",
    "raise ValueError('x')\nimport os",
    "def f():\n    return 1\n    g.h = 2",
    "while True:\n    pass\nz = open(1)",
    "assert x, 'message'",
    "raise ValueError('bad')",
    "global g\ng = 1",
    "def f():\n    n = 1\n    def g():\n        nonlocal n\n        n = 2\n    g()",
    "class C:\n    pass",
    "class C:\n    x = 1\nC.x",
    "@dec\ndef f():\n    pass",
    "try:\n    x\nexcept E:\n    pass",
    "with a:\n    b",
    "try:\n    x\nfinally:\n    y",
    "async def f():\n    await g()",
    "match x:\n    case 1:\n        y",
    "match(x)",
    "type X = int" if sys.version_info >= (3, 12) else "X = int",
    "def f[T](x: T) -> T:\n    return x" if sys.version_info >= (3, 12) else "def f(x):\n    return x",
    "x = 'é'; x",
    "\uff58 = 1",  # a fullwidth x: NFKC makes it x
    "résumé = 1; résumé",
    "print('a;b'); y",
    "print('a'); y",
    "x = 1 # ; y",
    "x = 1; \\\ny",
    "if x:\n    y\n# tail",
    "x = {'a':\n 1}\nx",
    "x = 1\nx\npass",
    "x\nglobal y",
    "__repl_value__ = 1",
    "__doc__",
    "[*a, *b]",
    "print(*args, **kwargs)",
    "a, *b = c",
    "x = y = z",
    "x == y",
    "not x",
    "x in y",
    "a and b or c",
    "a < b < c",
    "-x",
    "~x",
    "+x",
]

_BUILTIN_NAMES = ["print", "len", "range", "sum", "sorted", "open", "eval", "type", "map", "pow", "format"]
_NAMES = ["x", "y", "data", "_x", "__x", "__class__", "os", "f_globals", "register"]
_ATTRS = ["append", "mean", "format", "__class__", "_x", "gi_frame", "map", "query", "real"]
_CONSTANTS = ["1", "0", "2", "10", "10 ** 9", "'s'", "[0]", "(0,)", "None", "True", "1.5", "100000"]


def _generated(count: int, seed: int) -> list[str]:
    """Small random cells from the names, attributes and constants above."""
    rng = random.Random(seed)

    def atom() -> str:
        kind = rng.randrange(6)
        if kind == 0:
            return rng.choice(_CONSTANTS)
        if kind == 1:
            return rng.choice(_NAMES)
        if kind == 2:
            return f"{rng.choice(_NAMES)}.{rng.choice(_ATTRS)}"
        if kind == 3:
            return f"{rng.choice(_BUILTIN_NAMES)}({rng.choice(_NAMES)})"
        if kind == 4:
            return f"[{rng.choice(_NAMES)} for {rng.choice(_NAMES)} in {rng.choice(_NAMES)}]"
        operator = rng.choice(["+", "*", "**", "<<", "-", "%"])
        return f"({rng.choice(_CONSTANTS)} {operator} {rng.choice(_CONSTANTS)})"

    def expression() -> str:
        if rng.random() < 0.5:
            return atom()
        return f"{atom()} {rng.choice(['+', '*', '**', '-', '==', 'and'])} {atom()}"

    def statement() -> str:
        kind = rng.randrange(8)
        if kind == 0:
            return f"{rng.choice(_NAMES)} = {expression()}"
        if kind == 1:
            return f"{rng.choice(_NAMES)}.{rng.choice(_ATTRS)} = {expression()}"
        if kind == 2:
            return f"import {rng.choice(['math', 'os', 'json', 'numpy', 'subprocess'])}"
        if kind == 3:
            return f"from {rng.choice(['math', 'os'])} import {rng.choice(['sqrt', 'path', '_x', 'pi'])}"
        if kind == 4:
            return f"if {expression()}:\n    {rng.choice(_NAMES)} = {expression()}"
        if kind == 5:
            return f"def fn({rng.choice(_NAMES)}):\n    return {expression()}"
        return expression()

    cells = []
    for _ in range(count):
        parts = [statement() for _ in range(rng.randrange(1, 4))]
        joiner = "; " if all("\n" not in p for p in parts) and rng.random() < 0.3 else "\n"
        cells.append(joiner.join(parts))
    return cells


def _generated_tails(count: int, seed: int) -> list[str]:
    """Cells ending in an expression of every shape (branches, short circuits, chained comparisons,
    constants the compiler folds away), after statements, on one line or several."""
    rng = random.Random(seed)
    names = ["a", "b", "c", "x", "y"]

    def expression(depth: int) -> str:
        if depth <= 0 or rng.random() < 0.3:
            return rng.choice([*names, "1", "0", "2.5", "'s'", "None", "True", "[]", "(1, 2)", "f(a)"])
        kind = rng.randrange(14)
        sub = lambda: expression(depth - 1)  # noqa: E731
        if kind == 0:
            return f"{sub()} if {sub()} else {sub()}"
        if kind == 1:
            return f"{sub()} {rng.choice(['and', 'or'])} {sub()}"
        if kind == 2:
            choices = ["<", "<=", "==", "!=", "in", "not in", "is", "is not"]
            ops = [rng.choice(choices) for _ in range(rng.randrange(1, 4))]
            return " ".join(f"{sub()} {op}" for op in ops) + f" {sub()}"
        if kind == 3:
            return f"{rng.choice(['not ', '-', '~', '+'])}{sub()}"
        if kind == 4:
            return f"({sub()} {rng.choice(['+', '-', '*', '/', '%', '//', '|', '&'])} {sub()})"
        if kind == 5:
            return f"g({sub()}, k={sub()})"
        if kind == 6:
            return f"{rng.choice(names)}[{sub()}]"
        if kind == 7:
            return f"{rng.choice(names)}.real"
        if kind == 8:
            return f"[{sub()}, {sub()}]"
        if kind == 9:
            return f"{{{sub()}: {sub()}}}"
        if kind == 10:
            return f"[{sub()} for a in {rng.choice(names)} if {sub()}]"
        if kind == 11:
            return f"(lambda q: {sub()})"
        if kind == 12:
            return f"f'{{{sub()}}}'"
        return f"({rng.choice(names)} := {sub()})"

    cells = []
    for _ in range(count):
        prefix = [f"{rng.choice(names)} = {expression(1)}" for _ in range(rng.randrange(3))]
        tail = expression(3)
        style = rng.randrange(12)
        if style == 1:
            tail = f"({tail}\n)"
        elif style == 2:
            tail += "  # done"
        elif style == 3:
            tail += ";"
        elif style == 4:
            tail = f"for a in {rng.choice(names)}:\n    {rng.choice([tail, 'x = ' + tail])}"
        elif style == 5:
            tail = f"if {expression(1)}:\n    {tail}\nelse:\n    {rng.choice(names)} = 1"
        elif style == 6:
            tail = f"def fn(q):\n    return {tail}"
        elif style == 7:
            tail = f"{rng.choice(names)} = g(a,\n{rng.choice(names)} = {tail})"
        elif style == 8:
            tail = rng.choice(["import math", "from math import pi", "import os.path as p", "a += 1"])
        elif style == 9:
            tail = f"a, b = {tail}, {expression(1)}"
        elif style == 10:
            tail = f"g(a,\nk = {tail})"
        joiner = "; " if rng.random() < 0.4 else "\n"
        cell = joiner.join([*prefix, tail])
        try:
            ast.parse(cell)
        except SyntaxError:  # the grammar above is loose (`a == not b`): keep what Python accepts
            continue
        cells.append(cell)
    return cells


def _generated_constants(count: int, seed: int) -> list[str]:
    """Arithmetic on constants only: what the compiler folds and the audit's size estimate judge."""
    rng = random.Random(seed)
    leaves = [
        "0",
        "1",
        "-1",
        "2",
        "7",
        "10",
        "64",
        "100",
        "10 ** 9",
        "2 ** 70",
        "2 ** 200",
        "''",
        "'ab'",
        "()",
        "(0,)",
        "[0]",
        "[0, 1]",
        "True",
    ]

    def expression(depth: int) -> str:
        if depth <= 0 or rng.random() < 0.35:
            return rng.choice(leaves)
        if rng.random() < 0.15:
            return f"{rng.choice(['-', '~', '+'])}({expression(depth - 1)})"
        operator = rng.choice(["+", "*", "**", "<<", "-", "//", "%", "*", "*"])
        return f"({expression(depth - 1)} {operator} {expression(depth - 1)})"

    return [f"x = {expression(3)}" for _ in range(count)]


def _suite_strings() -> list[str]:
    """Every string constant in the security and policy tests that parses as a module."""
    found: set[str] = set()
    for folder in ("security", "policy"):
        for path in sorted((TESTS / folder).glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.strip():
                    try:
                        ast.parse(node.value)
                    except (SyntaxError, ValueError):
                        continue
                    found.add(node.value)
    return sorted(found)


CORPUS = sorted(
    {
        *SHAPES,
        *_suite_strings(),
        *_generated(1500, seed=18),
        *_generated_tails(4000, seed=19),
        *_generated_constants(1500, seed=20),
    }
)
POLICIES = {name: runtime_for(Policy.preset(name)) for name in ("trusted", "strict", "standard")}


def _dead_constants_only(source: str) -> bool:
    """The one reading the fast path and the tree audit differ on, by design: a branch the compiler
    removes as unreachable that names nothing (only constants and operators) is not in the code
    and so not judged; it never runs. (With any name in it, the fast path defers to the tree.)"""
    return source.startswith(("if False:", "if 0:", "while False:")) and all(
        not isinstance(n, ast.Name) for n in ast.walk(ast.parse(source).body[0])
    )


def test_the_corpus_holds_what_the_policies_refuse_and_allow() -> None:
    strict = POLICIES["strict"]
    refused = allowed = 0
    for source in CORPUS:
        findings = strict.audit(ast.parse(source), source)
        refused += bool(findings)
        allowed += not findings
    assert len(CORPUS) > 1500
    assert refused > 300 and allowed > 300  # both sides of each rule are exercised


@pytest.mark.parametrize("policy", ["strict", "standard"])
def test_a_cell_the_screen_accepts_is_one_the_audit_accepts_unchanged(policy: str) -> None:
    runtime = POLICIES[policy]
    accepted = 0
    wrong: list[str] = []
    for source in CORPUS:
        try:
            code = compile(source, "<cell>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            continue
        if not runtime.screen(code, source):
            continue
        accepted += 1
        tree = ast.parse(source)
        before = ast.dump(tree, include_attributes=True)
        findings = runtime.audit(tree, source)
        after = ast.dump(runtime.transform(copy.deepcopy(tree)), include_attributes=True)
        if (findings or after != before) and not _dead_constants_only(source):
            wrong.append(f"{source!r}: {[f.message for f in findings]} rewritten={after != before}")
    assert not wrong, "\n".join(wrong[:20])
    assert accepted > 500  # the fast path is taken for most plain cells


def _codes_equal(a: CodeType, b: CodeType) -> bool:
    if (a.co_code, a.co_names, a.co_varnames, a.co_freevars, a.co_cellvars) != (
        b.co_code,
        b.co_names,
        b.co_varnames,
        b.co_freevars,
        b.co_cellvars,
    ):
        return False
    nested_a = [c for c in a.co_consts if isinstance(c, CodeType)]
    nested_b = [c for c in b.co_consts if isinstance(c, CodeType)]
    plain_a = [c for c in a.co_consts if not isinstance(c, CodeType)]
    plain_b = [c for c in b.co_consts if not isinstance(c, CodeType)]
    same_nested = len(nested_a) == len(nested_b) and all(map(_codes_equal, nested_a, nested_b))
    return plain_a == plain_b and same_nested


def _only_value_stores_differ(fast: CodeType, source: str) -> bool:
    """`fast` is `compile(source)` with some POP_TOPs turned into stores of the value name."""
    plain = compile(source, fast.co_filename, "exec", dont_inherit=True)
    if fast.co_consts != plain.co_consts or fast.co_names[: len(plain.co_names)] != plain.co_names:
        return False
    index = fast.co_names.index(_compile.VALUE_NAME)
    pop, store = dis.opmap["POP_TOP"], dis.opmap["STORE_NAME"]
    changed = 0
    for i in range(0, len(plain.co_code), 2):
        pair, was = fast.co_code[i : i + 2], plain.co_code[i : i + 2]
        if pair != was:
            if was[0] != pop or pair != bytes([store, index]):
                return False
            changed += 1
    return changed > 0 and len(fast.co_code) == len(plain.co_code)


def _outcomes(cell: CompiledCell, names: list[str], seed: int) -> list[tuple[str, str]]:
    """What running the cell does, under a few bindings of `names` (values chosen so both sides
    of each `if`, `and`, `or` and comparison are taken)."""
    assert cell.body is not None
    found = []
    rng = random.Random(seed)
    for _ in range(6):
        ns = {n: rng.choice([0, 1, 2, [], [1, 2], "", "s"]) for n in names}
        try:
            exec(cell.body, ns)
            value = ns.pop(_compile.VALUE_NAME, "<none>") if cell.has_value else "<none>"
            found.append(("ok", re.sub(r" at 0x[0-9a-f]+", "", repr(value))))
        except Exception as exc:  # the cell's own errors are part of its outcome
            found.append(("raised", type(exc).__name__))
    return found


def _tree_path(source: str, runtime: object) -> CompiledCell:
    previous = _compile._FAST
    _compile._FAST = False
    try:
        return _compile._compile(source, runtime)  # type: ignore[arg-type]
    finally:
        _compile._FAST = previous


# Cells written here, safe to run: their names are bound to plain values, their imports are stdlib.
RUNNABLE = {*SHAPES, *_generated(1500, seed=18), *_generated_tails(4000, seed=19)} - {
    s for s in SHAPES if "open(" in s or "exec(" in s
}


@pytest.mark.parametrize("policy", ["trusted", "strict", "standard"])
def test_the_fast_path_compiles_what_the_tree_path_compiles(policy: str) -> None:
    runtime = POLICIES[policy]
    taken = valued = ran = 0
    wrong: list[str] = []
    for source in CORPUS:
        if _compile._needs_tree(source):
            continue
        try:
            code = compile(source, "<cell-x>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            continue
        fast = _compile._from_source(code, source, "<cell-x>", tuple(source.splitlines()), runtime)
        if fast is None:
            continue
        taken += 1
        valued += fast.has_value
        slow = _tree_path(source, runtime)
        if slow.findings and _dead_constants_only(source):
            continue
        problems = []
        if slow.findings or slow.syntax_error is not None or slow.body is None or fast.body is None:
            problems.append(f"the tree path refuses it: {slow.findings or slow.syntax_error}")
        else:
            if fast.has_value != slow.has_value:
                problems.append(f"value: fast {fast.has_value}, tree {slow.has_value}")
            if not (fast.names >= slow.names and fast.global_names == slow.global_names):
                problems.append(f"names: fast {sorted(fast.names)}, tree {sorted(slow.names)}")
            if (fast.dynamic, fast.touches_host) != (slow.dynamic, slow.touches_host):
                problems.append("dynamic/touches_host differ")
            if not _codes_equal(fast.body, slow.body):
                # An `a if b else c` stores its value once per branch; the tree path stores it once
                # after the branches join. Both must be the source's own code and do the same.
                if not fast.has_value or not _only_value_stores_differ(fast.body, source):
                    problems.append("different code")
                elif source in RUNNABLE and policy == "trusted":
                    ran += 1
                    names = sorted(n for n in fast.names | slow.names if n != _compile.VALUE_NAME)
                    if _outcomes(fast, names, len(source)) != _outcomes(slow, names, len(source)):
                        problems.append("different outcomes")
        if problems:
            wrong.append(f"{source!r}: {'; '.join(problems)}")
    assert not wrong, "\n".join(wrong[:20])
    assert taken > 500 and valued > 200
    assert policy != "trusted" or ran > 10


@pytest.mark.parametrize(
    "source",
    [
        "if False:\n    10 ** 10 ** 10",  # the documented reading: nothing named, nothing run
    ],
)
def test_a_removed_branch_without_names_is_judged_by_the_code_that_runs(source: str) -> None:
    runtime = POLICIES["strict"]
    assert runtime.audit(ast.parse(source), source)  # the tree would refuse the constant
    assert runtime.screen(compile(source, "<cell>", "exec"), source)  # the code holds nothing to refuse


@pytest.mark.parametrize(
    "source",
    [
        "if False:\n    import os",
        "if False:\n    open('f')",
        "raise ValueError('x')\nimport os",
        "def f():\n    return 1\n    g.__class__",
        "while True:\n    pass\nz = eval('1')",
    ],
)
def test_a_removed_branch_that_names_something_is_judged_by_the_tree(source: str) -> None:
    runtime = POLICIES["strict"]
    assert runtime.audit(ast.parse(source), source)
    assert not runtime.screen(compile(source, "<cell>", "exec"), source)
