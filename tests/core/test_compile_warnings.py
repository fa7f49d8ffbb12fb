"""Warnings the compiler gives for a cell (SyntaxWarning) are the cell's stderr, not the host's.

The boundary conformance suite checks what a run shows on every boundary; this checks what the host
process sees, and that a cached cell shows them on every run. pytest records warnings itself (and
runs this suite with `-W error`), so the in-process checks here show them as a plain `python` does.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from collections.abc import Iterator

import pytest

from genpark_repl_tools import ReplEngine


def compiler_says(code: str) -> str:
    """What this Python's compiler warns for `code`, as a run shows it (the wording changed in 3.12)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        compile(code, "<input>", "exec")
    return "".join(f"<input>:{w.lineno}: {w.category.__name__}: {w.message}\n" for w in seen)


WARNING = compiler_says("y = 5\nx = y is 5")


@pytest.fixture
def plain_warnings() -> Iterator[None]:
    """Warnings shown on sys.stderr, as a plain `python` shows them."""

    def show(
        message: Warning | str, category: type[Warning], filename: str, lineno: int, *rest: object
    ) -> None:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno))

    with warnings.catch_warnings():
        warnings.simplefilter("default", SyntaxWarning)
        warnings.showwarning = show
        yield


def test_the_host_process_prints_nothing() -> None:
    script = (
        "from genpark_repl_tools import ReplEngine\n"
        "for policy in ('trusted', 'standard', 'strict'):\n"
        "    r = ReplEngine(policy=policy).run('y = 5\\nx = y is 5', 's')\n"
        "    print(repr(r.stderr))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # before: "<cell-...>:2: SyntaxWarning: ..." on the host's stderr
    assert done.stdout.splitlines() == [repr(WARNING)] * 3


@pytest.mark.parametrize("policy", ["trusted", "standard", "strict"])
@pytest.mark.parametrize(
    "code",
    [
        "y = 5\nx = y is 5",
        "y = 5\nx = y is 5\ntry:\n    pass\nexcept Exception:\n    pass",  # with timeout guards
        "y = 5\nx = y is 5\ny",  # with a trailing value
    ],
)
def test_every_run_shows_the_warning_once(plain_warnings: None, policy: str, code: str) -> None:
    engine = ReplEngine(boundary="inprocess", policy=policy)
    for session in ("s", "s", "t"):  # the second run and the other session use the cached cell
        result = engine.run(code, session)
        assert result.status == "ok", result.error
        assert result.stderr == WARNING


def test_the_warning_comes_before_the_cells_own_stderr(plain_warnings: None) -> None:
    result = ReplEngine(boundary="inprocess", policy="trusted").run(
        "import sys\nx = 5 is 5\nprint('own', file=sys.stderr)", "s"
    )
    assert result.stderr == WARNING + "own\n"


def test_the_same_warning_twice_on_a_line_shows_once(plain_warnings: None) -> None:
    # The compiler warns once per comparison; Python's default filter shows a warning once per line.
    result = ReplEngine(boundary="inprocess", policy="trusted").run("y = 5\nx = y is 5 or y is 6", "s")
    assert result.stderr == WARNING


def test_each_warning_keeps_its_line(plain_warnings: None) -> None:
    result = ReplEngine(boundary="inprocess", policy="trusted").run("y = 5\nx = y is 5\nz = y is not 6", "s")
    assert result.stderr == compiler_says("y = 5\nx = y is 5\nz = y is not 6")


def test_a_cell_without_warnings_writes_nothing(plain_warnings: None) -> None:
    engine = ReplEngine(boundary="inprocess", policy="standard")
    assert engine.run("x = 1\nx", "s").stderr == ""


def test_a_host_that_makes_warnings_errors_gets_a_syntax_error() -> None:
    # pytest runs this suite with `-W error`: the compiler then raises, as under `python -W error`.
    result = ReplEngine(boundary="inprocess", policy="standard").run(
        "w = 5\nv = w is 7", "s"
    )  # a cell no test compiled
    assert result.status == "error"
    assert result.error is not None
    assert (result.error.type, result.error.line) == ("SyntaxError", 2)
    assert result.stderr == ""


def test_a_new_cell_compiles_inside_its_runs_routing(
    monkeypatch: pytest.MonkeyPatch, plain_warnings: None
) -> None:
    # The run routes its output before it compiles: the compile only redirects this context's
    # target (no routing of its own, which costs a lock and two stream swaps), and its warnings
    # still become the cell's stderr.
    from genpark_repl_tools import _compile

    routed: list[object] = []
    real_route = _compile.route
    monkeypatch.setattr(_compile, "route", lambda cap: routed.append(cap) or real_route(cap))
    with ReplEngine(boundary="inprocess", policy="trusted") as engine:
        # New to the cache (a comment no other test's cell has): this run compiles it.
        result = engine.run("y = 5\nx = y is 5\n# compiled inside its run's routing", session="s")
    assert routed == []
    assert result.status == "ok"
    assert result.stderr == WARNING


def test_redirect_needs_a_routed_context() -> None:
    from genpark_repl_tools._capture import BoundedText, Capture, redirect, route, unroute

    outside = Capture(100)
    assert redirect(outside) is None  # nothing routed: the caller must route
    run = Capture(100)
    token = route(run)
    try:
        inner = BoundedText(100)
        redirected = redirect(type("Sinks", (), {"stdout": inner, "stderr": inner})())
        assert redirected is not None
        try:
            print("to the redirect")
        finally:
            redirected.var.reset(redirected)
        print("to the run")
    finally:
        unroute(token)
    assert inner.getvalue() == "to the redirect\n"
    assert run.stdout.getvalue() == "to the run\n"
