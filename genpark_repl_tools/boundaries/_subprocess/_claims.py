"""What `SubprocessBoundary.describe()` claims, and how a worker's end is explained.

Every claim is built from what the zygote detected (`hello`) and what its probe worker checked
(`probe`): a protection that is configured but not verified is reported as off.
"""

from __future__ import annotations

import math
import signal
from typing import Any, Literal

from ..._limits import Limits
from ..._models import ErrorInfo, ExecutionResult, Status

__all__ = ["Lost", "enforced", "explain_exit", "implausible", "lost_call", "unavailable"]

# What a worker's text fields may hold beyond their limit: the marker a cut text carries.
_MARKER_SLACK = 200
# A worker's own timing of a call against the host's: clock reads on either side of a socket.
_CLOCK_SLACK_MS = 1000.0

# How a call lost its worker: an interrupt or the deadline killed it, the session was closed under
# it, it sent an invalid reply, or its process ended by itself.
Lost = Literal["interrupted", "timeout", "closed", "invalid", "ended"]
_LOST_SESSION = "The session's variables are lost; the next run starts a fresh session."

_SIGNAL_TEXT = {
    signal.SIGSEGV: "a segmentation fault (SIGSEGV): invalid memory access, usually in C code or ctypes",
    signal.SIGBUS: "a bus error (SIGBUS): invalid memory access, usually in C code or ctypes",
    signal.SIGILL: "an illegal instruction (SIGILL) in native code",
    signal.SIGFPE: "a floating-point exception (SIGFPE) in native code",
    signal.SIGABRT: "an abort (SIGABRT): a C library or the interpreter gave up",
    signal.SIGKILL: "SIGKILL: the code killed its own process, or the system ran out of memory",
}


def enforced(
    hello: dict[str, Any], limits: Limits, kill_grace_s: float, user_note: str | None
) -> dict[str, Any]:
    """The `enforced` table of `describe()`: each protection, and how, or False."""
    probe: dict[str, Any] = hello.get("probe", {})
    return {
        "namespace_isolation": True,
        "timeout": (
            f"hard: the worker's process group is killed {kill_grace_s:g} s after the deadline "
            "(C-level code included); pure-Python code is stopped at the deadline and keeps the session"
        ),
        "output_bounds": True,
        "memory_limit": f"RLIMIT_AS {limits.memory_mb} MiB per worker" if limits.memory_mb else False,
        "cpu_limit": f"RLIMIT_CPU {limits.cpu_s:g} s per worker process" if limits.cpu_s else False,
        "open_files_limit": f"RLIMIT_NOFILE {limits.max_open_files}" if limits.max_open_files else False,
        "file_size_limit": f"RLIMIT_FSIZE {limits.max_file_size_mb} MiB"
        if limits.max_file_size_mb
        else False,
        "crash_isolation": True,
        "network_isolation": _network_claim(hello, probe),
        "filesystem_confinement": _filesystem_claim(hello, probe),
        "process_tree_kill": (
            "process group; setsid/setpgid refused by seccomp"
            if hello.get("seccomp") and probe.get("setsid_denied")
            else "process group only: code can leave it with setsid (no seccomp)"
        ),
        "syscall_filter": (
            "seccomp: namespaces, ptrace, mounts, kernel modules, bpf, perf, io_uring, setrlimit refused"
            if hello.get("seccomp") and probe.get("setsid_denied")
            else False
        ),
        "privileges": _privilege_claim(hello, probe, user_note),
        "signal_isolation": "workers cannot signal the host" if probe.get("signal_host_denied") else False,
        "orphan_cleanup": (
            "workers die with the zygote (parent-death signal); the zygote kills them when the host exits"
            if hello.get("pdeathsig")
            else "the zygote kills workers when the host exits (no parent-death signal on this OS)"
        ),
    }


def unavailable(hello: dict[str, Any]) -> dict[str, str]:
    """Why an OS protection is not available here, by protection."""
    return {
        key: reason
        for key, reason in (
            ("network_namespace", hello.get("network_reason")),
            ("seccomp", hello.get("seccomp_reason")),
            ("landlock", hello.get("landlock_reason")),
        )
        if reason
    }


def lost_call(
    how: Lost, code: int | None, elapsed: float, timeout: float, limits: Limits, reason: str | None = None
) -> tuple[Status, ErrorInfo]:
    """The status and error of a call whose worker was stopped or ended under it (`reason`: what
    made an invalid reply invalid, from `implausible`)."""
    if how == "interrupted":
        return "cancelled", ErrorInfo(
            type="Cancelled",
            message=(
                f"execution was interrupted after {elapsed:.1f} s; the code did not stop by itself "
                "(C-level work cannot be interrupted), so its worker process was killed"
            ),
            hint=_LOST_SESSION,
        )
    if how == "timeout":
        return "timeout", ErrorInfo(
            type="Timeout",
            message=(
                f"execution stopped after {elapsed:.1f} s (limit {timeout:g} s); the code did not stop "
                "by itself (C-level work cannot be interrupted), so its worker process was killed"
            ),
            hint=(
                f"{_LOST_SESSION} "
                "Make the code faster, work on less data, or split the work into several calls."
            ),
        )
    if how == "closed":
        return "crashed", ErrorInfo(
            type="SessionClosed",
            message="the session was closed while this code ran",
            hint="Run the code again; it starts a new, empty session.",
        )
    if how == "invalid":
        return "crashed", ErrorInfo(
            type="WorkerCrashed",
            message=(
                f"the worker process sent an impossible result ({reason[:200]}) and was stopped"
                if reason
                else "the worker process sent an invalid reply and was stopped"
            ),
            hint=_LOST_SESSION,
        )
    return "crashed", ErrorInfo(
        type="WorkerCrashed",
        message=explain_exit(code, limits),
        hint=f"{_LOST_SESSION} Re-create what you need and avoid what ended the process.",
    )


