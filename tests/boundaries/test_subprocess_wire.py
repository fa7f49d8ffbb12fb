"""The host <-> worker wire: what a compromised worker can send, and the EXEC payload.

A worker runs the agent's code, so the host treats its bytes as hostile. These tests play the
compromised worker with `trusted` code that writes frames to the worker's own socket (found through
the worker object, as an escaped sandbox could): the host must answer with a clear error, stop that
worker, never hand one session's claims to another, and keep serving.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest

from genpark_repl_tools import BoundaryError, Limits, ReplEngine
from genpark_repl_tools._models import ExecutionResult
from genpark_repl_tools.boundaries._subprocess import _protocol as P

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks a sandboxed zygote")

# Runs in the worker: sends `frames` (a list of (kind, payload, rid offset)) on the worker's socket, each
# tagged with the id of the request being served plus its offset, then lets the cell end normally.
FORGE = """
import gc, struct
_w = next(o for o in gc.get_objects() if type(o).__name__ == "_Worker")
_w.sock.sendall(b"".join(
    struct.pack("!IBI", len(p) if n is None else n, k, _w.current + d) + p for k, p, d, n in {frames!r}
))
"""

VALID_RESULT = {"status": "ok", "session": "victim", "execution_count": 7, "policy": "x", "boundary": "y"}


def forge(*frames: tuple[int, bytes, int] | tuple[int, bytes, int, int]) -> str:
    """Code that sends these frames: (kind, payload, rid offset[, length to claim])."""
    full = [(*f, None) if len(f) == 3 else f for f in frames]
    return FORGE.format(frames=full)


# Checkpoints off: these tests check that a worker that broke the protocol is stopped and its session
# restarts; with checkpoints its session would go back to before the cell (test_checkpoints.py).
@pytest.fixture
def engine() -> Iterator[ReplEngine]:
    limits = Limits(timeout_s=10)
    with ReplEngine(policy="trusted", boundary="subprocess", limits=limits, checkpoints=False) as engine:
        yield engine


def _assert_stopped_and_recovers(engine: ReplEngine, session: str) -> None:
    after = engine.run("x", session)
    assert after.session_restarted
    assert after.status == "error"
    assert after.error is not None and after.error.type == "NameError"
    assert engine.run("y = 2\ny", session).value == "2"


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(b"not json", id="not-json"),
        pytest.param(b'{"status": "pwned", "session": "s"}', id="bad-status"),
        pytest.param(json.dumps({**VALID_RESULT, "execution_count": "many"}).encode(), id="bad-type"),
        pytest.param(json.dumps({**VALID_RESULT, "extra": 1}).encode(), id="unknown-field"),
        pytest.param(b"\xff\xfe", id="not-utf8"),
    ],
)
def test_a_malformed_result_stops_the_worker_with_a_clear_error(engine: ReplEngine, payload: bytes) -> None:
    engine.run("x = 1", "s")
    result = engine.run(forge((P.RESULT, payload, 0)), "s")
    assert result.status == "crashed"
    assert result.error is not None
    assert result.error.type == "WorkerCrashed"
    assert result.error.message == "the worker process sent an invalid reply and was stopped"
    _assert_stopped_and_recovers(engine, "s")


def test_an_oversized_frame_stops_the_worker_before_it_is_read(engine: ReplEngine) -> None:
    engine.run("x = 1", "s")
    result = engine.run(forge((P.RESULT, b"{}", 0, P.MAX_FRAME + 1)), "s")
    assert result.status == "crashed"
    assert result.error is not None
    assert result.error.message == "the worker process sent an invalid reply and was stopped"
    _assert_stopped_and_recovers(engine, "s")


def test_a_frame_for_another_request_is_dropped(engine: ReplEngine) -> None:
    engine.run("x = 1", "s")
    forged = json.dumps(VALID_RESULT).encode()
    result = engine.run(forge((P.RESULT, forged, 1000), (P.RESULT, b"junk", -1)) + "x + 1", "s")
    assert result.status == "ok"
    assert result.value == "2"
    assert engine.run("x", "s").value == "1"  # the same worker, still serving


def test_a_forged_result_cannot_speak_for_another_session(engine: ReplEngine) -> None:
    result = engine.run(forge((P.RESULT, json.dumps(VALID_RESULT).encode(), 0)), "s")
    # The worker may say what it likes about its own session, never which session or where it ran.
    assert (result.session, result.policy, result.boundary) == ("s", "trusted", "subprocess")
    assert result.execution_count == 7
    assert engine.usage("s").calls == 1
    assert engine.usage("victim").calls == 0
    assert engine.history("victim") == []


def test_a_malformed_query_reply_is_a_boundary_error(engine: ReplEngine) -> None:
    # The forged RESULT answers this call; the next request (the variables query) meets the junk.
    valid = json.dumps({**VALID_RESULT, "session": "s"}).encode()
    engine.run("x = 1", "s")
    result = engine.run(forge((P.RESULT, valid, 0), (P.VARIABLE_LIST, b'[{"name": 1}]', 1)), "s")
    assert result.status == "ok"
    with pytest.raises(BoundaryError, match="sent a malformed reply"):
        engine.variables("s")
    _assert_stopped_and_recovers(engine, "s")


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param(P.ACK, id="ack"),
        pytest.param(P.VARIABLE_LIST, id="variable-list"),
        pytest.param(ord("r"), id="retired-packed-result"),
    ],
)
def test_a_reply_of_another_kind_stops_the_worker_with_a_clear_error(engine: ReplEngine, kind: int) -> None:
    # Only a RESULT answers an EXEC, however well formed the other reply is.
    engine.run("x = 1", "s")
    result = engine.run(forge((kind, json.dumps({**VALID_RESULT, "session": "s"}).encode(), 0)), "s")
    assert result.status == "crashed"
    assert result.error is not None
    assert result.error.type == "WorkerCrashed"
    assert result.error.message == "the worker process sent an invalid reply and was stopped"
    _assert_stopped_and_recovers(engine, "s")


def test_the_engine_serves_other_sessions_meanwhile(engine: ReplEngine) -> None:
    engine.run("x = 1", "other")
    engine.run(forge((P.RESULT, b"junk", 0)), "s")
    assert engine.run("x", "other").value == "1"


def test_a_worker_failure_message_is_bounded(engine: ReplEngine) -> None:
    valid = json.dumps({**VALID_RESULT, "session": "s"}).encode()
    engine.run(forge((P.RESULT, valid, 0), (P.FAILED, b"x" * 100_000, 1)), "s")
    with pytest.raises(BoundaryError, match="could not answer") as raised:
        engine.variables("s")
    assert len(str(raised.value)) < 2100


# ---- the EXEC payload -------------------------------------------------------------------------------


@pytest.mark.parametrize("code", ["x = 1", "", "s = 'żółć 🐍'", "s = '\udcff'", "x = 1\n" * 1000])
def test_exec_payloads_round_trip(code: str) -> None:
    assert P.decode_exec(P.encode_exec(code, 2.5)) == (code, 2.5)


def test_a_short_exec_payload_is_a_protocol_error() -> None:
    with pytest.raises(P.ProtocolError, match="time limit"):
        P.decode_exec(b"\x00" * 7)


def test_code_reaches_the_worker_as_written() -> None:
    code = "s = 'żółć 🐍\\t'\nprint(s, len(s))\ns"
    surrogate = "t = '\udcff'\nlen(t)"
    with (
        ReplEngine(policy="standard", boundary="subprocess", limits=Limits(timeout_s=10)) as sub,
        ReplEngine(boundary="inprocess", policy="standard") as local,
    ):
        for snippet in (code, surrogate):
            there, here = sub.run(snippet, "s"), local.run(snippet, "s")
            assert (there.status, there.stdout, there.value) == (here.status, here.stdout, here.value)
        assert sub.run(code, "s").stdout == "żółć 🐍\t 7\n"


# ---- results -----------------------------------------------------------------------------------------


def test_warm_results_equal_in_process_ones() -> None:
    cells = ["x = 1", "x = 1", "x + 1", "print('hi')", "'żółć'", "None", "import math", "missing"]
    with (
        ReplEngine(policy="standard", boundary="subprocess", limits=Limits(timeout_s=10)) as sub,
        ReplEngine(boundary="inprocess", policy="standard") as local,
    ):
        for code in cells:
            there, here = sub.run(code, "s"), local.run(code, "s")
            for field in ("status", "stdout", "stderr", "value", "value_type", "execution_count", "error"):
                assert getattr(there, field) == getattr(here, field), (code, field)
            assert (there.session, there.policy, there.boundary) == ("s", "standard", "subprocess")
            assert there.model_fields_set == set(ExecutionResult.model_fields)


# ---- frames -----------------------------------------------------------------------------------------


def test_frames_of_any_size_come_out_whole_and_in_order() -> None:
    big = bytes(range(256)) * 1024  # 256 KiB: copied out through a memoryview
    stream = P.encode(P.RESULT, b"small", 1) + P.encode(P.SNAPSHOT_DATA, big, 2) + P.encode(P.ACK, b"", 3)
    frames = P.FrameBuffer()
    got = []
    for start in range(0, len(stream), 50_000):  # fed in pieces that split headers and payloads
        frames.feed(stream[start : start + 50_000])
        while (frame := frames.next_tagged()) is not None:
            got.append(frame)
    assert got == [(P.RESULT, 1, b"small"), (P.SNAPSHOT_DATA, 2, big), (P.ACK, 3, b"")]
    assert not frames.pending()


def test_next_from_takes_a_whole_frame_and_buffers_the_rest() -> None:
    frames = P.FrameBuffer()
    one = P.encode(P.EXEC, b"payload", 7)
    assert frames.next_from(one) == (P.EXEC, 7, b"payload")
    assert not frames.pending()
    two = one + P.encode(P.RESET, b"", 8)
    assert frames.next_from(two[:5]) is None  # a header split across reads
    assert frames.next_from(two[5:]) == (P.EXEC, 7, b"payload")
    assert frames.next_tagged() == (P.RESET, 8, b"")
    assert frames.next_from(P.encode(P.ACK, b"", 9)) == (P.ACK, 9, b"")
    with pytest.raises(P.ProtocolError, match="exceeds"):
        frames.next_from(P.HEADER.pack(P.MAX_FRAME + 1, P.RESULT, 1))
