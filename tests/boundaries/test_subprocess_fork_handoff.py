"""engine.fork on the subprocess boundary hands the source worker's state to the target's worker through a
sealed memory file, with no signature: what a source that is hostile (its code rewrote its own worker)
can hand over is refused unless it is what an honest worker hands over, and an honest handoff gives the
copy its own writable arrays that neither side's later writes reach.

The source's session runs `trusted` code, so it can replace its worker's functions: that is the worst a
compromised worker does, short of writing bytes to its socket by hand.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator

import pytest

from genpark_repl_tools import BoundaryError, Limits, ReplEngine
from genpark_repl_tools.snapshot import SnapshotError, SnapshotTooLarge

pytest.importorskip("genpark_repl_tools.boundaries.subprocess")
pytest.importorskip("numpy")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="Linux memfd")]

WORKER = "sys.modules['genpark_repl_tools.boundaries._subprocess._worker']"
ARRAYS = "import numpy as np\nblock = np.arange(1e6)\nsmall = np.ones(3)\nkept = [1, 2]"
# An index a hostile worker sends with its file: one that fits any file of two bytes or more.
INDEX = '{"header": [0, 2], "payload": [0, 0], "buffers": []}'
FAR = INDEX.replace("[0, 2]", "[0, 1000000000]")  # past the end of any file here


@pytest.fixture
def engine() -> Iterator[ReplEngine]:
    with ReplEngine(
        policy="trusted", boundary="subprocess", limits=Limits(timeout_s=5.0), kill_grace_s=0.1
    ) as engine:
        yield engine


def test_the_copy_gets_writable_aligned_arrays_that_neither_sides_writes_reach(engine: ReplEngine) -> None:
    engine.run(ARRAYS, session="src")
    restored = engine.fork("src", "copy")
    assert set(restored.restored) == {"np", "block", "small", "kept"}
    flags = "block.flags.writeable, block.flags.aligned, small.flags.writeable, float(block.sum())"
    assert engine.run(flags, session="copy").value == f"(True, True, True, {float(sum(range(1_000_000)))})"
    engine.run("block[0] = -1.0\nsmall += 1", session="copy")
    engine.run("block[1] = -2.0\nsmall -= 1", session="src")
    probe = "float(block[0]), float(block[1]), small.tolist()"
    assert engine.run(probe, session="copy").value == "(-1.0, 1.0, [2.0, 2.0, 2.0])"
    assert engine.run(probe, session="src").value == "(0.0, -2.0, [0.0, 0.0, 0.0])"
    # A copy of the copy, once the first copy has changed: the same way again.
    engine.fork("copy", "copy2")
    assert engine.run(probe, session="copy2").value == "(-1.0, 1.0, [2.0, 2.0, 2.0])"


def test_the_handoff_is_a_memory_file_sealed_against_every_change(engine: ReplEngine) -> None:
    engine.run(ARRAYS, session="src")
    boundary = engine.boundary
    handoff = boundary.fork_out("src", "copy")  # type: ignore[attr-defined]
    assert handoff is not None
    try:
        seals = fcntl.fcntl(handoff.fd, fcntl.F_GET_SEALS)
        for seal in (fcntl.F_SEAL_SEAL, fcntl.F_SEAL_WRITE, fcntl.F_SEAL_SHRINK, fcntl.F_SEAL_GROW):
            assert seals & seal
        with pytest.raises(PermissionError):
            os.pwrite(handoff.fd, b"x", 0)
        assert boundary.fork_in("copy", handoff).restored  # type: ignore[attr-defined]
    finally:
        handoff.close()
    assert engine.run("kept", session="copy").value == "[1, 2]"


# What a hostile source's worker hands over instead of a sealed memory file of its state.
HANDED = {
    "an unsealed memory file": (
        "def write_handoff(session, runtime, limits, fd):\n"
        "    os.write(fd, b'x' * 64)\n"
        f"    return b'{INDEX}'"
    ),
    "a pipe": (
        "def make_file():\n"
        "    return os.pipe()[0]\n"
        "def write_handoff(session, runtime, limits, fd):\n"
        f"    return b'{INDEX}'"
    ),
    "a sealed memory file over the snapshot limit": (
        "def write_handoff(session, runtime, limits, fd):\n"
        "    os.ftruncate(fd, 2 * 1024 * 1024)\n"
        "    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, 15)  # every seal\n"
        f"    return b'{INDEX}'"
    ),
}


@pytest.mark.parametrize("what", sorted(HANDED))
def test_a_handoff_that_is_not_a_sealed_memory_file_is_refused_and_no_copy_stays(what: str) -> None:
    limits = Limits(timeout_s=5.0, max_snapshot_bytes=1024 * 1024)
    with ReplEngine(policy="trusted", boundary="subprocess", limits=limits, kill_grace_s=0.1) as engine:
        engine.run("kept = [1, 2]", session="neighbour")
        engine.fork("neighbour", "fine")  # the honest neighbour, under the same limits
        assert engine.run("kept", session="fine").value == "[1, 2]"
        hostile = f"import os, sys, fcntl\nw = {WORKER}\n{HANDED[what]}\n"
        hostile += "w.write_handoff = write_handoff\nw.make_file = globals().get('make_file', w.make_file)"
        assert engine.run(hostile, session="src").status == "ok"
        with pytest.raises(SnapshotError, match=r"handed over .*; it was stopped"):
            engine.fork("src", "copy")
        assert "copy" not in engine.sessions()
        assert engine.run("kept", session="fine").value == "[1, 2]"
        # The hostile worker is gone: its session starts empty, without the patched code.
        after = engine.run("'write_handoff' in dir()", session="src")
        assert (after.value, after.session_restarted) == ("False", True)


def test_an_index_outside_the_file_is_refused_by_the_copy_and_nothing_of_it_stays(engine: ReplEngine) -> None:
    engine.run("kept = [1, 2]", session="src")
    hostile = (
        f"import sys\nw = {WORKER}\nreal = w.write_handoff\n"
        "def write_handoff(session, runtime, limits, fd):\n"
        "    real(session, runtime, limits, fd)\n"
        f"    return b'{FAR}'\n"
        "w.write_handoff = write_handoff"
    )
    assert engine.run(hostile, session="src").status == "ok"
    with pytest.raises(SnapshotError, match="index does not match its data; nothing was loaded"):
        engine.fork("src", "copy")
    assert sorted(engine.sessions()) == ["src"]
    assert engine.run("kept", session="src").value == "[1, 2]"


# Three MiB that pickle in the payload (a bytearray) or as an out-of-band buffer (an array).
BIG = {"in the payload": "bytearray(3 * 1024 * 1024)", "in a buffer": "np.zeros(3 * 1024 * 1024, np.uint8)"}


@pytest.mark.parametrize("where", sorted(BIG))
def test_a_worker_that_cannot_write_the_file_forks_through_a_snapshot(where: str) -> None:
    # RLIMIT_FSIZE (max_file_size_mb) bounds a memory file too: the direct path gives way, and the
    # variable that did not fit is copied all the same, not left out.
    limits = Limits(timeout_s=5.0, max_file_size_mb=1)
    with ReplEngine(policy="trusted", boundary="subprocess", limits=limits, kill_grace_s=0.1) as engine:
        engine.run(f"import numpy as np\nblob = {BIG[where]}\nblob[-1] = 7", session="src")
        assert engine.boundary.fork_out("src", "probe") is None  # type: ignore[attr-defined]
        engine.close("probe")
        restored = engine.fork("src", "copy")
        assert "blob" in restored.restored
        assert engine.run("len(blob), int(blob[-1])", session="copy").value == "(3145728, 7)"


def test_a_session_over_the_snapshot_limit_is_not_forked_and_stays_as_it_was() -> None:
    limits = Limits(timeout_s=5.0, max_snapshot_bytes=1024 * 1024)
    with ReplEngine(policy="trusted", boundary="subprocess", limits=limits, kill_grace_s=0.1) as engine:
        engine.run("import numpy as np\nbig = np.ones(300_000)\nkept = 1", session="src")
        with pytest.raises(SnapshotTooLarge, match=r"Limits\.max_snapshot_bytes"):
            engine.fork("src", "copy")
        assert sorted(engine.sessions()) == ["src"]
        assert engine.run("big.size, kept", session="src").value == "(300000, 1)"


def test_a_restricted_policy_forks_the_same_way() -> None:
    with ReplEngine(policy="standard", boundary="subprocess", limits=Limits(timeout_s=5.0)) as engine:
        engine.run("import numpy as np\ndata = np.arange(5)\ndef twice(v):\n    return 2 * v", session="src")
        handoff = engine.boundary.fork_out("src", "copy")  # type: ignore[attr-defined]
        assert handoff is not None  # the worker to worker path, not the snapshot
        try:
            engine.boundary.fork_in("copy", handoff)  # type: ignore[attr-defined]
        finally:
            handoff.close()
        assert engine.run("twice(data).tolist()", session="copy").value == "[0, 2, 4, 6, 8]"


def test_descriptors_a_worker_keeps_passing_are_not_kept(engine: ReplEngine) -> None:
    # It sends 200 descriptors before its reply and waits: the host holds two at most meanwhile,
    # and none after, and the handoff is refused (more than the one a handoff brings came).
    engine.run("kept = [1, 2]", session="src")
    hostile = (
        f"import os, sys, time\nw = {WORKER}\nP = w.P\nreal = w._Worker._hand_out\n"
        "def _hand_out(self):\n"
        "    junk = os.pipe()[0]\n"
        "    for _ in range(200):  # frames answering no request, each with a descriptor\n"
        "        P.send_frame(self.sock, P.ACK, b'', [junk])\n"
        "    time.sleep(1.0)\n"
        "    return real(self)\n"
        "w._Worker._hand_out = _hand_out"
    )
    assert engine.run(hostile, session="src").status == "ok"
    before = len(os.listdir("/proc/self/fd"))
    during: list[int] = []
    watcher = threading.Timer(0.6, lambda: during.append(len(os.listdir("/proc/self/fd"))))
    watcher.start()
    with pytest.raises(BoundaryError, match="unexpected reply"):
        engine.fork("src", "copy")
    watcher.join()
    # +2 kept, and the target's worker started meanwhile (its socket and pipes)
    assert during and during[0] <= before + 2 + 8
    assert len(os.listdir("/proc/self/fd")) <= before
    assert "copy" not in engine.sessions()
