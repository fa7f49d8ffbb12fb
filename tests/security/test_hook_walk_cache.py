"""The audit hook remembers frames it found clean (no sandboxed code in or below them), so a walk of
the stack stops at the first such frame. These are the ways that memory could be abused to hide
sandboxed code, each with the host's legitimate use next to it:

* a frame found clean is still on the stack, and sandboxed code now runs above it (a host function
  the session calls, outside any execution): the walk meets the sandboxed frame first;
* a host generator's frame found clean, then resumed by sandboxed code: a generator's frame changes
  its callers when resumed, so it is never remembered;
* the hook's activation request made by host code that sandboxed code called.

The host calls the session's functions directly here, outside any execution, as docs/security.md
describes ("code of a session that the host calls back later").
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from types import CodeType
from typing import Any

import pytest

from genpark_repl_tools import Policy, ReplEngine
from genpark_repl_tools.policy import PolicyViolation, runtime_for

_EXEC_REFUSED = r"running code built at run time"


@pytest.fixture(params=["strict", "standard"])
def engine(request: pytest.FixtureRequest) -> Iterator[ReplEngine]:
    with ReplEngine(policy=request.param) as engine:
        yield engine


def _namespace(engine: ReplEngine, session: str) -> dict[str, Any]:
    return engine.boundary._sessions[session].namespace  # type: ignore[attr-defined,no-any-return]


def _define(engine: ReplEngine, session: str, code: str, **given: Any) -> dict[str, Any]:
    assert engine.run("x = 1", session=session).status == "ok"
    namespace = _namespace(engine, session)
    namespace.update(given)  # host objects handed to the session (the test's back door)
    result = engine.run(code, session=session)
    assert result.status == "ok", result.to_observation()
    return namespace


def _host_compile() -> CodeType:
    return compile("x = 1", "<host>", "exec")


def _from_many_frames(fn: Callable[[], Any], depth: int) -> Any:
    return fn() if depth <= 0 else _from_many_frames(fn, depth - 1)


def test_sandboxed_code_above_a_frame_found_clean_is_still_found(engine: ReplEngine) -> None:
    namespace = _define(engine, "above", "def via():\n    return host_compile()", host_compile=_host_compile)
    for _ in range(5):  # the host's own compiles: its frames below are found clean and remembered
        assert isinstance(_from_many_frames(_host_compile, 20), CodeType)
    with pytest.raises(PolicyViolation, match=_EXEC_REFUSED):
        namespace["via"]()
    with pytest.raises(PolicyViolation, match=_EXEC_REFUSED):
        _from_many_frames(namespace["via"], 20)  # the same, deeper than the remembered frames
    assert isinstance(_from_many_frames(_host_compile, 20), CodeType)  # the host's own still work


def _host_steps() -> Iterator[CodeType]:
    while True:
        yield _host_compile()


def test_a_host_generator_resumed_by_sandboxed_code_is_judged_by_its_new_caller(engine: ReplEngine) -> None:
    namespace = _define(engine, "generator", "def step(steps):\n    return next(steps)")
    for _ in range(3):
        steps = _host_steps()
        for _ in range(5):  # resumed by the host: its frame is walked, found clean, and must not be kept
            assert isinstance(next(steps), CodeType)
        with pytest.raises(PolicyViolation, match=_EXEC_REFUSED):
            namespace["step"](steps)  # the refusal ends the generator: a new one for the next round


def test_activation_by_host_code_that_sandboxed_code_called_is_refused(engine: ReplEngine) -> None:
    permissive = runtime_for(Policy.standard().with_workspace("/"))

    def host_activates() -> None:
        permissive.exit(permissive.enter())

    code = "def go():\n    host_activates()"
    namespace = _define(engine, "activation", code, host_activates=host_activates)
    for _ in range(5):
        host_activates()  # the host's own activations: allowed, and its frames are remembered clean
    with pytest.raises(PolicyViolation, match="activating sandbox rules from sandboxed code"):
        namespace["go"]()
    with pytest.raises(PolicyViolation, match="activating sandbox rules from sandboxed code"):
        _from_many_frames(namespace["go"], 20)
    # Inside an execution too: the cell calls the host function.
    result = engine.run("go()", session="activation")
    assert result.status == "error" and result.error is not None
    assert "activating sandbox rules from sandboxed code" in result.error.message
    host_activates()


def test_frames_remembered_on_one_thread_do_not_answer_for_another(engine: ReplEngine) -> None:
    code = "def via():\n    return host_compile()"
    namespace = _define(engine, "threads", code, host_compile=_host_compile)
    outcome: dict[str, str] = {}

    def worker() -> None:
        for _ in range(5):
            _from_many_frames(_host_compile, 10)
        try:
            namespace["via"]()
            outcome["via"] = "allowed"
        except PolicyViolation:
            outcome["via"] = "refused"

    for _ in range(5):
        _from_many_frames(_host_compile, 10)
    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(10)
    assert outcome == {"via": "refused"}
