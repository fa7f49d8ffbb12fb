"""Relative paths mean the session's workspace, and only that: paths that leave it stay refused.

In-process the thread running a cell has a directory of its own (the workspace) for the cell's
duration; no other thread sees it change, the host's directory is back on that thread after the
cell (also after a timeout), and a relative path can reach another session's files no more than an
absolute one can.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _security import BOUNDARIES, ok, refusal

from genpark_repl_tools import Limits, ReplEngine
from genpark_repl_tools.policy import _paths

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="per-thread directories are Linux's")


@pytest.fixture(scope="module", params=BOUNDARIES)
def engine(request: pytest.FixtureRequest) -> Iterator[ReplEngine]:
    pytest.importorskip("pandas")
    with ReplEngine(policy="standard", boundary=request.param, limits=Limits(timeout_s=20)) as e:
        yield e


def workspace_of(engine: ReplEngine, session: str) -> Path:
    found = engine.boundary.session_workspace(session, create=True)
    assert found is not None
    return Path(os.path.realpath(found.path))


def outside_refusal(message: str, what: str, given: str) -> None:
    head = f"{what} '{given}' is not allowed under policy 'standard'; "
    head += "files are allowed only inside the workspace '"
    assert message.startswith(head), message
    assert message.endswith("'"), message  # no suggestion: the relative path was the workspace's already


@pytest.mark.parametrize(
    ("code", "what", "given"),
    [
        ("import pandas as pd\npd.read_csv('../neighbour/data.csv')", "opening", "../neighbour/data.csv"),
        ("import numpy as np\nnp.save('../dropped.npy', np.zeros(1))", "writing to", "../dropped.npy"),
        ("import pathlib\npathlib.Path('../dropped.txt').write_text('x')", "writing to", "../dropped.txt"),
        ("import pandas as pd\npd.read_csv('/etc/hostname', header=None)", "opening", "/etc/hostname"),
    ],
    ids=["read ../", "numpy write ../", "pathlib write ../", "absolute outside"],
)
def test_paths_that_leave_the_workspace_are_refused(
    engine: ReplEngine, code: str, what: str, given: str
) -> None:
    session = f"leave-{abs(hash(code))}"
    workspace = workspace_of(engine, session)
    neighbour = workspace.parent / "neighbour"
    neighbour.mkdir(exist_ok=True)
    (neighbour / "data.csv").write_text("secret\n1\n")
    outside_refusal(refusal(engine.run(code, session=session)), what, given)
    assert sorted(p.name for p in workspace.parent.iterdir() if p.name.startswith("dropped")) == []


def test_another_sessions_file_is_not_reachable_by_a_relative_path(engine: ReplEngine) -> None:
    engine.upload("victim", "data.csv", b"secret\n42\n")
    engine.upload("reader", "data.csv", b"mine\n7\n")
    victim = workspace_of(engine, "victim").name
    code = f"import pandas as pd\nint(pd.read_csv('../{victim}/data.csv').secret[0])"
    outside_refusal(refusal(engine.run(code, session="reader")), "opening", f"../{victim}/data.csv")
    # The neighbour: its own file by the same relative name.
    assert ok(engine.run("import pandas as pd\nint(pd.read_csv('data.csv').mine[0])", "reader")).value == "7"


def test_a_symlink_out_of_the_workspace_is_refused(engine: ReplEngine, tmp_path: Path) -> None:
    secret = tmp_path / "host"
    secret.mkdir()
    (secret / "secret.csv").write_text("secret\n1\n")
    session = "symlink-out"
    engine.upload(session, "data.csv", b"a\n1\n")
    workspace = workspace_of(engine, session)
    os.symlink(secret, workspace / "link")  # planted by the host: code cannot make links
    message = refusal(engine.run("import pandas as pd\npd.read_csv('link/secret.csv')", session=session))
    outside_refusal(message, "opening", "link/secret.csv")
    assert str(secret) not in message  # a refusal never says where a link leads
    os.symlink(secret / "secret.csv", workspace / "file-link")
    result = engine.run("import numpy as np\nnp.loadtxt('file-link')", session=session)
    if (
        result.boundary == "subprocess"
        and result.error is not None
        and result.error.type == "FileNotFoundError"
    ):
        # Where the worker's sandbox does not show the target at all (a worker in a chroot, as CI
        # runs Python 3.14 and 3.15), numpy finds no file before it opens one: nothing is read either.
        assert "secret" not in result.to_observation()
        assert str(secret) not in result.to_observation()
    else:
        outside_refusal(refusal(result), "opening", "file-link")


# ---- in-process: the directory is the running thread's own ------------------------------------------


@pytest.fixture(scope="module")
def inprocess() -> Iterator[ReplEngine]:
    pytest.importorskip("pandas")
    with ReplEngine(boundary="inprocess", policy="standard", limits=Limits(timeout_s=1)) as e:
        yield e


def test_other_threads_keep_the_hosts_directory_while_a_cell_runs(inprocess: ReplEngine) -> None:
    inprocess.upload("slow", "data.csv", b"a\n1\n")
    cwd = os.getcwd()
    started = threading.Event()
    results: list[str | None] = []

    def run() -> None:
        code = "import time, pandas as pd\nn = int(pd.read_csv('data.csv').a[0])\nticks = 0\n"
        code += "for _ in range(40):\n    time.sleep(0.01)\n    ticks += 1\nn"
        started.set()
        results.append(inprocess.run(code, session="slow").value)

    thread = threading.Thread(target=run)
    thread.start()
    started.wait(timeout=20)
    seen = set()
    while thread.is_alive():
        seen.add(os.getcwd())
        seen.add(os.readlink("/proc/self/cwd"))  # the process's directory as the kernel reports it
        time.sleep(0.002)
    thread.join()
    assert results == ["1"]
    assert seen == {cwd}


def test_the_thread_gets_the_hosts_directory_back_after_a_timeout(inprocess: ReplEngine) -> None:
    inprocess.upload("spin", "data.csv", b"a\n1\n")
    found: list[object] = []

    def run() -> None:
        result = inprocess.run("x = 0\nwhile True:\n    x += 1", session="spin")
        found.append((result.status, os.getcwd()))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)
    assert found == [("timeout", os.getcwd())]


def test_relative_paths_of_a_description_are_the_workspace_too(inprocess: ReplEngine) -> None:
    # A repr the host calls after the cell runs the session's code again, under its guards.
    inprocess.upload("describe", "note.txt", b"from the workspace")
    code = (
        "import pathlib\nclass Shown:\n    def __repr__(self):\n"
        "        return pathlib.Path('note.txt').read_text()\nShown()"
    )
    assert ok(inprocess.run(code, session="describe")).value == "from the workspace"


def test_without_a_directory_per_thread_the_refusal_names_the_path_to_use(
    inprocess: ReplEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where a thread cannot have a directory of its own (not Linux, a seccomp filter refusing
    # unshare), relative paths resolve against the host's directory and are refused.
    monkeypatch.setattr(_paths, "_libc", [None])
    workspace = workspace_of(inprocess, "fallback")
    message = refusal(inprocess.run("import pathlib\npathlib.Path('notes.txt').write_text('x')", "fallback"))
    assert message.endswith(
        "; relative paths given to libraries resolve against the host's directory, "
        f"use '{os.path.join(workspace, 'notes.txt')}'"
    )
