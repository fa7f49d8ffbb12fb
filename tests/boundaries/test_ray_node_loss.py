"""Losing a node or a session-host actor on a real local Ray cluster never hangs a caller.

Each test adds a third node, places a session on it and takes the node (or its host actor) away.
"""

from __future__ import annotations

import ast
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _ray_cluster import ray, ray_cluster_fixture, session_on_added_node  # noqa: F401 (the ray_cluster fixture)

from genpark_repl_tools import ExecutionResult, Limits, OutputEvent, ReplEngine, ResultEvent
from genpark_repl_tools.boundaries.ray import NAMESPACE

WAIT_S = 60.0


@pytest.fixture
def doomed(ray_cluster: Any) -> Iterator[tuple[ReplEngine, Any, str]]:
    """An engine over three nodes, and a session ("doomed") placed on the added node."""

    def make() -> ReplEngine:
        return ReplEngine(boundary="ray", policy="trusted", limits=Limits(timeout_s=5.0))

    with session_on_added_node(ray_cluster, make, WAIT_S) as placed:
        yield placed


def test_next_call_after_node_loss_restarts_the_session_elsewhere(
    ray_cluster: Any, doomed: tuple[ReplEngine, Any, str]
) -> None:
    engine, node, session = doomed
    others = {s: engine.run("tag", session=s).value for s in engine.sessions() if s != session}
    ray_cluster.remove_node(node)
    _wait_until_dead(node)  # the cluster knows the node is gone; the next call comes after that
    started = time.monotonic()
    result = engine.run("tag = 'new'\n6 * 7", session=session)
    elapsed = time.monotonic() - started
    assert (result.status, result.value) == ("ok", "42")  # its own result
    assert result.session_restarted is True
    assert any("was lost" in note for note in result.notes)
    assert elapsed < engine.limits.timeout_s + 1.0
    new_node = engine.boundary.describe()["placement"][session]
    assert new_node != node.node_id
    assert engine.run("tag", session=session).value == "'new'"  # and it sticks there
    assert engine.run("tag", session=session).session_restarted is False
    for s, value in others.items():  # sessions on the surviving nodes are untouched
        assert engine.run("tag", session=s).value == value


def test_caller_is_not_blocked_past_its_timeout_when_the_node_dies(
    ray_cluster: Any, doomed: tuple[ReplEngine, Any, str]
) -> None:
    engine, node, session = doomed
    cwd = engine.run("import os, time\nos.getcwd()", session=session).value
    assert cwd is not None
    marker = Path(ast.literal_eval(cwd)) / "started"
    outcome: list[tuple[ExecutionResult | BaseException, float]] = []

    def call() -> None:
        started = time.monotonic()
        try:
            result: ExecutionResult | BaseException = engine.run(
                "open('started', 'w').close()\ntime.sleep(30)", session=session
            )
        except BaseException as exc:  # recorded for the assertions below
            result = exc
        outcome.append((result, time.monotonic() - started))

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    deadline = time.monotonic() + WAIT_S
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert marker.exists(), "the call never started"
    ray_cluster.remove_node(node)
    caller.join(engine.limits.timeout_s + 1.0 + WAIT_S)
    [(result, elapsed)] = outcome
    assert isinstance(result, ExecutionResult), result
    assert elapsed < engine.limits.timeout_s + 1.0
    assert result.status == "crashed", result
    assert result.error is not None and result.error.type == "SessionLost"
    assert "was lost" in result.error.message
    after = engine.run("1 + 1", session=session)
    assert (after.value, after.session_restarted) == ("2", True)


def test_a_stream_ends_when_its_node_dies(ray_cluster: Any, doomed: tuple[ReplEngine, Any, str]) -> None:
    engine, node, session = doomed
    code = "import time\nfor i in range(10_000):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.05)\n"
    started = time.monotonic()
    streamed: list[str] = []
    final: ExecutionResult | None = None
    for event in engine.stream(code, session=session):
        if isinstance(event, OutputEvent):
            assert final is None, "output after the result"
            streamed.append(event.text)
            if len(streamed) == 1:  # the code runs and its output flows: take the node away
                ray_cluster.remove_node(node)
        elif isinstance(event, ResultEvent):
            final = event.result
    elapsed = time.monotonic() - started
    assert streamed and final is not None
    assert elapsed < engine.limits.timeout_s + 1.0
    assert final.status == "crashed", final
    assert final.error is not None and final.error.type == "SessionLost"
    text = "".join(streamed)
    assert text == "".join(f"tick {i}\n" for i in range(text.count("\n")))  # in order, none twice
    after = engine.run("1 + 1", session=session)
    assert (after.value, after.session_restarted) == ("2", True)


def test_lost_host_actor_restarts_the_session(doomed: tuple[ReplEngine, Any, str]) -> None:
    engine, node, session = doomed
    engine.run("x = 1", session=session)
    host = ray.get_actor(f"genpark-repl-host-{engine.boundary.key}-{node.node_id[:16]}", namespace=NAMESPACE)
    ray.kill(host, no_restart=True)
    deadline = time.monotonic() + WAIT_S
    while True:  # ray.kill is asynchronous: poll (bounded) until this driver knows the host is dead
        try:
            ray.get(host.ping.remote(), timeout=WAIT_S)
        except ray.exceptions.RayActorError:
            break
        assert time.monotonic() < deadline, "the killed host actor still answers"
        time.sleep(0.05)
    result = engine.run("'x' in dir()", session=session)
    if result.status == "crashed":
        # The head node had not recorded the death yet when the call was sent, so the code may have
        # reached the host: it is reported lost, not run twice. The next call restarts the session.
        assert result.error is not None and result.error.type == "SessionLost"
        result = engine.run("'x' in dir()", session=session)
    assert (result.status, result.value, result.session_restarted) == ("ok", "False", True)
    assert any("was lost" in note for note in result.notes)


def _wait_until_dead(node: Any) -> None:
    deadline = time.monotonic() + WAIT_S
    while any(n["NodeID"] == node.node_id and n["Alive"] for n in ray.nodes()):
        assert time.monotonic() < deadline, "Ray never noticed the node was removed"
        time.sleep(0.01)
