"""What a restricted runtime keeps per run: nothing that grows with the number of runs.

Each session of the in-process boundary has its own workspace, so its activation differs from the
runtime's first one; it used to build a new activation spec per run, which the audit hook kept.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from genpark_repl_tools import ReplEngine
from genpark_repl_tools.policy import _audithook, _restricted
from genpark_repl_tools.policy._errors import PolicyViolation

_RUNS = 2000


def _grown(work: Callable[[], None], *files: str) -> int:
    """Bytes that `work` left allocated by code in `files` (tracemalloc, after a collection)."""
    watched = [tracemalloc.Filter(True, f) for f in files]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot().filter_traces(watched)
        work()
        gc.collect()
        after = tracemalloc.take_snapshot().filter_traces(watched)
    finally:
        tracemalloc.stop()
    return sum(stat.size_diff for stat in after.compare_to(before, "filename"))


@pytest.mark.parametrize("policy", ["strict", "standard"])
def test_runs_of_a_later_session_keep_nothing_per_run(policy: str) -> None:
    with ReplEngine(boundary="inprocess", policy=policy) as engine:
        for session in ("first", "second"):
            assert engine.run("x = 1", session=session).status == "ok"

        def runs() -> None:
            for _ in range(_RUNS):
                assert engine.run("x = 1", session="second").status == "ok"

        grown = _grown(runs, _audithook.__file__, _restricted.__file__)
        # It was about 195 bytes per run (390 KB here); a few KB are the hook's per-thread frames.
        assert grown < 40 * 1024, grown


def _spec(workspace: str) -> tuple[object, ...]:
    return _audithook.rules_spec("standard", True, workspace, ["__dict__"], ["__"])


def test_rules_for_many_workspaces_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server makes a workspace per session: the hook's rules for them must not grow forever."""
    monkeypatch.setattr(_audithook, "_RULES_KEPT", 32)
    for i in range(64):  # past the bound
        _audithook.deactivate(_audithook.activate(_spec(f"/nonexistent/warm{i}")))

    def activations() -> None:
        for i in range(_RUNS // 4):
            _audithook.deactivate(_audithook.activate(_spec(f"/nonexistent/ws{i}")))

    grown = _grown(activations, _audithook.__file__)
    # It was about 1.3 KB per workspace (650 KB here): a new denied-names set each, never dropped.
    assert grown < 40 * 1024, grown


def test_forgotten_rules_fail_closed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rules dropped while an execution still runs under them refuse everything, never allow more."""
    monkeypatch.setattr(_audithook, "_RULES_KEPT", 8)
    workspace = str(tmp_path)
    tokens = _audithook.activate(_spec(workspace))
    try:
        (tmp_path / "a.txt").write_text("inside the workspace: allowed")
        for i in range(16):
            _audithook.deactivate(_audithook.activate(_spec(f"/nonexistent/other{i}")))
        with pytest.raises(PolicyViolation, match="policy 'unknown'"):
            (tmp_path / "b.txt").write_text("its rules were forgotten")
    finally:
        _audithook.deactivate(tokens)
    tokens = _audithook.activate(_spec(workspace))  # activated again: made again
    try:
        (tmp_path / "c.txt").write_text("allowed again")
    finally:
        _audithook.deactivate(tokens)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "c.txt"]
