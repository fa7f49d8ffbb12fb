"""Classes, decorators and metaclasses: the host's classes are read-only; the session's are its own."""

from __future__ import annotations

import collections
import json
import queue
import random

import pytest
from _security import blocked, ok, refusal, run

from genpark_repl_tools import ReplEngine

COUNTER_METHOD = "import collections\ncollections.Counter.most_common = lambda self, n=None: []"
RANDOM_METHOD = "import random\nrandom.Random.random = lambda self: 0.5"
QUEUE_METHOD = "import queue\nqueue.Queue.put = lambda *a: None"
ENCODER_METHOD = "import json\njson.JSONEncoder.default = lambda self, o: 'x'"
BUILTIN_TYPE = "int.real = 1"
SETATTR_CLASS = "import collections\nsetattr(collections.Counter, 'most_common', print)"
DELATTR_CLASS = "import collections\ndelattr(collections.OrderedDict, 'popitem')"
UNBOUND_METHOD = (
    "import collections\nclass A:\n    def poison(self, v):\n        self.most_common = "
    "v\nA.poison(collections.Counter, 1)"
)
PLAIN_FUNCTION = (
    "import collections\ndef poison(obj, v):\n    obj.most_common = v\npoison(collections.Counter, 1)"
)
HOST_FUNCTION_ATTRIBUTE = "import json\njson.dumps.cache = {}"
METACLASS_FUNCTION = (
    "import collections\nclass X(metaclass=lambda name, bases, ns: collections.Counter):\n    pass"
)
DEFINE_METACLASS = "class Meta(type):\n    pass"
TYPE_OF_ABC = "import abc\ntype(abc.ABC)"
TYPE_THREE_ARGS_DUNDER = "type('X', (), {'__del__': print})"
METACLASS_CALL = "type(int)('X', (), {'__array_interface__': {}})"
ENUM_FUNCTIONAL = "import enum\nenum.Enum('E', {'__array_interface__': 1, 'A': 2})"
MAKE_DATACLASS = "import dataclasses\ndataclasses.make_dataclass('X', [], namespace={'__del__': print})"
DATACLASS_HOST = "import dataclasses, collections\ndataclasses.dataclass(collections.Counter)"
TOTAL_ORDERING_HOST = "import functools, collections\nfunctools.total_ordering(collections.OrderedDict)"
UPDATE_WRAPPER_HOST = "import functools, json\ndef f():\n    pass\nfunctools.update_wrapper(json.dumps, f)"
UPDATE_WRAPPER_GLOBALS = (
    "import functools\ndef f():\n    pass\nfunctools.update_wrapper(f, "
    "functools.reduce, assigned=(), updated=('__globals__',))"
)
ABC_REGISTER = "import collections.abc\ncollections.abc.Mapping.register(list)"
SINGLEDISPATCH_HOST = (
    "import functools, pprint\nfunctools.singledispatch(pprint.pformat).register(int, print)"
)
SPECIAL_METHODS = {
    "__del__": "a finalizer runs whenever the object is collected, outside the time limit",
    "__getattribute__": "it would intercept every attribute read, including the host's",
    "__init_subclass__": "class-creation hooks are not available",
    "__set_name__": "class-creation hooks are not available",
    "__class_getitem__": "class-creation hooks are not available",
    "__instancecheck__": "it would run code inside the host's isinstance() checks",
    "__reduce__": "pickling is not available",
}
SHARED = "it is shared with the host, not defined by this session; subclass it and change that"


