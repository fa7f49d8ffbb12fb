"""Files: none under strict; under standard only inside the workspace, whoever opens them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from _security import blocked, ok, refusal, run

from genpark_repl_tools import Policy, ReplEngine

READ_SECRET = "open('/etc/hostname').read()"
TRAVERSAL = "open('../../../../../../etc/hostname').read()"
BY_DESCRIPTOR = "open(0).read()"
WITH_OPENER = "open('x.txt', 'w', opener=lambda path, flags: 1)"
STR_SUBCLASS = (
    "class Sneaky(str):\n    def startswith(self, *args):\n        return "
    "True\nopen(Sneaky('/etc/hostname')).read()"
)
CHANGING_PATH = (
    "import pathlib\n"
    "class Flip(pathlib.PurePosixPath):\n"
    "    calls = 0\n"
    "    def __str__(self):\n"
    "        Flip.calls += 1\n"
    "        return 'ok.txt' if Flip.calls % 2 else '/etc/hostname'\n"
    "open(Flip('ok.txt')).read()"
)
PATHLIB_READ = "import pathlib\npathlib.Path('/etc/hostname').read_text()"
PATHLIB_LIST = "import pathlib\nlist(pathlib.Path('/etc').iterdir())"
PATHLIB_SYMLINK = "import pathlib\npathlib.Path('{ws}/link').symlink_to('/etc/hostname')"
PATHLIB_HARDLINK = "import pathlib\npathlib.Path('{ws}/hard').hardlink_to('/etc/hostname')"
PATHLIB_RENAME_OUT = (
    "import pathlib\np = pathlib.Path('{ws}/r.txt')\np.write_text('x')\np.rename('{outside}/moved.txt')"
)
PATHLIB_WRITE_OUT = "import pathlib\npathlib.Path('{outside}/dropped.txt').write_text('x')"
IO_OPEN = "import io\nio.open('/etc/hostname')"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("workspace")


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("outside")


@pytest.fixture(scope="module")
def standard(workspace: Path) -> Iterator[ReplEngine]:
    with ReplEngine(boundary="inprocess", policy=Policy.standard().with_workspace(workspace)) as e:
        yield e


def outside_message(path: str, workspace: Path, verb: str = "opening") -> str:
    return (
        f"{verb} '{path}' is not allowed under policy 'standard'; "
        f"files are allowed only inside the workspace '{os.path.realpath(workspace)}'"
    )


@pytest.mark.parametrize("code", [READ_SECRET, TRAVERSAL, STR_SUBCLASS, PATHLIB_READ])
def test_reading_outside_the_workspace_is_refused(standard: ReplEngine, workspace: Path, code: str) -> None:
    assert refusal(run(standard, code)) == outside_message("/etc/hostname", workspace)


def test_listing_outside_the_workspace_is_refused(standard: ReplEngine, workspace: Path) -> None:
    assert refusal(run(standard, PATHLIB_LIST)) == outside_message("/etc", workspace, "listing directory")


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (
            BY_DESCRIPTOR,
            "open() of a int is not allowed under policy 'standard'; pass a str or pathlib path inside "
            "the workspace",
        ),
        (WITH_OPENER, "open() with an opener is not allowed under policy 'standard'"),
        (
            CHANGING_PATH,
            "open() of a Flip is not allowed under policy 'standard'; pass a str or pathlib path inside "
            "the workspace",
        ),
        (PATHLIB_SYMLINK, "creating symbolic links (os.symlink) is not allowed under policy 'standard'"),
    ],
)
def test_tricky_opens_are_refused(standard: ReplEngine, workspace: Path, code: str, message: str) -> None:
    assert refusal(run(standard, code.format(ws=workspace))) == message


def test_links_and_moves_across_the_boundary_are_refused(
    standard: ReplEngine, workspace: Path, outside: Path
) -> None:
    ws = os.path.realpath(workspace)
    assert refusal(run(standard, PATHLIB_HARDLINK.format(ws=ws))) == outside_message(
        "/etc/hostname", workspace, "os.link on"
    )
    moved = os.path.join(os.path.realpath(outside), "moved.txt")
    assert refusal(run(standard, PATHLIB_RENAME_OUT.format(ws=ws, outside=outside))) == outside_message(
        moved, workspace, "os.rename on"
    )
    dropped = os.path.join(os.path.realpath(outside), "dropped.txt")
    assert refusal(run(standard, PATHLIB_WRITE_OUT.format(outside=outside))) == outside_message(
        dropped, workspace, "writing to"
    )
    assert os.listdir(outside) == []


def test_files_inside_the_workspace_work(standard: ReplEngine, workspace: Path) -> None:
    (workspace / "given.csv").write_text("a,b\n1,2\n")
    session = "files-inside"
    code = (
        "with open('notes.txt', 'w') as f:\n    f.write('hello')\n"  # relative: inside the workspace
        "import csv, pathlib\n"
        f"with open('{workspace}/given.csv') as f:\n    rows = list(csv.reader(f))\n"
        f"p = pathlib.Path('{workspace}') / 'sub'\n"
        "p.mkdir(exist_ok=True)\n"
        "(p / 'x.txt').write_text('y')\n"
        "with open('notes.txt') as f:\n    text = f.read()\n"
        "(rows, text, sorted(x.name for x in pathlib.Path(p).iterdir()))"
    )
    assert ok(standard.run(code, session=session)).value == "([['a', 'b'], ['1', '2']], 'hello', ['x.txt'])"
    assert (workspace / "notes.txt").read_text() == "hello"


def test_the_default_workspace_is_a_temporary_directory_per_engine() -> None:
    with ReplEngine(boundary="inprocess", policy="standard") as engine:
        result = ok(engine.run("with open('a.txt', 'w') as f:\n    n = f.write('z')\nn"))
        assert result.value == "1"
        workspace = engine.boundary.session_workspace("default").path  # type: ignore[union-attr]
        assert os.path.basename(workspace.parent).startswith("genpark-ws-")  # a directory per session
        assert Path(workspace, "a.txt").read_text() == "z"


def test_strict_has_no_files() -> None:
    with ReplEngine(boundary="inprocess", policy="strict") as engine:
        assert blocked(run(engine, READ_SECRET)).startswith(
            "builtin 'open' is not available under policy 'strict'"
        )
        assert blocked(run(engine, PATHLIB_READ)).startswith(
            "import of 'pathlib' is not allowed under policy 'strict'"
        )
        result = run(engine, IO_OPEN)
        assert result.error is not None and result.error.message == (
            "'io.open' is not available under policy 'strict': in-memory streams only"
        )
        assert (
            ok(run(engine, "import io\nbuf = io.StringIO()\nbuf.write('x')\nbuf.getvalue()")).value == "'x'"
        )
