"""Bare exec in a process of its own: the partner every executor's time is divided by.

Why not in the executor's process: our restricted policies install a process-wide audit hook, and
once a restricted run has happened it judges every audited event of the process, the host's own
`compile` and `exec` included (a bare `compile` + `exec` of `x = 1` then costs about twice as much).
Timed there, bare exec would pay our hook's toll and every ratio against it would look better than it
is. The partner is a fresh interpreter (`-I -S`: not even site-packages) that imports only the
standard library. Each of its batches is timed there, on its own clock, between the executor's
batches, as before: rounds still alternate, so load from other processes still hits both sides alike.

Security model: none; the partner runs the benchmark's own snippets, as `Bare` does.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from _executors import Executor, Outcome

__all__ = ["CLOCK_NAMES", "BarePartner", "timed"]

# The partner's whole program: commands are pickled tuples on stdin, replies pickled on stdout.
_SERVE = r"""
import contextlib, io, pickle, sys, time
inp, out = sys.stdin.buffer, sys.stdout.buffer
sys.stdout = io.StringIO()  # stray prints must not corrupt the replies
clocks = {"cpu": time.process_time, "wall": time.perf_counter}
namespaces = {}
def namespace(session):
    ns = namespaces.get(session)
    if ns is None:
        ns = namespaces[session] = {"__name__": "__main__"}
    return ns
while True:
    try:
        op, session, *args = pickle.load(inp)
    except EOFError:
        break
    if op == "run":
        (code,) = args
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf):
                exec(compile(code, "<cell>", "exec"), namespace(session))
            reply = (True, buf.getvalue(), None, "ok")
        except BaseException as exc:
            reply = (False, buf.getvalue(), f"{type(exc).__name__}: {exc}", "error")
    elif op == "batch":  # the same call as Bare.caller's, one per code, timed as one batch
        codes, clock = args
        ns = namespace(session)
        call = lambda code: exec(compile(code, "<cell>", "exec"), ns)
        now = clocks[clock]
        started = now()
        for code in codes:
            call(code)
        reply = (now() - started) / len(codes)
    elif op == "close":
        namespaces.pop(session, None)
        reply = None
    else:
        reply = None
    pickle.dump(reply, out)
    out.flush()
"""


class _PartnerCall:
    """`BarePartner.caller(session)`: a call for untimed use, and `batch` for timed batches."""

    def __init__(self, partner: BarePartner, session: str) -> None:
        self._partner = partner
        self._session = session

    def __call__(self, code: str) -> object:
        return self.batch([code], "wall")

    def batch(self, codes: list[str], clock: str) -> float:
        """Seconds per call of running `codes` in the partner, by the partner's own `clock`."""
        seconds: float = self._partner.ask("batch", self._session, codes, clock)
        return seconds


class BarePartner(Executor):
    """`Bare`, run in a fresh interpreter of its own (see the module doc)."""

    key = "bare"

    def __init__(self, timeout_s: float) -> None:
        super().__init__(timeout_s)
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _SERVE], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )

    def ask(self, op: str, session: str, *args: Any) -> Any:
        stdin, stdout = self._proc.stdin, self._proc.stdout
        assert stdin is not None and stdout is not None
        pickle.dump((op, session, *args), stdin)
        stdin.flush()
        return pickle.load(stdout)

    def caller(self, session: str) -> Callable[[str], object]:
        return _PartnerCall(self, session)

    def run(self, code: str, session: str) -> Outcome:
        ok, out, error, status = self.ask("run", session, code)
        return Outcome(ok, out, error, status)

    def close_session(self, session: str) -> None:
        self.ask("close", session)

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()  # the partner's loop ends at end of input
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()


# The clocks the timing loops use (_worker.CLOCKS), by the name the partner knows them by.
CLOCK_NAMES: dict[Callable[[], float], str] = {time.process_time: "cpu", time.perf_counter: "wall"}


def timed(fn: Callable[[str], object], codes: list[str], clock: Callable[[], float]) -> float:
    """Seconds per call of `fn` over `codes`, timed as one batch: in the partner's process when `fn`
    is a partner's call, here otherwise."""
    batch = getattr(fn, "batch", None)
    if batch is not None:
        seconds: float = batch(codes, CLOCK_NAMES[clock])
        return seconds
    started = clock()
    for code in codes:
        fn(code)
    return (clock() - started) / len(codes)
