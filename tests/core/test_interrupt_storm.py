"""Ctrl-C can land between any two bytecodes of the host's own code around a run. Whatever it
interrupts, no lock of the engine (output routing, the watchdog, the session, the usage ledger) may be
left held: a held lock would hang every later run of the process. A storm of SIGINTs while a session
runs cell after cell, then one more run on another thread must finish, and the host's own output must
reach its own streams again."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    from genpark_repl_tools import ReplEngine

    engine = ReplEngine(policy=sys.argv[1])
    engine.run("x = 1", "s")
    stop = threading.Event()

    ready = threading.Event()

    def pester():
        ready.wait()  # not before the loop below is inside its try: a signal there is the test's own
        time.sleep(0.2)
        while not stop.is_set():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.0003)

    # The thread of the last run starts before the storm: the check is about locks only.
    go = threading.Event()
    found = []
    worker = threading.Thread(
        target=lambda: go.wait() and found.append(engine.run("x = 2\\nx", "s").value), daemon=True
    )
    worker.start()
    pest = threading.Thread(target=pester, daemon=True)
    pest.start()
    deadline = time.monotonic() + float(sys.argv[2])
    interrupts = 0

    def storm():
        # A function, so that an interrupt in the loop's own bytecode (3.13 can leave the copy of a
        # loop's condition after an except clause outside the enclosing try) leaves it through the
        # call below, which is inside the try.
        global interrupts
        while time.monotonic() < deadline:
            try:
                engine.run("x = 1", "s")
            except KeyboardInterrupt:
                interrupts += 1

    running = True
    while running:
        try:
            ready.set()
            storm()
            stop.set()
            pest.join()
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            time.sleep(0.1)  # a signal that arrived before SIG_IGN raises here, still inside the try
            running = False
        except KeyboardInterrupt:
            interrupts += 1
    go.set()
    worker.join(20)
    # The host's own streams are back, and its output reaches them (not a run's dead capture).
    print("host output", sys.stdout is sys.__stdout__, sys.stderr is sys.__stderr__, flush=True)
    os.write(1, f"{interrupts} {found[0] if found else 'HUNG'}\\n".encode())
    os._exit(0)
    """
)


@pytest.mark.parametrize("policy", ["trusted", "standard"])
def test_no_lock_is_left_held_by_an_interrupt(policy: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, policy, "5"], check=False, capture_output=True, text=True, timeout=120
    )
    interrupts, _, value = proc.stdout.strip().rpartition("\n")[2].partition(" ")
    assert interrupts.isdigit(), f"no report (stderr: {proc.stderr[-800:]})"
    assert int(interrupts) > 100, proc.stdout  # the storm did interrupt runs
    assert value == "2", f"the run after the storm: {value} (stderr: {proc.stderr[-500:]})"
    assert "host output True True\n" in proc.stdout  # before: swallowed by a run cut short
