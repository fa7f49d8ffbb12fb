"""Every route by which library code applies a format string for the session checks its fields.

str.format and format_map walk attributes by name ('{x.__init__.__globals__}'); library code that
calls them on a string the session handed over (a string wrapper class, matplotlib's tick
formatters and labels, a string written into a library object) applies the same rules as the
session's own str.format calls. Plain fields still work everywhere.
"""

from __future__ import annotations

import pytest
from _security import ok, refusal, run

from genpark_repl_tools import ReplEngine

FIELD = "{0.__init__.__globals__}"
USER_STRING = f"import collections\ncollections.UserString('{FIELD}').format(1)"
USER_STRING_MAP = "import collections\ncollections.UserString('{x.__class__}').format_map({'x': 1})"
USER_STRING_UNBOUND = (
    f"import collections\ncollections.UserString.format(collections.UserString('{FIELD}'), 1)"
)
USER_STRING_NESTED = (
    "import collections\n"
    "outer = collections.UserString('plain')\n"
    f"outer.data = collections.UserString('{FIELD}')\n"
    "outer.format(1)"
)
PLOT = "import matplotlib\nimport matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n"
TICK_CLASS = "import matplotlib.ticker as t\nt.StrMethodFormatter('{x.__init__.__globals__}')(1.0)"
TICK_STRING = PLOT + "ax.xaxis.set_major_formatter('{x.__class__}')"
TICK_REWRITE = PLOT + "f = ax.xaxis.get_major_formatter()\nax.xaxis.set_major_formatter('{x}')\n"
TICK_REWRITE += "f = ax.xaxis.get_major_formatter()\nf.fmt = '{x.__class__}'"
BAR_LABEL = PLOT + "bars = ax.bar([1, 2], [3, 4])\nax.bar_label(bars, fmt='{0.__class__}')"
LEGIT = (
    "import collections, io\n"
    "name = 'x'\n"
    "s = collections.UserString('{} {:.2f}')\n"
    "(s.format('a', 2.5), '{} {:.2f}'.format(1, 2.5), f'{name}!', '{a}-{b}'.format_map({'a': 1, 'b': 2}))"
)
LEGIT_PLOT = (
    PLOT
    + "ax.xaxis.set_major_formatter('{x:.1f} km')\n"
    + "bars = ax.bar([1, 2], [3, 4])\n"
    + "labels = ax.bar_label(bars, fmt='{:.1f}')\n"
    + "import matplotlib.ticker as t\n"
    + "texts = [x.get_text() for x in labels]\n"
    + "(ax.xaxis.get_major_formatter()(2.0), t.StrMethodFormatter('{x:g}')(3.0), texts)"
)


@pytest.mark.parametrize(
    ("code", "field"),
    [
        (USER_STRING, "0.__init__.__globals__"),
        (USER_STRING_MAP, "x.__class__"),
        (USER_STRING_UNBOUND, "0.__init__.__globals__"),
        (USER_STRING_NESTED, "0.__init__.__globals__"),
    ],
    ids=["bound", "format_map", "unbound", "nested"],
)
def test_string_wrappers_are_checked(engine: ReplEngine, code: str, field: str) -> None:
    assert refusal(run(engine, code)).startswith(f"format field '{{{field}}}': attribute '__")


@pytest.mark.parametrize(
    "code",
    [TICK_CLASS, TICK_STRING, TICK_REWRITE, BAR_LABEL],
    ids=["class", "string", "rewrite", "bar_label"],
)
def test_matplotlib_format_strings_are_checked(engine: ReplEngine, code: str) -> None:
    pytest.importorskip("matplotlib")
    message = refusal(run(engine, code))
    if engine.policy.name == "strict":
        assert "import of 'matplotlib" in message
    else:
        assert message.startswith("format field '{"), message


def test_plain_format_strings_still_work(engine: ReplEngine) -> None:
    assert ok(run(engine, LEGIT)).value == "('a 2.50', '1 2.50', 'x!', '1-2')"


def test_plain_tick_and_label_formats_still_work(engine: ReplEngine) -> None:
    pytest.importorskip("matplotlib")
    if engine.policy.name == "strict":
        pytest.skip("matplotlib is not allowed under strict")
    assert ok(run(engine, LEGIT_PLOT)).value == "('2.0 km', '3', ['3.0', '4.0'])"


def test_colorbar_format_strings_are_checked(engine: ReplEngine) -> None:
    pytest.importorskip("matplotlib")
    if engine.policy.name == "strict":
        pytest.skip("matplotlib is not allowed under strict")
    code = (
        PLOT
        + "import matplotlib.colorbar as cbar\n"
        + "image = ax.imshow([[1, 2], [3, 4]])\n"
        + "fig2, cax = plt.subplots()\n"
        + "cb = cbar.Colorbar(cax, image, format='{x.__class__}')"
    )
    assert refusal(run(engine, code)).startswith("format field '{x.__class__}'")
    legit = (
        PLOT
        + "image = ax.imshow([[1, 2], [3, 4]])\ncb = fig.colorbar(image, format='{x:.1f}')\ncb.formatter(2)"
    )
    assert ok(run(engine, legit)).value == "'2.0'"


def test_pprint_s_format_method_still_works(engine: ReplEngine) -> None:
    code = "import pprint\npprint.PrettyPrinter().format({'a': 1}, {}, 0, 0)"
    assert ok(run(engine, code)).value == "(\"{'a': 1}\", True, False)"
