"""Snapshots round-trip a session's values, code and imports; what cannot be saved says why."""

from __future__ import annotations

import importlib.metadata

import pytest
from _durable_support import keyed_engine

from genpark_repl_tools import ReplEngine
from genpark_repl_tools.snapshot import SessionSnapshot

POLICIES = ["strict", "standard", "trusted"]

FUNCTIONS = """
def fact(n):
    return 1 if n < 2 else n * fact(n - 1)

square = lambda x: x * x

def make_counter(start):
    count = start
    def inc():
        nonlocal count
        count += 1
        return count
    def get():
        return count
    return inc, get

inc, get = make_counter(10)
inc()
def scaled(x, *, factor=3):
    return x * factor
"""

CLASSES = """
import math
from dataclasses import dataclass

class Point:
    scale = 1
    def __init__(self, x, y):
        self.x, self.y = x, y
    def norm(self):
        return math.hypot(self.x, self.y) * self.scale

class Point3(Point):
    def __init__(self, x, y, z):
        super().__init__(x, y)
        self.z = z
    def norm(self):
        return super().norm() + self.z

@dataclass
class Item:
    name: str
    qty: int = 1

p = Point(3, 4)
q = Point3(3, 4, 1)
Point.scale = 2
items = [Item("a"), Item("b", 5)]
same = [p, p]
"""


def round_trip(engines: list[ReplEngine], policy: str, code: str) -> tuple[ReplEngine, SessionSnapshot]:
    """Run `code` in one engine, snapshot it to bytes, restore the bytes into a new engine."""
    first = keyed_engine(engines, policy)
    result = first.run(code)
    assert result.status == "ok", result.to_observation()
    snapshot = first.snapshot()
    second = keyed_engine(engines, policy)
    second.restore("default", snapshot.to_bytes())
    return second, snapshot


def value(engine: ReplEngine, code: str) -> str | None:
    result = engine.run(code)
    assert result.status == "ok", result.to_observation()
    return result.value


@pytest.mark.parametrize("policy", POLICIES)
def test_functions_recursion_lambdas_and_closures(engines: list[ReplEngine], policy: str) -> None:
    engine, snapshot = round_trip(engines, policy, FUNCTIONS)
    assert value(engine, "fact(10)") == "3628800"
    assert value(engine, "square(12)") == "144"
    # inc and get share one cell: the restore keeps it shared
    assert value(engine, "inc(), get(), inc(), get()") == "(12, 12, 13, 13)"
    assert value(engine, "scaled(2), scaled(2, factor=5)") == "(6, 10)"
    assert value(engine, "f, g = make_counter(0); f(), g()") == "(1, 1)"
    assert {v.name for v in snapshot.manifest.saved} >= {"fact", "square", "inc", "get", "scaled"}


@pytest.mark.parametrize("policy", POLICIES)
def test_classes_instances_and_dataclasses(engines: list[ReplEngine], policy: str) -> None:
    engine, _ = round_trip(engines, policy, CLASSES)
    assert value(engine, "p.norm()") == "10.0"  # the changed class attribute came back
    assert value(engine, "q.norm()") == "11.0"  # super() in a method of a subclass
    assert value(engine, "isinstance(q, Point) and type(p) is Point") == "True"
    assert value(engine, "items") == "[Item(name='a', qty=1), Item(name='b', qty=5)]"
    assert value(engine, "Item('c') == Item('c', 1)") == "True"
    assert value(engine, "same[0] is same[1] is p") == "True"  # identity across variables
    assert value(engine, "Point(6, 8).norm()") == "20.0"


FROZEN = """
from dataclasses import dataclass, replace

@dataclass(frozen=True, slots=True)
class Pair:
    a: int
    b: int = 2

pair = Pair(1)
"""


@pytest.mark.parametrize("policy", POLICIES)
def test_the_dataclass_decorator_s_own_functions_are_made_again(
    engines: list[ReplEngine], policy: str
) -> None:
    """Functions of the dataclasses module the decorator puts on a class (a frozen slotted class's
    __getstate__/__setstate__, Python 3.13's __replace__) come back with the decorator, not by name."""
    engine, snapshot = round_trip(engines, policy, FROZEN)
    assert snapshot.manifest.not_saved == []
    assert (
        value(engine, "(pair, replace(pair, b=3), pair == Pair(1))")
        == "(Pair(a=1, b=2), Pair(a=1, b=3), True)"
    )


