"""One compiled cell shared by sessions: the compile cache gives sessions of one policy the same code
object, which the audit hook registers under their merged (strictest) rules, and each session's later
runs of it take the hook's fast path (the code "ran under" that execution's rules before). The fast
path must not let one session's execution use another's rights: every run is judged by the rules of
the execution running it, whichever session registered the code first or most recently.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from genpark_repl_tools import Limits, ReplEngine


@pytest.fixture
def engine() -> Iterator[ReplEngine]:
    with ReplEngine(boundary="inprocess", policy="standard", limits=Limits(timeout_s=30)) as engine:
        yield engine


def workspace(engine: ReplEngine, session: str) -> str:
    found = engine.boundary.session_workspace(session)
    assert found is not None
    return str(found.path)


READ = "with open(target) as f:\n    seen = f.read()\nseen"


def test_a_shared_cell_reads_only_its_own_sessions_files(engine: ReplEngine) -> None:
    for session in ("a", "b"):
        assert engine.run(f"with open('mine.txt', 'w') as f:\n    f.write({session!r})", session).ok
    own = {s: f"{workspace(engine, s)}/mine.txt" for s in ("a", "b")}
    # Each session runs the same source (one code object), alternately, many times: the first runs
    # register it, the later ones take the fast path.
    for round_ in range(6):
        for session, other in (("a", "b"), ("b", "a")):
            assert engine.run(f"target = {own[session]!r}", session).ok
            mine = engine.run(READ, session)
            assert (mine.status, mine.value) == ("ok", repr(session)), mine.to_observation()
            assert engine.run(f"target = {own[other]!r}", session).ok
            theirs = engine.run(READ, session)
            assert theirs.status == "blocked", (round_, theirs.to_observation())
            assert "not allowed under policy 'standard'" in (theirs.error.message if theirs.error else "")


def test_many_sessions_share_a_cell(engine: ReplEngine) -> None:
    """More sessions than the hook remembers per code object: the ones it forgot take the slow path,
    and every session still writes only into its own workspace."""
    sessions = [f"s{i}" for i in range(12)]
    for _ in range(3):
        for session in sessions:
            result = engine.run("with open('note.txt', 'w') as f:\n    f.write('x')", session)
            assert result.ok, result.to_observation()
    for session, neighbour in zip(sessions, sessions[1:] + sessions[:1], strict=True):
        assert [f.name for f in engine.files(session)] == ["note.txt"]
        escape = engine.run(f"open({workspace(engine, neighbour)!r} + '/x.txt', 'w')", session)
        assert escape.status == "blocked", escape.to_observation()
        assert [f.name for f in engine.files(neighbour)] == ["note.txt"]
