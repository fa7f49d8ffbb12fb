"""One benchmark job in its own process: `python benchmarks/_worker.py '<job as JSON>'`.

The orchestrator (run.py) starts one process per (executor, job kind) and bounds it in time, so a
peer that hangs or crashes costs one row, not the run. Results go as JSON lines to the job's `out`
file (never to stdout: some executors swap or flood it), one line per finished figure, so a job
killed halfway still reports what it measured.

Security model: none; it runs the benchmark's own snippets, some deliberately hostile. The hostile
probes run under an address-space cap (RLIMIT_AS) set here, and the orchestrator kills the whole
process tree at its deadline.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import itertools
import json
import os
import resource
import statistics
import sys
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import _figures as F
from _executors import Bare, Executor, Outcome, discover, make_executor
from _partner import BarePartner, timed
from _proc import descendants, rss_kb, tree_peak_mb, uss_kb, vm_size_kb

_LATENCY_TIMEOUT_S = 120.0
_WARM_UP_S = 0.6


class Emitter:
    def __init__(self, path: str) -> None:
        self._file = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - lives as long as the job

    def __call__(self, event: str, **data: Any) -> None:
        self._file.write(json.dumps({"event": event, "t": time.time(), **data}, default=str) + "\n")
        self._file.flush()


# ---- timing -------------------------------------------------------------------------------------

Call = tuple[Callable[[str], object], str]


CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.process_time, "wall": time.perf_counter}


def _batch(fn: Callable[[str], object], code: str, number: int, clock: Callable[[], float]) -> float:
    return timed(fn, [code] * number, clock)


def batch_size(
    fn: Callable[[str], object],
    codes: Callable[[], str],
    clock: Callable[[], float],
    target_s: float,
    most: int,
) -> int:
    """How many calls of `fn` (on `codes()`) make a batch of about `target_s` (at most `most`).

    Measured after one untimed call, on a batch (1, 2, 4, ... calls) that lasts a quarter of
    `target_s`, not on one call: the first call after a setup cell can take ten times a warm one (a
    collection, cold caches), and a batch sized by it holds a couple of calls, whose per-batch costs
    (another session's caches, a worker's wake-up) the figure would then charge to every call.
    """
    fn(codes())
    number = 1
    while True:
        elapsed = timed(fn, [codes() for _ in range(number)], clock) * number
        if elapsed >= target_s / 4 or number >= most:
            return max(1, min(most, int(target_s * number / max(elapsed, 1e-9))))
        number *= 2


def interleaved(
    calls: dict[str, Call], s: F.Settings, clock: str
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Per-call seconds of each call, measured in alternating rounds so machine load hits all alike."""
    numbers = {
        k: batch_size(fn, lambda c=code: c, CLOCKS[clock], s.target_round_s, 100_000)
        for k, (fn, code) in calls.items()
    }
    samples: dict[str, list[float]] = {k: [] for k in calls}
    started = time.perf_counter()
    for _ in range(s.rounds):
        for k, (fn, code) in calls.items():
            samples[k].append(_batch(fn, code, numbers[k], CLOCKS[clock]))
        if time.perf_counter() - started > s.budget_s:
            break
    return samples, numbers


def paired_ratio(a: list[float], b: list[float]) -> float:
    """Median of per-round ratios: each round times both sides moments apart, under the same load."""
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def _validate(ex: Executor, fig: F.Latency, session: str) -> tuple[float | None, str | None]:
    """Run setup, the snippet once (timed, for calibration) and the check. Returns (seconds, failure)."""
    for cell in fig.setup:
        o = ex.run(cell, session)
        if not o.ok:
            return None, f"setup fails: {o.error}"
    started = time.perf_counter()
    o = ex.run(fig.code, session)
    elapsed = time.perf_counter() - started
    if not o.ok:
        return None, f"fails: {o.error}"
    got = o.out
    if fig.check is not None:
        c = ex.run(fig.check, session)
        got = c.out if c.ok else f"{c.error}"
    if got.strip() != fig.expected:
        return None, f"wrong output: {got.strip()[:100]!r} (expected {fig.expected!r})"
    return elapsed, None


# ---- jobs ---------------------------------------------------------------------------------------


