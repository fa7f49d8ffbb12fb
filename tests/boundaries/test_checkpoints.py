"""Checkpoints on the subprocess boundary, without a store: after each reply the worker forks a paused
copy of itself, and a cell that ends the worker leaves the session as it was before that cell.

Each killer the boundary stops by ending the worker is tried with real processes: os._exit, a
segfault, C code past the deadline, an interrupt of C code, a memory bomb. Bounds: a short
timeout, a small memory limit, and waits capped by _procs.WAIT_S.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from _procs import WAIT_S, alive, wait_for, wait_gone

from genpark_repl_tools import Limits, ReplEngine
from genpark_repl_tools.boundaries._subprocess._zygote import _Zygote

pytest.importorskip("genpark_repl_tools.boundaries.subprocess")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not os.path.isdir("/proc"), reason="Linux /proc")]

SETUP = "kept = [1, 2, 3]\nblob = bytes(2 * 1024 * 1024)\ndef double(v):\n    return 2 * v"
# C-level work the watchdog cannot interrupt: catastrophic regex backtracking
C_LOOP = "import re\nre.match(r'(a+)+$', 'a' * 64 + 'b')"
ROLLED_BACK = "Rolled back: the variables from before this cell are intact"


@pytest.fixture
def engine() -> Iterator[ReplEngine]:
    with ReplEngine(
        policy="trusted", boundary="subprocess", limits=Limits(timeout_s=1.0, memory_mb=600), kill_grace_s=0.1
    ) as engine:
        if not engine.boundary.supports_rollback:
            pytest.skip("checkpoints need a child subreaper (Linux)")
        yield engine


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def assert_as_before(engine: ReplEngine) -> None:
    after = engine.run("kept, len(blob), double(2), sorted(n for n in dir() if not n.startswith('_'))")
    assert after.status == "ok", after.error
    assert after.value == "([1, 2, 3], 2097152, 4, ['blob', 'double', 'kept'])"
    assert after.session_restarted is False and after.rolled_back is False


@pytest.mark.parametrize(
    ("crash", "status", "said"),
    [
        ("import os\nos._exit(3)", "crashed", "exit code 3"),
        ("import ctypes\nctypes.string_at(0)", "crashed", "SIGSEGV"),
        (C_LOOP, "timeout", "limit 1 s"),
    ],
    ids=["os._exit", "segfault", "C past the deadline"],
)
def test_a_cell_that_ends_the_worker_is_rolled_back(
    engine: ReplEngine, crash: str, status: str, said: str
) -> None:
    assert engine.run(SETUP).status == "ok"
    failed = engine.run(f"kept.append(4)\nnew_name = 1\ndel blob\n{crash}")
    assert (failed.status, failed.rolled_back) == (status, True)
    assert failed.error is not None and said in failed.error.message
    text = failed.to_observation()
    assert ROLLED_BACK in text and "Files it wrote in the workspace stay." in text
    assert "variables are lost" not in text
    assert_as_before(engine)


def test_an_interrupt_that_had_to_kill_is_rolled_back(engine: ReplEngine) -> None:
    engine.run(SETUP)
    timer = threading.Timer(0.3, engine.interrupt)
    timer.start()
    try:
        stopped = engine.run(f"kept.append(4)\n{C_LOOP}", timeout_s=20)
    finally:
        timer.cancel()
    assert (stopped.status, stopped.rolled_back) == ("cancelled", True)
    assert ROLLED_BACK in stopped.to_observation()
    assert_as_before(engine)


def test_a_memory_bomb_leaves_the_variables_from_before(engine: ReplEngine) -> None:
    engine.run(SETUP)
    bomb = engine.run("hog = []\nwhile True:\n    hog.append(bytearray(50 * 2**20))", timeout_s=20)
    assert bomb.status in ("error", "crashed")
    if bomb.status == "crashed":
        assert bomb.rolled_back is True
    else:  # the allocation failed in Python (MemoryError): the worker lives; the cell's hog goes
        assert bomb.error is not None and bomb.error.type == "MemoryError"
        engine.run("del hog")
    assert_as_before(engine)


def test_the_first_cell_waits_for_no_fork_and_is_still_rolled_back(engine: ReplEngine) -> None:
    # A new worker's state is any new worker's: it runs its first cell without a copy of its own, and
    # a crash there leaves a new worker, with the count going on.
    first = engine.run("import os\nme = os.getpid()\nopen(f'/proc/{me}/task/{me}/children').read()")
    assert (first.status, first.value) == ("ok", "''")
    assert not any("checkpoint" in note for note in first.notes)
    with ReplEngine(policy="trusted", boundary="subprocess", limits=Limits(timeout_s=2)) as other:
        crashed = other.run("x = 1\nimport os\nos._exit(1)")
        assert (crashed.status, crashed.rolled_back, crashed.execution_count) == ("crashed", True, 1)
        assert ROLLED_BACK in crashed.to_observation()
        # The new worker stands for the state before its first request too.
        assert other.run("import os\nos._exit(1)").rolled_back is True
        after = other.run("'x' in dir()")
        assert (after.status, after.value, after.session_restarted) == ("ok", "False", False)
        assert after.execution_count == 3


def test_rollbacks_follow_each_other_and_the_count_goes_on(engine: ReplEngine) -> None:
    engine.run(SETUP)
    for n in range(3):
        failed = engine.run(f"kept.append({n})\nimport os\nos._exit(1)")
        assert failed.rolled_back is True
        assert failed.execution_count == 2 + n
    after = engine.run("kept")
    assert (after.value, after.execution_count) == ("[1, 2, 3]", 5)


def test_files_the_cell_wrote_stay(engine: ReplEngine) -> None:
    engine.run(SETUP)
    engine.run("open('out.txt', 'w').write('written')\nimport os\nos._exit(1)")
    assert engine.run("open('out.txt').read()").value == "'written'"


def live_children(pid: int) -> list[int]:
    return [child for child in children(pid) if alive(child)]


def test_between_cells_one_new_copy_waits(engine: ReplEngine) -> None:
    engine.run(SETUP)
    pid = int(engine.run("import os; os.getpid()").value or 0)
    assert wait_for(lambda: len(live_children(pid)) == 1, timeout=5)
    # The copy seen now may still be the one from before the last cell (the worker forks the next one
    # after its reply, and nothing tells the host when), so only copies that appear later are counted.
    seen = set(live_children(pid))
    live: list[int] = []

    def a_new_copy_alone() -> bool:
        live[:] = live_children(pid)
        return len(live) == 1 and live[0] not in seen

    for _ in range(3):
        engine.run("kept.append(0); kept.pop()")
        # After the reply the worker forks the next cell's copy, and the last one ends (it exits once
        # the zygote lets it go, and the worker kills it): a new copy after each cell, then alone.
        assert wait_for(a_new_copy_alone, timeout=5)
        seen.add(live[0])
    # Ended copies are reaped without blocking the worker: the last one killed may still wait for the
    # next reply to be reaped, but they never pile up (at most the live one and one ended one are
    # children now).
    assert wait_for(lambda: len(children(pid)) <= 2, timeout=5) or len(children(pid)) <= 3


def test_the_copy_holds_the_state_from_just_before_the_cell(engine: ReplEngine) -> None:
    # Each request in a row changes the state, the next one crashes: the copy it resumes from was
    # forked after the last reply, even when the crashing request arrives while that fork runs.
    engine.run(SETUP)
    for n in range(5):
        assert engine.run(f"kept.append({n})").status == "ok"
        failed = engine.run("import os\nos._exit(1)")
        assert failed.rolled_back is True
        assert engine.run("kept").value == repr([1, 2, 3, *range(n + 1)])
    engine.reset()
    failed = engine.run("import os\nos._exit(1)")
    assert failed.rolled_back is True
    assert engine.run("'kept' in dir()").value == "False"


# A worker as the zygote sees one: the leader of its own process group, with a copy in that group
# that waits on a socket of its own; on the checkpoint channel (given as argv[1]) it announces the
# copy's pid with the other end of that socket, then the announcement given as argv[2] ("copy": the
# same again, "none": 0), prints the pid and waits.
FAKE_WORKER = """
import os, socket, struct, sys, time
channel = socket.socket(fileno=int(sys.argv[1]))
inbox, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
copy = os.fork()
if copy == 0:
    zygote_end.close()
    inbox.recv(64)
    os._exit(0)
