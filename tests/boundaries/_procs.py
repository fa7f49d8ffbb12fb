"""Process helpers for the subprocess-boundary tests (Linux /proc)."""

from __future__ import annotations

import time


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


def wait_gone(pids: list[int], timeout: float = 3.0) -> list[int]:
    """Wait until none of `pids` runs; return those still running at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        left = [pid for pid in pids if alive(pid)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.02)
