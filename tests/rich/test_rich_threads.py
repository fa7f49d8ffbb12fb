"""pyplot's figure registry is process-wide: concurrent sessions must still get only their own figures."""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from genpark_repl_tools import ExecutionResult, Limits, ReplEngine

pytest.importorskip("matplotlib")

SYNC = "_genpark_rich_sync"  # a module the cells import to meet at a barrier

# A draws, waits until B has drawn too, calls plt.show() while B's figure is open, waits again.
SHOW_WHILE_OTHER_IS_OPEN = """
import matplotlib.pyplot as plt
import _genpark_rich_sync as sync
fig, ax = plt.subplots(figsize=(1, 1))
ax.set_title("{name}")
sync.barrier.wait()
if "{name}" == "A":
    plt.show()
sync.barrier.wait()
fig2 = plt.figure(figsize=(1, 1))
fig2.suptitle("{name}2")
sync.barrier.wait()
"""


@pytest.fixture
def barrier() -> Iterator[threading.Barrier]:
    sync = types.ModuleType(SYNC)
    sync.barrier = threading.Barrier(2, timeout=10)  # type: ignore[attr-defined]
    sys.modules[SYNC] = sync
    yield sync.barrier  # type: ignore[attr-defined]
    del sys.modules[SYNC]


def _descriptions(result: ExecutionResult) -> list[str]:
    assert result.status == "ok", result.to_observation()
    return [a.description for a in result.attachments]


def test_two_sessions_drawing_at_once_keep_their_figures(barrier: threading.Barrier) -> None:
    with ReplEngine(boundary="inprocess", policy="trusted", limits=Limits(figure_dpi=20)) as engine:
        for name in ("A", "B"):
            engine.run("import matplotlib.pyplot as plt", session=name)
        with ThreadPoolExecutor(2) as pool:
            futures = {
                name: pool.submit(engine.run, SHOW_WHILE_OTHER_IS_OPEN.format(name=name), name)
                for name in ("A", "B")
            }
            results = {name: future.result(timeout=30) for name, future in futures.items()}
    assert _descriptions(results["A"]) == ['figure 1 "A"', 'figure 2 "A2"']
    assert _descriptions(results["B"]) == ['figure 1 "B"', 'figure 2 "B2"']


def test_many_sessions_many_runs_never_swap_figures() -> None:
    def work(session: str) -> list[list[str]]:
        out = []
        for i in range(4):
            code = (
                f"fig, ax = plt.subplots(figsize=(1, 1))\nax.plot([{i}, 1])\nax.set_title('{session}-{i}')\n"
                f"fig2 = plt.figure(figsize=(1, 1))\nfig2.suptitle('{session}-{i}b')"
            )
            out.append(_descriptions(engine.run(code, session)))
        return out

    sessions = ["s0", "s1", "s2", "s3"]
    with ReplEngine(boundary="inprocess", policy="trusted", limits=Limits(figure_dpi=20)) as engine:
        for s in sessions:
            engine.run("import matplotlib.pyplot as plt", session=s)
        with ThreadPoolExecutor(len(sessions)) as pool:
            per_session = dict(zip(sessions, pool.map(work, sessions), strict=True))
    for s, runs in per_session.items():
        assert runs == [[f'figure 1 "{s}-{i}"', f'figure 2 "{s}-{i}b"'] for i in range(4)]
