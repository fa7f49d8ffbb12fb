"""A compromised worker on the wire: every frame it sends is checked by the host, and nothing it
sends makes the host do unbounded work or believe an impossible figure.

The worker is real and so is the host; session code under `trusted` (the worker's full rights,
what an escape inside its own process would have) writes crafted frames through
genpark_repl_tools.testing.hostile_worker. Tests marked "awaiting the host-side check" describe
checks whose host side is not wired into the subprocess boundary yet.
"""

from __future__ import annotations

import math
import time
import tracemalloc
from collections.abc import Iterator

import pytest

from genpark_repl_tools import Limits, ReplEngine
from genpark_repl_tools._models import Attachment, ExecutionResult, SnapshotManifest, Usage
from genpark_repl_tools.snapshot import SnapshotError

pytest.importorskip("genpark_repl_tools.boundaries.subprocess")

from genpark_repl_tools.boundaries._subprocess._claims import implausible

KEY = b"hostile-worker-tests-key-0123456789"
LIMITS = Limits(timeout_s=10)
HW = "from genpark_repl_tools.testing import hostile_worker as hw\n"
MiB = 1 << 20


@pytest.fixture(scope="module")
def engine() -> Iterator[ReplEngine]:
    with ReplEngine(policy="trusted", boundary="subprocess", limits=LIMITS, snapshot_key=KEY) as e:
        yield e


@pytest.fixture
def session(request: pytest.FixtureRequest) -> str:
    return str(request.node.name)[:60]


def hostile(engine: ReplEngine, session: str, code: str) -> ExecutionResult:
    assert engine.run("ready = 1", session=session).status == "ok"
    return engine.run(HW + code, session=session)


def assert_stopped(result: ExecutionResult, engine: ReplEngine, session: str, why: str) -> None:
    assert result.status == "crashed"
    assert result.error is not None and result.error.type == "WorkerCrashed"
    assert why in result.error.message
    assert engine.run("1 + 1", session=session).value == "2"  # the next call gets a sound worker


# ---- frames and results the schema refuses -------------------------------------------------------


def test_a_result_that_is_not_json_stops_the_worker(engine: ReplEngine, session: str) -> None:
    result = hostile(engine, session, 'hw.replace_reply(lambda kind, payload: (kind, b"{not json"))')
    assert_stopped(result, engine, session, "invalid reply")


def test_a_result_outside_the_schema_stops_the_worker(engine: ReplEngine, session: str) -> None:
    result = hostile(engine, session, 'hw.edit_result(status="owned", extra_field=1)')
    assert_stopped(result, engine, session, "invalid reply")


def test_a_frame_declaring_more_than_the_frame_limit_stops_the_worker(
    engine: ReplEngine, session: str
) -> None:
    code = (
        "from genpark_repl_tools.boundaries._subprocess import _protocol as P\n"
        "hw.send_raw(P.HEADER.pack(P.MAX_FRAME + 1, P.RESULT, hw.worker().current))\n"
        "import time; time.sleep(2)"
    )
    started = time.monotonic()
    result = hostile(engine, session, code)
    assert time.monotonic() - started < 2  # refused from the header, not after waiting for the bytes
    assert_stopped(result, engine, session, "invalid reply")


def test_a_result_for_another_request_is_not_taken_as_this_calls(engine: ReplEngine, session: str) -> None:
    code = (
        "import json\n"
        "from genpark_repl_tools.boundaries._subprocess import _protocol as P\n"
        "forged = {'status': 'ok', 'session': 'x', 'value': \"'forged'\"}\n"
        "hw.send(P.RESULT, json.dumps(forged).encode(), rid=hw.worker().current + 1000)\n"
        "'real'"
    )
    result = hostile(engine, session, code)
    assert (result.status, result.value) == ("ok", "'real'")


def test_a_result_cannot_name_another_session_policy_or_boundary(engine: ReplEngine, session: str) -> None:
    result = hostile(
        engine, session, 'hw.edit_result(session="victim", policy="strict", boundary="inprocess")'
    )
    assert (result.status, result.session, result.policy, result.boundary) == (
        "ok",
        session,
        "trusted",
        "subprocess",
    )


# ---- figures the host keeps or adds up -----------------------------------------------------------

IMPOSSIBLE = {  # the arguments of hw.edit_result, as code
    "negative execution_count": "execution_count=-5",
    "NaN duration": "duration_ms=nan",
    "negative duration": "duration_ms=-1.0",
    "duration longer than the call": "duration_ms=3.6e9",
    "NaN cpu": "**{'usage.cpu_ms': nan}",
    "negative cpu": "**{'usage.cpu_ms': -1e9}",
    "infinite peak memory": "**{'usage.peak_memory_mb': inf}",
    "stdout past the output limit": "stdout='x' * 1_000_000",
    "value past the repr limit": "value='x' * 1_000_000",
}


