"""Reading processes from /proc (Linux): memory figures and cleanup of process trees.

Elsewhere the functions return None / empty lists and the memory figures say they were not measured.
"""

from __future__ import annotations

import os

__all__ = ["descendants", "hwm_kb", "rss_kb", "start_time", "tree_peak_mb", "uss_kb", "vm_size_kb"]


def _read_kb(path: str, field: str) -> int | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_kb(pid: int | str = "self") -> int | None:
    return _read_kb(f"/proc/{pid}/status", "VmRSS")


def vm_size_kb(pid: int | str = "self") -> int | None:
    """Address space in use: what RLIMIT_AS counts."""
    return _read_kb(f"/proc/{pid}/status", "VmSize")


def hwm_kb(pid: int | str = "self") -> int | None:
    """Peak resident set size of a live process."""
    return _read_kb(f"/proc/{pid}/status", "VmHWM")


def uss_kb(pid: int) -> int:
    """Unique set size: pages only this process maps (what it costs on top of what it shares)."""
    clean = _read_kb(f"/proc/{pid}/smaps_rollup", "Private_Clean") or 0
    dirty = _read_kb(f"/proc/{pid}/smaps_rollup", "Private_Dirty") or 0
    return clean + dirty


def _stat(pid: str) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses; everything after the last ')' is fixed.
    return stat.rsplit(")", 1)[1].split()


def start_time(pid: int) -> int | None:
    """Clock ticks after boot when `pid` started: tells a process from a later one reusing its id."""
    fields = _stat(str(pid))
    return int(fields[19]) if fields else None


def descendants(root: int) -> list[int]:
    if not os.path.isdir("/proc"):
        return []
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(entry)
            if fields:
                children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def tree_peak_mb(root: int | None = None) -> float | None:
    """The largest peak RSS among `root` (default: this process) and its live descendants."""
    root = os.getpid() if root is None else root
    peaks = [hwm_kb(p) for p in [root, *descendants(root)]]
    known = [p for p in peaks if p is not None]
    return round(max(known) / 1024, 1) if known else None
