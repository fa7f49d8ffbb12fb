"""What a restricted runtime keeps per run: nothing that grows with the number of runs.

Each session of the in-process boundary has its own workspace, so its activation differs from the
runtime's first one; it used to build a new activation spec per run, which the audit hook kept.
"""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from genpark_repl_tools import ReplEngine
from genpark_repl_tools.policy import _audithook, _restricted

_RUNS = 2000


@pytest.mark.parametrize("policy", ["strict", "standard"])
def test_runs_of_a_later_session_keep_nothing_per_run(policy: str) -> None:
    with ReplEngine(policy=policy) as engine:
        for session in ("first", "second"):
            assert engine.run("x = 1", session=session).status == "ok"
        watched = (
            tracemalloc.Filter(True, _audithook.__file__),
            tracemalloc.Filter(True, _restricted.__file__),
        )
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.take_snapshot().filter_traces(watched)
            for _ in range(_RUNS):
                assert engine.run("x = 1", session="second").status == "ok"
            gc.collect()
            after = tracemalloc.take_snapshot().filter_traces(watched)
        finally:
            tracemalloc.stop()
        grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
        # It was about 195 bytes per run (390 KB here); a few KB are the hook's per-thread frames.
        assert grown < 40 * 1024, grown