# The restricted loader's reviewed pandas reconstructors are pandas 3's; pandas 2 (all Python 3.10 has)
# pickles DataFrames through functions it does not admit, so under `standard` they are not saved.
_OLD_PANDAS = int(importlib.metadata.version("pandas").split(".")[0]) < 3


@pytest.mark.parametrize(
    "policy",
    [
        pytest.param(
            "standard",
            marks=pytest.mark.xfail(
                _OLD_PANDAS,
                reason="pandas < 3: DataFrames are not admitted by the restricted loader",
                strict=True,
            ),
        ),
        "trusted",
    ],
)
def test_arrays_and_dataframes_out_of_band(engines: list[ReplEngine], policy: str) -> None:
    code = (
        "import numpy as np\nimport pandas as pd\n"
        "arr = np.arange(100_000, dtype='float64').reshape(1000, 100)\n"
        "df = pd.DataFrame({'a': np.arange(50_000), 'b': np.linspace(0, 1, 50_000),\n"
        "                   'c': ['x', 'y'] * 25_000})\n"
        "s = df['a'] * 2\n"
    )
    engine, snapshot = round_trip(engines, policy, code)
    assert len(snapshot.buffers) >= 2  # the arrays travelled out of band, not inside the pickle
    assert sum(len(b) for b in snapshot.buffers) >= 800_000 + 400_000
    assert (
        value(engine, "float(arr.sum()), arr.shape, arr.flags.writeable")
        == "(4999950000.0, (1000, 100), True)"
    )
    assert value(engine, "arr[0, 0] = 7.0; float(arr[0, 0])") == "7.0"
    assert (
        value(engine, "int(df['a'].sum()), round(float(df['b'].mean()), 6), df.shape")
        == "(1249975000, 0.5, (50000, 3))"
    )
    assert value(engine, "df['c'].iloc[:3].tolist(), int(s.iloc[-1])") == "(['x', 'y', 'x'], 99998)"
    assert value(engine, "np.__name__, pd.__name__") == "('numpy', 'pandas')"  # imports came back by name
    assert set(snapshot.manifest.imports) == {"np", "pd"}
    assert {"numpy", "pandas"} <= set(snapshot.manifest.libraries)


def test_imports_are_redone_through_the_policy(engines: list[ReplEngine]) -> None:
    engine, snapshot = round_trip(
        engines,
        "strict",
        "import math\nimport collections.abc as cabc\nfrom random import randint\nx = math.sqrt(16)",
    )
    assert snapshot.manifest.imports == {"math": "math", "cabc": "collections.abc"}
    assert (
        value(engine, "math.floor(x), cabc.__name__, 1 <= randint(1, 6) <= 6")
        == "(4, 'collections.abc', True)"
    )


def test_execution_count_and_tracebacks_survive(engines: list[ReplEngine]) -> None:
    first = keyed_engine(engines, "standard")
    first.run("def boom(x):\n    return 1 / x\n")
    first.run("y = 2")
    snapshot = first.snapshot()
    second = keyed_engine(engines, "standard")
    info = second.restore("default", snapshot)
    assert info.execution_count == 2 and snapshot.manifest.execution_count == 2
    result = second.run("boom(0)")
    assert result.execution_count == 3
    assert result.error is not None and result.error.type == "ZeroDivisionError"
    assert "return 1 / x" in result.error.traceback  # the restored function's source is known


