"""The Ray boundary on a real two-node local cluster: placement, isolation, capacity, big results,
streamed output, the hosts' lanes."""

from __future__ import annotations

import pickle
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from _ray_cluster import ray, ray_cluster_fixture  # noqa: F401 (the ray_cluster fixture)

from genpark_repl_tools import Limits, OutputEvent, ReplEngine, ResultEvent
from genpark_repl_tools._exceptions import CapacityError, MissingDependency
from genpark_repl_tools.boundaries._ray._actors import Outbox
from genpark_repl_tools.boundaries.ray import NAMESPACE, _Relay


@pytest.fixture
def make_engine(ray_cluster: Any) -> Iterator[Any]:
    engines: list[ReplEngine] = []

    def make(**kwargs: Any) -> ReplEngine:
        kwargs.setdefault("policy", "trusted")
        engines.append(ReplEngine(boundary="ray", **kwargs))
        return engines[-1]

    yield make
    for engine in engines:
        engine.close()


def _placement(engine: ReplEngine) -> dict[str, str]:
    placement: dict[str, str] = engine.boundary.describe()["placement"]
    return placement


def test_sessions_spread_over_nodes_and_stick(make_engine: Any) -> None:
    engine = make_engine()
    for session in ("a", "b"):
        assert engine.run(f"name = {session!r}", session=session).status == "ok"
    placement = _placement(engine)
    live = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert set(placement) == {"a", "b"}
    assert set(placement.values()) == live and len(live) == 2  # one session on each node
    for _ in range(3):  # later calls stay where the session is
        assert engine.run("name", session="a").value == "'a'"
    assert _placement(engine) == placement
    described = engine.boundary.describe()["nodes"]
    assert set(described) == live
    assert all(d["boundary"] == "subprocess" and d["node"] == node for node, d in described.items())


def test_sessions_on_one_node_are_isolated(make_engine: Any) -> None:
    engine = make_engine(sessions_per_node=None)
    for i in range(4):
        engine.run(f"import os\nsecret = {i}", session=f"s{i}")
    placement = _placement(engine)
    by_node: dict[str, list[str]] = {}
    for session, node in placement.items():
        by_node.setdefault(node, []).append(session)
    first, second = next(sessions for sessions in by_node.values() if len(sessions) >= 2)[:2]
    # Each session has its own worker process and namespace, on the same node.
    assert engine.run("secret", session=second).value == second[1:]
    assert engine.run("del secret", session=first).status == "ok"
    assert engine.run("secret", session=second).value == second[1:]
    pids = {engine.run("os.getpid()", session=s).value for s in (first, second)}
    assert len(pids) == 2
    result = engine.run("secret", session=first)
    assert result.error is not None and result.error.type == "NameError"


def test_sessions_per_node_caps_placement(make_engine: Any) -> None:
    engine = make_engine(sessions_per_node=1)
    engine.run("1", session="one")
    engine.run("1", session="two")
    with pytest.raises(CapacityError, match="sessions_per_node"):
        engine.run("1", session="three")
    assert engine.close("one") is True
    assert engine.run("3", session="three").value == "3"  # the freed room is used


@pytest.mark.parametrize(("lane", "counts"), [(True, (2, 0)), (False, (0, 1))])
def test_big_results_arrive_whole(make_engine: Any, lane: bool, counts: tuple[int, int]) -> None:
    # Every node of this cluster is on this machine: plain calls take the hosts' lanes, big results
    # included. Without lanes (as for hosts on other machines) a big one goes through the object store.
    engine = make_engine(limits=Limits(max_output_chars=1_000_000), lane=lane)
    result = engine.run("print('x' * 300_000)", session="big")
    assert (result.status, len(result.stdout), result.stdout_truncated) == ("ok", 300_001, False)
    small = engine.run("print('y')", session="big")
    assert small.stdout == "y\n"
    nodes = engine.boundary.describe()["nodes"].values()
    assert (sum(d["lane_calls"] for d in nodes), sum(d["big_results"] for d in nodes)) == counts


def test_only_plain_calls_take_the_lane(make_engine: Any) -> None:
    engine = make_engine()
    assert engine.run("x = 1", session="s").status == "ok"
    events = list(engine.stream("print(x)", session="s"))  # streamed: through Ray
    assert events[-1].result.stdout == "1\n"  # type: ignore[union-attr]
    nodes = engine.boundary.describe()["nodes"].values()
    assert sum(d["lane_calls"] for d in nodes) == 1


