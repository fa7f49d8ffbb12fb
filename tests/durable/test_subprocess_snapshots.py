"""Snapshots on the subprocess boundary: the worker takes and loads them inside its sandbox, the
host holds the key (checks before the worker sees a blob, signs what it returns)."""

from __future__ import annotations

import builtins
import os
from pathlib import Path
from typing import Any

import pytest
from _durable_support import KEY, keyed_engine
from test_snapshot_security import Reduces, crafted

from genpark_repl_tools import ReplEngine
from genpark_repl_tools.snapshot import SessionSnapshot, SnapshotAuthError, SnapshotError, SnapshotRefused
from genpark_repl_tools.stores import SQLiteStore

pytest.importorskip("genpark_repl_tools.boundaries.subprocess")
pytestmark = pytest.mark.slow

DEFINE = """
import math
def fact(n):
    return 1 if n < 2 else n * fact(n - 1)
class Circle:
    def __init__(self, r):
        self.r = r
    def area(self):
        return round(math.pi * self.r ** 2, 3)
shapes = [Circle(1), Circle(2)]
scale = 10
grow = lambda v: v * scale
gen = (i for i in range(3))
"""
USE = "fact(6), [s.area() for s in shapes], grow(2), math.floor(2.5)"
USED = "(720, [3.142, 12.566], 20, 2)"


def subprocess_engine(engines: list[ReplEngine], policy: str = "standard", **options: Any) -> ReplEngine:
    return keyed_engine(engines, policy, boundary="subprocess", **options)


def test_round_trip_through_the_worker(engines: list[ReplEngine]) -> None:
    engine = subprocess_engine(engines)
    assert engine.run(DEFINE).status == "ok"
    snapshot = engine.snapshot()
    assert {v.name for v in snapshot.manifest.saved} == {"fact", "Circle", "shapes", "scale", "grow"}
    assert [(s.name, s.reason[:11]) for s in snapshot.manifest.not_saved] == [("gen", "a generator")]
    engine.run("scale = 0; del shapes")
    restored = engine.restore("default", snapshot.to_bytes())
    assert {"fact", "Circle", "shapes", "grow", "math"} <= set(restored.restored)
    result = engine.run(USE)
    assert (result.status, result.value, result.session_restarted) == ("ok", USED, False)
    assert result.execution_count == 2  # the snapshot's count, plus this run


def test_a_restore_starts_a_worker_for_a_new_session(engines: list[ReplEngine]) -> None:
    engine = subprocess_engine(engines)
    engine.run(DEFINE, session="a")
    snapshot = engine.snapshot("a")
    engine.restore("b", snapshot)
    assert engine.run(USE, session="b").value == USED


def test_snapshots_move_between_boundaries(engines: list[ReplEngine]) -> None:
    sub = subprocess_engine(engines)
    sub.run(DEFINE)
    inproc = keyed_engine(engines, "standard")
    inproc.restore("default", sub.snapshot())
    assert inproc.run(USE).value == USED
    inproc.run("scale = 3")
    sub.restore("default", inproc.snapshot())
    assert sub.run("grow(2)").value == "6"


def test_the_host_signs_with_its_key_and_marks_the_origin(engines: list[ReplEngine]) -> None:
    engine = subprocess_engine(engines)
    engine.run("x = 1")
    snapshot = engine.snapshot()
    snapshot.verify(KEY)  # the engine's key, not the worker's placeholder
    assert snapshot.header_data(KEY)["origin"] == "sandboxed-worker"
    with pytest.raises(SnapshotAuthError):
        snapshot.verify(b"another-key-0123456789abcdef")


def test_an_altered_blob_never_reaches_the_worker(engines: list[ReplEngine]) -> None:
    engine = subprocess_engine(engines)
    engine.run("x = 1")
    blob = bytearray(engine.snapshot().to_bytes())
    blob[-40] ^= 1
    engine.run("x = 2")
    with pytest.raises(SnapshotAuthError, match="not loaded"):
        engine.restore("default", bytes(blob))
    assert engine.run("x").value == "2"