@pytest.mark.parametrize(
    ("code", "attr", "cls"),
    [
        (COUNTER_METHOD, "most_common", "Counter"),
        (RANDOM_METHOD, "random", "Random"),
        (QUEUE_METHOD, "put", "Queue"),
        (ENCODER_METHOD, "default", "JSONEncoder"),
        (BUILTIN_TYPE, "real", "int"),
        (SETATTR_CLASS, "most_common", "Counter"),
        (DELATTR_CLASS, "popitem", "OrderedDict"),
    ],
)
def test_host_classes_are_read_only(engine: ReplEngine, code: str, attr: str, cls: str) -> None:
    before = (
        collections.Counter.most_common,
        random.Random.random,
        queue.Queue.put,
        json.JSONEncoder.default,
    )
    assert refusal(run(engine, code)) == (
        f"changing attribute '{attr}' of class '{cls}' is not allowed under policy "
        f"'{engine.policy.name}'; {SHARED}"
    )
    assert (
        collections.Counter.most_common,
        random.Random.random,
        queue.Queue.put,
        json.JSONEncoder.default,
    ) == before


@pytest.mark.parametrize("code", [UNBOUND_METHOD, PLAIN_FUNCTION])
def test_functions_called_with_a_host_class_cannot_change_it(engine: ReplEngine, code: str) -> None:
    assert refusal(run(engine, code)) == (
        f"changing attribute of class 'Counter' is not allowed under policy '{engine.policy.name}'; {SHARED}"
    )
    assert not hasattr(collections.Counter, "poison") and callable(collections.Counter.most_common)


def test_host_functions_are_read_only(engine: ReplEngine) -> None:
    assert refusal(run(engine, HOST_FUNCTION_ATTRIBUTE)) == (
        f"changing attribute 'cache' of function 'dumps' is not allowed under policy '{engine.policy.name}'; "
        "it is not defined by this session"
    )


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (
            METACLASS_FUNCTION,
            "metaclass=function for class 'X' is not allowed under policy '{policy}'; metaclasses must "
            "be classes",
        ),
        (
            DEFINE_METACLASS,
            "defining the metaclass 'Meta' (a subclass of 'type') is not allowed under policy "
            "'{policy}'; define ordinary classes",
        ),
        (
            TYPE_OF_ABC,
            "type() of class 'ABC' (its metaclass) is not allowed under policy '{policy}'; use "
            "isinstance() checks",
        ),
        (
            TYPE_THREE_ARGS_DUNDER,
            "type(): the class attribute '__del__' is not allowed under policy '{policy}'; define "
            "special methods in a class statement",
        ),
        (
            METACLASS_CALL,
            "type(): the class attribute '__array_interface__' is not allowed under policy '{policy}'; "
            "define special methods in a class statement",
        ),
        (
            ENUM_FUNCTIONAL,
            "enum member name '__array_interface__' is not allowed: names starting with '_' are private",
        ),
        (
            MAKE_DATACLASS,
            "make_dataclass(): the name '__del__' is not allowed under policy '{policy}'; names starting "
            "with '_' are private",
        ),
        (
            DATACLASS_HOST,
            "dataclass() on a class not defined by this session is not allowed under policy '{policy}'",
        ),
        (
            TOTAL_ORDERING_HOST,
            "functools.total_ordering() on a class not defined by this session is not allowed under "
            "policy '{policy}'",
        ),
        (
            UPDATE_WRAPPER_HOST,
            "update_wrapper()/wraps() on an object not defined by this session is not allowed under "
            "policy '{policy}'",
        ),
        (
            UPDATE_WRAPPER_GLOBALS,
            "update_wrapper()/wraps() with custom attribute names is not allowed under policy '{policy}'",
        ),
        (
            ABC_REGISTER,
            "registering classes with 'Mapping' is not allowed under policy '{policy}'; it would change "
            "isinstance() "
            "for the host and other sessions; subclass it instead",
        ),
        (
            SINGLEDISPATCH_HOST,
            "registering implementations with a single-dispatch function not defined by this session is "
            "not allowed "
            "under policy '{policy}'",
        ),
    ],
)
def test_class_factories_and_decorators_accept_only_the_sessions_own(
    engine: ReplEngine, code: str, message: str
) -> None:
    assert refusal(run(engine, code)) == message.format(policy=engine.policy.name)
    assert not isinstance([], collections.abc.Mapping)