def implausible(result: ExecutionResult, limits: Limits, elapsed_s: float) -> str | None:
    """Why a worker's result cannot be true, or None: the figures the host keeps or adds up must be
    finite, non-negative and possible (no longer than the host saw the call take), and text the
    host passes on must be within the limits the worker enforces. The schema checks types only.
    `elapsed_s`: how long the host waited for the reply. A compromised worker (anything `trusted`
    code in the sandbox can do) is stopped on the first such reply.

    The execution count has no upper bound here: a call the host abandoned still counts in the
    worker, and the count is the session's own to report."""
    if result.execution_count < 0:
        return f"execution_count {result.execution_count}"
    figures = {
        "duration_ms": result.duration_ms,
        "cpu_ms": result.usage.cpu_ms,
        "peak_memory_mb": result.usage.peak_memory_mb,
    }
    for name, value in figures.items():
        if value is not None and not (math.isfinite(value) and value >= 0):
            return f"{name} {value!r}"
    if result.duration_ms > elapsed_s * 1000 + _CLOCK_SLACK_MS:
        return f"duration_ms {result.duration_ms:g} for a call that took {elapsed_s * 1000:.0f} ms"
    texts = {
        "stdout": (result.stdout, limits.max_output_chars),
        "stderr": (result.stderr, limits.max_output_chars),
        "value": (result.value or "", limits.max_repr_chars),
    }
    for name, (text, limit) in texts.items():
        if len(text) > limit + _MARKER_SLACK:
            return f"{len(text):,} characters of {name} (limit {limit:,})"
    if len(result.attachments) > limits.max_figures:
        return f"{len(result.attachments)} attachments (limit {limits.max_figures})"
    return None


def rolled_back_hint(how: Lost) -> str | None:
    """The hint of a lost call whose session went back to its checkpoint: what to change, without
    the lost-variables sentence (the observation says the variables are intact)."""
    if how == "timeout":
        return "Make the code faster, work on less data, or split the work into several calls."
    if how == "ended":
        return "Avoid what ended the process."
    return None


def explain_exit(code: int | None, limits: Limits) -> str:
    """How a worker process ended, in words for the model (`code`: negative for a signal)."""
    if code is None:
        return "the worker process ended unexpectedly"
    if code >= 0:
        return (
            f"the code ended the worker process with exit code {code} (os._exit or a C library calling exit)"
        )
    signum = -code
    if signum == signal.SIGXCPU:
        return f"the worker used up its CPU-time limit (Limits.cpu_s = {limits.cpu_s:g} s) and was stopped"
    if signum == signal.SIGKILL and limits.cpu_s is not None:
        return (
            "the worker process was killed (SIGKILL): the code killed its own process, it passed its "
            "CPU-time limit, or the system ran out of memory"
        )
    text = _SIGNAL_TEXT.get(signal.Signals(signum)) if signum in signal.valid_signals() else None
    if text is None:
        name = signal.Signals(signum).name if signum in signal.valid_signals() else str(signum)
        text = f"signal {name}"
    return f"the worker process crashed with {text}"


def _network_claim(hello: dict[str, Any], probe: dict[str, Any]) -> str | bool:
    if hello.get("egress_port"):
        if not probe.get("egress_only"):
            return False
        text = (
            "a network policy: each session's only way out is its egress proxy on the host, reached "
            "on loopback in a network namespace of its own (its container's on the container boundary)"
        )
        if hello.get("landlock_net"):
            text += "; Landlock: TCP only to the proxy's port"
        return text
    if not probe.get("network_blocked"):
        return False
    if hello.get("network_namespace"):
        text = f"{hello['network_namespace']} with no interface up"
    elif hello.get("seccomp_blocks_inet"):
        text = "seccomp: AF_INET/AF_INET6 sockets refused"
        if hello.get("landlock_net"):
            text += "; Landlock: TCP bind/connect refused"
    else:
        return False
    if probe.get("unix_socket_blocked"):
        text += "; Unix sockets by path refused (seccomp)"
    return text


def _filesystem_claim(hello: dict[str, Any], probe: dict[str, Any]) -> str | bool:
    if not (hello.get("landlock_abi") and probe.get("write_outside_denied") and probe.get("write_inside")):
        return False
    text = f"Landlock ABI {hello['landlock_abi']}: writes only inside the session's workspace"
    if hello.get("confine_reads") and probe.get("read_outside_denied"):
        text += "; reads only system, Python and workspace paths"
    return text


def _privilege_claim(hello: dict[str, Any], probe: dict[str, Any], note: str | None) -> str:
    uid = probe.get("uid", hello.get("uid"))
    if hello.get("dropped_root"):
        return f"uid {uid} (root dropped), no capabilities"
    if uid == 0:
        return f"root without capabilities{f' ({note})' if note else ''}"
    return f"the host's user (uid {uid}), no capabilities"
