"""The audit hook's start-up self-test: it passes on this interpreter, a probe that fails stops the
restricted policies (with a message that says what to do) and leaves "trusted" running."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from genpark_repl_tools import ReplEngine
from genpark_repl_tools.policy import _audithook
from genpark_repl_tools.policy._audithook import PROBES, Probe

# A real expectation the hook does not meet: it allows a missing workspace file to be opened.
WRONG = Probe(
    "opening a file in the workspace is refused",
    "try:\n    open(inside)\nexcept FileNotFoundError:\n    pass",
    True,
)


def test_the_self_test_passes_here() -> None:
    with ReplEngine(boundary="inprocess", policy="strict") as engine:
        assert engine.run("1 + 1").value == "2"
    assert _audithook.self_test() == []


def test_a_probe_that_does_not_hold_is_reported() -> None:
    _audithook.install()
    failures = _audithook.self_test([WRONG])
    assert failures == [f"{WRONG.what}: expected refused, got allowed"]


def test_the_probes_cover_refusals_and_their_allowed_neighbours() -> None:
    assert {p.refused for p in PROBES} == {True, False, None}
    whats = " ".join(p.what for p in PROBES)
    for kind in ("file", "compil", "code object", "frame", "import", "dataclass", "namedtuple", "annotation"):
        assert kind in whats, kind


REFUSED = textwrap.dedent(
    """
    import sys
    from genpark_repl_tools import ReplEngine
    from genpark_repl_tools.policy import UnsupportedInterpreter, _audithook
    from genpark_repl_tools.policy._audithook import Probe

    wrong = Probe({what!r}, {source!r}, True)
    try:
        _audithook.install(extra_probes=[wrong])
    except UnsupportedInterpreter as exc:
        print("install:", exc)
    for policy in ("standard", "strict"):
        try:
            with ReplEngine(boundary="inprocess", policy=policy) as engine:
                print(policy, "ran:", engine.run("1 + 1").value)
        except UnsupportedInterpreter as exc:
            print(policy, "refused:", exc)
    with ReplEngine(boundary="inprocess", policy="trusted") as engine:
        print("trusted ran:", engine.run("1 + 1").value)
    """
)


def test_a_failed_self_test_refuses_restricted_policies_and_leaves_trusted_running() -> None:
    script = REFUSED.format(what=WRONG.what, source=WRONG.source)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    message = lines["install"]
    assert f"{WRONG.what}: expected refused, got allowed" in message
    assert "tested on CPython 3.10-3.15" in message
    assert 'policy="trusted" with boundary="subprocess"' in message
    # The verdict holds for the process: every restricted runtime made later is refused with it.
    assert lines["standard refused"] == message
    assert lines["strict refused"] == message
    assert lines["trusted ran"] == "2"


def test_sandboxed_code_cannot_set_the_verdict() -> None:
    import builtins

    with ReplEngine(boundary="inprocess", policy="standard") as engine:
        engine.run("x = 1", session="s")
        engine.boundary._sessions["s"].namespace["bi"] = builtins.__dict__  # type: ignore[attr-defined]
        result = engine.run(
            "sys = bi['__import__']('sys')\n"
            "try:\n"
            "    sys.audit('genpark_repl.sandbox.verdict', 'passed')\n"
            "    outcome = 'set'\n"
            "except PermissionError:\n"
            "    outcome = 'refused'\n"
            "outcome",
            session="s",
        )
    assert result.value == "'refused'"
