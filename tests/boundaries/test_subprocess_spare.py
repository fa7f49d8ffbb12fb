"""The zygote's spare: the next worker, forked before its request and handed the next new session."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator

import pytest
from _procs import alive, wait_for, wait_gone

from genpark_repl_tools import ReplEngine

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")

PIDS = "import os\n[os.getpid(), os.getppid()]"


@pytest.fixture
def engine() -> Iterator[ReplEngine]:
    with ReplEngine(policy="trusted", boundary="subprocess") as engine:
        yield engine


def _pids(engine: ReplEngine, session: str) -> tuple[int, int]:
    result = engine.run(PIDS, session=session)
    assert result.status == "ok", result.error
    worker, zygote = json.loads(result.value or "[]")
    return worker, zygote


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/children") as f:
            found.update(int(p) for p in f.read().split())
    return found


def _spare(zygote: int, workers: set[int]) -> int:
    """The zygote's one child that serves no session, once it has forked it."""
    assert wait_for(lambda: len(_children(zygote) - workers) == 1), (_children(zygote), workers)
    (spare,) = _children(zygote) - workers
    return spare


def test_a_new_session_gets_the_worker_forked_before_it_was_asked_for(engine: ReplEngine) -> None:
    first, zygote = _pids(engine, "a")
    spare = _spare(zygote, {first})
    second, _ = _pids(engine, "b")
    assert second == spare
    # and the zygote forks the next one
    assert _spare(zygote, {first, second}) not in (first, second)
    assert engine.run("x = 1\nx + 1", session="b").value == "2"
    assert engine.run("x = 5\nx", session="a").value == "5"  # each its own namespace


def _targets(pid: int) -> dict[int, str]:
    fds = {}
    for name in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile
            fds[int(name)] = os.readlink(f"/proc/{pid}/fd/{name}")
    return fds


def test_a_spare_holds_no_descriptor_of_the_zygote_or_of_another_worker(engine: ReplEngine) -> None:
    first, zygote = _pids(engine, "a")
    spare = _spare(zygote, {first})

    # It closes what it inherited right after the fork: wait until it has. Then it holds two
    # sockets: the one it waits on for its request (the host holds the other end) and its own
    # checkpoint channel (the zygote holds the other end). No pipe, and nothing the zygote, the
    # host or another worker holds too: no control socket, no other worker's socket or pipes.
    def sockets() -> list[str]:
        return [t for t in _targets(spare).values() if t.startswith("socket:")]

    assert wait_for(lambda: len(sockets()) == 2), _targets(spare)
    above_stdio = {fd: target for fd, target in _targets(spare).items() if fd > 2}
    assert not [t for t in above_stdio.values() if t.startswith("pipe:")], above_stdio
    shared = set(above_stdio.values()) & {
        t for pid in (zygote, first, os.getpid()) for t in _targets(pid).values() if t.startswith("socket:")
    }
    assert shared == set(), (shared, above_stdio)


def test_a_spare_that_dies_unassigned_costs_nothing_but_the_spare(engine: ReplEngine) -> None:
    first, zygote = _pids(engine, "a")
    spare = _spare(zygote, {first})
    os.kill(spare, signal.SIGKILL)
    assert wait_gone([spare]) == []
    second, parent = _pids(engine, "b")  # forked for the request, as without spares
    assert parent == zygote
    assert second != spare
    assert engine.run("x = 2\nx * 21", session="b").value == "42"
    assert engine.run("1 + 1", session="a").value == "2"
    # no spare after one died unassigned: a spare that cannot start is not forked again and again
    assert wait_for(lambda: _children(zygote) == {first, second})


def test_close_ends_the_spare_too() -> None:
    engine = ReplEngine(policy="trusted", boundary="subprocess")
    first, zygote = _pids(engine, "a")
    spare = _spare(zygote, {first})
    engine.close()
    assert [pid for pid in (first, zygote, spare) if alive(pid)] == []


@pytest.mark.parametrize("policy", ["trusted", "standard"])  # strict allows no files
def test_a_worker_from_a_spare_is_sandboxed_in_its_own_workspace(policy: str) -> None:
    outside = "import os\nopen(os.path.join(os.path.dirname(os.getcwd()), 'outside.txt'), 'w')"
    with ReplEngine(policy=policy, boundary="subprocess") as engine:
        if "Landlock" not in str(engine.describe()["enforced"]["filesystem_confinement"]):
            pytest.skip("no Landlock here: nothing confines a trusted worker's writes")
        for session in ("a", "b"):  # forked for its request, then from the spare
            written = engine.run(f"open('mine.txt', 'w').write({session!r} * 2)", session=session)
            assert written.status == "ok", written.error
            escape = engine.run(outside, session=session)
            assert escape.status in ("error", "blocked")  # the OS sandbox, or the policy before it
            assert not os.path.exists(os.path.join(str(engine.describe()["workspace_root"]), "outside.txt"))
        assert engine.download("a", "mine.txt") == b"aa"
        assert engine.download("b", "mine.txt") == b"bb"


@pytest.mark.parametrize("policy", ["trusted", "standard"])
def test_a_spare_warmed_up_on_a_call_of_its_own_hands_its_session_none_of_it(policy: str) -> None:
    # The spare ran a first call (a throwaway session's) while it waited: the session it serves
    # starts empty, at its first execution, with no output of that call, in its own workspace,
    # and the worker's only extra thread is the watchdog it starts once sandboxed.
    with ReplEngine(policy=policy, boundary="subprocess") as engine:
        spare = None
        if policy == "trusted":
            first, zygote = _pids(engine, "a")
            spare = _spare(zygote, {first})
        else:  # the code may not ask for its process ids: the spare is forked by then
            assert engine.run("1", session="a").status == "ok"
            time.sleep(0.5)
        names = "sorted(k for k in dir() if not k.startswith('__'))"
        result = engine.run(names, session="b")
        assert result.status == "ok", result.error
        assert (result.value, result.execution_count, result.stdout, result.stderr) == ("[]", 1, "", "")
        assert engine.run("open('here.txt', 'w').write('b')", session="b").status == "ok"
        assert engine.download("b", "here.txt") == b"b"
        if spare is not None:  # standard refuses `os` and `threading`; the process is the same
            worker = engine.run("import os, threading\n[os.getpid(), threading.active_count()]", session="b")
            assert json.loads(worker.value or "[]") == [spare, 1]


def test_a_spare_that_dies_before_the_zygote_learns_who_took_it_ends_that_workers_start_only(
    engine: ReplEngine,
) -> None:
    # The host sends a spare its request itself and then tells the zygote (TAKEN). With the zygote
    # stopped, the spare takes the request, serves its first call and is killed: once the zygote runs
    # again it reaps the spare either as the taken worker or as a lost spare (whichever it reads
    # first), and either way the host learns that worker ended. The session goes on; so do others.
    first, zygote = _pids(engine, "a")
    spare = _spare(zygote, {first})
    os.kill(zygote, signal.SIGSTOP)
    try:
        second, _ = _pids(engine, "b")
        assert second == spare
        os.kill(spare, signal.SIGKILL)
    finally:
        os.kill(zygote, signal.SIGCONT)
    # As for any worker killed between two calls: the next call finds it dead (and says so), the
    # session goes on from its checkpoint or afresh.
    after = engine.run("1 + 1", session="b")
    assert after.status in ("ok", "crashed"), after
    assert after.rolled_back or after.session_restarted or after.status == "crashed", after
    assert engine.run("1 + 1", session="b").value == "2"
    assert engine.run("x = 3\nx * 2", session="c").value == "6"
    assert engine.run("2 + 2", session="a").value == "4"