def test_a_lane_serves_only_who_presents_its_token(make_engine: Any) -> None:
    engine = make_engine()
    engine.run("x = 41", session="s")
    node = engine.boundary.describe()["placement"]["s"]
    host = ray.get_actor(f"genpark-repl-host-{engine.boundary.key}-{node[:16]}", namespace=NAMESPACE)
    path, token = ray.get(host.lane.remote())
    call = pickle.dumps(("s", "x + 1", None, "rid-1", False, None))
    frame = len(call).to_bytes(4, "big") + call
    for wrong in (bytes(len(token)), token[:-1] + bytes([token[-1] ^ 1])):
        with socket.socket(socket.AF_UNIX) as conn:
            conn.settimeout(10)
            conn.connect(path)
            conn.sendall(wrong + frame)
            try:
                answer = conn.recv(1)
            except ConnectionResetError:  # closed with the frame unread
                answer = b""
            assert answer == b""  # no answer: the call never ran
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(10)
        conn.connect(path)
        conn.sendall(token + frame)
        assert conn.recv(1) == b"\x01"
        header = conn.recv(4, socket.MSG_WAITALL)
        reply = conn.recv(int.from_bytes(header, "big"), socket.MSG_WAITALL)
    assert reply[:1] == b"R" and pickle.loads(reply[1:]).value == "42"
    assert engine.run("x", session="s").value == "41"  # the wrong tokens ran nothing


def test_big_streamed_output_arrives_once_and_whole(make_engine: Any) -> None:
    # Output keeps coming while polls take it and the rest comes with a big result (object store):
    # every line is streamed exactly once, in order, and the streamed text is the result's.
    engine = make_engine(limits=Limits(max_output_chars=1_000_000, timeout_s=30.0))
    code = (
        "import time\nfor i in range(3000):\n    print(f'{i:05d}', 'x' * 40, flush=True)\n"
        "    if i % 300 == 0:\n        time.sleep(0.05)\n"
    )
    events = list(engine.stream(code, session="flow"))
    result = events[-1].result  # type: ignore[union-attr]
    assert isinstance(events[-1], ResultEvent) and result.status == "ok"
    outputs = [e for e in events if isinstance(e, OutputEvent)]
    assert len(outputs) > 1, "the output came in one piece, with the result"
    streamed = "".join(e.text for e in outputs if e.stream == "stdout")
    assert streamed == result.stdout == "".join(f"{i:05d} {'x' * 40}\n" for i in range(3000))
    counts = [d["big_results"] for d in engine.boundary.describe()["nodes"].values()]
    assert sum(counts) == 1  # 138 KB of output: the reply went through the object store


def test_outbox_hands_each_item_once_whatever_the_caller_acknowledged() -> None:
    box = Outbox()
    box.put(("stdout", "a\n"))
    box.put(("stdout", "b\n"))
    box.put(("stderr", "e\n"))
    assert box.take(0) == (0, [("stdout", "a\nb\n"), ("stderr", "e\n")])
    box.put(("stderr", "\r1/3"))
    box.put(("stderr", "\r2/3"))
    box.put(("stderr", "\r3/3\n"))
    # The caller has the first two items: the redraws come squashed, numbered 2.
    assert box.take(2) == (2, [("stderr", "\r3/3\n")])
    box.put(("stdout", "c\n"))
    # The final take: the caller acknowledged nothing more (its last poll's reply may be on its
    # way), so item 2 comes again with number 2 and the caller skips it.
    assert box.take(2, final=True) == (2, [("stderr", "\r3/3\n"), ("stdout", "c\n")])


def test_relay_passes_on_each_item_once() -> None:
    got: list[tuple[str, str]] = []
    relay = _Relay(got.append, "rid")
    relay.deliver(0, [("stdout", "a"), ("stdout", "b")])  # a poll
    relay.deliver(2, [])  # a poll that found nothing
    relay.deliver(1, [("stdout", "b"), ("stderr", "c")])  # the result, with an item a poll brought
    relay.deliver(3, [("stdout", "d")])
    assert got == [("stdout", "a"), ("stdout", "b"), ("stderr", "c"), ("stdout", "d")]
    assert relay.received == 4


def test_two_boundaries_share_the_cluster_not_their_sessions(make_engine: Any) -> None:
    first, second = make_engine(), make_engine()
    first.run("x = 'first'", session="same")
    result = second.run("x", session="same")
    assert result.error is not None and result.error.type == "NameError"
    assert first.run("x", session="same").value == "'first'"


def test_core_never_imports_ray() -> None:
    code = (
        "import sys\n"
        "from genpark_repl_tools import ReplEngine\n"
        "with ReplEngine(boundary='subprocess') as e:\n"
        "    assert e.run('1 + 1').value == '2'\n"
        "import genpark_repl_tools.boundaries, genpark_repl_tools.tools\n"
        "print('ray' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "False"


def test_missing_extra_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails as if it were not installed
    monkeypatch.delitem(sys.modules, "genpark_repl_tools.boundaries.ray", raising=False)
    with pytest.raises(MissingDependency, match=r"install genpark-repl-tools\[ray\]"):
        ReplEngine(boundary="ray")
