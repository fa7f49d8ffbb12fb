"""Namespaces: isolation, change tracking that scales, host state left alone."""

from __future__ import annotations

import builtins
import os

import pytest

from genpark_repl_tools import Limits, ReplEngine
from genpark_repl_tools._compile import compile_cell


@pytest.fixture
def engine() -> ReplEngine:
    with ReplEngine(boundary="inprocess", policy="trusted", limits=Limits(timeout_s=10)) as e:
        yield e


def test_ten_thousand_variables(engine: ReplEngine) -> None:
    engine.run("for i in range(10_000):\n    globals()[f'v{i}'] = i\nbig = list(range(10**6))")
    result = engine.run("x = 1")
    assert [v.name for v in result.changes.created] == ["x"]
    assert not result.changes.rebound and not result.changes.deleted
    variables = engine.variables()
    assert len(variables) == 10_003  # v0..v9999, i, big, x
    big = next(v for v in variables if v.name == "big")
    assert big.len == 1_000_000 and len(big.repr) < 3_000


def test_dynamic_cells_are_diffed_in_full(engine: ReplEngine) -> None:
    result = engine.run("globals()['made_' + 'up'] = 1\nexec('other = 2')")
    assert sorted(v.name for v in result.changes.created) == ["made_up", "other"]


def test_function_using_globals_keeps_full_diffs(engine: ReplEngine) -> None:
    engine.run("def put(name, value):\n    globals()[name] = value\n")
    result = engine.run("put('later', 3)")
    assert [v.name for v in result.changes.created] == ["later"]


def test_star_import_is_tracked(engine: ReplEngine) -> None:
    result = engine.run("from math import *")
    names = {v.name for v in result.changes.created}
    assert {"sqrt", "pi"} <= names


def test_bookkeeping_never_enters_the_namespace(engine: ReplEngine) -> None:
    engine.run("x = 1")
    names = engine.run("sorted(k for k in globals() if k != '__builtins__')").value
    assert names == "['__name__', 'x']"


def test_host_cwd_and_builtins_are_restored(engine: ReplEngine) -> None:
    cwd = os.getcwd()
    result = engine.run("import os, builtins\nos.chdir('/')\nbuiltins.len = None\nbuiltins.injected = 1")
    assert result.status == "ok"
    assert os.getcwd() == cwd
    assert builtins.len([1, 2]) == 2
    assert not hasattr(builtins, "injected")


def test_session_builtins_are_per_session(engine: ReplEngine) -> None:
    engine.run("__builtins__['print'] = None", session="a")
    assert engine.run("print('fine')", session="b").stdout == "fine\n"


def test_compile_cache_shares_code_not_state(engine: ReplEngine) -> None:
    code = "counter = counter + 1 if 'counter' in dir() else 1\ncounter"
    assert engine.run(code, session="a").value == "1"
    assert engine.run(code, session="a").value == "2"
    assert engine.run(code, session="b").value == "1"


def test_error_in_function_from_earlier_cell_names_that_cell(engine: ReplEngine) -> None:
    engine.run("def half(x):\n    return x / 0\n")
    result = engine.run("y = 2\nhalf(y)")
    assert result.error is not None
    assert result.error.line == 2  # the line of *this* cell that made the call
    assert 'File "<cell 1>", line 2, in half' in result.error.traceback
    assert 'File "<input>", line 2, in <module>' in result.error.traceback


def test_name_error_suggests_a_close_name(engine: ReplEngine) -> None:
    engine.run("total_price = 10")
    result = engine.run("total_prize")
    assert result.error is not None
    assert "Did you mean: 'total_price'?" in result.error.message


def test_repr_that_loops_forever_is_stopped() -> None:
    with ReplEngine(boundary="inprocess", policy="trusted", limits=Limits(timeout_s=0.5)) as engine:
        engine.run("class Evil:\n    def __repr__(self):\n        while True:\n            pass\n")
        result = engine.run("Evil()")
        assert result.status == "timeout"
        assert engine.run("evil = Evil()").status == "timeout"  # describing the new variable loops too
        assert engine.inspect("evil").repr == "<repr timed out>"
        assert engine.run("1 + 1").value == "2"


def test_broken_repr_is_reported_not_raised(engine: ReplEngine) -> None:
    engine.run("class Bad:\n    def __repr__(self):\n        raise SystemExit('no')\n")
    result = engine.run("b = Bad()\nb")
    assert result.status == "ok"
    assert result.value == "<repr failed: SystemExit>"
    assert engine.inspect("b").repr == "<repr failed: SystemExit>"


def test_inspect_with_endless_len_is_bounded() -> None:
    with ReplEngine(boundary="inprocess", policy="trusted", limits=Limits(timeout_s=0.5)) as engine:
        engine.run("class Slow:\n    def __len__(self):\n        while True:\n            pass\n")
        engine.run("s = 1")
        engine.run("s = Slow()")
        info = engine.inspect("s")
        assert info.repr == "<repr timed out>"


def test_walrus_in_a_comprehension_is_reported(engine: ReplEngine) -> None:
    result = engine.run("squares = [last := i * i for i in range(4)]")
    assert sorted(v.name for v in result.changes.created) == ["last", "squares"]


def test_global_in_a_function_is_watched_in_later_cells(engine: ReplEngine) -> None:
    engine.run("counter = 0\ndef bump():\n    global counter\n    counter += 1\n")
    result = engine.run("bump()")
    assert [(v.name, v.repr) for v in result.changes.rebound] == [("counter", "1")]


def test_a_method_named_eval_does_not_make_the_session_diff_in_full(engine: ReplEngine) -> None:
    # `model.eval()` names `eval` as an attribute: the cell is read exactly, not as dynamic.
    cell = compile_cell(
        "class M:\n    def eval(self):\n        return self\nmodel = M().eval()", engine.boundary.runtime
    )
    assert not cell.dynamic and "model" in cell.names
    assert compile_cell("x = eval('1')", engine.boundary.runtime).dynamic


def test_importing_a_host_module_is_noticed(engine: ReplEngine) -> None:
    runtime = engine.boundary.runtime
    assert compile_cell("import os.path\nx = 1", runtime).touches_host
    assert compile_cell("def f():\n    from sys import argv\n", runtime).touches_host
    assert not compile_cell("import json\nx = 1", runtime).touches_host
