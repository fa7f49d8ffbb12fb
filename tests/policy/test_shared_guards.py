"""What sessions of restricted policies share in one process (small idle sessions), and that sharing carries
nothing from one session to another.

The `type` guard is one object per policy: type(name, bases, ns) records the class in the session
whose code called it. These tests run sessions of different policies and workspaces side by side
(interleaved, and on threads) and check that each keeps its own classes and rules, and that
restricted code can neither change the shared guard nor make it act for another session.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from genpark_repl_tools import Limits, Policy, ReplEngine
from genpark_repl_tools.boundaries.inprocess import InProcessBoundary
from genpark_repl_tools.policy._guards import SESSION, Execution, SessionGuards, current_execution

MAKE_CLASS = "K = type('K', (), {'a': 1})\nK.b = 2\nk = K()\nk.c = 3\nr = (K.a, K.b, k.c)"


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[dict[str, ReplEngine]]:
    limits = Limits(timeout_s=10)
    made = {
        "strict": ReplEngine(boundary="inprocess", policy="strict", limits=limits),
        "ws1": ReplEngine(
            boundary="inprocess", policy=Policy.standard().with_workspace(tmp_path / "ws1"), limits=limits
        ),
        "ws2": ReplEngine(
            boundary="inprocess", policy=Policy.standard().with_workspace(tmp_path / "ws2"), limits=limits
        ),
    }
    yield made
    for engine in made.values():
        engine.close()


def guards_of(engine: ReplEngine, session: str) -> SessionGuards:
    boundary = engine.boundary
    assert isinstance(boundary, InProcessBoundary)
    guards = boundary.session(session).namespace["__builtins__"][SESSION]
    assert type(guards) is SessionGuards
    return guards


def value(engine: ReplEngine, code: str, session: str) -> str | None:
    result = engine.run(code, session)
    assert result.status == "ok", (code, result.error)
    return result.value


def refused(engine: ReplEngine, code: str, session: str) -> str:
    result = engine.run(code, session)
    assert result.status in ("error", "blocked"), (code, result.status, result.value)
    if result.status == "blocked":
        return " ".join(f.message for f in result.findings)
    assert result.error is not None
    assert result.error.type == "PolicyViolation", result.error
    return result.error.message


def test_sessions_of_a_policy_share_one_type_guard_and_keep_their_own_tables(
    engines: dict[str, ReplEngine],
) -> None:
    strict, ws1, ws2 = engines["strict"], engines["ws1"], engines["ws2"]
    for engine in (strict, ws1, ws2):
        value(engine, "x = 1", "a")
        value(engine, "x = 1", "b")
    tables = [guards_of(e, s).table for e in (strict, ws1, ws2) for s in ("a", "b")]
    assert len({id(t) for t in tables}) == 6  # every session its own builtins
    assert guards_of(strict, "a").type_guard is guards_of(strict, "b").type_guard
    assert guards_of(ws1, "a").type_guard is guards_of(ws2, "b").type_guard  # both 'standard'
    assert guards_of(strict, "a").type_guard is not guards_of(ws1, "a").type_guard
    # An idle session made no class: it holds the shared empty set, not sets of its own.
    assert not isinstance(guards_of(strict, "a").owned, set)


def test_interleaved_sessions_keep_their_own_classes_and_rules(engines: dict[str, ReplEngine]) -> None:
    strict, ws1, ws2 = engines["strict"], engines["ws1"], engines["ws2"]
    order = [(strict, "a"), (ws1, "a"), (ws2, "a"), (strict, "b"), (ws1, "b")]
    for engine, session in order:
        value(engine, "x = 1", session)
    for engine, session in order:  # each session's class is its own: writable there
        assert value(engine, MAKE_CLASS + "\nr", session) == "(1, 2, 3)"
    classes = {(id(e), s): e.boundary.session(s).namespace["K"] for e, s in order}  # type: ignore[attr-defined]
    for engine, session in order:
        guards = guards_of(engine, session)
        own = classes[(id(engine), session)]
        assert own in guards.owned and own in guards.writable
        others = [cls for key, cls in classes.items() if key != (id(engine), session)]
        assert not any(cls in guards.owned for cls in others)
    # The rules stay each session's own: messages name its policy, files follow its workspace.
    assert "'strict'" in refused(strict, "import abc\ntype(abc.ABC)", "a")
    assert "'standard'" in refused(ws1, "import abc\ntype(abc.ABC)", "a")
    assert value(ws1, "with open('f.txt', 'w') as f:\n    n = f.write('one')\nn", "a") == "3"
    assert value(ws2, "with open('f.txt', 'w') as f:\n    n = f.write('two!')\nn", "a") == "4"
    assert value(ws1, "with open('f.txt') as f:\n    t = f.read()\nt", "b") == "'one'"
    outside = str(Path(guards_of(ws1, "a").state.workspace) / "f.txt")
    assert "workspace" in refused(ws2, f"with open({outside!r}) as f:\n    f.read()", "a")
    assert "no file access" in refused(strict, "open('f.txt')", "a")


def test_a_class_goes_to_the_session_whose_code_made_it(engines: dict[str, ReplEngine]) -> None:
    ws1, ws2 = engines["ws1"], engines["ws2"]
    value(ws1, "def make():\n    return type('Made', (), {})", "a")
    value(ws2, "x = 1", "b")
    # Hand session a's function to session b (only the host can: sessions share no objects).
    make = ws1.boundary.session("a").namespace["make"]  # type: ignore[attr-defined]
    ws2.boundary.session("b").namespace["make"] = make  # type: ignore[attr-defined]
    value(ws2, "M = make()", "b")
    made = ws2.boundary.session("b").namespace["M"]  # type: ignore[attr-defined]
    assert made in guards_of(ws1, "a").owned  # a's code made it, as when each session had its guard
    assert made not in guards_of(ws2, "b").owned
    assert "class 'Made'" in refused(ws2, "M.z = 1", "b")
    # b's own type() call in the same cell still records to b.
    assert value(ws2, "N = type('N', (), {})\nN.z = 1\nN.z", "b") == "1"


def test_the_guard_called_by_host_code_acts_for_the_current_execution_only(
    engines: dict[str, ReplEngine],
) -> None:
    ws1 = engines["ws1"]
    value(ws1, "x = 1", "a")
    guards = guards_of(ws1, "a")
    shared_type: Any = guards.type_guard
    # No session's code on the stack and no execution: refused, nothing recorded anywhere.
    with pytest.raises(PermissionError, match="outside a session's own code"):
        shared_type("Host", (), {})
    # Inside an execution whose cell entered session a (what the CELL builtin does): a's.
    execution = Execution()
    execution.enter_session(guards)
    token = current_execution.set(execution)
    try:
        made = shared_type("Lib", (), {})
    finally:
        current_execution.reset(token)
    assert made in guards.owned
    # One-argument type() needs no session at all.
    assert shared_type(1) is int


def test_sessions_on_threads_keep_their_own_classes(engines: dict[str, ReplEngine]) -> None:
    strict, ws1 = engines["strict"], engines["ws1"]
    rounds = 15
    barrier = threading.Barrier(4, timeout=30)
    failures: list[str] = []

    def work(engine: ReplEngine, session: str) -> None:
        try:
            value(engine, "made = []", session)
            barrier.wait()
            for i in range(rounds):
                code = f"C = type('C{i}', (), {{}})\nC.v = {i}\nmade.append(C)\nC.v"
                result = engine.run(code, session)
                if result.status != "ok" or result.value != str(i):
                    failures.append(f"{session}: {result.status} {result.value} {result.error}")
        except BaseException as exc:  # reported below, with the session
            failures.append(f"{session}: {exc!r}")

    jobs = [(strict, "t1"), (strict, "t2"), (ws1, "t1"), (ws1, "t2")]
    threads = [threading.Thread(target=work, args=job, daemon=True) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    assert failures == []
    made = {
        (id(e), s): list(e.boundary.session(s).namespace["made"])  # type: ignore[attr-defined]
        for e, s in jobs
    }
    for engine, session in jobs:
        guards = guards_of(engine, session)
        assert all(cls in guards.owned for cls in made[(id(engine), session)])
        assert len(guards.owned) == rounds
        for key, classes in made.items():
            if key != (id(engine), session):
                assert not any(cls in guards.owned for cls in classes)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("type.x = 1", "class 'type'"),
        ("setattr(type, 'x', 1)", "class 'type'"),
        ("del type.mro", "class 'type'"),
        ("type(type).x = 1", "class 'type'"),
        ("class M(type): pass", "metaclass"),
        ("class M(type(type)): pass", "metaclass"),
        ("class M(metaclass=type(type)): pass\nM.x = 1\ntype(M)", None),  # the real type: a plain class
        ("type('M', (type,), {})", "metaclasses"),
        ("getattr(type, '_type_guard_policy')", "_type_guard_policy"),
        ("__repl_session__", "__repl_session__"),
        ("type.__call__", "__call__"),
        ("type.__dict__", "__dict__"),
    ],
)
def test_restricted_code_cannot_change_or_steer_the_shared_guard(
    engines: dict[str, ReplEngine], code: str, expected: str | None
) -> None:
    for name in ("strict", "ws1"):
        engine = engines[name]
        if expected is None:
            assert value(engine, code, "a") == "<class 'type'>"
        else:
            assert expected in refused(engine, code, "a")
        # Nothing it tried changed the guard for the other session of the same policy.
        assert value(engine, "type('Q', (), {'v': 1}).v", "other") == "1"
        assert value(engine, "hasattr(type, 'x')", "other") == "False"
