"""Imports: only the allowlist, wherever the import statement hides; modules arrive as read-only views."""

from __future__ import annotations

import pytest
from _security import assert_import_refused, blocked, ok, refusal, run

from genpark_repl_tools import ReplEngine

IMPORT_OS = "import os"
IMPORT_NESTED = "if True:\n    import subprocess"
IMPORT_IN_FUNCTION = "def f():\n    import socket\n    return socket"
IMPORT_IN_TRY = "try:\n    import sys\nexcept ImportError:\n    pass"
IMPORT_FROM = "from os import system"
IMPORT_ALIAS = "import ctypes as c"
IMPORT_DOTTED = "import os.path"
IMPORT_UNICODE = "import ｏｓ"  # noqa: RUF001 - fullwidth letters normalize to "os"
IMPORT_PRIVATE_MODULE = "import _thread"
IMPORT_PRIVATE_NAME = "from random import _os"
IMPORT_RELATIVE = "from . import sibling"
IMPORT_HIDDEN_NAME = "from string import Formatter"
IMPORT_LATER_LINE = "x = 1\n\nimport importlib"

REFUSED_MODULES = [
    (IMPORT_OS, "os"),
    (IMPORT_NESTED, "subprocess"),
    (IMPORT_IN_FUNCTION, "socket"),
    (IMPORT_IN_TRY, "sys"),
    (IMPORT_FROM, "os"),
    (IMPORT_ALIAS, "ctypes"),
    (IMPORT_DOTTED, "os.path"),
    (IMPORT_UNICODE, "os"),
    ("import gc", "gc"),
    ("import builtins", "builtins"),
    ("import inspect", "inspect"),
    ("import pickle", "pickle"),
    ("import threading", "threading"),
    ("import importlib.util", "importlib.util"),
]


@pytest.mark.parametrize(("code", "module"), REFUSED_MODULES)
def test_modules_outside_the_allowlist_are_refused_wherever_the_import_is(
    engine: ReplEngine, code: str, module: str
) -> None:
    assert_import_refused(blocked(run(engine, code)), module, engine.policy.name)


def test_refusal_says_where(engine: ReplEngine) -> None:
    result = run(engine, IMPORT_LATER_LINE)
    finding = result.findings[0]
    assert (finding.line, finding.column, finding.source_line) == (3, 0, "import importlib")
    assert "line 3:1: import of 'importlib'" in result.to_observation()


def test_a_refused_cell_runs_nothing(engine: ReplEngine) -> None:
    session = "refused-runs-nothing"
    engine.run("x = 1", session=session)
    result = engine.run("x = 2\nimport os", session=session)
    assert result.status == "blocked"
    assert engine.run("x", session=session).value == "1"


def test_private_modules_are_refused(engine: ReplEngine) -> None:
    assert_import_refused(blocked(run(engine, IMPORT_PRIVATE_MODULE)), "_thread", engine.policy.name)


def test_private_names_are_refused(engine: ReplEngine) -> None:
    assert blocked(run(engine, IMPORT_PRIVATE_NAME)) == (
        f"importing '_os' from 'random' is not allowed under policy '{engine.policy.name}': "
        "names starting with '_' are private"
    )


def test_relative_imports_are_refused(engine: ReplEngine) -> None:
    assert blocked(run(engine, IMPORT_RELATIVE)) == (
        f"relative imports are not available under policy '{engine.policy.name}': "
        "import modules by their absolute name"
    )


def test_withheld_names_are_refused_with_the_reason(engine: ReplEngine) -> None:
    assert blocked(run(engine, IMPORT_HIDDEN_NAME)) == (
        f"'string.Formatter' is not available under policy '{engine.policy.name}': "
        "Formatter is left out: it looks attributes up by name"
    )


def test_the_data_stack_is_refused_under_strict() -> None:
    with ReplEngine(boundary="inprocess", policy="strict") as engine:
        assert_import_refused(blocked(run(engine, "import numpy as np")), "numpy", "strict")


def test_submodules_follow_their_own_rules() -> None:
    with ReplEngine(boundary="inprocess", policy="standard") as engine:
        assert blocked(run(engine, "import pandas.core.frame")).startswith(
            "import of 'pandas.core.frame' is not allowed under policy 'standard'; allowed from pandas: "
            "pandas.api"
        )
        assert blocked(run(engine, "import numpy.ctypeslib")) == (
            "import of 'numpy.ctypeslib' is not allowed under policy 'standard': raw memory access "
            "through ctypes"
        )


# ---- the legitimate neighbours ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "value"),
    [
        ("import math\nmath.pi", "3.141592653589793"),
        ("import json\njson.dumps({'a': [1, 2]})", "'{\"a\": [1, 2]}'"),
        ("from collections import Counter\nCounter('aab').most_common(1)", "[('a', 2)]"),
        ("import collections.abc\nissubclass(list, collections.abc.Sequence)", "True"),
        ("from json import *\ndumps([1])", "'[1]'"),
        ("from __future__ import annotations\ndef f(x: Undefined) -> int:\n    return 1\nf(0)", "1"),
        ("def f():\n    import statistics\n    return statistics.mean([1, 2, 3])\nf()", "2"),
        ("import json.decoder\njson.decoder.JSONDecodeError.__name__", "'JSONDecodeError'"),
        ("import time\ntime.strptime('2024-03-05', '%Y-%m-%d').tm_mday", "5"),
    ],
)
def test_allowed_imports_work(engine: ReplEngine, code: str, value: str) -> None:
    assert ok(run(engine, code)).value == value


def test_imported_modules_show_up_as_modules(engine: ReplEngine) -> None:
    result = ok(run(engine, "import json\njson"))
    assert result.value == "<module 'json'>"


def test_refusal_text_reads_well_for_a_model(engine: ReplEngine) -> None:
    text = run(engine, IMPORT_OS).to_observation()
    policy = engine.policy.name
    assert text.startswith(
        f"Blocked by policy '{policy}': nothing ran and no variable changed.\n"
        f"line 1:1: import of 'os' is not allowed under policy '{policy}'; allowed include: "
    )
    assert text.endswith(
        "    import os\n    ^\nHint: Rewrite the code using only what the message above says is allowed."
    )


def test_a_module_the_policy_admits_but_the_view_hides_fails_clearly(engine: ReplEngine) -> None:
    result = run(engine, "import queue\nqueue.threading")
    assert result.status == "error"
    assert result.error is not None and result.error.type == "AttributeError"
    assert result.error.message.startswith(
        f"'queue.threading' is the module 'threading': import of 'threading' is not allowed under policy "
        f"'{engine.policy.name}'"
    )


def test_runtime_imports_of_c_code_still_work(engine: ReplEngine) -> None:
    # datetime.strptime imports _strptime from C through the calling frame's builtins.
    code = "import datetime\ndatetime.datetime.strptime('2024', '%Y').year"
    assert ok(run(engine, code)).value == "2024"
    assert refusal(run(engine, IMPORT_OS)).startswith("import of 'os'")
