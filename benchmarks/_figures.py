"""What is measured: the snippets, their expected output, and the run settings per mode.

Every timed snippet is idempotent (it can run any number of times with the same effect) and is
checked once before timing: an executor that gives a wrong answer is reported as failing, not timed.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CALLER_DEPTH",
    "CALLER_DEPTH_TITLE",
    "CONCURRENCY_SESSIONS",
    "LATENCY",
    "NAMESPACE_SIZES",
    "NEW_CELL_TITLE",
    "PROBES",
    "Latency",
    "Probe",
    "Settings",
    "concurrency_code",
    "concurrency_expected",
    "namespace_setup",
    "new_cell_code",
    "settings",
]


@dataclass(frozen=True)
class Settings:
    quick: bool
    # One timed batch lasts about this long: short batches are more often spared by other processes.
    target_round_s: float
    rounds: int  # alternating rounds (executor, bare) per figure; figures use the fastest round of each
    budget_s: float  # stop adding rounds past this (at least one round always runs)
    cpu_n: int
    fib_n: int
    new_sessions: int
    idle_sessions: int
    idle_workers: int  # subprocess boundary: worker processes measured for memory
    idle_kernels: int
    probe_timeout_s: float
    probe_grace_s: float  # how late past the timeout a call may return and still count as returned
    probe_headroom_mb: int  # address space a probe may add before it gets MemoryError (RLIMIT_AS)
    latency_job_s: float
    side_job_s: float

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def settings(quick: bool) -> Settings:
    if quick:
        return Settings(
            quick=True,
            target_round_s=0.005,
            rounds=25,
            budget_s=0.2,
            cpu_n=50_000,
            fib_n=16,
            new_sessions=8,
            idle_sessions=1_000,
            idle_workers=3,
            idle_kernels=1,
            probe_timeout_s=1.0,
            probe_grace_s=2.0,
            probe_headroom_mb=512,
            latency_job_s=90,
            side_job_s=60,
        )
    return Settings(
        quick=False,
        target_round_s=0.005,
        rounds=80,
        budget_s=1.5,
        cpu_n=50_000,
        fib_n=18,
        new_sessions=25,
        idle_sessions=1_000,
        idle_workers=10,
        idle_kernels=2,
        probe_timeout_s=2.0,
        probe_grace_s=6.0,
        probe_headroom_mb=512,
        latency_job_s=240,
        side_job_s=150,
    )


@dataclass(frozen=True)
class Latency:
    key: str
    title: str
    code: str
    setup: tuple[str, ...] = ()
    check: str | None = None  # run after `code`; None: `code`'s own output is checked
    expected: str = ""
    throughput: bool = False  # report bare/executor (higher is better) instead of executor/bare


def _fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


FIB_DEF = "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)"


def _latency(s: Settings) -> list[Latency]:
    n = s.cpu_n
    return [
        Latency("trivial", "Trivial call: `x = 1`", "x = 1", check="print(x)", expected="1"),
        Latency("print", "Print call: `print('hello')`", "print('hello')", expected="hello"),
        Latency(
            "cpu",
            f"CPU-heavy loop: {n:,} iterations of `total += i * i % 7`",
            f"total = 0\nfor i in range({n}):\n    total += i * i % 7",
            check="print(total)",
            expected=str(sum(i * i % 7 for i in range(n))),
            throughput=True,
        ),
        Latency(
            "recursive",
            f"Recursive function: `r = fib({s.fib_n})`, fib defined in an earlier call",
            f"r = fib({s.fib_n})",
            setup=(FIB_DEF,),
            check="print(r)",
            expected=str(_fib(s.fib_n)),
        ),
        Latency(
            "comprehension",
            "Comprehension over session variables: `r = [x * x for x in data if x < limit]` (20,000 items)",
            "r = [x * x for x in data if x < limit]",
            setup=("data = list(range(20000))\nlimit = 10000",),
            check="print(len(r), r[-1])",
            expected="10000 99980001",
        ),
    ]


LATENCY = _latency

# Sizes of the namespace `x = 1` runs in; the largest also holds a 10**6-element list.
NAMESPACE_SIZES = (10, 1_000, 10_000)


def namespace_setup(size: int, start: int = 0) -> str:
    """The cell that grows a namespace from `start` to `size` variables (the largest adds a big list)."""
    lines = [f"v{i} = {i}" for i in range(start, size)]
    if size >= 10_000:
        lines.append("big = list(range(10**6))")
    return "\n".join(lines)


def new_cell_code(n: int) -> str:
    """Cell number `n` of a session: code no executor has seen before, so no cache helps (a model's
    cells are almost always new), ending in an expression as model-written cells often do."""
    return f"x = {n}\ny = x * 2\ny"


NEW_CELL_TITLE = "New cell: code never run before (`x = <n>; y = x * 2; y`, n counting up) in a warm session"

# Frames a caller adds above the executor in the caller-depth figure: about what an agent framework's
# tool call puts between its loop and the tool (a LangChain tool call adds 10 to 15 per call).
CALLER_DEPTH = 32
CALLER_DEPTH_TITLE = f"Caller depth: `x = 1` called from {CALLER_DEPTH} more Python frames"


CONCURRENCY_SESSIONS = 32
_CONCURRENCY_LINES = 40


def concurrency_code(i: int) -> str:
    # CPU work between prints makes the interpreter switch threads mid-cell.
    return f"for k in range({_CONCURRENCY_LINES}):\n    print('S{i}', k)\n    w = sum(range(20000))"


def concurrency_expected(i: int) -> str:
    return "\n".join(f"S{i} {k}" for k in range(_CONCURRENCY_LINES))


@dataclass(frozen=True)
class Probe:
    key: str
    title: str
    code: str


PROBES = (
    Probe("loop", "infinite loop", "while True:\n    pass"),
    Probe(
        "swallow",
        "loop swallowing BaseException",
        "while True:\n    try:\n        while True:\n            pass\n"
        "    except BaseException:\n        pass",
    ),
    Probe("flood", "print flood", "while True:\n    print('flood ' * 16)"),
    # The size is a variable: a constant one is refused by the static audit of strict/standard before
    # anything runs, and this probe is about what stops memory growth at run time.
    Probe("bomb", "memory bomb", "size = 10**8\nchunks = []\nwhile True:\n    chunks.append(b'x' * size)"),
)
