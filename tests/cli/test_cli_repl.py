"""The interactive REPL: driven through stdin (in-process and as a process) and through a pseudo-terminal."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from genpark_repl_tools import (
    Attachment,
    EngineClosed,
    ExecutionRequest,
    ExecutionResult,
    MockBoundary,
    ReplEngine,
)
from genpark_repl_tools.cli import UsageError, repl

ROOT = Path(__file__).resolve().parents[2]
BOUND_S = 60


def drive(
    lines: str,
    engine: ReplEngine | None = None,
    *,
    json_output: bool = False,
    figures_dir: Path | None = None,
    switch_policy: Callable[[str], ReplEngine] | None = None,
) -> tuple[str, int, ReplEngine]:
    """Feed `lines` to the REPL as a pipe would; returns what it printed, its exit code and the engine."""
    engine = engine or ReplEngine(boundary="inprocess", policy="trusted")
    stdout = io.StringIO()
    code = repl(
        engine,
        stdin=io.StringIO(lines),
        stdout=stdout,
        json_output=json_output,
        figures_dir=figures_dir,
        switch_policy=switch_policy,
    )
    return stdout.getvalue(), code, engine


# ---- input: statements, blocks, values -----------------------------------------------------------


def test_a_value_and_a_statement() -> None:
    out, code, _ = drive("x = 6 * 7\nx\n")
    assert code == 0
    assert out == (
        "OK (no output; end the code with an expression or print() to see a value)\n"
        "Variables: created x (int)\n"
        "OK\nOut: 42\n"
    )


def test_a_block_continues_until_a_blank_line() -> None:
    out, _, _ = drive("total = 0\nfor i in range(3):\n    total += i\n\ntotal\n")
    assert out.endswith("OK\nOut: 3\n")
    # The for-loop ran as one cell: three runs in all, not one per line.
    assert out.count("OK") == 3


def test_an_if_block_takes_its_else_branch() -> None:
    out, _, _ = drive("flag = False\nif flag:\n    r = 'yes'\nelse:\n    r = 'no'\n\nr\n")
    assert out.endswith("Out: 'no'\n")


def test_code_after_a_block_runs_with_it() -> None:
    # `python -i` would refuse this paste; the engine runs it as a module.
    out, _, _ = drive("def double(n):\n    return 2 * n\ndouble(21)\n")
    assert "Out: 42" in out
    assert "created double (function)" in out


def test_an_open_block_at_end_of_input_still_runs() -> None:
    out, _, _ = drive("for i in range(2):\n    print('line', i)")
    assert out == "OK\nstdout:\nline 0\nline 1\nVariables: created i (int)\n"


def test_an_open_bracket_waits_for_more_lines() -> None:
    out, _, _ = drive("values = [\n    1,\n    2,\n]\nsum(values)\n")
    assert out.endswith("OK\nOut: 3\n")


def test_two_blank_lines_run_an_unfinished_statement_and_show_the_error() -> None:
    out, _, _ = drive("x = (1,\n\n\nx\n")
    assert "Error: SyntaxError" in out
    assert "Error: NameError: name 'x' is not defined" in out


def test_errors_show_the_failing_line() -> None:
    out, _, _ = drive("items = []\nitems[3]\n")
    assert "Error: IndexError: list index out of range\nAt line 1:\n    items[3]\n" in out


def test_json_prints_the_telemetry() -> None:
    out, _, _ = drive("'a' * 3\n", json_output=True)
    data = json.loads(out)
    assert (data["status"], data["value"], data["session"]) == ("ok", "'aaa'", "repl")


# ---- commands ------------------------------------------------------------------------------------


def test_vars_inspect_and_reset() -> None:
    out, _, _ = drive(
        ":vars\nname = 'Ada'\nnums = [1, 2, 3]\n:vars\n:inspect nums\n:inspect nope\n:reset\n:vars\n"
    )
    lines = out.splitlines()
    # The same words as every frontend (the core's tool layer).
    assert lines[0] == "No variables defined yet."
    assert "name: str, len 3 = 'Ada'" in lines
    assert "nums: list, len 3 = [1, 2, 3]" in lines
    assert "nums: list, len 3" in lines  # :inspect nums
    assert "Not defined: 'nope'. Defined: name, nums." in lines
    assert lines[-2:] == ["Session reset: every variable is gone.", "No variables defined yet."]


def test_inspect_marks_a_shortened_value_once() -> None:
    # Every cut repr carries its own marker (with the length); a second one said nothing new.
    out, _, _ = drive("big = 'x' * 1_000_000\nitems = list(range(100_000))\n:inspect big\n:inspect items\n")
    assert out.count("shortened") == 2, out[-400:]
    assert "[shortened; len 1,000,000]" in out
    assert "(shortened)" not in out


def test_quit_stops_reading_and_closes_the_engine() -> None:
    out, code, engine = drive("1 + 1\n:quit\nprint('not reached')\n")
    assert code == 0
    assert "not reached" not in out
    with pytest.raises(EngineClosed):
        engine.run("1")


def test_help_and_unknown_commands() -> None:
    out, _, _ = drive(":help\n:frobnicate\n")
    assert ":inspect NAME" in out
    assert ":policy [NAME]" in out
    assert out.endswith("Unknown command :frobnicate; :help lists the commands.\n")


def test_policy_shows_what_is_enforced() -> None:
    out, _, _ = drive(":policy\n")
    assert out.startswith("Policy 'trusted' on the inprocess boundary.\n")
    assert "  memory_limit: False\n" in out
    assert "Presets: " in out
    assert "trusted" in out.splitlines()[-1]


def test_policy_switch_replaces_the_engine() -> None:
    made: list[ReplEngine] = []

    def switch(name: str) -> ReplEngine:
        if name != "trusted":
            raise UsageError(f"unknown policy {name!r}; choose one of: trusted")
        made.append(ReplEngine(boundary="inprocess", policy=name))
        return made[-1]

    out, _, first = drive("kept = 1\n:policy nope\nkept\n:policy trusted\nkept\n", switch_policy=switch)
    assert "unknown policy 'nope'; choose one of: trusted" in out
    assert out.count("Out: 1") == 1  # before the switch only
    assert "Policy 'trusted' now; the session starts empty." in out
    after_switch = out.split("the session starts empty.")[1]
    assert after_switch.startswith("\nError: NameError: name 'kept' is not defined\n")
    with pytest.raises(EngineClosed):
        first.run("1")
    with pytest.raises(EngineClosed):  # the replacement is closed when the REPL ends, too
        made[0].run("1")


def test_figures_are_saved(tmp_path: Path) -> None:
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n-data").decode()

    def handler(request: ExecutionRequest) -> ExecutionResult:
        attachment = Attachment(data_base64=png, description="plot")
        return ExecutionResult(
            status="ok", session=request.session, execution_count=7, attachments=[attachment]
        )

    engine = ReplEngine(boundary=MockBoundary(handler))
    out, _, _ = drive("plot()\n", engine, figures_dir=tmp_path)
    path = tmp_path / "figure-7-1.png"
    assert f"Saved figure: {path}" in out
    assert path.read_bytes() == b"\x89PNG\r\n\x1a\n-data"


# ---- as a process ----------------------------------------------------------------------------------


def test_piped_stdin_gets_no_prompts(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "genpark_repl_tools.cli", "--policy", "trusted"],
        input="base = 40\nbase + 2\n:vars\n",
        capture_output=True,
        text=True,
        timeout=BOUND_S,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)},
        check=False,
    )
    assert done.returncode == 0
    assert ">>>" not in done.stdout
    assert done.stdout.endswith("OK\nOut: 42\nVariables (1):\nbase: int = 40\n")
    assert not (tmp_path / ".genpark_repl_history").exists()  # history is for terminals only


# Run first in the child: make the pseudo-terminal its controlling terminal, so ^C and ^D typed there
# reach it through the terminal's line discipline, as they do for a person at a keyboard.
_TAKE_TERMINAL = (
    "import fcntl, os, sys, termios\n"
    "fcntl.ioctl(0, termios.TIOCSCTTY, 0)\n"
    "os.execv(sys.argv[1], sys.argv[1:])"
)


class Terminal:
    """A child process on a pseudo-terminal; every wait is bounded."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path | None = None) -> None:
        import pty

        self.master, child = pty.openpty()
        self.process = subprocess.Popen(
            [sys.executable, "-c", _TAKE_TERMINAL, *args],
            stdin=child,
            stdout=child,
            stderr=child,
            env=env,
            start_new_session=True,
            close_fds=True,
            cwd=cwd,
        )
        os.close(child)
        self.seen = b""
        self.mark = 0

    def expect(self, text: str, timeout: float = BOUND_S) -> None:
        wanted = text.encode()
        deadline = time.monotonic() + timeout
        while wanted not in self.seen[self.mark :]:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"{text!r} not seen; output so far: {self.seen[-600:]!r}")
            ready, _, _ = select.select([self.master], [], [], remaining)
            if not ready:
                continue
            try:
                chunk = os.read(self.master, 4096)
            except OSError:  # EIO: the child closed the terminal
                chunk = b""
            if not chunk:
                raise AssertionError(f"{text!r} not seen before exit; output: {self.seen[-600:]!r}")
            self.seen += chunk
        self.mark = self.seen.index(wanted, self.mark) + len(wanted)

    def send(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\r")

    def type_control(self, key: str) -> None:
        """Type Ctrl-`key` (C: interrupt, D: end of input)."""
        os.write(self.master, bytes([ord(key.upper()) - ord("@")]))

    def interrupt(self) -> None:
        """Type Ctrl-C until the REPL answers.

        A ^C that arrives just before readline starts waiting for a key is only acted on at the next
        one (CPython checks signals when the wait is interrupted), so it is typed again if unanswered.
        """
        for _ in range(6):
            self.type_control("C")
            try:
                self.expect("KeyboardInterrupt", timeout=5)
            except AssertionError:
                continue
            return
        raise AssertionError(f"Ctrl-C was never answered; output: {self.seen[-600:]!r}")

    def close(self, failed: bool = False) -> int:
        """Wait for the child to leave (kill it at once if the test already failed); its exit code."""
        try:
            return -1 if failed else self.process.wait(timeout=BOUND_S)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(timeout=BOUND_S)
            os.close(self.master)


@pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")
def test_terminal_session_with_prompts_and_history(tmp_path: Path) -> None:
    history = tmp_path / "history"
    term = repl_terminal(tmp_path, "--policy", "trusted", "--timeout", "5")
    try:
        term.expect("policy 'trusted', subprocess boundary, 5 s timeout. :help for commands")
        term.expect(">>> ")
        term.send("for i in range(2):")
        term.expect("... ")
        term.send("    print('row', i * 10)")
        term.expect("... ")
        term.send("")
        term.expect("row 10")
        term.expect(">>> ")
        term.send("answer = 6 * 7")
        term.expect(">>> ")
        term.send("answer")
        term.expect("Out: 42")
        term.send(":quit")
    finally:
        code = term.close()
    assert code == 0
    assert "answer = 6 * 7" in history.read_text()


def repl_terminal(tmp_path: Path, *options: str, cwd: Path | None = None) -> Terminal:
    """`genpark-repl OPTIONS` on a pseudo-terminal, with its HOME and its history (tmp_path/history) in
    tmp_path."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HOME": str(tmp_path),
        "TERM": "dumb",
        "GENPARK_REPL_HISTORY": str(tmp_path / "history"),
    }
    return Terminal([sys.executable, "-m", "genpark_repl_tools.cli", *options], env, cwd)


@pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")
@pytest.mark.parametrize(
    "boundary",
    ["inprocess", "subprocess"],
)
def test_ctrl_c_stops_a_running_call_and_clears_a_half_typed_block(tmp_path: Path, boundary: str) -> None:
    term = repl_terminal(
        tmp_path, "--policy", "trusted", "--boundary", boundary, "--timeout", "120", cwd=tmp_path
    )
    failed = True
    try:
        term.expect(">>> ")
        term.send("kept = 1")
        term.expect(">>> ")
        # Where the code writes: this directory in-process, the worker's workspace otherwise.
        term.send("import os, time; os.getcwd()")
        term.expect(">>> ")
        cwd = re.findall(r"Out: '([^']+)'", term.seen.decode())
        assert cwd, term.seen[-600:]
        started = Path(cwd[-1]) / "started"
        # At the prompt: the half-typed block is dropped and a new prompt comes.
        term.send("for i in range(3):")
        term.expect("... ")
        term.interrupt()
        term.expect(">>> ")
        term.send("'in sync'")  # a ^C answered late would stop this, not the call below
        term.expect("Out: 'in sync'")
        term.expect(">>> ")
        # During a call: it stops long before its 100 s and the REPL keeps the session.
        term.send("open('started', 'w').close(); time.sleep(100)")
        deadline = time.monotonic() + BOUND_S
        while not started.exists():
            assert time.monotonic() < deadline, f"the call never started: {term.seen[-600:]!r}"
            time.sleep(0.01)
        term.type_control("C")  # Python code is running: the signal is seen at once
        term.expect("KeyboardInterrupt")
        term.expect(">>> ")
        term.send("kept")
        term.expect("Out: 1", timeout=10)
        term.expect(">>> ")
        term.send(":quit")
        failed = False
    finally:
        code = term.close(failed)
    assert code == 0


@pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")
@pytest.mark.parametrize("half_typed", [False, True], ids=["at-the-prompt", "in-a-block"])
def test_ctrl_d_leaves_with_exit_code_0(tmp_path: Path, half_typed: bool) -> None:
    term = repl_terminal(tmp_path, "--policy", "trusted")
    failed = True
    try:
        term.expect(">>> ")
        term.send("x = 41")
        term.expect(">>> ")
        if half_typed:
            # As at the end of a piped script, the open block runs before the REPL leaves.
            term.send("for i in range(2):")
            term.expect("... ")
            term.send("    print('row', x + i)")
            term.expect("... ")
            term.type_control("D")
            term.expect("row 42")
        else:
            term.type_control("D")
        failed = False
    finally:
        code = term.close(failed)
    assert code == 0
    assert "x = 41" in (tmp_path / "history").read_text()