def job_latency(key: str, s: F.Settings, emit: Emitter) -> None:
    ex = make_executor(key, _LATENCY_TIMEOUT_S)
    bare = BarePartner(_LATENCY_TIMEOUT_S)  # in a process of its own: see _partner
    try:
        _warm_up(ex, _WARM_UP_S)
        _warm_up(bare, _WARM_UP_S / 3)
        steps: list[tuple[str, Callable[[], None]]] = [
            (fig.key, functools.partial(_latency_figure, ex, bare, fig, s, emit)) for fig in F.LATENCY(s)
        ]
        steps.append(("namespace", functools.partial(_namespace_figure, ex, bare, s, emit)))
        steps.append(("new_cell", functools.partial(_new_cell_figure, ex, bare, s, emit)))
        steps.append(("new_session", functools.partial(_new_session_figure, ex, bare, s, emit)))
        steps.append(("host_toll", functools.partial(_host_toll_figure, bare, s, emit)))
        steps.append(("caller_depth", functools.partial(_caller_depth_figure, ex, s, emit)))
        for figure, step in steps:
            try:
                step()
            except Exception as exc:  # one figure failing in a peer must not cost the others
                emit("figure", figure=figure, failure=f"raised {type(exc).__name__}: {exc}"[:300])
    finally:
        ex.close()
        bare.close()


def _warm_up(ex: Executor, seconds: float) -> None:
    """Run calls until lazy imports, caches and the collector's first passes over them are behind us."""
    call = ex.caller("warm-up")
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        call("x = 1")
    ex.close_session("warm-up")
    gc.collect()


def _latency_figure(ex: Executor, bare: Executor, fig: F.Latency, s: F.Settings, emit: Emitter) -> None:
    first, failure = _validate(ex, fig, "main")
    bare_first, bare_failure = _validate(bare, fig, "main")
    if bare_failure is not None:  # the snippet itself is wrong: a bug in the benchmark
        raise RuntimeError(f"{fig.key}: bare exec {bare_failure}")
    if failure is not None or first is None or bare_first is None:
        emit("figure", figure=fig.key, failure=failure)
        return
    calls = {"x": (ex.caller("main"), fig.code), "bare": (bare.caller("main"), fig.code)}
    samples, numbers = interleaved(calls, s, ex.clock)
    _emit_paired(emit, fig.key, ex.clock, samples, numbers)


def _namespace_figure(ex: Executor, bare: Executor, s: F.Settings, emit: Emitter) -> None:
    trivial = F.Latency("namespace", "", "x = 1", check="print(x)", expected="1")
    ref_first, ref_failure = _validate(ex, trivial, "ns-0")
    _validate(bare, trivial, "ns-0")
    # One session grows from size to size: one more kernel/worker instead of one per size.
    session = "ns"
    previous = 0
    for size in F.NAMESPACE_SIZES:
        grow = F.namespace_setup(size, start=previous)
        previous = size
        fig = F.Latency("namespace", "", "x = 1", setup=(grow,), check="print(x)", expected="1")
        first, failure = (None, ref_failure) if ref_failure else _validate(ex, fig, session)
        bare_first, _ = _validate(bare, fig, session)
        if failure is not None or first is None or ref_first is None or bare_first is None:
            emit("figure", figure="namespace", size=size, failure=failure)
        else:
            calls = {
                "x": (ex.caller(session), "x = 1"),
                "ref": (ex.caller("ns-0"), "x = 1"),
                "bare": (bare.caller(session), "x = 1"),
            }
            samples, numbers = interleaved(calls, s, ex.clock)
            emit(
                "figure",
                figure="namespace",
                size=size,
                clock=ex.clock,
                value_s=min(samples["x"]),
                empty_s=min(samples["ref"]),
                bare_s=min(samples["bare"]),
                growth=paired_ratio(samples["x"], samples["ref"]),
                ratio=paired_ratio(samples["x"], samples["bare"]),
                samples=samples,
                rounds=len(samples["x"]),
                number=numbers["x"],
            )
    ex.close_session(session)
    ex.close_session("ns-0")


def _emit_paired(
    emit: Emitter, key: str, clock: str, samples: dict[str, list[float]], numbers: dict[str, int]
) -> None:
    """One figure timed against bare exec in alternating rounds: fastest, ratio, median."""
    emit(
        "figure",
        figure=key,
        clock=clock,
        value_s=min(samples["x"]),
        bare_s=min(samples["bare"]),
        ratio=paired_ratio(samples["x"], samples["bare"]),
        median_s=statistics.median(samples["x"]),
        rounds=len(samples["x"]),
        number=numbers["x"],
        samples=samples,
    )