inbox.close()
rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", zygote_end.fileno()))]
channel.sendmsg([struct.pack("!i", copy)], rights)
if sys.argv[2] == "copy":
    channel.sendmsg([struct.pack("!i", copy)], rights)
else:
    channel.send(struct.pack("!i", 0))
zygote_end.close()
print(copy, flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("announced", ["copy", "none"])
def test_a_kill_handled_before_the_announcement_was_read_spares_the_copy(announced: str) -> None:
    # The interleaving of a crash right after the copy was forked, forced: the host's kill reaches
    # the zygote before its loop has read the worker's announcement. The copy announced last is
    # kept (only the worker is killed); with "no copy" announced last, the whole group goes.
    ctl, host = socket.socketpair()
    zygote = _Zygote(ctl)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    worker = subprocess.Popen(
        [sys.executable, "-c", FAKE_WORKER, str(theirs.fileno()), announced],
        pass_fds=[theirs.fileno()],
        stdout=subprocess.PIPE,
        start_new_session=True,  # its own process group, as a worker's
    )
    theirs.close()
    copy = 0
    try:
        assert worker.stdout is not None
        copy = int(worker.stdout.readline())  # both announcements are in the channel now
        zygote.checkpoints = True
        zygote._started("w", worker.pid, ours.detach(), {})
        zygote._kill("w")
        assert worker.wait(WAIT_S) == -signal.SIGKILL
        if announced == "copy":
            assert alive(copy)
            assert zygote.announced["w"][0] == copy
        else:
            assert wait_gone([copy]) == []
    finally:
        if copy:
            with contextlib.suppress(OSError):
                os.kill(copy, signal.SIGKILL)
        zygote._close_channel("w")
        zygote.selector.close()
        for fd in (zygote.wake_r, zygote.wake_w):
            os.close(fd)
        ctl.close()
        host.close()
        worker.kill()
        worker.communicate(timeout=WAIT_S)


# The zygote's side of a rollback, in a child process that is a child subreaper as the zygote is. A
# worker announces its copy, and another process holding the worker's checkpoint channel waits on
# that channel first: as a copy killed a moment before that has not run since does (the kernel
# still hands it a waiting message, and it dies with it), or a process the session forked; this
# one left the worker's group, so it lives on. The worker dies; the resume request, which carries
# the new worker's socket, must reach the copy, which answers on that socket.
ANOTHER_READER_WORKER = """
import os, socket, struct, sys, time

def answer(sock, name):
    data, ancdata, _, _ = sock.recvmsg(1 << 16, socket.CMSG_SPACE(16))
    for level, kind, cdata in ancdata:
        os.write(struct.unpack_from("i", cdata)[0], name)  # the new worker's socket comes first
    os._exit(0)

channel = socket.socket(fileno=int(sys.argv[1]))
other = os.fork()
if other == 0:
    os.setsid()
    answer(channel, b"another reader of the channel")
time.sleep(0.2)  # it waits on the channel before the copy exists
inbox, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
copy = os.fork()
if copy == 0:
    zygote_end.close()
    answer(inbox, b"copy")
rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", zygote_end.fileno()))]
channel.sendmsg([struct.pack("!i", copy)], rights)
print(other, copy, flush=True)
time.sleep(60)
"""

ROLLBACK_WITH_ANOTHER_READER = """
import ctypes, os, signal, socket, subprocess, sys
from genpark_repl_tools.boundaries._subprocess._zygote import _Zygote

ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
ctl, host = socket.socketpair()
zygote = _Zygote(ctl)
zygote.checkpoints = True
ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
worker = subprocess.Popen(
    [sys.executable, "-c", sys.argv[1], str(theirs.fileno())],
    pass_fds=[theirs.fileno()],
    stdout=subprocess.PIPE,
    preexec_fn=os.setpgrp,  # its own group in our session, as a worker (the copy must be movable)
)
theirs.close()
other, copy = map(int, worker.stdout.readline().split())
zygote._started("w", worker.pid, ours.detach(), {})
zygote._kill("w")  # the cell ended the worker; the copy it announced is spared
worker.wait()
assert zygote._adopt("w", worker.pid), "the copy was not kept"
new_host, new_worker = socket.socketpair()
pipes = [os.pipe() for _ in range(3)]
zygote.fds.extend([os.dup(new_worker.fileno()), pipes[0][1], pipes[1][1], pipes[2][0]])
new_worker.close()
zygote._resume({"token": "n", "from": "w", "execution_count": 1})
new_host.settimeout(20)
try:
    print(new_host.recv(64).decode() or "nothing: the new worker's socket closed")
except TimeoutError:
    print("nothing within 20 s")
for pid in (other, copy):
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
"""


def test_the_resume_request_reaches_only_the_announced_copy() -> None:
    ran = subprocess.run(
        [sys.executable, "-c", ROLLBACK_WITH_ANOTHER_READER, ANOTHER_READER_WORKER],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "copy"


def test_copies_do_not_outlive_the_session_or_the_engine() -> None:
    engine = ReplEngine(policy="trusted", boundary="subprocess", limits=Limits(timeout_s=2), kill_grace_s=0.1)
    try:
        if not engine.boundary.supports_rollback:
            pytest.skip("checkpoints need a child subreaper (Linux)")
        # A cell that runs while the copy waits: both pids are seen from inside (the first cell's
        # copy is a new worker the zygote would fork, so the second one is asked). The copy is seen
        # waiting from inside the cell: once the reply is sent the worker replaces it at once.
        engine.run("x = 0")
        ran = engine.run(
            "import os\nme = os.getpid()\n"
            "with open(f'/proc/{me}/task/{me}/children') as f:\n    copy = int(f.read())\n"
            "waiting = os.waitid(os.P_PID, copy, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None\n"
            "f'{me} {copy} {waiting}'"
        )
        assert ran.status == "ok", ran.error
        me, child, waiting = (ran.value or "''").strip("'").split()
        assert waiting == "True"
        worker, copy = int(me), int(child)
        engine.run("x = 1")  # the copy of that cell went once the next one existed
        assert wait_gone([copy]) == []
        # A rolled-back session's worker is the copy; closing the session ends it.
        engine.run("import os\nos._exit(1)")
        resumed = int(engine.run("import os; os.getpid()").value or 0)
        assert resumed not in (0, worker) and alive(resumed)
        engine.close("default")
        assert wait_gone([resumed]) == []
        # A copy waiting while its cell runs goes with the engine.
        engine.run("y = 1", session="b")
        pids: list[int] = []

        def long_cell() -> None:
            engine.run(
                "import os, time\nme = os.getpid()\n"
                "with open(f'/proc/{me}/task/{me}/children') as f:\n    copy = f.read().split()[-1]\n"
                "with open('pids.txt', 'w') as f:\n    f.write(f'{me} {copy}')\n"
                "time.sleep(30)",
                session="b",
                timeout_s=60,
            )

        thread = threading.Thread(target=long_cell, daemon=True)
        thread.start()

        def seen() -> bool:
            try:
                pids[:] = [int(p) for p in engine.download("b", "pids.txt").split()]
            except Exception:
                return False
            return len(pids) == 2

        assert wait_for(seen, timeout=10)
        assert all(alive(pid) for pid in pids)
    finally:
        engine.close()
    assert wait_gone(pids) == []
    thread.join(10)
    assert not thread.is_alive()


def test_threads_started_by_the_session_skip_the_checkpoint_and_say_so(engine: ReplEngine) -> None:
    engine.run(SETUP)
    engine.run(
        "import threading\nstop = threading.Event()\nt = threading.Thread(target=stop.wait)\nt.start()"
    )
    ran = engine.run("kept.append(4)")
    assert ran.status == "ok"
    assert any("No checkpoint was taken before this cell" in n and "threads" in n for n in ran.notes)
    crashed = engine.run("import os\nos._exit(1)")
    assert crashed.rolled_back is False
    assert "so it could not be rolled back" in crashed.to_observation()
    assert "variables are lost" in crashed.to_observation()
    assert engine.run("1").session_restarted is True


def test_without_checkpoints_a_crash_loses_the_session_as_before() -> None:
    with ReplEngine(
        policy="trusted", boundary="subprocess", limits=Limits(timeout_s=2), checkpoints=False
    ) as engine:
        assert engine.boundary.supports_rollback is False
        assert engine.describe()["checkpoints"] is False
        engine.run("x = 1")
        crashed = engine.run("import os\nos._exit(1)")
        assert (crashed.status, crashed.rolled_back) == ("crashed", False)
        assert "variables are lost" in crashed.to_observation()
        assert engine.run("1").session_restarted is True


def test_a_trivial_cell_with_a_checkpoint_stays_fast(engine: ReplEngine) -> None:
    engine.run("import numpy\nstate = numpy.ones(20 * 2**20 // 8)")
    times = []
    for _ in range(20):
        started = time.perf_counter()
        assert engine.run("x = 1").status == "ok"
        times.append(time.perf_counter() - started)
    # Generous for a loaded 2-core machine: the fork of a 20 MB worker is well under a millisecond.
    assert sorted(times)[len(times) // 2] < 0.05
