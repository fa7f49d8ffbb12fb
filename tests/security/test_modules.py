"""Modules: views are read-only and per session, so no session can poison what the host or others use."""

from __future__ import annotations

import decimal
import json
import keyword
import random
import sys

import pytest
from _security import ok, refusal, run

from genpark_repl_tools import ReplEngine

REPLACE_FUNCTION = "import json\njson.dumps = lambda *a, **k: 'poisoned'"
SETATTR_FUNCTION = "import json\nsetattr(json, 'dumps', print)"
DELETE_FUNCTION = "import json\ndel json.dumps"
REPLACE_SUBMODULE_FUNCTION = "import json.decoder\njson.decoder.scanstring = print"
REPLACE_CONSTANT = "import math\nmath.pi = 3"
AUGMENT_CONSTANT = "import math\nmath.pi += 1"
MUTATE_TABLE = "import keyword\nkeyword.kwlist.clear()\nlen(keyword.kwlist)"
MUTATE_DECIMAL_DEFAULT = "import decimal\ndecimal.DefaultContext.prec = 3\ndecimal.DefaultContext.prec"
SEED_RANDOM = "import random\nrandom.seed(7)\n[random.randint(0, 99) for _ in range(3)]"
COPY_MODULE = "import copy, json\ncopy.copy(json)"


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (REPLACE_FUNCTION, "dumps"),
        (SETATTR_FUNCTION, "dumps"),
        (DELETE_FUNCTION, "dumps"),
        (REPLACE_SUBMODULE_FUNCTION, "scanstring"),
        (REPLACE_CONSTANT, "pi"),
        (AUGMENT_CONSTANT, "pi"),
    ],
)
def test_modules_are_read_only(engine: ReplEngine, code: str, name: str) -> None:
    before = (json.dumps, json.decoder.scanstring)
    assert refusal(run(engine, code)) == (
        f"changing attribute '{name}' of a module is not allowed under policy '{engine.policy.name}'; "
        "modules are shared; keep your own values in variables"
    )
    assert (json.dumps, json.decoder.scanstring) == before
    assert json.dumps({"a": 1}) == '{"a": 1}'


def test_module_level_tables_are_copies(engine: ReplEngine) -> None:
    host = list(keyword.kwlist)
    assert ok(run(engine, MUTATE_TABLE)).value == "0"
    assert keyword.kwlist == host


def test_decimal_contexts_belong_to_the_session(engine: ReplEngine) -> None:
    host_default = decimal.DefaultContext.prec
    host_current = decimal.getcontext().prec
    assert ok(run(engine, MUTATE_DECIMAL_DEFAULT)).value == "3"
    session = "decimal-session"
    assert ok(
        engine.run("import decimal\ndecimal.getcontext().prec = 5\ndecimal.Decimal(1) / 3", session=session)
    ).value == ("Decimal('0.33333')")
    assert engine.run("decimal.Decimal(2) / 3", session=session).value == "Decimal('0.66667')"
    assert (decimal.DefaultContext.prec, decimal.getcontext().prec) == (host_default, host_current)
    assert ok(run(engine, "import decimal\ndecimal.getcontext().prec")).value == str(host_default)


def test_random_is_per_session_and_leaves_the_host_alone(engine: ReplEngine) -> None:
    host_state = random.getstate()
    first = ok(run(engine, SEED_RANDOM)).value
    second = ok(run(engine, SEED_RANDOM)).value
    assert first == second
    expected = random.Random(7)
    assert first == repr([expected.randint(0, 99) for _ in range(3)])
    assert random.getstate() == host_state


def test_sessions_do_not_share_views(engine: ReplEngine) -> None:
    engine.run("import json\nmine = json", session="views-a")
    engine.run("import json\nmine = json", session="views-b")
    assert engine.run("mine is json", session="views-a").value == "True"
    result = engine.run("import json\njson.loads('[1]')", session="views-b")
    assert ok(result).value == "[1]"


def test_a_view_cannot_be_copied_into_a_real_module(engine: ReplEngine) -> None:
    result = run(engine, COPY_MODULE)
    assert result.status == "error"
    assert result.error is not None and result.error.type == "TypeError"
    assert result.error.message == "cannot pickle 'module' object"  # plain Python's words


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("import math\ntype(math)", "<class 'module'>"),
        (
            "import json, math\ntry:\n    json.dumps(math)\nexcept TypeError as e:\n    m = str(e)\nm",
            "Object of type module is not JSON serializable",
        ),
        ("import math\ntype(math).__name__", "module"),
        ("import math\nrepr(type(math))", "<class 'module'>"),
    ],
)
def test_a_view_reads_as_a_module_never_by_its_internal_name(
    engine: ReplEngine, code: str, expected: str
) -> None:
    """Internal names never reach the model: the view's class answers as `module` does in plain Python."""
    result = ok(run(engine, code))
    assert result.value is not None and expected in result.value
    assert "genpark" not in result.to_observation() and "ModuleView" not in result.to_observation()


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (
            "import dataclasses\ndataclasses.sys",
            "'dataclasses.sys' is the module 'sys': import of 'sys' is not allowed",
        ),
        pytest.param(
            "import dataclasses\ndataclasses.builtins",
            "'dataclasses.builtins' is the module 'builtins': import of 'builtins'",
            marks=pytest.mark.skipif(
                sys.version_info >= (3, 12), reason="dataclasses imports builtins only on Python 3.10-3.11"
            ),
        ),
        (
            "import typing\ntyping.Type",
            "'typing.Type' is not available under policy '{policy}': it exposes the real metaclass",
        ),
        ("import time\ntime.clock_settime", "'time.clock_settime' is not available under policy '{policy}'"),
        (
            "import csv\ncsv.register_dialect",
            "'csv.register_dialect' is not available under policy '{policy}': changes a process-wide setting",
        ),
        (
            "import enum\nenum.global_enum",
            "'enum.global_enum' is not available under policy '{policy}': it writes into the host's "
            "__main__ module",
        ),
        ("import io\nio.open", "'io.open' is not available under policy '{policy}': in-memory streams only"),
        ("import abc\nabc.ABCMeta", "'abc.ABCMeta' is not available under policy '{policy}'"),
    ],
)
def test_withheld_module_attributes_say_why(engine: ReplEngine, code: str, message: str) -> None:
    result = run(engine, code)
    assert result.status == "error"
    assert result.error is not None and result.error.type == "AttributeError"
    assert result.error.message.startswith(message.format(policy=engine.policy.name))