def _new_cell_figure(ex: Executor, bare: Executor, s: F.Settings, emit: Emitter) -> None:
    """Like a latency figure, but every call runs a cell never run before (made before the batch)."""
    session = "cells"
    fig = F.Latency("new_cell", "", F.new_cell_code(1), check="print(y)", expected="2")
    first, failure = _validate(ex, fig, session)
    bare_first, bare_failure = _validate(bare, fig, session)
    if bare_failure is not None:
        raise RuntimeError(f"new_cell: bare exec {bare_failure}")
    if failure is not None or first is None or bare_first is None:
        emit("figure", figure="new_cell", failure=failure)
        return
    clock = CLOCKS[ex.clock]
    callers = {"x": ex.caller(session), "bare": bare.caller(session)}
    serial = itertools.count(2)
    # Fewer calls per batch than the latency figures: each one leaves a new cell in the caches.
    numbers = {
        k: batch_size(fn, lambda: F.new_cell_code(next(serial)), clock, s.target_round_s, 2_000)
        for k, fn in callers.items()
    }
    samples: dict[str, list[float]] = {"x": [], "bare": []}
    started = time.perf_counter()
    for _ in range(s.rounds):
        for k, fn in callers.items():
            samples[k].append(timed(fn, [F.new_cell_code(next(serial)) for _ in range(numbers[k])], clock))
        if time.perf_counter() - started > s.budget_s:
            break
    ex.close_session(session)
    bare.close_session(session)
    _emit_paired(emit, "new_cell", ex.clock, samples, numbers)


def _host_toll_figure(bare: Executor, s: F.Settings, emit: Emitter) -> None:
    """Bare exec of the host's own `x = 1` in this process, after the executor's runs, against the
    same in the partner's fresh process: what running the executor here costs the code beside it
    (a process-wide audit hook judges the host's events too)."""
    here = Bare(_LATENCY_TIMEOUT_S)
    calls = {"x": (here.caller("toll"), "x = 1"), "bare": (bare.caller("toll"), "x = 1")}
    samples, numbers = interleaved(calls, s, "cpu")
    _emit_paired(emit, "host_toll", "cpu", samples, numbers)
    bare.close_session("toll")


def _nested(depth: int, fn: Callable[[str], object], code: str) -> object:
    """`fn(code)` called from `depth` (at least 1) more frames of plain Python functions."""
    return fn(code) if depth <= 1 else _nested(depth - 1, fn, code)


def _caller_depth_figure(ex: Executor, s: F.Settings, emit: Emitter) -> None:
    """`x = 1` called from F.CALLER_DEPTH frames deeper against the direct call, in alternating
    rounds: what each frame between a caller and the executor costs a call (a framework's call stack;
    our restricted policies' audit hook looks for sandboxed code among the frames above a run)."""
    if ex.key == "jupyter":
        emit(
            "figure", figure="caller_depth", failure="not measured: a kernel's milliseconds of jitter hide it"
        )
        return
    direct = ex.caller("depth")
    calls = {"x": (functools.partial(_nested, F.CALLER_DEPTH, direct), "x = 1"), "ref": (direct, "x = 1")}
    samples, numbers = interleaved(calls, s, ex.clock)
    ex.close_session("depth")
    emit(
        "figure",
        figure="caller_depth",
        clock=ex.clock,
        value_s=min(samples["x"]),
        direct_s=min(samples["ref"]),
        # Paired as the ratios are: the difference of two batches timed moments apart, per frame.
        per_frame_s=statistics.median(x - r for x, r in zip(samples["x"], samples["ref"], strict=True))
        / F.CALLER_DEPTH,
        samples=samples,
        rounds=len(samples["x"]),
        number=numbers["x"],
    )


def _new_session_figure(ex: Executor, bare: Executor, s: F.Settings, emit: Emitter) -> None:
    count = s.new_sessions if ex.key != "jupyter" else max(1, s.idle_kernels + 1)
    times: list[float] = []
    bare_times: list[float] = []
    failure = None
    clock = CLOCKS[ex.clock]
    for i in range(count):
        session = f"new-{i}"
        started = clock()
        ex.caller(session)("x = 1")
        times.append(clock() - started)
        bare_times.append(timed(bare.caller(session), ["x = 1"], clock))
        if i == 0:
            check = ex.run("print(x)", session)
            if not (check.ok and check.out.strip() == "1"):
                failure = f"fails: {check.error or check.out!r}"
                break
        ex.close_session(session)
        bare.close_session(session)
    if failure is not None:
        emit("figure", figure="new_session", failure=failure)
        return
    emit(
        "figure",
        figure="new_session",
        clock=ex.clock,
        value_s=statistics.median(times),
        bare_s=statistics.median(bare_times),
        ratio=paired_ratio(times, bare_times),
        min_s=min(times),
        rounds=len(times),
        samples={"x": times, "bare": bare_times},
    )


