"""Code that libraries compile for the session runs only if the hook verified what it is.

dataclasses, namedtuple and typing build source text from names the session chose and `exec` it
with the host's globals. The hook judges that code by its content (generated shapes, names the
session may use), never by which module asks to run it.
"""

from __future__ import annotations

import sys

import pytest
from _security import ok, refusal, run

from genpark_repl_tools import ReplEngine

REFUSED = "running code built at run time (exec, eval, templates, string annotations) is not allowed"

# A Field is a host object the session may change; dataclasses pastes its name into source.
FIELD_NAME_INJECTION = """import dataclasses
@dataclasses.dataclass
class A:
    a: int = 0
dataclasses.fields(A)[0].name = ('a,))\\n raise LookupError(__import__("builtins").__dict__)'
    '\\n def q(self):\\n  return hash((self.a')
try:
    @dataclasses.dataclass(init=False, repr=False, eq=False, unsafe_hash=True)
    class B(A): pass
except LookupError as e:
    bi = e.args[0]
"""
# The same through an inherited field, in the shapes of __eq__, __hash__ and a frozen __init__.
INHERITED_EQ = """import dataclasses
@dataclasses.dataclass
class A:
    a: int = 0
dataclasses.fields(A)[0].name = 'a,type.__setattr__(int,"real",0)'
@dataclasses.dataclass(init=False, repr=False)
class B(A):
    pass
"""
HASH_INJECTION = """import dataclasses
@dataclasses.dataclass
class A:
    a: int = 0
dataclasses.fields(A)[0].name = 'a,open("/etc/hostname")'
@dataclasses.dataclass(init=False, repr=False, eq=False, unsafe_hash=True)
class B(A):
    pass
"""
PRIVATE_FIELD_NAME = """import dataclasses
@dataclasses.dataclass(frozen=True)
class A:
    a: int = 0
dataclasses.fields(A)[0].name = '__class__'
@dataclasses.dataclass(frozen=True)
class B(A):
    pass
"""
STRING_ANNOTATION_CALL = """import typing
def f(x: 'len(__import__("os").environ)'):
    pass
typing.get_type_hints(f)
"""
STRING_ANNOTATION_HOST_GLOBALS = """import typing
class C:
    x: 'int'
typing.get_type_hints(C)
"""
STRING_ANNOTATION_OWN_NAMESPACE = """import typing
def f(x: 'getattr'):
    pass
typing.get_type_hints(f, globalns={})
"""
STRING_ANNOTATION_PRIVATE = """import typing
def f(x: '__builtins__'):
    pass
typing.get_type_hints(f)
"""

LEGITIMATE = """import collections, dataclasses, typing
@dataclasses.dataclass(order=True)
class P:
    x: int = 0
    tags: list[str] = dataclasses.field(default_factory=list)
    note: typing.Optional[str] = None
@dataclasses.dataclass(kw_only=True)
class Q(P):
    y: float = 1.5
    def __post_init__(self):
        self.y = self.y * 2
@dataclasses.dataclass(frozen=True, eq=True)
class F:
    a: int
    b: str = 'b'
N = collections.namedtuple('N', 'a b')
class T(typing.NamedTuple):
    u: int
    v: str = 'x'
M = dataclasses.make_dataclass('M', ['p', ('q', int), ('r', list, dataclasses.field(default_factory=list))])
def f(a: int, b: 'str') -> 'list[int]':
    return []
hints = typing.get_type_hints(f)
class_hints = typing.get_type_hints(P)
(P(1) < P(2), Q(x=1, y=2.0).y, repr(F(1)), hash(F(1)) == hash(F(1)), F(1) == F(1), N(1, 2)._asdict(),
 T(1), M(1, 2).r, sorted(hints), sorted(class_hints), collections.Counter('abca').most_common(1))
"""
LEGITIMATE_VALUE = (
    "(True, 4.0, \"F(a=1, b='b')\", True, True, {'a': 1, 'b': 2}, T(u=1, v='x'), [], "
    "['a', 'b', 'return'], ['note', 'tags', 'x'], [('a', 2)])"
)


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (FIELD_NAME_INJECTION, "it is not generated code of a known shape"),
        (INHERITED_EQ, "it calls a special setter"),
        (HASH_INJECTION, "it uses the global name 'open'"),
        (PRIVATE_FIELD_NAME, "a parameter is the private name '__class__'"),
        (STRING_ANNOTATION_CALL, "a string annotation may only name types (Call found)"),
        (STRING_ANNOTATION_HOST_GLOBALS, "a string annotation would be evaluated in a module of the host"),
        (STRING_ANNOTATION_OWN_NAMESPACE, "a string annotation would be evaluated in a module of the host"),
        (STRING_ANNOTATION_PRIVATE, "the annotation uses the private name '__builtins__'"),
    ],
    ids=[
        "field-name",
        "inherited-eq",
        "hash",
        "private-field",
        "annotation-call",
        "class-hints",
        "globalns",
        "private-name",
    ],
)
def test_generated_code_runs_only_if_verified(engine: ReplEngine, code: str, reason: str) -> None:
    message = refusal(run(engine, code))
    # The guards may refuse the first step (a write to a dataclass Field) before the hook judges the
    # generated code; either way nothing generated runs. The hook's own check, with every guard out of
    # the way, is what test_hook_integrity.py exercises.
    first_layer = "changing attribute 'name' of a dataclass field is not allowed"
    hook = f"{REFUSED} under policy '{engine.policy.name}'; {reason}"
    assert message.startswith((first_layer, hook)), message