def test_a_sandboxed_snapshot_is_refused_in_process_under_trusted(engines: list[ReplEngine]) -> None:
    sub = subprocess_engine(engines, policy="trusted")
    sub.run("x = 1")
    snapshot = sub.snapshot()
    with pytest.raises(SnapshotRefused, match="sandboxed subprocess worker"):
        keyed_engine(engines, "trusted").restore("default", snapshot)
    limited = keyed_engine(engines, "standard")
    limited.restore("default", snapshot)  # the policy-limited loader is fine
    assert limited.run("x").value == "1"


def test_a_refusal_in_the_worker_is_the_same_error(engines: list[ReplEngine], tmp_path: Path) -> None:
    engine = subprocess_engine(engines, policy="standard")
    engine.run("kept = 41")
    marker = tmp_path / "pwned"
    with pytest.raises(SnapshotRefused, match="nothing was loaded"):
        engine.restore("default", crafted(Reduces(os.system, f"touch {marker}")))
    assert not marker.exists()
    assert engine.run("kept + 1").value == "42"


def test_a_crafted_snapshot_under_trusted_runs_only_in_the_sandbox(
    engines: list[ReplEngine], tmp_path: Path
) -> None:
    engine = subprocess_engine(engines, policy="trusted")
    if "Landlock" not in str(engine.describe()["enforced"].get("filesystem_confinement")):
        pytest.skip("Landlock is not active here: the worker could write outside its workspace")
    marker = tmp_path / "pwned"
    engine.restore("default", crafted(Reduces(os.system, f"touch {marker} 2>/dev/null")))
    assert engine.run("x").value != "0"  # touch ran, in the worker, and Landlock refused the write
    assert not marker.exists()
    opened = engine.restore("default", crafted(Reduces(builtins.open, str(marker), "w")))
    assert "PermissionError" in opened.failed["x"]
    assert not marker.exists()
    engine.restore("default", crafted(Reduces(os.getpid)))
    worker_pid = int(engine.run("x").value or "0")
    assert worker_pid not in (0, os.getpid())  # the reduction ran in the worker, not here


def test_a_snapshot_larger_than_a_frame_travels_in_parts(engines: list[ReplEngine]) -> None:
    engine = subprocess_engine(engines, policy="trusted")
    engine.run("big = bytearray(20 * 2**20)\nbig[-1] = 7\nbig[0] = 3")  # > 2 parts of 8 MiB
    snapshot = engine.snapshot()
    assert snapshot.size_bytes > 20 * 2**20
    engine.run("del big")
    engine.restore("default", snapshot.to_bytes())
    assert engine.run("len(big), big[0], big[-1]").value == f"({20 * 2**20}, 3, 7)"


def test_a_snapshot_over_the_limit_is_refused_with_its_largest_variables(engines: list[ReplEngine]) -> None:
    engine = subprocess_engine(engines, policy="trusted")
    engine.run("big = bytearray(130 * 2**20)\nsmall = 1")
    with pytest.raises(
        SnapshotError, match=r"over the limit of 134\.2 MB .*the largest variables: big \(136"
    ):
        engine.snapshot()
    engine.run("del big")
    assert [v.name for v in engine.snapshot().manifest.saved] == ["small"]


def test_a_session_with_a_lost_worker_has_nothing_to_snapshot(engines: list[ReplEngine]) -> None:
    engine = subprocess_engine(engines, policy="trusted", checkpoints=False)  # or it rolls back
    engine.run("x = 1")
    assert engine.run("import os; os._exit(3)").status == "crashed"
    with pytest.raises(SnapshotError, match="no live worker"):
        engine.snapshot()


def test_a_store_on_the_subprocess_boundary(engines: list[ReplEngine], tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    with SQLiteStore.from_path(path, lease_wait_s=5) as store:
        first = subprocess_engine(engines, store=store)
        assert first.run(DEFINE, session="conv").status == "ok"
        first.close()
        second = subprocess_engine(engines, store=store)
        result = second.run(USE, session="conv")
        assert (result.status, result.value) == ("ok", USED)
        assert result.session_restored is not None and "fact" in result.session_restored.restored
        stored = store.get("conv")
        assert stored is not None
        assert SessionSnapshot.from_bytes(stored.data).header_data(KEY)["origin"] == "sandboxed-worker"
        second.close()  # while the store is open: closing saves what the checkpoints kept unsaved
