"""Names checked by their text but used by hash, equality or str(): each is used as the plain str checked.

A str subclass can pass a check as 'x' and then hash and compare equal to '__array_interface__' in
a class namespace (numpy would then read raw memory at an address of its choosing), or format
itself into generated source as anything. A class cannot choose the module it claims to come from.
"""

from __future__ import annotations

import pytest
from _security import ok, refusal, run

from genpark_repl_tools import ReplEngine

COLLIDING = (
    "class Sneaky(str):\n"
    "    def __hash__(self):\n"
    "        return hash('__array_interface__')\n"
    "    def __eq__(self, other):\n"
    "        return True\n"
    "key = Sneaky('x')\n"
)
TYPE_KEY = (
    COLLIDING + "C = type('C', (), {key: {'data': (0, False)}})\n(hasattr(C, '__array_interface__'), C.x)"
)
NON_STR_KEY = (
    "class Key:\n"
    "    def __hash__(self):\n"
    "        return hash('__array_interface__')\n"
    "    def __eq__(self, other):\n"
    "        return True\n"
    "type('C', (), {Key(): 1})"
)
ENUM_KEY = (
    COLLIDING + "import enum\nE = enum.Enum('E', {key: 1})\n(hasattr(E, '__array_interface__'), E.x.value)"
)
FORMATTED = (
    "class Shifty(str):\n"
    "    def __str__(self):\n"
    "        return 'a=0)\\n    raise LookupError(1)\\n    def q(self'\n"
    "    def __format__(self, spec):\n"
    "        return str(self)\n"
    "import dataclasses\n"
    "P = dataclasses.make_dataclass('P', [(Shifty('a'), int, 0)])\n"
    "(P(a=3).a, [f.name for f in dataclasses.fields(P)])"
)
FORGED_MODULE = "A = type('A', (), {'__module__': 'importlib._bootstrap'})"
LEGIT = (
    "import dataclasses\n"
    "P = type('P', (), {'x': 1, 'twice': lambda self: 2 * self.x, '__doc__': 'a point'})\n"
    "Q = dataclasses.make_dataclass('Q', ['a', ('b', int), ('c', int, dataclasses.field(default=3))])\n"
    "q = Q(1, 2)\n"
    "(P().twice(), P.__doc__, P.__module__, q, Q.__module__)"
)


def test_type_stores_the_key_it_checked(engine: ReplEngine) -> None:
    assert ok(run(engine, TYPE_KEY)).value == "(False, {'data': (0, False)})"


def test_type_refuses_keys_that_are_not_str(engine: ReplEngine) -> None:
    assert refusal(run(engine, NON_STR_KEY)) == (
        f"type(): the class attribute Key key is not allowed under policy '{engine.policy.name}'; "
        "names must be str"
    )


def test_enum_functional_api_stores_the_names_it_checked(engine: ReplEngine) -> None:
    assert ok(run(engine, ENUM_KEY)).value == "(False, 1)"


def test_make_dataclass_generates_code_from_the_checked_names(engine: ReplEngine) -> None:
    assert ok(run(engine, FORMATTED)).value == "(3, ['a'])"


def test_a_class_cannot_claim_a_module(engine: ReplEngine) -> None:
    assert refusal(run(engine, FORGED_MODULE)) == (
        f"type(): the class attribute '__module__' is not allowed under policy '{engine.policy.name}'; "
        "define special methods in a class statement"
    )


def test_make_dataclass_cannot_claim_a_module(engine: ReplEngine) -> None:
    code = "import dataclasses\ndataclasses.make_dataclass('P', ['a'], module='importlib._bootstrap')"
    assert "make_dataclass(module=...)" in refusal(run(engine, code))


def test_ordinary_namespaces_and_plain_names_still_work(engine: ReplEngine) -> None:
    assert ok(run(engine, LEGIT)).value == "(2, 'a point', '__main__', Q(a=1, b=2, c=3), '__main__')"


@pytest.mark.parametrize("names", ["'A B'", "['A', 'B']", "[('A', 1), ('B', 2)]", "{'A': 1, 'B': 2}"])
def test_enum_functional_api_takes_every_form_of_names(engine: ReplEngine, names: str) -> None:
    assert (
        ok(run(engine, f"import enum\nE = enum.Enum('E', {names})\n[m.name for m in E]")).value
        == "['A', 'B']"
    )


CLAIMS = {
    "namedtuple": "import collections\ncollections.namedtuple('P', 'x y', module='importlib._bootstrap')",
    "enum": "import enum\nenum.Enum('E', 'A B', module='importlib._bootstrap')",
}


@pytest.mark.parametrize("code", list(CLAIMS.values()), ids=list(CLAIMS))
def test_class_factories_cannot_claim_a_module(engine: ReplEngine, code: str) -> None:
    assert "module=" in refusal(run(engine, code))


def test_class_factories_without_a_module_still_work(engine: ReplEngine) -> None:
    code = (
        "import collections, enum\n"
        "P = collections.namedtuple('P', 'x y', defaults=[0])\n"
        "E = enum.Enum('E', 'A B', start=5)\n"
        "(P(1), E.B.value)"
    )
    assert ok(run(engine, code)).value == "(P(x=1, y=0), 6)"


def test_pandas_gets_the_method_names_it_checked(engine: ReplEngine) -> None:
    pytest.importorskip("pandas")
    if engine.policy.name == "strict":
        pytest.skip("pandas is not allowed under strict")
    code = (
        "class Name(str):\n"
        "    def __eq__(self, other):\n"
        "        return True\n"
        "    def __hash__(self):\n"
        "        return hash('sum')\n"
        "import pandas as pd\n"
        "df = pd.DataFrame({'a': [1, 2]})\n"
        "(df.agg(Name('sum')).tolist(), df.agg([Name('max')]).a.tolist())"
    )
    assert ok(run(engine, code)).value == "([3], [2])"
