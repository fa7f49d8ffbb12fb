"""Attribute writes that would land on the host's classes, modules or functions, whatever passes them on.

typing's aliases forward attribute writes to the class they stand for, pandas' option tree to the
process-wide settings, and a dataclass field is pasted into generated source. Instances of the
session's own classes and plain data still take writes as usual.
"""

from __future__ import annotations

import collections.abc

import pytest
from _security import ok, refusal, run

from genpark_repl_tools import ReplEngine

ALIAS_WRITE = "import typing\ntyping.Sequence.patched = 5"
ALIAS_SETATTR = "import typing\nsetattr(typing.Counter, 'most_common', len)"
ALIAS_IN_FUNCTION = "import typing\ndef f(alias):\n    alias.patched = 5\nf(typing.Sequence)"
ALIAS_DELETE = "import typing\ndel typing.Sequence.count"
SUBSCRIPTED_ALIAS = "import typing\nalias = typing.Mapping[str, int]\nalias.patched = 5"
FIELD_WRITE = (
    "import dataclasses\n"
    "@dataclasses.dataclass\n"
    "class A:\n"
    "    a: int = 0\n"
    "dataclasses.fields(A)[0].name = 'b'"
)
PANDAS_OPTIONS = "import pandas as pd\npd.options.display.max_rows = 3"

LEGIT = (
    "import dataclasses, typing, collections\n"
    "class P:\n"
    "    def __init__(self):\n"
    "        self.x = 1\n"
    "p = P()\n"
    "p.y = 2\n"
    "setattr(p, 'z', 3)\n"
    "del p.z\n"
    "@dataclasses.dataclass\n"
    "class D:\n"
    "    items: typing.List[int] = dataclasses.field(default_factory=list)\n"
    "    n: int = 0\n"
    "d = D()\n"
    "d.n = 4\n"
    "d.items.append(1)\n"
    "@dataclasses.dataclass\n"
    "class E(D):\n"
    "    m: 'int' = 2\n"
    "e = E(n=1)\n"
    "e.m = 3\n"
    "c = collections.Counter('abca')\n"
    "c.note = 'mine'\n"
    "(p.x, p.y, d.n, d.items, e.m, c.most_common(1), c.note)"
)


@pytest.mark.parametrize(
    "code", [ALIAS_WRITE, ALIAS_SETATTR, ALIAS_IN_FUNCTION, ALIAS_DELETE, SUBSCRIPTED_ALIAS]
)
def test_writes_through_typing_aliases_never_reach_the_class(engine: ReplEngine, code: str) -> None:
    message = refusal(run(engine, code))
    assert "is not allowed under policy" in message
    assert "object" in message or "class" in message
    assert not hasattr(collections.abc.Sequence, "patched")
    assert not hasattr(collections.abc.Mapping, "patched")
    assert collections.abc.Sequence.count is not None
    assert collections.Counter.most_common is not len


def test_dataclass_fields_are_fixed_once_the_class_is_made(engine: ReplEngine) -> None:
    assert refusal(run(engine, FIELD_WRITE)) == (
        f"changing attribute 'name' of a dataclass field is not allowed under policy '{engine.policy.name}'; "
        "fields are fixed when the class is made; pass the options to field(...)"
    )


def test_the_process_wide_pandas_options_refuse_writes(engine: ReplEngine) -> None:
    pytest.importorskip("pandas")
    import pandas as pd

    before = pd.get_option("display.max_rows")
    result = run(engine, PANDAS_OPTIONS)
    if engine.policy.name == "strict":
        assert "import of 'pandas' is not allowed" in refusal(result)
    else:
        assert refusal(result) == (
            "changing pandas.options.display.max_rows is not allowed: pandas options are shared by the whole "
            "process (the host and other sessions); pass display arguments to the call instead "
            "(df.to_string(max_rows=...), df.round(2))"
        )
    assert pd.get_option("display.max_rows") == before


def test_session_objects_and_plain_data_take_writes(engine: ReplEngine) -> None:
    assert ok(run(engine, LEGIT)).value == "(1, 2, 4, [1], 3, [('a', 2)], 'mine')"


def test_a_session_class_that_inherits_a_forwarding_setter_is_checked(engine: ReplEngine) -> None:
    code = "import typing\nT = type(typing.Sequence)\nclass Mine(T):\n    pass\nMine(list, 0).patched = 1"
    result = run(engine, code)
    assert result.status in ("error", "blocked"), result.to_observation()
    assert not hasattr(list, "patched")


SHARED = {
    "enum_member": ("import re\nre.I.note = 1", "a member of the enum 'RegexFlag'"),
    "descriptor": (
        "import functools\nclass C:\n    @functools.cached_property\n    def v(self):\n        return 1\n"
        "import statistics\nstatistics.NormalDist.mean.note = 1",
        "the descriptor 'property'",
    ),
    "module_level": ("import decimal\ndecimal.DefaultContext.prec = 3", ""),
}


@pytest.mark.parametrize(("code", "role"), list(SHARED.values()), ids=list(SHARED))
def test_objects_shared_through_modules_and_classes_refuse_writes(
    engine: ReplEngine, code: str, role: str
) -> None:
    result = run(engine, code)
    if role:
        assert f"changing attribute 'note' of {role} is not allowed" in refusal(result)
    else:
        ok(result)  # decimal.DefaultContext is a per-session copy: writes stay in the session
    import decimal
    import re

    assert not hasattr(re.I, "note")
    assert decimal.DefaultContext.prec == 28


def test_matplotlib_shared_objects_refuse_writes_and_registration(engine: ReplEngine) -> None:
    pytest.importorskip("matplotlib")
    if engine.policy.name == "strict":
        pytest.skip("matplotlib is not allowed under strict")
    write = "import matplotlib\nmatplotlib.colormaps.note = 1"
    assert "of the module-level object 'ColormapRegistry'" in refusal(run(engine, write))
    register = (
        "import matplotlib\nfrom matplotlib.colors import ListedColormap\n"
        "matplotlib.colormaps.register(ListedColormap(['red', 'blue'], name='mine'))"
    )
    assert "registering with the process-wide 'ColormapRegistry'" in refusal(run(engine, register))
    import matplotlib

    assert "mine" not in matplotlib.colormaps


def test_library_objects_the_session_made_take_writes(engine: ReplEngine) -> None:
    pytest.importorskip("pandas")
    if engine.policy.name == "strict":
        pytest.skip("the data stack is not allowed under strict")
    code = (
        "import matplotlib.pyplot as plt, pandas as pd, numpy as np, enum\n"
        "fig, ax = plt.subplots()\nfig.note = 1\n"
        "df = pd.DataFrame({'a': [1]})\ndf.index.name = 'i'\ndf.columns = ['b']\n"
        "a = np.zeros(4)\na.flat = 7\n"  # a C-level setter (numpy 2.5 deprecates setting a.shape)
        "class C(enum.Enum):\n    A = 1\nC.A.note = 2\n"
        "(fig.note, df.index.name, list(df.columns), a.tolist(), C.A.note)"
    )
    assert ok(run(engine, code)).value == "(1, 'i', ['b'], [7.0, 7.0, 7.0, 7.0], 2)"