@pytest.mark.parametrize("name", sorted(SPECIAL_METHODS))
def test_unreviewed_special_methods_are_refused(engine: ReplEngine, name: str) -> None:
    assert blocked(run(engine, f"class A:\n    def {name}(self, *args):\n        pass")) == (
        f"defining '{name}' is not allowed under policy '{engine.policy.name}': {SPECIAL_METHODS[name]}; "
        "allowed special methods include __init__, __repr__, __eq__, __len__, __iter__, __getitem__, "
        "__call__, "
        "__enter__/__exit__ and the operators"
    )


def test_private_class_hooks_are_refused(engine: ReplEngine) -> None:
    assert blocked(run(engine, "class A:\n    _type_ = 'z'")) == (
        f"class attribute '_type_' is not allowed under policy '{engine.policy.name}': "
        "names like _x_ are hooks of the host's libraries"
    )
    assert blocked(run(engine, "class A:\n    __secret = 1")) == (
        f"name '__secret' is not allowed under policy '{engine.policy.name}': names starting with '__' "
        "are reserved"
    )


VECTOR = """
class Vector:
    __slots__ = ("x", "y")
    def __init__(self, x, y):
        self.x = x
        self.y = y
    def __repr__(self):
        return f"Vector({self.x}, {self.y})"
    def __eq__(self, other):
        return (self.x, self.y) == (other.x, other.y)
    def __hash__(self):
        return hash((self.x, self.y))
    def __add__(self, other):
        return Vector(self.x + other.x, self.y + other.y)
    def __len__(self):
        return 2
    def __iter__(self):
        return iter((self.x, self.y))
    def __getitem__(self, i):
        return (self.x, self.y)[i]
    def scale(self, k):
        self.x *= k
        self.y *= k
        return self
v = Vector(1, 2) + Vector(3, 4)
(v, len(v), list(v), v[1], v == Vector(4, 6), v.scale(2))
"""


@pytest.mark.parametrize(
    ("code", "value"),
    [
        (VECTOR, "(Vector(8, 12), 2, [4, 6], 6, True, Vector(8, 12))"),
        (
            "class A:\n    count = 0\nA.count += 1\nA.extra = 'x'\nsetattr(A, 'more', 2)\n(A.count, "
            "A.extra, A.more)",
            "(1, 'x', 2)",
        ),
        ("class A:\n    pass\na = A()\na.x = 1\ndel a.x\nhasattr(a, 'x')", "False"),
        ("def f():\n    pass\nf.calls = 3\nf.calls", "3"),
        (
            "import collections\nclass C(collections.Counter):\n    pass\nC.most_common = lambda self, "
            "n=None: 'mine'\nC('ab').most_common()",
            "'mine'",
        ),
        (
            "import dataclasses\n@dataclasses.dataclass(order=True)\nclass P:\n    x: int\n    y: int = "
            "0\nsorted([P(2), P(1)])[0]",
            "P(x=1, y=0)",
        ),
        (
            "import dataclasses\nQ = dataclasses.make_dataclass('Q', ['a', ('b', int, 3)])\nQ(1)",
            "Q(a=1, b=3)",
        ),
        (
            "import functools\n@functools.total_ordering\nclass V:\n    def __init__(self, v):\n        "
            "self.v = v\n    def __eq__(self, o):\n        return self.v == o.v\n    def "
            "__lt__(self, o):\n        return self.v < o.v\nV(1) >= V(0)",
            "True",
        ),
        (
            "import functools\ndef deco(fn):\n    @functools.wraps(fn)\n    def inner(*a):\n        "
            "return fn(*a) + 1\n    return inner\n@deco\ndef two():\n    'doc'\n    return "
            "1\n(two(), two.__name__, two.__doc__)",
            "(2, 'two', 'doc')",
        ),
        (
            "import enum\nclass Color(enum.Enum):\n    RED = 1\n    BLUE = 2\n(Color.RED, Color(2).name, "
            "isinstance(Color.RED, enum.Enum))",
            "(<Color.RED: 1>, 'BLUE', True)",
        ),
        ("import enum\nShape = enum.Enum('Shape', 'CIRCLE SQUARE')\nShape.SQUARE.value", "2"),
        (
            "import abc\nclass Base(abc.ABC):\n    @abc.abstractmethod\n    def area(self): ...\nclass "
            "Sq(Base):\n    def area(self):\n        return 4\nSq().area()",
            "4",
        ),
        ("import abc\nclass Mine(abc.ABC):\n    pass\nMine.register(int)\nisinstance(1, Mine)", "True"),
        (
            "import functools\n@functools.singledispatch\ndef show(x):\n    return "
            "'any'\n@show.register\ndef _(x: int):\n    return 'int'\n(show(1), show('a'))",
            "('int', 'any')",
        ),
        (
            "class E(Exception):\n    def __init__(self, msg):\n        super().__init__(msg)\n        "
            "self.msg = msg\ntry:\n    raise E('boom')\nexcept E as e:\n    r = (str(e), e.msg)\nr",
            "('boom', 'boom')",
        ),
        (
            "class Proxy:\n    def __init__(self, target):\n        self.target = target\n    def "
            "__getattr__(self, name):\n        return getattr(self.target, name)\nProxy([1, 2]).count(2)",
            "1",
        ),
        (
            "from typing import NamedTuple\nclass P(NamedTuple):\n    x: int\n    y: int = 0\nP(1)",
            "P(x=1, y=0)",
        ),
        (
            "class K:\n    @classmethod\n    def make(cls):\n        cls.made = True\n        return "
            "cls()\n    @property\n    def name(self):\n        return 'k'\n(K.make().name, K.made)",
            "('k', True)",
        ),
    ],
)
def test_the_sessions_own_classes_work(engine: ReplEngine, code: str, value: str) -> None:
    assert ok(run(engine, code)).value == value