def test_unsaveable_values_are_listed_with_reasons(engines: list[ReplEngine]) -> None:
    code = (
        "import threading\n"
        "gen = (i for i in range(3))\n"
        "lock = threading.Lock()\n"
        "fh = open(__import__('os').devnull)\n"
        "nested = {'g': (i for i in range(2))}\n"
        "fine = [1, 2, 3]\n"
    )
    engine, snapshot = round_trip(engines, "trusted", code)
    engines[0].run("fh.close()")
    reasons = {s.name: s.reason for s in snapshot.manifest.not_saved}
    assert set(reasons) == {"gen", "lock", "fh", "nested"}
    assert "generator" in reasons["gen"] and "generator" in reasons["nested"]
    assert "lock" in reasons["lock"] and "file" in reasons["fh"]
    assert value(engine, "fine") == "[1, 2, 3]"
    assert engine.run("gen").status == "error"


def test_figures_are_skipped_with_a_reason(engines: list[ReplEngine]) -> None:
    pytest.importorskip("matplotlib")
    code = "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 2, 3])\npts = [1, 2, 3]\n"
    engine, snapshot = round_trip(engines, "standard", code)
    reasons = {s.name: s.reason for s in snapshot.manifest.not_saved}
    assert set(reasons) == {"fig", "ax"}
    assert all("figures are not saved" in r for r in reasons.values())
    assert value(engine, "pts") == "[1, 2, 3]"


def test_manifest_sizes_policy_and_versions(engines: list[ReplEngine]) -> None:
    first = keyed_engine(engines, "standard")
    first.run("small = 1\nbig = 'x' * 100_000\n")
    manifest = first.snapshot().manifest
    sizes = {v.name: v.bytes for v in manifest.saved}
    assert sizes["big"] > 100_000 > sizes["small"]
    assert manifest.policy == "standard" and manifest.python.count(".") == 2
    assert manifest.size_bytes >= sum(sizes.values())


def test_version_mismatch_is_reported_plainly() -> None:
    from genpark_repl_tools.snapshot._load import version_warnings

    warnings = version_warnings("3.1.0", {"numpy": "0.0.1", "surely_not_installed_pkg": "1.0"})
    assert any("Python 3.1.0" in w for w in warnings)
    assert any("numpy 0.0.1" in w for w in warnings)
    assert any("not installed" in w for w in warnings)


def test_standard_library_versions_are_the_python_version() -> None:
    """json's and re's own __version__ (deprecated in Python 3.15) is neither recorded nor compared."""
    import platform

    from genpark_repl_tools.snapshot._load import version_warnings
    from genpark_repl_tools.snapshot._save import library_versions

    pytest.importorskip("numpy")
    assert set(library_versions({"json", "re", "decimal", "numpy"})) == {"numpy"}
    assert version_warnings(platform.python_version(), {"json": "0.1", "re": "0.1"}) == []


def test_a_value_that_fails_to_rebuild_does_not_take_the_others(engines: list[ReplEngine]) -> None:
    code = (
        "class Bad:\n    def __reduce__(self):\n        return (int, ('not a number',))\n"
        "bad = Bad()\nlater = [bad, 2]\nfine = {'a': 1}\n"
    )
    first = keyed_engine(engines, "trusted")
    assert first.run(code).status == "ok"
    second = keyed_engine(engines, "trusted")
    info = second.restore("default", first.snapshot().to_bytes())
    assert set(info.failed) == {"bad", "later"}
    assert "ValueError" in info.failed["bad"]
    assert "depends on a value that could not be rebuilt" in info.failed["later"]
    assert "fine" in info.restored and value(second, "fine") == "{'a': 1}"


