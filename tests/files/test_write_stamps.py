"""In-process sessions under a restricted policy: the audit hook stamps every write it lets code make
in a workspace, and a run that wrote nothing there is known to have changed nothing without a look at
the directory. Every route by which such code can create, write, rename or remove a file must stamp,
or its file would go unreported."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import genpark_repl_tools._files as files_module
from genpark_repl_tools import Limits, ReplEngine

_names = itertools.count()

# (code writing in the workspace, whose path is `ws`; the names it leaves there). Every kind of write
# the hook allows: open for writing in each mode, pathlib's methods (os.* events), libraries that
# write through open().
CREATES = {
    "open w": ("open('a.txt', 'w').close()", ["a.txt"]),
    "open x": ("open('a.txt', 'x').close()", ["a.txt"]),
    "open a": ("open('a.txt', 'a').close()", ["a.txt"]),
    "open wb+": ("with open('a.bin', 'wb+') as f:\n    f.write(b'1')", ["a.bin"]),
    "pathlib write_text": ("import pathlib\npathlib.Path(ws, 'p.txt').write_text('x')", ["p.txt"]),
    "pathlib touch": ("import pathlib\npathlib.Path(ws, 't').touch()", ["t"]),
    "pathlib mkdir": ("import pathlib\npathlib.Path(ws, 'd').mkdir()\nopen('d/f', 'w').close()", ["d/f"]),
    "json.dump": ("import json\nwith open('j.json', 'w') as f:\n    json.dump([1], f)", ["j.json"]),
    "numpy save": ("import numpy as np\nnp.save(ws + '/n.npy', np.arange(3))", ["n.npy"]),
    "numpy tofile": ("import numpy as np\nnp.arange(3).tofile(ws + '/n.bin')", ["n.bin"]),
    "pandas to_csv": ("import pandas as pd\npd.DataFrame({'a': [1]}).to_csv(ws + '/t.csv')", ["t.csv"]),
    "matplotlib savefig": (
        "import matplotlib.pyplot as plt\nfig = plt.figure()\nfig.savefig(ws + '/f.png')\nplt.close(fig)",
        ["f.png"],
    ),
}
# (code run on a workspace holding a.txt; the change it makes)
CHANGES = {
    "open r+": ("with open('a.txt', 'r+') as f:\n    f.write('zzzz')", ("a.txt", "modified")),
    "pathlib unlink": ("import pathlib\npathlib.Path(ws, 'a.txt').unlink()", ("a.txt", "deleted")),
    "pathlib rename": (
        "import pathlib\npathlib.Path(ws, 'a.txt').rename(pathlib.Path(ws, 'b.txt'))",
        ("b.txt", "created"),
    ),
}


@pytest.fixture(scope="module")
def engine() -> Iterator[ReplEngine]:
    with ReplEngine(boundary="inprocess", policy="standard", limits=Limits(timeout_s=30)) as engine:
        yield engine


def fresh(engine: ReplEngine) -> tuple[str, str]:
    """A session that ran once and has an empty workspace: (its name, its workspace path)."""
    session = f"s{next(_names)}"
    assert engine.run("x = 1", session).files == []
    path = engine.boundary.session_workspace(session)
    assert path is not None
    return session, str(path.path)


@pytest.mark.parametrize("route", sorted(CREATES))
def test_every_route_that_creates_a_file_is_reported(engine: ReplEngine, route: str) -> None:
    code, names = CREATES[route]
    library = code.partition("import ")[2].partition("\n")[0].split(" ")[0].split(".")[0]
    if library in ("numpy", "pandas", "matplotlib"):
        pytest.importorskip(library)
    session, ws = fresh(engine)
    assert engine.run("y = 2", session).files == []  # nothing written: nothing looked at or reported
    result = engine.run(f"ws = {ws!r}\n{code}", session)
    assert result.ok, result.to_observation()
    assert [(c.name, c.change) for c in result.files] == [(n, "created") for n in names]


@pytest.mark.parametrize("route", sorted(CHANGES))
def test_changes_to_existing_files_are_reported(engine: ReplEngine, route: str) -> None:
    code, change = CHANGES[route]
    session, ws = fresh(engine)
    assert [
        c.name for c in engine.run("with open('a.txt', 'w') as f:\n    f.write('abc')", session).files
    ] == ["a.txt"]
    result = engine.run(f"ws = {ws!r}\n{code}", session)
    assert result.ok, result.to_observation()
    assert change in [(c.name, c.change) for c in result.files]


def test_a_run_that_writes_nothing_does_not_look_at_the_directory(
    engine: ReplEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    looked: list[str] = []

    class CountingOs:
        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

        @staticmethod
        def stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
            looked.append(os.fspath(path))
            return os.stat(path, *args, **kwargs)

    monkeypatch.setattr(files_module, "os", CountingOs())
    session, ws = fresh(engine)
    looked.clear()
    # Reads, and code that names open() without writing, stamp nothing: no stat of the workspace.
    quiet = "q = [1, 2]\nopen('missing.txt') if False else None\nimport json\njson.dumps(q)"
    assert engine.run(quiet, session).files == []
    assert ws not in looked
    result = engine.run("open('new.txt', 'w').close()", session)
    assert ws in looked and [c.name for c in result.files] == ["new.txt"]


def test_a_host_upload_then_a_quiet_run(engine: ReplEngine) -> None:
    session, _ = fresh(engine)
    engine.upload(session, "up.csv", b"a\n1\n")
    assert engine.run("k = 1", session).files == []  # the host's upload is not the run's change
    engine.delete_file(session, "up.csv")
    assert engine.run("k = 2", session).files == []
    assert [c.name for c in engine.run("open('mine.txt', 'w').close()", session).files] == ["mine.txt"]


def test_trusted_sessions_are_looked_at_every_run(tmp_path: Path) -> None:
    """Trusted code writes without the hook: its workspace is looked at after every run."""
    with ReplEngine(boundary="inprocess", policy="trusted") as engine:
        engine.upload("t", "seed.txt", b"x")
        ws = engine.boundary.session_workspace("t")
        assert ws is not None and engine.boundary.workspace_writes("t") is None
        result = engine.run(f"open({str(ws.path / 'made.txt')!r}, 'w').close()", "t")
        assert [c.name for c in result.files] == ["made.txt"]