GETATTR_VARARGS = "class A:\n    def __getattr__(*args):\n        return {'data': (0, False)}"
GETATTR_DECORATED = (
    "def swap(f):\n    return lambda self, name: {}\nclass A:\n    @swap\n    def "
    "__getattr__(self, name):\n        return 1"
)
GETATTR_BY_TYPE = "type('A', (), {'__getattr__': lambda self, name: {}})"
STOLEN_SPECIAL_METHOD = (
    "import collections\nstolen = []\ndef grab(f):\n    stolen.append(f)\n    return f\n"
    "class A:\n    @grab\n    def __init__(self, v):\n        self.most_common = v\n"
    "stolen[0](collections.Counter, 1)"
)


@pytest.mark.parametrize("code", [GETATTR_VARARGS, GETATTR_DECORATED])
def test_getattr_must_be_a_plain_method(engine: ReplEngine, code: str) -> None:
    assert blocked(run(engine, code)) == (
        f"this '__getattr__' is not allowed under policy '{engine.policy.name}': define it undecorated as "
        "def __getattr__(self, name) (libraries ask objects for private protocol names through it)"
    )


def test_type_takes_no_special_methods(engine: ReplEngine) -> None:
    assert refusal(run(engine, GETATTR_BY_TYPE)) == (
        f"type(): the class attribute '__getattr__' is not allowed under policy '{engine.policy.name}'; "
        "define special methods in a class statement"
    )


def test_a_special_method_handed_out_by_a_decorator_still_checks_its_target(engine: ReplEngine) -> None:
    assert refusal(run(engine, STOLEN_SPECIAL_METHOD)).startswith(
        f"changing attribute of class 'Counter' is not allowed under policy '{engine.policy.name}'"
    )
    assert callable(collections.Counter.most_common)


@pytest.mark.parametrize(
    ("code", "name"),
    [
        ("import typing\ntyping.NamedTupleMeta", "typing.NamedTupleMeta"),
        ("import numbers\nnumbers.ABCMeta", "numbers.ABCMeta"),
    ],
)
def test_metaclasses_are_not_handed_out_by_modules(engine: ReplEngine, code: str, name: str) -> None:
    result = run(engine, code)
    assert result.error is not None and result.error.type == "AttributeError"
    assert result.error.message.startswith(
        f"'{name}' is not available under policy '{engine.policy.name}': it is a metaclass, which creates "
        "classes with arbitrary special attributes; subclass a class instead"
    )


