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
from pathlib import Path
from types import CodeType, FunctionType
from typing import Any

import pytest

import genpark_repl_tools
from genpark_repl_tools import Policy, ReplEngine
from genpark_repl_tools.policy import PolicyViolation, _audithook, runtime_for

_EXEC_REFUSED = r"running code built at run time"


@pytest.fixture(params=["strict", "standard"])
def engine(request: pytest.FixtureRequest) -> Iterator[ReplEngine]:
    with ReplEngine(boundary="inprocess", policy=request.param) as engine:
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
    # The hook's request itself, not a runtime's enter(): that also gives the thread the workspace
    # as its directory, through libc calls whose ctypes event (audited from Python 3.14) is refused
    # before the request is made.
    permissive = _audithook.rules_spec("standard", True, "/", (), ())

    def host_activates() -> None:
        _audithook.deactivate(_audithook.activate(permissive))

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
    assert result.status == "blocked" and result.error is not None
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


# Frames whose code lives in this package's directory: the hook treats them as the host's own.
_PACKAGE_FILE = str(Path(genpark_repl_tools.__file__).parent / "_walk_test_frames.py")
_PACKAGE_CHAIN = "def chain(n, fn):\n    return fn() if n <= 0 else chain(n - 1, fn)\n"


def _package_chain() -> Callable[[int, Callable[[], Any]], Any]:
    namespace: dict[str, Any] = {}
    exec(compile(_PACKAGE_CHAIN, _PACKAGE_FILE, "exec"), namespace)
    return namespace["chain"]  # type: ignore[no-any-return]


def test_sandboxed_code_above_the_packages_frames_found_clean_is_still_found(engine: ReplEngine) -> None:
    # A run's compile walk stores the package's frames (engine.run ... compile_cell) so the
    # activation's walk can stop at them; sandboxed code running above them must still be found.
    chain = _package_chain()
    namespace = _define(
        engine, "package", "def via():\n    return host_compile()", host_compile=_host_compile
    )
    for _ in range(5):
        assert isinstance(chain(10, _host_compile), CodeType)
    with pytest.raises(PolicyViolation, match=_EXEC_REFUSED):
        chain(10, lambda: chain(3, namespace["via"]))
    assert isinstance(chain(10, _host_compile), CodeType)  # the host's own compile, still allowed


def _closure_value(fn: Any, name: str, seen: set[int] | None = None) -> Any:
    """A variable of the hook's closure (the test looks inside; nothing else can name it)."""
    seen = set() if seen is None else seen
    if id(fn) in seen:
        return None
    seen.add(id(fn))
    for var, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True):
        value = cell.cell_contents
        if var == name:
            return value
        if isinstance(value, FunctionType):
            found = _closure_value(value, name, seen)
            if found is not None:
                return found
    return None


def test_the_packages_frames_are_dropped_when_the_run_activates() -> None:
    """Held past the run they would keep the run's objects (a session's, the cell's) alive."""
    hook = _audithook._build_hook(_audithook._learn())  # a hook of the test's own, called directly
    clean = _closure_value(hook, "clean")
    runtime = runtime_for(Policy.strict())
    runtime.exit(runtime.enter())
    spec = next(iter(runtime._specs.values()))  # type: ignore[attr-defined]
    chain = _package_chain()

    def activate() -> None:
        tokens: list[Any] = []
        hook(_audithook.ACTIVATE, (spec, tokens))
        _audithook.deactivate(tokens)

    def stored_package_frames() -> list[str]:
        frames = clean.__dict__.get("frames") or []
        return [f.f_code.co_name for f in frames if f is not None and f.f_code.co_filename == _PACKAGE_FILE]

    def run() -> list[str]:
        hook("compile", ("x = 1", "<cell>"))  # the run compiles its cell, then activates
        compiled = stored_package_frames()
        activate()
        return compiled

    activate()  # the first activation in the hook's life: it judges host events from now on
    assert chain(5, run), "the compile's walk stores the package's frames"
    assert stored_package_frames() == []  # dropped by the activation, while still on the stack
    assert clean.__dict__.get("frames"), "the caller's own frames stay remembered"


_COUNT_READS = r"""
import sys
from genpark_repl_tools import ReplEngine

with ReplEngine(boundary="inprocess", policy=sys.argv[1]) as engine:
    assert engine.run("x = 1").status == "ok"  # the hook judges the host's events from now on
    reads = []

    def count(event, args):
        if event == "object.__getattr__" and args[1] == "f_code":
            reads.append(args[0])

    sys.addaudithook(count)  # added last: it also sees the events our hook raises while it judges

    def host():
        return compile("x = 1", "<host>", "exec")

    host()
    reads.clear()
    host()  # a new frame of the same function, above frames already found clean
    print(len(reads))
"""


@pytest.mark.parametrize("policy", ["strict", "standard"])
def test_a_host_compile_reads_its_callers_code_once(policy: str) -> None:
    """Each read of a frame's f_code is an audit event, one more call of the hook: the hook reads the
    caller's code once and passes it on (its check for ast.parse, then its walk of the stack)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _COUNT_READS, policy], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"