def job_memory(key: str, s: F.Settings, emit: Emitter) -> None:
    ex = make_executor(key, 60.0)
    if key.startswith("subprocess-"):
        count = s.idle_workers
    elif key == "jupyter":
        count = s.idle_kernels
    else:
        count = s.idle_sessions
    try:
        # Warm up first: imports, caches, a worker template are per process, not per session.
        warm = ex.run("x = 1", "warm")
        if not warm.ok:
            emit("figure", figure="memory", failure=f"fails: {warm.error}")
            return
        gc.collect()
        me = os.getpid()
        rss0 = rss_kb() or 0
        kids0 = sum(uss_kb(p) for p in descendants(me))
        for i in range(count):
            o = ex.run("x = 1", f"idle-{i}")
            if not o.ok:
                emit("figure", figure="memory", failure=f"session {i} fails: {o.error}")
                return
        gc.collect()
        rss1 = rss_kb() or 0
        kids1 = sum(uss_kb(p) for p in descendants(me))
        total_kb: float = (rss1 - rss0) + (kids1 - kids0)
        bare_kb = _bare_session_kb()
        if key == "bare":  # its own RSS delta is below resolution: report the exact count
            total_kb = bare_kb * count
        emit(
            "figure",
            figure="memory",
            sessions=count,
            per_session_kb=total_kb / count,
            per_1000_mb=total_kb / count * 1000 / 1024,
            host_kb=rss1 - rss0,
            children_kb=kids1 - kids0,
            extrapolated=count != 1000,
            bare_kb=bare_kb,
            ratio=(total_kb / count) / bare_kb if bare_kb > 0 else None,
        )
    finally:
        ex.close()


def _bare_session_kb() -> float:
    """One bare-exec session (a dict that ran `x = 1`): the reference for the memory ratios.

    Counted with tracemalloc, not RSS: a few hundred bytes per session are below what RSS resolves.
    """
    import tracemalloc

    bare = Bare(60.0)
    count = 1000
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(count):
        bare.caller(f"bare-{i}")("x = 1")
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return used / count / 1024


def job_concurrency(key: str, s: F.Settings, emit: Emitter) -> None:
    ex = make_executor(key, 60.0)
    if ex.no_concurrency:
        emit("figure", figure="concurrency", skipped=ex.no_concurrency)
        return
    n = F.CONCURRENCY_SESSIONS
    sessions = [f"c{i}" for i in range(n)]
    try:
        for session in sessions:
            o = ex.run("w = 0", session)
            if not o.ok:
                emit("figure", figure="concurrency", failure=f"creating sessions fails: {o.error}")
                return
        barrier = threading.Barrier(n)

        def task(i: int) -> Outcome:
            barrier.wait(timeout=60)
            return ex.run(F.concurrency_code(i), sessions[i])

        started = time.perf_counter()
        with ThreadPoolExecutor(n) as pool:
            threaded = list(pool.map(task, range(n)))
        threads = {**_crosstalk(threaded), "wall_s": time.perf_counter() - started}

        async def gathered() -> list[Outcome]:
            asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(n))
            return list(
                await asyncio.gather(*(ex.arun(F.concurrency_code(i), sessions[i]) for i in range(n)))
            )

        started = time.perf_counter()
        outs = asyncio.run(gathered())
        asyncio_ = {**_crosstalk(outs), "wall_s": time.perf_counter() - started}
        emit("figure", figure="concurrency", sessions=n, threads=threads, asyncio=asyncio_)
    finally:
        ex.close()


def _crosstalk(outs: list[Outcome]) -> dict[str, Any]:
    mixed = [i for i, o in enumerate(outs) if o.ok and o.out.strip() != F.concurrency_expected(i)]
    errors = [i for i, o in enumerate(outs) if not o.ok]
    report: dict[str, Any] = {"mixed": len(mixed), "errors": len(errors)}
    if mixed:
        i = mixed[0]
        lines = outs[i].out.strip().splitlines()
        foreign = [line for line in lines if not line.startswith(f"S{i} ")]
        own = F.concurrency_expected(i).splitlines()
        missing = len(set(own) - set(lines))
        report["example"] = (
            f"S{i} got {len(foreign)} lines of other sessions and lost {missing} of its {len(own)}"
        )
        if foreign:
            report["example"] += f" (e.g. {foreign[0]!r})"
    if errors:
        report["error_example"] = (outs[errors[0]].error or "")[:200]
    return report


