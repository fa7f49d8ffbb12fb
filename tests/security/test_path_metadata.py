"""No metadata of paths outside the workspace under standard.

`os.stat`, `os.readlink`, `realpath` and the `pwd`/`grp` lookups raise no audit event, so pathlib's
metadata methods are checked by the session's own pathlib classes (`policy/_paths.py`).
"""

from __future__ import annotations

import os
import pathlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from _security import ok, refusal, run

from genpark_repl_tools import ExecutionResult, Policy, ReplEngine
from genpark_repl_tools.policy import PolicyViolation, _paths
from genpark_repl_tools.policy._paths import SessionPath

OUTSIDE = {
    "stat": "pathlib.Path('/etc/passwd').stat().st_size",
    "lstat": "pathlib.Path('/etc/passwd').lstat().st_size",
    "exists": "pathlib.Path('/etc/shadow').exists()",
    "is_dir": "pathlib.Path('/root/.ssh').is_dir()",
    "owner": "pathlib.Path('/etc/passwd').owner()",
    "group": "pathlib.Path('/etc/passwd').group()",
    "readlink": "str(pathlib.Path('/proc/self/exe').readlink())",
    "resolve": "str(pathlib.Path('/proc/self/root').resolve())",
    "samefile": "pathlib.Path('/etc/passwd').samefile('/etc/passwd')",
    "relative escape": "pathlib.Path('../../etc/passwd').stat().st_size",
}
HOST_DIRECTORIES = (
    "import pathlib\n(str(pathlib.Path.cwd()), str(pathlib.Path.home()), str(pathlib.Path('~').expanduser()))"
)


@pytest.fixture
def path_class(tmp_path: pathlib.Path) -> Iterator[tuple[type[SessionPath], pathlib.Path]]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "data.csv").write_text("a,b\n")
    os.symlink("/etc/passwd", workspace / "link")
    token = _paths.enter("standard", str(workspace))
    try:
        yield SessionPath, workspace
    finally:
        _paths.exit(token)


@pytest.mark.parametrize("method", ["stat", "lstat", "exists", "is_file", "owner", "group", "resolve"])
def test_metadata_outside_the_workspace_is_refused(path_class: Any, method: str) -> None:
    cls, _ = path_class
    with pytest.raises(PolicyViolation, match=r"^reading metadata of '/etc/passwd' is not allowed"):
        getattr(cls("/etc/passwd"), method)()


def test_links_and_relative_paths_are_judged_by_where_they_lead(path_class: Any) -> None:
    cls, workspace = path_class
    with pytest.raises(PolicyViolation, match=r"^reading metadata of '.*/ws/link' is not allowed") as refused:
        cls("link").stat()  # a link in the workspace that points outside; not named in the message
    assert "/etc/passwd" not in str(refused.value)
    with pytest.raises(PolicyViolation, match="/proc/"):
        cls("/proc/self/exe").readlink()
    with pytest.raises(PolicyViolation):
        cls("../../etc/passwd").exists()
    assert cls("data.csv").stat().st_size == 4  # relative paths mean the workspace
    assert cls(workspace / "data.csv").is_file()
    assert cls("missing.txt").exists() is False
    assert cls.cwd() == cls.home() == cls("~").expanduser() == cls(os.path.realpath(workspace))
    assert cls("data.csv").resolve() == cls(os.path.realpath(workspace / "data.csv"))


def test_outside_an_execution_nothing_is_answered() -> None:
    with pytest.raises(PolicyViolation, match=r"^reading file metadata is not allowed"):
        SessionPath("/etc/passwd").exists()


@pytest.mark.parametrize("label", list(OUTSIDE))
def test_path_metadata_outside_the_workspace_is_refused_in_a_session(label: str) -> None:
    with ReplEngine(boundary="inprocess", policy="standard") as engine:
        message = refusal(run(engine, "import pathlib\n" + OUTSIDE[label]))
    assert message.startswith("reading metadata of '"), message


def test_host_directories_are_the_workspace_in_a_session(tmp_path: pathlib.Path) -> None:
    with ReplEngine(boundary="inprocess", policy=Policy.standard().with_workspace(tmp_path)) as engine:
        value = ok(run(engine, HOST_DIRECTORIES)).value
    assert value == repr((str(tmp_path),) * 3)


def test_metadata_inside_the_workspace_still_works_in_a_session(tmp_path: pathlib.Path) -> None:
    with ReplEngine(boundary="inprocess", policy=Policy.standard().with_workspace(tmp_path)) as engine:
        code = (
            f"import pathlib\np = pathlib.Path({str(tmp_path / 'a.txt')!r})\n"
            "with open(p, 'w') as f:\n    f.write('xyz')\n(p.exists(), p.is_file(), p.stat().st_size)"
        )
        assert ok(run(engine, code)).value == "(True, True, 3)"


def test_refusals_do_not_say_where_links_lead() -> None:
    pytest.importorskip("pandas")
    found: list[ExecutionResult] = []
    with ReplEngine(boundary="inprocess", policy="standard") as engine:
        # On a thread of its own, the cell's directory is that thread's: /proc/self/cwd (the main
        # thread's) is the host's directory.
        code = "import pandas as pd\npd.read_csv('/proc/self/cwd/data.csv')"
        thread = threading.Thread(target=lambda: found.append(run(engine, code)))
        thread.start()
        thread.join(timeout=60)
    message = refusal(found[0])
    assert message.startswith("opening '/proc/self/cwd/data.csv' is not allowed under policy 'standard'")
    assert os.getcwd() not in message
