"""engine.fork on the subprocess boundary, with real workers: the copy is a session of its own in every
respect the sandbox enforces (its workspace, its worker, its checkpoints), not only in its variables.

The conformance suite checks what every boundary shares (state copied, changes and files independent,
closing one leaves the other, bad input refused); this checks what a forked worker process would get
wrong: a fork of the source's worker would keep the source's cwd, environment and Landlock domain,
and Landlock cannot move a domain to another directory (a new layer only narrows it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from genpark_repl_tools import Limits, ReplEngine

pytest.importorskip("genpark_repl_tools.boundaries.subprocess")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not os.path.isdir("/proc"), reason="Linux /proc")]

WHERE = "import os\nos.getcwd(), os.environ['HOME'], os.environ['TMPDIR']"


@pytest.fixture
def engine() -> Iterator[ReplEngine]:
    with ReplEngine(
        policy="trusted", boundary="subprocess", limits=Limits(timeout_s=5.0), kill_grace_s=0.1
    ) as engine:
        yield engine


def workspace(engine: ReplEngine, session: str) -> str:
    place = engine.boundary.session_workspace(session)
    assert place is not None
    return str(place.path)


def write(engine: ReplEngine, session: str, path: str) -> str:
    result = engine.run(f"open({path!r}, 'w').write('x')", session=session)
    return result.status if result.status == "ok" else f"{result.status}: {result.error}"


def test_the_copy_runs_in_its_own_workspace_and_cannot_write_the_sources(engine: ReplEngine) -> None:
    engine.run("x = 1", session="src")
    engine.upload("src", "notes.txt", b"kept")
    engine.fork("src", "copy")
    src, copy = workspace(engine, "src"), workspace(engine, "copy")
    assert src != copy
    assert engine.run(WHERE, session="copy").value == repr((copy, copy, copy))
    assert engine.run(WHERE, session="src").value == repr((src, src, src))
    assert engine.download("copy", "notes.txt") == b"kept"
    # The neighbour that stays allowed: each writes its own workspace.
    assert write(engine, "copy", os.path.join(copy, "mine.txt")) == "ok"
    assert write(engine, "src", os.path.join(src, "mine.txt")) == "ok"
    confinement = engine.describe()["enforced"]["filesystem_confinement"]
    if not str(confinement).startswith("Landlock"):
        pytest.skip(f"writes are not confined to the workspace here: {confinement}")
    assert "PermissionError" in write(engine, "copy", os.path.join(src, "from-copy.txt"))
    assert "PermissionError" in write(engine, "src", os.path.join(copy, "from-src.txt"))
    assert sorted(os.listdir(src)) == ["mine.txt", "notes.txt"]
    assert sorted(os.listdir(copy)) == ["mine.txt", "notes.txt"]


def test_each_has_its_own_worker_and_checkpoints(engine: ReplEngine) -> None:
    if not engine.boundary.supports_rollback:
        pytest.skip("checkpoints need a child subreaper (Linux)")
    engine.run("kept = [1, 2]", session="src")
    last = engine.run("import os\npid = os.getpid()\npid", session="src")
    engine.fork("src", "copy")
    first = engine.run("import os\nos.getpid()", session="copy")
    assert first.value != last.value
    # The copy's cells go on counting from the source's.
    assert first.execution_count == last.execution_count + 1
    for crashed, other in (("copy", "src"), ("src", "copy")):
        failed = engine.run("kept.append(3)\nimport os\nos._exit(9)", session=crashed)
        assert (failed.status, failed.rolled_back) == ("crashed", True), failed.to_observation()
        assert engine.run("kept", session=crashed).value == "[1, 2]"
        assert engine.run("kept", session=other).value == "[1, 2]"
    engine.run("kept.append(4)", session="copy")
    assert engine.close("src") is True
    assert engine.run("kept", session="copy").value == "[1, 2, 4]"