@pytest.mark.parametrize("fields", IMPOSSIBLE.values(), ids=IMPOSSIBLE.keys())
def test_an_impossible_figure_stops_the_worker(engine: ReplEngine, session: str, fields: str) -> None:
    result = hostile(engine, session, f"from math import inf, nan\nhw.edit_result({fields})")
    assert_stopped(result, engine, session, "impossible result")


def test_results_at_the_limits_are_believed(engine: ReplEngine, session: str) -> None:
    """The neighbour: output and values cut at their limits, a slow call, are ordinary results."""
    code = (
        f"print('x' * {LIMITS.max_output_chars * 3})\n"
        "import time; time.sleep(0.2)\n"
        f"'y' * {LIMITS.max_repr_chars * 3}"
    )
    result = engine.run(code, session=session)
    assert result.status == "ok"
    assert result.stdout_truncated and result.value_truncated
    assert result.duration_ms >= 200


# ---- implausible(), the rule the host applies to each result ------------------------------------


def ordinary(**fields: object) -> ExecutionResult:
    base = ExecutionResult(
        status="ok", session="s", execution_count=3, duration_ms=5.0, usage=Usage(cpu_ms=4.0)
    )
    return base.model_copy(update=fields)


def test_implausible_names_each_impossible_field() -> None:
    assert implausible(ordinary(), LIMITS, elapsed_s=0.01) is None
    assert implausible(ordinary(execution_count=0), LIMITS, elapsed_s=0.01) is None
    cases = {
        "execution_count -1": ordinary(execution_count=-1),
        "duration_ms nan": ordinary(duration_ms=math.nan),
        "cpu_ms -1.0": ordinary(usage=Usage(cpu_ms=-1.0)),
        "peak_memory_mb inf": ordinary(usage=Usage(peak_memory_mb=math.inf)),
        "duration_ms 5000 for a call that took 10 ms": ordinary(duration_ms=5000.0),
        "stdout": ordinary(stdout="x" * (LIMITS.max_output_chars + 201)),
        "value": ordinary(value="x" * (LIMITS.max_repr_chars + 201)),
        "attachments": ordinary(attachments=[Attachment(data_base64="")] * (LIMITS.max_figures + 1)),
    }
    for reason, result in cases.items():
        assert reason in (implausible(result, LIMITS, elapsed_s=0.01) or ""), reason
    at_limit = ordinary(stdout="x" * (LIMITS.max_output_chars + 200), value="x" * LIMITS.max_repr_chars)
    assert implausible(at_limit, LIMITS, elapsed_s=0.01) is None


# ---- snapshots -----------------------------------------------------------------------------------


def traced_peak(call: object) -> tuple[int, float, BaseException | None]:
    """Peak Python allocation of the host while `call()` runs, its time, and what it raised."""
    error: BaseException | None = None
    tracemalloc.start()
    started = time.perf_counter()
    try:
        call()  # type: ignore[operator]
    except Exception as exc:
        error = exc
    finally:
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak, elapsed, error


def test_a_snapshot_flood_is_cut_at_the_limit(engine: ReplEngine, session: str) -> None:
    # one buffer sent again and again: 256 MiB in 4 MiB parts, past the 128 MiB snapshot limit
    hostile(engine, session, "hw.flood_snapshot(part_bytes=4 << 20, total_bytes=256 << 20)")
    peak, _, error = traced_peak(lambda: engine.snapshot(session))
    assert isinstance(error, SnapshotError) and "limit" in str(error)
    assert peak < 150 * MiB, f"the host held {peak / MiB:.0f} MiB"
    assert engine.run("1 + 1", session=session).value == "2"


def test_a_snapshot_declaring_millions_of_buffers_costs_its_bytes(engine: ReplEngine, session: str) -> None:
    manifest = SnapshotManifest(
        session=session,
        created_at="2026-01-01T00:00:00Z",
        execution_count=1,
        policy="trusted",
        python="3.11.0",
    )
    header = {"format": 1, "manifest": manifest.model_dump(mode="json"), "records": [], "imports": {}}
    code = f"hw.snapshot_reply(hw.empty_buffers_blob(2_000_000, {header!r}))"
    hostile(engine, session, code)
    peak, elapsed, error = traced_peak(lambda: engine.snapshot(session))
    assert error is None or isinstance(error, SnapshotError)
    assert peak < 3 * 16 * MiB, f"16 MiB received, the host held {peak / MiB:.0f} MiB"
    assert elapsed < 2.0
