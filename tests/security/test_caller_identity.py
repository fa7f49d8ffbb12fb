"""Nothing the hook decides depends on who the caller says it is.

Session code chooses what its frames' globals say (`type(..., {'__module__': ...})` makes dataclasses
generate methods in any module's globals). The hook recognises the import machinery and sandboxed
code by the identity of their code objects instead.
"""

from __future__ import annotations

import importlib

import pytest
from _security import ok, refusal, run

from genpark_repl_tools import ReplEngine

# Generated methods run with importlib's globals and call back into the session.
FORGED_IMPORTLIB = """import dataclasses, typing
class H:
    x: '(i for i in ()).throw(LookupError(__import__("builtins").__dict__))'
class Base:
    def __post_init__(self):
        typing.get_type_hints(H)
A = dataclasses.dataclass(type('A', (Base,), {'__module__': 'importlib._bootstrap'}))
A()
"""
# A C-level reader called straight from a generated method whose globals say 'importlib._bootstrap'.
FORGED_READER = """import dataclasses, functools
import numpy as np
@dataclasses.dataclass
class Base:
    f: object = dataclasses.field(
        default_factory=functools.partial(np.fromfile, '/etc/hostname', dtype=np.uint8))
A = dataclasses.dataclass(type('A', (Base,), {'__module__': 'importlib._bootstrap_external'}))
bytes(A().f)
"""
PLAIN_TYPE = """import dataclasses
Point = dataclasses.dataclass(type('Point', (), {'__doc__': 'a point'}))
Child = type('Child', (Point,), {'__qualname__': 'Child'})
(Point(), Child(), Point.__doc__)
"""


@pytest.mark.parametrize("module", ["importlib._bootstrap", "importlib._bootstrap_external", "zipimport"])
def test_a_class_claiming_to_be_the_import_machinery_gets_no_exec(engine: ReplEngine, module: str) -> None:
    code = FORGED_IMPORTLIB.replace("importlib._bootstrap", module)
    message = refusal(run(engine, code))
    # Two layers refuse it: type() lets no session class choose its __module__, and the audit hook
    # judges generated code by content, not by who seems to run it (the hook alone, with the real
    # builtins in hand, is tested in test_hook_integrity.py).
    assert message.startswith(
        ("type(): the class attribute '__module__' is not allowed", "running code built at run time")
    ), message


def test_a_forged_module_name_opens_no_file(engine: ReplEngine) -> None:
    if engine.policy.name == "strict":
        assert refusal(run(engine, FORGED_READER)).startswith("import of 'numpy' is not allowed")
        return
    pytest.importorskip("numpy")
    message = refusal(run(engine, FORGED_READER))
    # Refused at type() (no chosen __module__) or, past it, at the file (identity cannot be forged).
    assert message.startswith(
        ("type(): the class attribute '__module__' is not allowed", "opening '/etc/hostname' is not allowed")
    ), message


def test_type_with_ordinary_namespaces_still_works(engine: ReplEngine) -> None:
    assert ok(run(engine, PLAIN_TYPE)).value == "(Point(), Child(), 'a point')"


def test_imports_still_work_after_a_forged_name(engine: ReplEngine) -> None:
    # The import machinery is recognised by its code objects: real imports are unaffected.
    run(engine, FORGED_IMPORTLIB)
    for name in ("colorsys", "graphlib"):
        __import__("sys").modules.pop(name, None)
    assert (
        ok(run(engine, "import colorsys, graphlib\ncolorsys.rgb_to_hls(0, 0, 0)")).value == "(0.0, 0.0, 0.0)"
    )
    assert importlib.import_module("colorsys").rgb_to_hls(0, 0, 0) == (0.0, 0.0, 0.0)


# pandas resolves names in the frame `level` steps up: beyond the cell, the host's frames.
STACK_WALK = "import pandas as pd\npd.eval('limits', level={level})"
OWN_VARIABLES = (
    "import pandas as pd\na = 1\nb = 2\ndf = pd.DataFrame({'x': [1, 5, 7]})\nt = 2\n"
    "(int(pd.eval('a + b')), len(df.query('x > @t')))"
)


@pytest.mark.parametrize("level", [2, 4, 6, 9])
def test_stack_walking_apis_see_only_the_sessions_frames(engine: ReplEngine, level: int) -> None:
    message = refusal(run(engine, STACK_WALK.format(level=level)))
    if engine.policy.name == "strict":
        assert message.startswith("import of 'pandas' is not allowed")
        return
    # The pandas guard refuses level= outright; the hook would refuse the frames beyond the session's.
    assert message.startswith(
        ("pandas eval() with level= is not allowed", "reading the host's frames (a frame depth beyond")
    ), message


def test_pandas_expressions_on_the_sessions_own_variables_still_work(engine: ReplEngine) -> None:
    if engine.policy.name == "strict":
        pytest.skip("pandas is not allowed under strict")
    pytest.importorskip("pandas")
    assert ok(run(engine, OWN_VARIABLES)).value == "(3, 2)"
