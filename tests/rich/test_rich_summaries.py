"""Tables and arrays: compact summaries from a head/tail slice, never a full repr, whatever the options."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from genpark_repl_tools import Limits, ReplEngine
from genpark_repl_tools._rich import table_kind

pd = pytest.importorskip("pandas")
np = pytest.importorskip("numpy")

MILLION = """
import numpy as np
import pandas as pd
n = 1_000_000
city = np.where(np.arange(n) % 2, "Paris", "Oslo")
df = pd.DataFrame({"id": np.arange(n), "price": np.arange(n) / 4, "city": city})
"""
# pandas' own repr prints every row with these options; a DataFrame whose repr fails proves it is not used.
UNBOUNDED_OPTIONS = "pd.set_option('display.max_rows', None)\npd.set_option('display.max_columns', None)"
SPY = """
class Spy(pd.DataFrame):
    @property
    def _constructor(self):
        return Spy

    def __repr__(self):
        raise AssertionError("the full repr was computed")

spy = Spy(df)
"""
HEADER = "DataFrame: 1,000,000 rows x 3 columns\ncolumns: id int64, price float64, city "


@pytest.fixture
def engine() -> Iterator[ReplEngine]:
    with ReplEngine(boundary="inprocess", policy="trusted", limits=Limits(timeout_s=60)) as e:
        yield e
    pd.reset_option("display.max_rows")
    pd.reset_option("display.max_columns")
    np.set_printoptions(threshold=1000)


@pytest.fixture
def million(engine: ReplEngine) -> ReplEngine:
    result = engine.run(MILLION + UNBOUNDED_OPTIONS + SPY)
    assert result.status == "ok", result.to_observation()
    return engine


def _table_lines(text: str) -> list[str]:
    return [line for line in text.splitlines()[2:] if line.strip()]


def test_trailing_dataframe_is_summarized_with_head_and_tail(million: ReplEngine) -> None:
    result = million.run("spy")
    assert result.status == "ok", result.to_observation()
    value = result.value or ""
    assert value.startswith(HEADER)
    lines = _table_lines(value)
    assert lines[0].split() == ["id", "price", "city"]
    assert lines[1].split() == ["0", "0", "0.00", "Oslo"]
    assert lines[6].split() == ["...", "...", "...", "..."]
    assert lines[-1].split() == ["999999", "999999", "249999.75", "Paris"]
    assert len(lines) == 12  # header row + 5 + ... + 5
    assert len(value) <= million.limits.max_repr_chars
    assert (result.value_type or "").endswith("Spy")


def test_inspect_fills_summary_and_keeps_repr_bounded(million: ReplEngine) -> None:
    info = million.inspect("spy")
    assert (info.summary or "").startswith(HEADER)
    assert info.repr.endswith("[1,000,000 rows x 3 columns]")
    assert len(info.repr) <= million.limits.max_repr_chars
    assert (info.shape, info.size, info.len) == ([1_000_000, 3], 3_000_000, 1_000_000)


def test_variables_and_changes_carry_the_summary(million: ReplEngine) -> None:
    by_name = {v.name: v for v in million.variables()}
    assert (by_name["df"].summary or "").startswith(HEADER)
    created = million.run("half = df.iloc[:500_000]").changes.created
    assert [v.name for v in created] == ["half"]
    assert (created[0].summary or "").startswith("DataFrame: 500,000 rows x 3 columns")


def test_a_dataframe_inside_a_container_is_bounded_too(million: ReplEngine) -> None:
    value = million.run("[spy, spy]").value or ""
    assert value.count("\n999999  999999  249999.75  Paris\n\n[1,000,000 rows x 3 columns]") == 2
    assert len(value) <= million.limits.max_repr_chars


def test_series_summary(million: ReplEngine) -> None:
    value = million.run("df['price']").value or ""
    assert value.startswith("Series 'price': 1,000,000 values, dtype float64\n0 ")
    assert value.splitlines()[-1].split() == ["999999", "249999.75"]
    assert len(value.splitlines()) == 12


def test_wide_frame_lists_some_columns_and_counts_the_rest(engine: ReplEngine) -> None:
    value = engine.run("import numpy as np, pandas as pd\npd.DataFrame(np.zeros((3, 5000)))").value or ""
    assert value.startswith("DataFrame: 3 rows x 5,000 columns\ncolumns: 0 float64, 1 float64, ")
    assert ", 11 float64, ... (4,988 more)\ndtype counts: float64 5,000\n" in value
    assert len(value) <= engine.limits.max_repr_chars
    assert value.splitlines()[3].split()[5] == "..."  # the table shows the first and last columns only


def test_small_dataframe_summary_shows_every_row(engine: ReplEngine) -> None:
    value = engine.run("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})").value
    assert value is not None
    assert value.splitlines()[0] == "DataFrame: 2 rows x 2 columns"
    assert [line.split() for line in value.splitlines()[2:]] == [["a", "b"], ["0", "1", "x"], ["1", "2", "y"]]


def test_summary_respects_a_small_limit() -> None:
    with ReplEngine(boundary="inprocess", policy="trusted", limits=Limits(max_repr_chars=200)) as engine:
        value = engine.run("import numpy as np, pandas as pd\npd.DataFrame(np.ones((100, 30)))").value or ""
    assert value.startswith("DataFrame: 100 rows x 30 columns")
    assert value.endswith("more characters]")
    assert len(value) <= 200 + len("\n[... 99,999 more characters]")


def test_large_array_summary_whatever_the_print_options(engine: ReplEngine) -> None:
    code = "import sys\nimport numpy as np\nnp.set_printoptions(threshold=sys.maxsize)\n"
    code += "a = np.arange(10**6).reshape(1000, 1000)\na"
    result = engine.run(code)
    value = result.value or ""
    assert value.splitlines()[0] == "ndarray: shape (1000, 1000), dtype int64, 1,000,000 elements, 7.6 MB"
    assert value.splitlines()[1].split() == ["[[", "0", "1", "2", "...", "997", "998", "999]"]
    assert len(value) <= engine.limits.max_repr_chars
    info = engine.inspect("a")
    assert info.repr.startswith("array([[     0,      1,      2, ...,")
    assert info.repr.endswith("dtype=int64)")
    assert info.summary == value
    assert (info.shape, info.dtype, info.size) == ([1000, 1000], "int64", 1_000_000)


def test_small_array_keeps_its_repr_and_gets_a_summary(engine: ReplEngine) -> None:
    result = engine.run("import numpy as np\nsmall = np.arange(3)\nsmall")
    assert result.value == "array([0, 1, 2])"
    (info,) = [v for v in result.changes.created if v.name == "small"]
    assert info.repr == "array([0, 1, 2])"
    assert info.summary == "ndarray: shape (3,), dtype int64, 3 elements, 24 bytes\n[0 1 2]"


def test_high_dimensional_array_previews_one_slice(engine: ReplEngine) -> None:
    value = engine.run("import numpy as np\nnp.zeros((3, 3, 3, 3, 3))").value or ""
    assert value.splitlines()[:2] == [
        "ndarray: shape (3, 3, 3, 3, 3), dtype float64, 243 elements, 1.9 KB",
        "[0, 0, 0, :, :] =",
    ]
    assert len(value.splitlines()) == 5


def test_a_user_class_named_dataframe_is_not_mistaken(engine: ReplEngine) -> None:
    result = engine.run(
        "class DataFrame:\n    shape = (1, 1)\n    def __repr__(self):\n        return 'mine'\nDataFrame()"
    )
    assert result.value == "mine"


def test_table_kind_never_hashes_the_type_of_a_value() -> None:
    class Meta(type):
        def __hash__(cls) -> int:
            raise RuntimeError("a metaclass __hash__ is the session's code")

    class Value(metaclass=Meta):
        pass

    assert table_kind(Value()) is None
    assert table_kind(1) is None and table_kind([1]) is None
