"""Attributes: private and internal names are refused statically, and again when computed at run time."""

from __future__ import annotations

import pytest
from _security import blocked, ok, refusal, run

from genpark_repl_tools import ReplEngine

SUBCLASSES_WALK = "().__class__.__base__.__subclasses__()"
MRO_WALK = "type(()).mro()[-1].__subclasses__()"
PRINT_SELF = "print.__self__"
FUNCTION_GLOBALS = "(lambda: 0).__globals__"
MODULE_DICT = "import math\nmath.__dict__['pi'] = 3"
GETATTR_CLASS = "getattr((), '__cl' + 'ass__')"
GETATTR_GLOBALS = "getattr(lambda: 0, '__glo' + 'bals__')"
GETATTR_DEFAULT = "getattr((), '__class__', None)"
SETATTR_PRIVATE = "class A:\n    pass\nsetattr(A, '__init__', print)"
DELATTR_PRIVATE = "class A:\n    x = 1\ndelattr(A, '_' + '_doc__')"
ATTRGETTER = "import operator\noperator.attrgetter('real.__class__')(1)"
METHODCALLER = "import operator\noperator.methodcaller('__reduce_ex__', 2)(1)"
STR_SUBCLASS_NAME = (
    "class Sneaky(str):\n"
    "    def startswith(self, *args):\n"
    "        return False\n"
    "    def isascii(self):\n"
    "        return True\n"
    "getattr((), Sneaky('__class__'))"
)
DUNDER_KEYWORD = "dict(__class__=1)"
MATCH_KEYWORD = "match 1:\n    case int(__class__=c):\n        pass"
TWO_ARG_SUPER = "class A:\n    pass\nsuper(A, A()).__init__"
GETATTR_PROBE = (
    "class A:\n    def __getattr__(self, name):\n        return 42\na = A()\n(a.anything, "
    "hasattr(a, '_' + '_array_interface__'))"
)

PRIVATE = "names starting with '_' are private"


@pytest.mark.parametrize(
    ("code", "name", "hint"),
    [
        (SUBCLASSES_WALK, "__class__", "use type(obj)"),
        (MRO_WALK, "__subclasses__", "use the public API instead"),
        (PRINT_SELF, "__self__", "use the public API instead"),
        (FUNCTION_GLOBALS, "__globals__", "use the public API instead"),
        (MODULE_DICT, "__dict__", "use getattr(obj, name) or dataclasses.asdict(obj)"),
        (TWO_ARG_SUPER, "__init__", "inside a method, call super().__init__(...)"),
        (MATCH_KEYWORD, "__class__", "use type(obj)"),
    ],
)
def test_private_attributes_are_refused_before_running(
    engine: ReplEngine, code: str, name: str, hint: str
) -> None:
    assert blocked(run(engine, code)) == (
        f"attribute '{name}' is not allowed under policy '{engine.policy.name}': {PRIVATE}; {hint}"
    )


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (GETATTR_CLASS, "__class__"),
        (GETATTR_GLOBALS, "__globals__"),
        (GETATTR_DEFAULT, "__class__"),
        (SETATTR_PRIVATE, "__init__"),
        (DELATTR_PRIVATE, "__doc__"),
        (ATTRGETTER, "__class__"),
        (METHODCALLER, "__reduce_ex__"),
        (STR_SUBCLASS_NAME, "__class__"),
    ],
)
def test_computed_private_names_are_refused_at_run_time(engine: ReplEngine, code: str, name: str) -> None:
    assert refusal(run(engine, code)).startswith(
        f"attribute '{name}' is not allowed under policy '{engine.policy.name}': {PRIVATE}"
    )


def test_dunder_keywords_are_refused(engine: ReplEngine) -> None:
    assert blocked(run(engine, DUNDER_KEYWORD)) == (
        f"keyword '__class__' is not allowed under policy '{engine.policy.name}': names starting with "
        "'__' are reserved"
    )


def test_getattr_of_a_class_never_answers_private_names(engine: ReplEngine) -> None:
    # Libraries probe objects for protocols such as __array_interface__ through __getattr__.
    assert ok(run(engine, GETATTR_PROBE)).value == "(42, False)"


@pytest.mark.parametrize(
    ("code", "value"),
    [
        ("type(1.5).__name__", "'float'"),
        ("def f():\n    'doc'\n(f.__name__, f.__doc__, f.__qualname__)", "('f', 'doc', 'f')"),
        ("import json\njson.dumps.__module__", "'json'"),
        ("__name__", "'__main__'"),
        ("getattr(1, 'real')", "1"),
        ("getattr(1, 'missing', 'default')", "'default'"),
        ("hasattr([], '__len__')", "True"),
        ("class P:\n    pass\np = P()\nsetattr(p, 'x', 3)\np.x", "3"),
        (
            "from collections import namedtuple\nP = namedtuple('P', 'x y')\nP(1, 2)._asdict()",
            "{'x': 1, 'y': 2}",
        ),
        (
            "from collections import namedtuple\nP = namedtuple('P', 'x y')\nP(1, 2)._replace(y=5)",
            "P(x=1, y=5)",
        ),
        (
            "class Base:\n    def __init__(self, x):\n        self.x = x\n"
            "class Child(Base):\n    def __init__(self):\n        super().__init__(7)\nChild().x",
            "7",
        ),
        ("import operator\noperator.attrgetter('real', 'imag')(3)", "(3, 0)"),
        ("import operator\noperator.methodcaller('upper')('ab')", "'AB'"),
        ("'x_y'.split('_')", "['x', 'y']"),
        ("_private = 1\n_ = 2\n_private + _", "3"),
        ("[name for name in dir(1) if name.startswith('_')]", "[]"),
    ],
)
def test_public_attributes_and_readable_names_work(engine: ReplEngine, code: str, value: str) -> None:
    assert ok(run(engine, code)).value == value


@pytest.mark.parametrize(
    "name",
    [
        "f_globals",
        "f_back",
        "f_builtins",
        "f_locals",
        "gi_frame",
        "gi_code",
        "cr_frame",
        "ag_frame",
        "tb_frame",
        "co_code",
    ],
)
def test_internal_names_are_refused(engine: ReplEngine, name: str) -> None:
    assert blocked(run(engine, f"x = object()\nx.{name}")) == (
        f"attribute '{name}' is not allowed under policy '{engine.policy.name}': "
        "frame, code and traceback internals are not available"
    )
