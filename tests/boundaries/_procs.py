"""Process helpers for the subprocess-boundary tests (Linux /proc)."""

from __future__ import annotations

import os
import select
import subprocess
import time
from collections.abc import Callable


def proc_state(pid: int) -> str | None:
    """The process's state letter, or None when no such process exists."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def alive(pid: int) -> bool:
    # A zombie has exited: whoever its parent is (pid 1 here is not ours) may reap it later.
    state = proc_state(pid)
    return state is not None and state != "Z"


# Bounds for waits on processes and files: generous for a loaded machine; a pass returns at once.
WAIT_S = 30.0


def wait_gone(pids: list[int], timeout: float = WAIT_S) -> list[int]:
    """Wait until none of `pids` runs; return those still running at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        left = [pid for pid in pids if alive(pid)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.02)


def wait_for(condition: Callable[[], bool], timeout: float = WAIT_S) -> bool:
    """Poll `condition` until it holds or the timeout passes; returns whether it held."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def read_line(process: subprocess.Popen[bytes], timeout: float = WAIT_S) -> bytes:
    """One line from the child's stdout within `timeout`: AssertionError instead of a hang."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    line = b""
    deadline = time.monotonic() + timeout
    while not line.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(remaining, 0))
        if not ready:
            raise AssertionError(f"no line from pid {process.pid} within {timeout} s; got {line!r}")
        chunk = os.read(fd, 1)
        if not chunk:
            raise AssertionError(f"pid {process.pid} closed its stdout; got {line!r}")
        line += chunk
    return line