# ---- a host class's guarded form, however the session reaches the class -----------------------------

PLOT = "import matplotlib.pyplot as plt\nimport matplotlib.ticker as t\nfig, ax = plt.subplots()\n"
# The formatter matplotlib makes from a format string is an instance of the host's class.
LIBRARY_FORMATTER = PLOT + "ax.xaxis.set_major_formatter('{x:.1f}')\nf = ax.xaxis.get_major_formatter()\n"
LIBRARY_COLORBAR = (
    PLOT + "image = ax.imshow([[1, 2], [3, 4]])\ncb = fig.colorbar(image)\nfig2, cax = plt.subplots()\n"
)


@pytest.mark.parametrize(
    ("code", "field"),
    [
        (LIBRARY_FORMATTER + "type(f)('{x.__class__}')(1.0)", "x.__class__"),
        (LIBRARY_COLORBAR + "type(cb)(cax, image, format='{x.__class__}')", "x.__class__"),
        (
            PLOT + "[c for c in t.StrMethodFormatter.mro() if c.__name__ == 'StrMethodFormatter'][-1]"
            "('{x.__class__}')(1.0)",
            "x.__class__",
        ),
        (
            PLOT + "class Mine(t.StrMethodFormatter):\n    pass\nMine.mro()[1]('{x.__init__}')(1.0)",
            "x.__init__",
        ),
    ],
    ids=["type() of a library's object", "type() of a colorbar", "mro()", "mro() of a subclass"],
)
def test_every_route_to_a_checked_library_class_gets_the_checked_form(
    engine: ReplEngine, code: str, field: str
) -> None:
    pytest.importorskip("matplotlib")
    if engine.policy.name == "strict":
        pytest.skip("matplotlib is not allowed under strict")
    assert refusal(run(engine, code)).startswith(f"format field '{{{field}}}'")


def test_a_class_with_shared_tables_reached_by_mro_is_the_sessions_copy(engine: ReplEngine) -> None:
    import textwrap

    code = (
        "import textwrap\n"
        "for c in textwrap.TextWrapper.mro():\n"
        "    if 'unicode_whitespace_trans' in dir(c):\n"
        "        c.unicode_whitespace_trans[65] = 'B'\n"
        "textwrap.TextWrapper().fill('A A')"
    )
    assert ok(run(engine, code)).value == "'B B'"  # the session's own copy changed
    assert 65 not in textwrap.TextWrapper.unicode_whitespace_trans
    assert ok(run(engine, "import textwrap\ntextwrap.TextWrapper().fill('A A')")).value == "'A A'"


def test_library_objects_and_their_guarded_classes_work_together(engine: ReplEngine) -> None:
    pytest.importorskip("matplotlib")
    if engine.policy.name == "strict":
        pytest.skip("matplotlib is not allowed under strict")
    code = LIBRARY_FORMATTER + (
        "class Mine(t.StrMethodFormatter):\n    pass\n"
        "(isinstance(f, t.StrMethodFormatter), type(f) is t.StrMethodFormatter, f(2.0),"
        " type(f)('{x:g}')(3.0), isinstance(f, Mine), Mine('{x:g}')(4.0),"
        " [c.__name__ for c in Mine.mro()][:3])"
    )
    value = ok(run(engine, code)).value
    assert value == "(True, True, '2.0', '3', False, '4', ['Mine', 'StrMethodFormatter', 'Formatter'])"


def test_type_of_a_library_path_and_a_queue_is_the_sessions_class(engine: ReplEngine) -> None:
    code = (
        "import queue, json\n"
        "q = queue.Queue()\n"
        "(type(q) is queue.Queue, type(json.JSONDecoder()) is json.JSONDecoder, type(1) is int, "
        "[c.__name__ for c in queue.Queue.mro()][:2])"
    )
    assert ok(run(engine, code)).value == "(True, True, True, ['Queue', 'object'])"