@pytest.mark.parametrize(
    ("code", "value"),
    [
        ("import json\njson.decoder.JSONDecoder().decode('[2]')", "[2]"),
        ("import json.decoder as d\nd.JSONDecodeError.__name__", "'JSONDecodeError'"),
        ("import re\nre.sub(r'\\d', '#', 'a1b2')", "'a#b#'"),
        ("import random\nr = random.Random(1)\nr.random() == random.Random(1).random()", "True"),
        ("import time\nround(time.monotonic() - time.monotonic())", "0"),
        ("import string\nstring.ascii_lowercase[:3]", "'abc'"),
    ],
)
def test_module_contents_work(engine: ReplEngine, code: str, value: str) -> None:
    assert ok(run(engine, code)).value == value


def test_a_module_s_version_is_read_when_asked(engine: ReplEngine) -> None:
    """matplotlib computes __version__ on first read; a view answers it then, as the module would."""
    matplotlib = pytest.importorskip("matplotlib")
    if engine.policy.name == "strict":
        pytest.skip("matplotlib is not allowed under strict")
    code = "import matplotlib, numpy\n(matplotlib.__version__, numpy.__version__)"
    numpy = sys.modules["numpy"]
    assert ok(run(engine, code)).value == repr((matplotlib.__version__, numpy.__version__))


# pathlib's classes hold the real os.path module (posixpath or ntpath) as `parser` from Python 3.13 on:
# its `os` attribute is the host's os module (os.environ: the host's secrets). Each way code reads an
# attribute by name goes through the same check.
PATH = "import pathlib\np = pathlib.PurePath('a')\n"
PARSER_READS = {
    "attribute": PATH + "p.parser.os.environ",
    "class attribute": PATH + "pathlib.PureWindowsPath.parser",
    "getattr": PATH + "getattr(p, 'par' + 'ser')",
    "attrgetter": PATH + "import operator\noperator.attrgetter('parser.os')(p)",
    "methodcaller": PATH + "import operator\noperator.methodcaller('parser')(p)",
    "format field": PATH + "'{0.parser.os.environ}'.format(p)",
    "format field built at run time": PATH + "('{0.par' + 'ser.os.environ}').format(p)",
    "format_map field": PATH + "'{p.parser.sep}'.format_map({'p': p})",
}


@pytest.mark.parametrize("code", PARSER_READS.values(), ids=PARSER_READS.keys())
def test_a_real_module_held_by_a_library_class_is_refused(engine: ReplEngine, code: str) -> None:
    pathlib = pytest.importorskip("pathlib")
    if engine.policy.name == "strict":
        pytest.skip("pathlib is not allowed under strict")
    if not hasattr(pathlib.PurePath, "parser"):
        pytest.skip("pathlib's classes hold no os.path module before Python 3.13")
    message = refusal(run(engine, code))
    assert "'parser'" in message, message


def test_a_real_module_in_a_pandas_expression_is_refused(engine: ReplEngine) -> None:
    pytest.importorskip("pandas")
    if engine.policy.name == "strict":
        pytest.skip("pandas is not allowed under strict")
    code = PATH + "import pandas as pd\npd.DataFrame({'a': [1]}).eval('@p . parser', engine='python')"
    assert "attribute 'parser' is checked when code reads it" in refusal(run(engine, code))


def test_names_read_through_the_check_still_work(engine: ReplEngine) -> None:
    """A module view under such a name is handed out; paths and columns named like one work."""
    code = "import json\nclass C:\n    parser = json\nC.parser.dumps([1])"
    assert ok(run(engine, code)).value == "'[1]'"
    if engine.policy.name == "strict":
        return
    code = (
        PATH + "w = pathlib.PureWindowsPath('c:/x/y')\n"
        "(pathlib.PurePath('a/b').parts, p / 'b' == pathlib.PurePath('a/b'), w.parent.name, w.drive)"
    )
    assert ok(run(engine, code)).value == "(('a', 'b'), True, 'x', 'c:')"
    pytest.importorskip("pandas")
    code = "import pandas as pd\ndf = pd.DataFrame({'type': [1, 2], 'parser': [3, 4]})\n"
    code += "(len(df.query('type == 1')), int(df.eval('parser + type').sum()))"
    assert ok(run(engine, code)).value == "(1, 10)"
