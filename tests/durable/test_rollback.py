"""Rollback instead of loss: with a store, a subprocess cell whose worker is killed or dies leaves the
session as it was before that cell. Here checkpoints are off, so the store is what brings it back
(its last stored snapshot); tests/boundaries/test_checkpoints.py covers rollback by checkpoint."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _durable_support import KEY

from genpark_repl_tools import Limits, ReplEngine
from genpark_repl_tools.snapshot._durable import LOST_SESSION_HINT
from genpark_repl_tools.stores import SQLiteStore

pytest.importorskip("genpark_repl_tools.boundaries.subprocess")
pytestmark = pytest.mark.slow

SETUP = "def double(v):\n    return 2 * v\nkept = [1, 2, 3]"
# C-level work the watchdog cannot interrupt: catastrophic regex backtracking
C_LOOP = "import re\nkept.append(4)\nre.match(r'(a+)+$', 'a' * 64 + 'b')"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore.from_path(tmp_path / "sessions.db", lease_wait_s=5) as store:
        yield store


def engine_with(
    store: SQLiteStore, policy: str = "trusted", *, checkpoints: bool = False, **limits: float
) -> ReplEngine:
    return ReplEngine(
        policy=policy,
        boundary="subprocess",
        limits=Limits(**limits),  # type: ignore[arg-type]
        store=store,
        snapshot_key=KEY,
        kill_grace_s=0.1,
        checkpoints=checkpoints,
    )


def assert_rolled_back(engine: ReplEngine) -> None:
    after = engine.run("double(len(kept)), kept")
    assert (after.status, after.value) == ("ok", "(6, [1, 2, 3])")
    assert after.session_restarted is False and after.rolled_back is False


def test_a_killed_c_level_loop_rolls_back(store: SQLiteStore) -> None:
    with engine_with(store, policy="standard", timeout_s=1.0) as engine:
        assert engine.run(SETUP).status == "ok"
        killed = engine.run(C_LOOP)
        assert killed.status == "timeout" and killed.rolled_back is True
        text = killed.to_observation()
        assert "Rolled back: the variables from before this cell are intact" in text
        assert killed.error is not None and LOST_SESSION_HINT not in (killed.error.hint or "")
        assert_rolled_back(engine)


@pytest.mark.parametrize(
    ("crash", "said"),
    [("import os\nos._exit(7)", "exit code 7"), ("import ctypes\nctypes.string_at(0)", "SIGSEGV")],
)
def test_a_worker_that_dies_rolls_back(store: SQLiteStore, crash: str, said: str) -> None:
    with engine_with(store) as engine:
        engine.run(SETUP)
        crashed = engine.run(f"kept.append(4)\n{crash}")
        assert (crashed.status, crashed.rolled_back) == ("crashed", True)
        assert crashed.error is not None and said in crashed.error.message
        assert_rolled_back(engine)


def test_a_memory_bomb_keeps_earlier_variables(store: SQLiteStore) -> None:
    with engine_with(store, memory_mb=400, timeout_s=20) as engine:
        engine.run(SETUP)
        bomb = engine.run("kept.append(4)\nhog = []\nwhile True:\n    hog.append(bytearray(50 * 2**20))")
        assert bomb.status in ("error", "crashed")
        if bomb.status == "crashed":
            assert bomb.rolled_back is True
            assert_rolled_back(engine)
        else:  # the allocation failed in Python (MemoryError): the worker lives, the cell's change stays
            assert bomb.error is not None and bomb.error.type == "MemoryError"
            assert engine.run("del hog; kept.pop(); kept").value == "[1, 2, 3]"


def test_without_a_stored_snapshot_the_session_restarts_empty(store: SQLiteStore) -> None:
    with engine_with(store) as engine:
        crashed = engine.run("import os\nos._exit(1)")
        assert (crashed.status, crashed.rolled_back) == ("crashed", False)
        assert engine.run("1 + 1").session_restarted is True


def test_the_rolled_back_state_is_what_another_process_finds(store: SQLiteStore) -> None:
    with engine_with(store) as engine:
        engine.run(SETUP, session="s")
        assert engine.run("kept.append(4)\nimport os\nos._exit(1)", session="s").rolled_back
    with engine_with(store) as other:
        assert other.run("kept", session="s").value == "[1, 2, 3]"


def test_with_checkpoints_a_first_cell_rolls_back_to_the_empty_session(store: SQLiteStore) -> None:
    # The checkpoint, not the store, brings it back: nothing was stored yet.
    with engine_with(store, checkpoints=True) as engine:
        crashed = engine.run("x = 1\nimport os\nos._exit(1)")
        assert (crashed.status, crashed.rolled_back) == ("crashed", True)
        after = engine.run("'x' in dir()")
        assert (after.value, after.session_restarted) == ("False", False)
