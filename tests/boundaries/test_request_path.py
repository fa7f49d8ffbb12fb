"""One request goes down a straight line: session table, worker client, wire.

A warm `engine.run` on the subprocess boundary is traced on the host (sys.setprofile sees only the
calling thread, which is the one that serves the request). Among the modules of
genpark_repl_tools.boundaries, a module is left once none of its frames is on the stack any more; the
test counts the calls that come back into a module already left. On a straight line each module above
the wire is entered once on the way down and left once on the way up, so the count is 0. The wire is
the end of the line: the worker client calls it once per frame it sends or reads, and it calls nothing
back, so its own entries are not counted; what is checked for it is that only the worker client calls it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest

from genpark_repl_tools import Limits, ReplEngine

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks a sandboxed zygote")

PACKAGE = "genpark_repl_tools.boundaries"
TABLE = f"{PACKAGE}.subprocess"
CLIENT = f"{PACKAGE}._subprocess._host"
WIRE = f"{PACKAGE}._subprocess._protocol"
# What the worker client may call besides the wire: how a worker's result is judged plausible.
CLAIMS = f"{PACKAGE}._subprocess._claims"
STRAIGHT = {(TABLE, CLIENT), (CLIENT, WIRE), (CLIENT, CLAIMS)}


class PathTrace:
    """The boundaries modules' calls during one request: which module called which, and the calls
    that came back into a module already left."""

    def __init__(self) -> None:
        self._stack: list[tuple[str, FrameType]] = []
        self._left: set[str] = set()
        self.edges: set[tuple[str, str]] = set()
        self.returns: list[str] = []  # "module.function" of each call back into a module already left

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event not in ("call", "return"):
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(PACKAGE):
            return
        if event == "call":
            on_stack = {m for m, _ in self._stack}
            if module not in on_stack:
                if self._stack:
                    self.edges.add((self._stack[-1][0], module))
                if module in self._left and module != WIRE:
                    self.returns.append(f"{module.removeprefix(PACKAGE)}.{frame.f_code.co_name}")
            self._stack.append((module, frame))
            return
        while self._stack:  # a frame unwound by an exception may not have reported its return
            if self._stack.pop()[1] is frame:
                break
        if module not in {m for m, _ in self._stack}:
            self._left.add(module)


@pytest.fixture(scope="module")
def engine() -> Iterator[ReplEngine]:
    with ReplEngine(policy="trusted", boundary="subprocess", limits=Limits(timeout_s=10)) as engine:
        yield engine


def traced_run(engine: ReplEngine, code: str, session: str) -> PathTrace:
    trace = PathTrace()
    sys.setprofile(trace.profile)
    try:
        result = engine.run(code, session=session)
    finally:
        sys.setprofile(None)
    assert result.status == "ok", result.error
    return trace


@pytest.mark.parametrize(
    "code",
    [
        pytest.param("x = 1", id="silent"),
        pytest.param("print('out'); import sys; print('err', file=sys.stderr); 2", id="output"),
    ],
)
def test_a_warm_run_goes_down_a_straight_line(engine: ReplEngine, code: str) -> None:
    engine.run("warm = True", session="path")  # the worker is started: what follows is a warm call
    trace = traced_run(engine, code, "path")
    assert trace.returns == []
    assert trace.edges <= STRAIGHT, sorted(trace.edges - STRAIGHT)
    assert (TABLE, CLIENT) in trace.edges  # the trace saw the request at all


def test_the_trace_counts_a_return_into_a_module_already_left() -> None:
    # The measure itself, on a known walk: table -> client, back, client again -> wire, back.
    from genpark_repl_tools.boundaries._subprocess import _host, _protocol

    trace = PathTrace()
    sys.setprofile(trace.profile)
    try:
        _host.OutputSink(10)
        _protocol.encode(1, b"")
        _host.OutputSink(10).finish()
    finally:
        sys.setprofile(None)
    assert trace.returns == ["._subprocess._host.__init__", "._subprocess._host.finish"]
