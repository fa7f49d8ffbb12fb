"""Complete attack chains from earlier security reviews, under both policies: each stops at its first step.

A dataclass field renamed to source text, which dataclasses pastes into generated code.
A class claiming the module 'importlib._bootstrap', so that frames of its methods look like
the import machinery's. The neighbours (dataclasses with defaults, inheritance, field(), typing
annotations, collections.Counter) keep working.
"""

from __future__ import annotations

from _security import ok, refusal, run

from genpark_repl_tools import ReplEngine

ISSUE_12 = """
import dataclasses
@dataclasses.dataclass
class A:
    a: int = 0
payload = 'a,))\\n raise LookupError(__import__("builtins").__dict__)'
payload += '\\n def q(self):\\n  return hash((self.a'
dataclasses.fields(A)[0].name = payload
try:
    @dataclasses.dataclass(init=False, repr=False, eq=False, unsafe_hash=True)
    class B(A): pass
except LookupError as e:
    bi = e.args[0]
"""
ISSUE_22 = """
import dataclasses, typing
class H:
    x: '(i for i in ()).throw(LookupError(__import__("builtins").__dict__))'
class Base:
    def __post_init__(self):
        typing.get_type_hints(H)
A = dataclasses.dataclass(type('A', (Base,), {'__module__': 'importlib._bootstrap'}))
A()
"""
NEIGHBOURS = """
import dataclasses, typing, collections
@dataclasses.dataclass
class Base:
    name: str
    tags: typing.List[str] = dataclasses.field(default_factory=list)
@dataclasses.dataclass
class Item(Base):
    count: int = 1
    weights: typing.Dict[str, float] = dataclasses.field(default_factory=dict)
it = Item('x', ['a'], 3)
it.count += 1
c = collections.Counter(['a', 'b', 'a'])
(it, dataclasses.asdict(it)['count'], c.most_common(1), '{} {:.1f}'.format('n', 2.25))
"""


def test_issue_12_stops_at_the_field_write(engine: ReplEngine) -> None:
    assert "changing attribute 'name' of a dataclass field is not allowed" in refusal(run(engine, ISSUE_12))


def test_issue_22_stops_at_the_forged_module(engine: ReplEngine) -> None:
    assert "type(): the class attribute '__module__' is not allowed" in refusal(run(engine, ISSUE_22))


def test_the_neighbours_keep_working(engine: ReplEngine) -> None:
    assert ok(run(engine, NEIGHBOURS)).value == (
        "(Item(name='x', tags=['a'], count=4, weights={}), 4, [('a', 2)], 'n 2.2')"
    )