# (setup code, check expression, expected value) for the shapes of session code agents write
KINDS = {
    "enum": (
        "from enum import Enum\nclass Color(Enum):\n    RED = 1\n    BLUE = 2\nc = Color.BLUE\n",
        "c is Color.BLUE, Color(1).name",
        "(True, 'RED')",
    ),
    "lru_cache": (
        "import functools\n@functools.lru_cache(maxsize=None)\ndef fib(n):\n"
        "    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
        "fib(30), fib.cache_info().maxsize",
        "(832040, None)",
    ),
    "namedtuple": (
        "from collections import namedtuple\nP = namedtuple('P', 'x y')\np = P(1, 2)\n",
        "p, P(3, 4).y",
        "(P(x=1, y=2), 4)",
    ),
    "typing.NamedTuple": (
        "from typing import NamedTuple\nclass Q(NamedTuple):\n    a: int\n    b: str = 'z'\nq = Q(1)\n",
        "q, Q(2, 'w')",
        "(Q(a=1, b='z'), Q(a=2, b='w'))",
    ),
    "slots": (
        "class S:\n    __slots__ = ('a', 'b')\n    def __init__(self):\n        self.a = 1\n"
        "        self.b = 2\ns = S()\n",
        "s.a + s.b",
        "3",
    ),
    "nested class": (
        "class Outer:\n    class Inner:\n        v = 5\n    def get(self):\n        return self.Inner.v\n"
        "o = Outer()\n",
        "o.get(), Outer.Inner.v",
        "(5, 5)",
    ),
    "dict subclass": (
        "class D(dict):\n    def total(self):\n        return sum(self.values())\nd = D(a=1, b=2)\n",
        "d.total(), type(d).__name__",
        "(3, 'D')",
    ),
    "exception": (
        "class MyErr(ValueError):\n    pass\ne = MyErr('boom')\n",
        "isinstance(e, ValueError), str(e)",
        "(True, 'boom')",
    ),
    "partial": (
        "import functools\ndef add(a, b):\n    return a + b\ninc = functools.partial(add, 1)\n",
        "inc(41)",
        "42",
    ),
    "abc": (
        "from abc import ABC, abstractmethod\nclass A(ABC):\n    @abstractmethod\n    def f(self): ...\n"
        "class B(A):\n    def f(self):\n        return 7\nb = B()\n",
        "b.f(), isinstance(b, A)",
        "(7, True)",
    ),
    "property and class/static methods": (
        "class T:\n    def __init__(self):\n        self.w = 3\n    @property\n    def v(self):\n"
        "        return self.w * 2\n"
        "    @staticmethod\n    def s():\n        return 1\n    @classmethod\n    def c(cls):\n"
        "        return cls.__name__\nt = T()\n",
        "t.v, T.s(), T.c()",
        "(6, 1, 'T')",
    ),
    "stdlib values": (
        "from decimal import Decimal\nfrom fractions import Fraction\nimport datetime\n"
        "from collections import Counter, deque\n"
        "v = (Decimal('1.1'), Fraction(1, 3), datetime.date(2020, 1, 2))\nc = Counter('abca')\n"
        "q = deque([1, 2])\n",
        "v, c['a'], list(q)",
        "((Decimal('1.1'), Fraction(1, 3), datetime.date(2020, 1, 2)), 2, [1, 2])",
    ),
    "hashable instances in a set": (
        "class H:\n    def __init__(self, v):\n        self.v = v\n    def __hash__(self):\n"
        "        return hash(self.v)\n"
        "    def __eq__(self, o):\n        return self.v == o.v\nhs = {H(1), H(2)}\n",
        "len(hs), H(1) in hs",
        "(2, True)",
    ),
    "generic class": (
        "from typing import Generic, TypeVar\nT = TypeVar('T')\nclass Box(Generic[T]):\n"
        "    def __init__(self, v):\n        self.v = v\nbx = Box(3)\n",
        "bx.v, Box[int](4).v",
        "(3, 4)",
    ),
}


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("kind", list(KINDS))
def test_shapes_of_session_code(engines: list[ReplEngine], policy: str, kind: str) -> None:
    code, check, expected = KINDS[kind]
    engine, snapshot = round_trip(engines, policy, code)
    assert snapshot.manifest.not_saved == []
    assert value(engine, check) == expected


def test_markers_pickle_by_name_and_refuse_to_run() -> None:
    import pickle

    from genpark_repl_tools.snapshot import _markers as markers

    assert set(markers.__all__) == markers.NAMES and len(markers.NAMES) == 10
    for name in markers.NAMES:
        marker = getattr(markers, name)
        assert (marker.__module__, marker.__qualname__) == (markers.MODULE, name)
        assert pickle.loads(pickle.dumps(marker)) is marker
        assert f"{markers.MODULE}\n{name}".encode() in pickle.dumps(marker, protocol=0)
        with pytest.raises(RuntimeError, match=f"snapshot marker '{name}' is a placeholder"):
            marker(1, 2)
