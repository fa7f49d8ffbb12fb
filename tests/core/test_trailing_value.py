"""The compile fast path's reading of a cell's last line: a bare name is read without the general
rules, and must read as they do."""

from __future__ import annotations

import keyword

import pytest

from genpark_repl_tools import ReplEngine
from genpark_repl_tools._compile import _last_code_line, _last_line

NAMES = [*keyword.kwlist, *keyword.softkwlist, "__debug__", "y", "df", "_", "x1", "print", "_x_"]
BEFORE = ["", "x = 1\n", "x = (1,\n", "x = 1 \\\n", "def f():\n    pass\n", "# note\n"]
AFTER = ["", "\n", "\n# note", "\n\n"]


@pytest.mark.parametrize("name", NAMES)
def test_a_bare_name_reads_as_the_general_rules_read_it(name: str) -> None:
    for before in BEFORE:
        for after in AFTER:
            text = f"{before}{name}{after}".split("\n")
            last = _last_code_line(text)
            # A trailing space keeps the line from the bare-name shortcut; the rules strip it.
            general = [line + " " if i == last else line for i, line in enumerate(text)]
            assert _last_line(text) == _last_line(general), (before, name, after)


def test_a_cell_ending_in_a_name_shows_its_value() -> None:
    with ReplEngine(policy="strict") as engine:
        assert engine.run("y = 21 * 2\ny").value == "42"
        assert engine.run("y = 1\npass").value is None
