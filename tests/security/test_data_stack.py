"""The data stack under standard: raw memory, pickles, expression strings and string dispatch are refused."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from _security import blocked, ok, refusal, run

from genpark_repl_tools import Policy, ReplEngine

np = pytest.importorskip("numpy")
pd = pytest.importorskip("pandas")

FORGED_INTERFACE = "import numpy as np\nT = type('T', (), {'__array_interface__': {'data': (0, False)}})"
FORGED_BY_ENUM = "import enum\nE = enum.Enum('E', {'__array_interface__': 1, 'A': 2})"
AS_STRIDED = "import numpy as np\nnp.lib.stride_tricks.as_strided(np.zeros(1), shape=(10**6,), strides=(8,))"
CTYPES = "import numpy as np\nnp.zeros(1).ctypes.data"
CTYPESLIB = "import numpy.ctypeslib"
LOAD_PICKLE = (
    "import numpy as np\nnp.save('{ws}/o.npy', np.array([{{1: 2}}], dtype=object), "
    "allow_pickle=True)\nnp.load('{ws}/o.npy', allow_pickle=True)"
)
READ_PICKLE = (
    "import pandas as pd\npd.DataFrame({{'a': [1]}}).to_pickle('{ws}/p.pkl')\npd.read_pickle('{ws}/p.pkl')"
)
QUERY_DUNDER = (
    "import pandas as pd\ndf = pd.DataFrame({'a': [1]})\nx = 1\ndf.query('a > @x.__class__.__base__')"
)
QUERY_BUILTINS = "import pandas as pd\npd.DataFrame({'a': [1]}).query('@__builtins__')"
EVAL_DUNDER = "import pandas as pd\npd.eval('(1).__class__')"
AGG_DUNDER = "import pandas as pd\npd.Series([1]).agg('__dict__')"
APPLY_DUNDER = "import pandas as pd\npd.Series([1]).apply('__class__')"
STYLER_TEMPLATE = (
    "import pandas as pd\npd.DataFrame({'a': [1]}).style.env.from_string('{{ 7 * 6 }}').render()"
)
READ_URL = "import pandas as pd\npd.read_csv('http://127.0.0.1:9/x.csv')"
READ_ETC = "import pandas as pd\npd.read_csv('/etc/hostname', header=None)"
STYLER_FORMAT_LEAK = (
    "import pandas as pd\ndf = pd.DataFrame({'a': "
    "[pd.read_csv]})\ndf.style.format('{0.__globals__[os].environ}').to_html()"
)
STYLER_BY_CLASS = "import pandas as pd\npd.DataFrame.style.fget(pd.DataFrame({'a': [1]}))"
STYLER_REFUSED = (
    "pandas' Styler is not allowed under policy 'standard'; it applies format strings to arbitrary cell "
    "objects; "
    "use df.round(), df.to_string() or f-strings"
)
COMPAT = "import pandas as pd\npd.compat.import_optional_dependency('os')"
CATEGORICAL_METACLASS = (
    "import pandas as pd\nM = pd.CategoricalDtype.type\nM('T', (), {'__array_interface__': {}})"
)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("data-workspace")


@pytest.fixture(scope="module")
def standard(workspace: Path) -> Iterator[ReplEngine]:
    with ReplEngine(boundary="inprocess", policy=Policy.standard().with_workspace(workspace)) as e:
        yield e


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (
            FORGED_INTERFACE,
            "type(): the class attribute '__array_interface__' is not allowed under policy 'standard'; "
            "define special methods in a class statement",
        ),
        (
            FORGED_BY_ENUM,
            "enum member name '__array_interface__' is not allowed: names starting with '_' are private",
        ),
        (CTYPES, "raw memory access through ndarray.ctypes is not allowed under policy 'standard'"),
        (
            QUERY_DUNDER,
            "pandas query(): attribute '__class__' is not allowed under policy 'standard': names "
            "starting with '_' are private; use type(obj)",
        ),
        (
            QUERY_BUILTINS,
            "pandas query(): attribute '__builtins__' is not allowed under policy 'standard': names "
            "starting with '_' are private; use the public API instead",
        ),
        (
            EVAL_DUNDER,
            "pandas eval(): attribute '__class__' is not allowed under policy 'standard': names starting "
            "with '_' are private; use type(obj)",
        ),
        (
            AGG_DUNDER,
            "pandas agg(): attribute '__dict__' is not allowed under policy 'standard': names starting "
            "with '_' are private; use getattr(obj, name) or dataclasses.asdict(obj)",
        ),
        (
            APPLY_DUNDER,
            "pandas apply(): attribute '__class__' is not allowed under policy 'standard': names "
            "starting with '_' are private; use type(obj)",
        ),
        (STYLER_TEMPLATE, STYLER_REFUSED),
        (STYLER_FORMAT_LEAK, STYLER_REFUSED),
        (STYLER_BY_CLASS, STYLER_REFUSED),
        (READ_URL, "network access (urllib.Request) is not allowed under policy 'standard'"),
        (
            CATEGORICAL_METACLASS,
            "reading 'type': it is the metaclass 'CategoricalDtypeType' is not allowed under policy "
            "'standard'; "
            "metaclasses create classes with arbitrary special attributes",
        ),
    ],
)
def test_memory_code_and_network_routes_are_refused(standard: ReplEngine, code: str, message: str) -> None:
    assert refusal(run(standard, code)) == message


@pytest.mark.parametrize("code", [LOAD_PICKLE, READ_PICKLE])
def test_pickles_are_refused_even_inside_the_workspace(
    standard: ReplEngine, workspace: Path, code: str
) -> None:
    assert refusal(run(standard, code.format(ws=workspace))) == (
        "loading pickles (pickle.find_class) is not allowed under policy 'standard'; pickles can run "
        "arbitrary code"
    )


def test_reading_outside_the_workspace_through_pandas_is_refused(
    standard: ReplEngine, workspace: Path
) -> None:
    assert refusal(run(standard, READ_ETC)) == (
        "opening '/etc/hostname' is not allowed under policy 'standard'; files are allowed only inside the "
        f"workspace '{os.path.realpath(workspace)}'"
    )


def test_unsafe_numpy_and_pandas_parts_are_withheld(standard: ReplEngine) -> None:
    assert blocked(run(standard, CTYPESLIB)) == (
        "import of 'numpy.ctypeslib' is not allowed under policy 'standard': raw memory access through ctypes"
    )
    result = run(standard, AS_STRIDED)
    assert result.error is not None and result.error.message == (
        "'numpy.lib.stride_tricks.as_strided' is not available under policy 'standard': "
        "as_strided can address memory outside the array"
    )
    result = run(standard, COMPAT)
    assert result.error is not None and result.error.message.startswith(
        "'pandas.compat' is the module 'pandas.compat': import of 'pandas.compat' is not allowed"
    )


def test_numpy_global_random_state_is_per_session(standard: ReplEngine) -> None:
    host = np.random.get_state()[1].copy()
    code = "import numpy as np\nnp.random.seed(3)\nnp.random.randint(0, 100, 3).tolist()"
    first, second = ok(run(standard, code)).value, ok(run(standard, code)).value
    assert first == second == repr(np.random.RandomState(3).randint(0, 100, 3).tolist())
    assert (np.random.get_state()[1] == host).all()


@pytest.mark.parametrize(
    ("code", "value"),
    [
        (
            "import numpy as np\na = np.arange(6).reshape(2, 3)\n(a.sum(), a.T.shape, "
            "float(np.linalg.norm([3, 4])))",
            "(np.int64(15), (3, 2), 5.0)",
        ),
        (
            "import numpy as np\nnp.lib.stride_tricks.sliding_window_view(np.arange(4), 2).tolist()",
            "[[0, 1], [1, 2], [2, 3]]",
        ),
        (
            "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3], 'b': [4, 5, 6]})\nt = "
            "1\ndf.query('a > @t')['b'].tolist()",
            "[5, 6]",
        ),
        (
            "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})\ndf.eval('c = a * 2')['c'].tolist()",
            "[2, 4]",
        ),
        (
            "import pandas as pd\ndf = pd.DataFrame({'g': ['x', 'y', 'x'], 'v': [1, 2, "
            "3]})\ndf.groupby('g')['v'].agg(['sum', 'max']).to_dict()",
            "{'sum': {'x': 4, 'y': 2}, 'max': {'x': 3, 'y': 2}}",
        ),
        ("import pandas as pd\npd.Series([1, 2]).apply(lambda v: v * 10).tolist()", "[10, 20]"),
        ("import pandas as pd\npd.Series(['a', 'b']).map({'a': 1, 'b': 2}).tolist()", "[1, 2]"),
    ],
)
def test_the_data_stack_works(standard: ReplEngine, code: str, value: str) -> None:
    assert ok(run(standard, code)).value == value


def test_files_round_trip_inside_the_workspace(standard: ReplEngine, workspace: Path) -> None:
    code = (
        "import numpy as np, pandas as pd\n"
        f"np.save('{workspace}/a.npy', np.arange(3))\n"
        f"pd.DataFrame({{'x': [1, 2]}}).to_csv('{workspace}/t.csv', index=False)\n"
        f"(np.load('{workspace}/a.npy').tolist(), pd.read_csv('{workspace}/t.csv')['x'].tolist())"
    )
    assert ok(run(standard, code)).value == "([0, 1, 2], [1, 2])"


def test_figures_save_inside_the_workspace(standard: ReplEngine, workspace: Path) -> None:
    pytest.importorskip("matplotlib")
    code = (
        "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
        f"fig, ax = plt.subplots()\nax.plot([1, 2])\nfig.savefig('{workspace}/f.png')\nplt.close(fig)"
    )
    ok(run(standard, code))
    assert (workspace / "f.png").stat().st_size > 0
    result = run(
        standard, "import matplotlib.pyplot as plt\nplt.plot([1])\nplt.savefig('/tmp/genpark-outside.png')"
    )
    assert refusal(result).startswith(
        "writing to '/tmp/genpark-outside.png' is not allowed under policy 'standard'"
    )
    assert not os.path.exists("/tmp/genpark-outside.png")


def test_numpy_error_state_stays_in_the_session(standard: ReplEngine) -> None:
    host = np.geterr()
    session = "errstate"
    ok(standard.run("import numpy as np\nold = np.seterr(all='raise')", session=session))
    assert np.geterr() == host
    assert standard.run("np.geterr()['divide']", session=session).value == "'raise'"
    assert ok(run(standard, "import numpy as np\nnp.geterr()['divide']")).value == repr(host["divide"])