def test_dataclasses_namedtuple_and_type_hints_still_work(engine: ReplEngine) -> None:
    assert ok(run(engine, LEGITIMATE)).value == LEGITIMATE_VALUE


def test_int_is_untouched_after_the_eq_injection(engine: ReplEngine) -> None:
    refusal(run(engine, INHERITED_EQ))
    assert (5).real == 5


# String annotations that are bare names: from Python 3.14 typing looks them up instead of compiling
# them, so the hook never sees them; the session's typing looks them up in the session's names only.
FORWARD_REFERENCE_NEIGHBOURS = """import dataclasses, typing
class Later:
    pass
def f(a: 'Later', b: 'list[int]', c: 'getattr', d: 'typing.Optional[Later]') -> 'str':
    pass
@dataclasses.dataclass
class P:
    x: 'int'
    y: 'Later' = None
class N(typing.NamedTuple):
    a: 'Later'
    b: int = 0
class Plain:
    u: int
    v: list[str]
h = typing.get_type_hints(f)
(h['a'] is Later, h['b'] == list[int], h['c'] is getattr, h['d'] == typing.Optional[Later],
 h['return'] is str, P(1).x, N(Later()).b, typing.get_type_hints(Plain) == {'u': int, 'v': list[str]})
"""


def test_string_annotations_naming_the_sessions_classes_and_builtins_work(engine: ReplEngine) -> None:
    assert ok(run(engine, FORWARD_REFERENCE_NEIGHBOURS)).value == "(True, True, True, True, True, 1, 0, True)"


def test_a_string_annotation_gets_the_sessions_builtin_never_the_real_one(engine: ReplEngine) -> None:
    code = "import typing\ndef f(a: 'vars'):\n    pass\ntyping.get_type_hints(f)['a'](f)"
    assert refusal(run(engine, code)).startswith("builtin 'vars' is not available")


def test_a_forward_reference_naming_a_host_module_is_not_looked_up_there(engine: ReplEngine) -> None:
    # TypedDict's forward references name the class's module, the host's __main__; get_type_hints()
    # would look them up there even with a namespace given. Refused, or not found in the namespace.
    code = (
        "import typing\nclass D(typing.TypedDict):\n    a: 'ReplEngine'\n"
        "typing.get_type_hints(D, globalns={'__builtins__': {}})"
    )
    result = run(engine, code)
    assert result.status in ("error", "blocked"), result.to_observation()
    assert result.error is not None and result.error.type in ("PolicyViolation", "NameError"), result.error


@pytest.mark.skipif(
    sys.version_info < (3, 14), reason="ForwardRef.evaluate() and evaluate_forward_ref() are 3.14+"
)
@pytest.mark.parametrize(
    "code",
    [
        "typing.ForwardRef('ReplEngine', module='__main__').evaluate()",
        "typing.ForwardRef('ReplEngine', owner=int).evaluate()",
        "typing.evaluate_forward_ref(typing.ForwardRef('ReplEngine'), owner=typing)",
        "typing.ForwardRef.evaluate(typing.ForwardRef('getattr'), globals={})",
    ],
    ids=["module", "owner-class", "owner-module", "unbound-globals"],
)
def test_forward_refs_are_not_evaluated_in_host_namespaces(engine: ReplEngine, code: str) -> None:
    hook = (
        f"{REFUSED} under policy '{engine.policy.name}'; a string annotation would be evaluated in a module"
    )
    assert refusal(run(engine, f"import typing\n{code}")).startswith(hook)


@pytest.mark.skipif(
    sys.version_info < (3, 14), reason="ForwardRef.evaluate() and evaluate_forward_ref() are 3.14+"
)
def test_forward_refs_evaluate_in_the_sessions_names(engine: ReplEngine) -> None:
    code = """import typing
class Later:
    pass
def f():
    pass
(typing.ForwardRef('Later').evaluate(owner=f) is Later,
 typing.evaluate_forward_ref(typing.ForwardRef('list[Later]'), owner=f) == list[Later],
 typing.ForwardRef.evaluate(typing.ForwardRef('getattr'), owner=f) is getattr)
"""
    assert ok(run(engine, code)).value == "(True, True, True)"
    missing = "import typing\ntyping.ForwardRef('vars').evaluate(globals={'__builtins__': {}})"
    result = run(engine, missing)
    assert result.error is not None and result.error.type == "NameError", result.to_observation()