def _cap_address_space(headroom_mb: int) -> dict[str, int]:
    """Cap this process and its children (kernels, workers) at their current size + headroom.

    Nothing else stops a memory bomb in a process without limits; this keeps the probe from taking
    the machine down. Existing lower limits (a worker's memory_mb) are kept.
    """
    caps = {}
    for pid in [os.getpid(), *descendants(os.getpid())]:
        size_kb = vm_size_kb(pid)
        if size_kb is None:
            continue
        cap = size_kb * 1024 + headroom_mb * 1024 * 1024
        try:
            soft, hard = resource.prlimit(pid, resource.RLIMIT_AS)
            if soft != resource.RLIM_INFINITY and soft <= cap:
                continue
            resource.prlimit(pid, resource.RLIMIT_AS, (cap, hard if hard != resource.RLIM_INFINITY else cap))
            caps[str(pid)] = cap // (1024 * 1024)
        except (OSError, ValueError):
            continue
    return caps


def job_probe(key: str, probe_key: str, s: F.Settings, emit: Emitter) -> None:
    probe = next(p for p in F.PROBES if p.key == probe_key)
    ex = make_executor(key, s.probe_timeout_s, memory_mb=512)
    o = ex.run("keep = 42", "probe")
    if not o.ok:
        emit("failed", error=f"setup fails: {o.error}")
        return
    caps = _cap_address_space(s.probe_headroom_mb)
    emit("ready", caps_mb=caps)
    if isinstance(ex, Bare):
        ex.capture = False  # bare exec has no capture: its output goes where the process's goes
    started = time.perf_counter()
    o = ex.run(probe.code, "probe")
    elapsed = time.perf_counter() - started
    if isinstance(ex, Bare):
        ex.capture = True
    emit(
        "returned",
        elapsed_s=elapsed,
        status=o.status if not o.ok else "ok",
        error=(o.error or "")[:300],
        out_chars=len(o.out),
        peak_rss_mb=tree_peak_mb(),
    )
    check = ex.run("print(keep)", "probe")
    survived = check.ok and check.out.strip() == "42"
    detail = None if survived else (check.error or f"printed {check.out.strip()[:80]!r}")
    emit("survived", survived=survived, detail=detail, peak_rss_mb=tree_peak_mb())
    closer = threading.Thread(target=ex.close, daemon=True)
    closer.start()
    closer.join(10)


def _ignoring_code(fn: Callable[[], object]) -> Callable[[str], object]:
    return lambda code: fn()


def job_adapter(s: F.Settings, emit: Emitter) -> None:
    from _adapter import make_calls

    engine, fns, failure = make_calls(_LATENCY_TIMEOUT_S)
    try:
        if failure is not None:
            emit("figure", figure="adapter", failure=failure)
            return
        calls: dict[str, Call] = {k: (_ignoring_code(fn), "") for k, fn in fns.items()}
        samples, _ = interleaved(calls, s, "cpu")
        overheads = [t - c for t, c in zip(samples["tool"], samples["core"], strict=True)]
        # Like for like: our tool against a plain BaseTool that also calls engine.run, timed in the
        # same rounds (LangChain's code and the engine's, run one after the other, cost more than
        # each timed alone: that share is any tool's, not ours).
        added = [t - p for t, p in zip(samples["tool"], samples["plain"], strict=True)]
        emit(
            "figure",
            figure="adapter",
            policy=engine.policy.name,
            core_s=min(samples["core"]),
            tool_s=min(samples["tool"]),
            noop_s=min(samples["noop"]),
            plain_s=min(samples["plain"]),
            overhead_s=min(samples["tool"]) - min(samples["core"]),
            separate_s=min(samples["tool"]) - min(samples["core"]) - min(samples["noop"]),
            added_s=min(samples["tool"]) - min(samples["plain"]),
            median_overhead_s=statistics.median(overheads),
            median_added_s=statistics.median(added),
            samples=samples,
            rounds=len(overheads),
        )
    finally:
        engine.close()


def main(argv: list[str]) -> int:
    job = json.loads(argv[0])
    emit = Emitter(job["out"])
    s = F.settings(job["quick"])
    kind = job["kind"]
    try:
        if kind == "discover":
            emit("discovered", **discover())
        elif kind == "latency":
            job_latency(job["executor"], s, emit)
        elif kind == "memory":
            job_memory(job["executor"], s, emit)
        elif kind == "concurrency":
            job_concurrency(job["executor"], s, emit)
        elif kind == "probe":
            job_probe(job["executor"], job["probe"], s, emit)
        elif kind == "adapter":
            job_adapter(s, emit)
        else:
            raise ValueError(f"unknown job kind {kind!r}")
    except BaseException as exc:
        emit("failed", error=f"{type(exc).__name__}: {exc}"[:500], traceback=traceback.format_exc()[-3000:])
    emit("done")
    sys.stdout.flush()
    # Never wait for threads a hung executor left behind; the orchestrator kills leftovers anyway.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
