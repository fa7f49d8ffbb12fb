"""Run one compiled cell in one session's namespace, and describe what happened.

The runner is the part every boundary shares: the in-process boundary calls it on the caller's
thread, a subprocess worker calls it inside the worker. Its security model is the policy's: with
the trusted policy it isolates namespaces and bounds time and output, nothing more.
"""

from __future__ import annotations

import builtins
import difflib
import os
import time
import traceback as _traceback
from collections.abc import Callable
from types import CodeType, TracebackType
from typing import Any

from ._armed import call_armed
from ._capture import BoundedText, Capture, OutputCapture, TextSink, exit_execution
from ._compile import CELL_PREFIX, VALUE_NAME, CompiledCell, compile_cell
from ._introspect import describe_fields, type_name, value_repr, variable_name
from ._limits import Limits
from ._models import (
    Attachment,
    AuditFinding,
    ErrorInfo,
    ExecutionResult,
    Usage,
    VariableChanges,
    VariableInfo,
)
from ._rich import FigureRun
from ._session import Session
from ._text import clean
from ._watchdog import ExecutionCancelled, ExecutionTimeout, watchdog
from .policy._runtime import PolicyRuntime

__all__ = ["OUT_OF_MEMORY", "run_cell"]

_MISSING = object()
_SOURCES_KEPT = 256
_MAX_TB_FRAMES = 30
_LATE_STOP_NOTE_S = 0.5
OUT_OF_MEMORY = "out of memory"

_perf_counter = time.perf_counter
_thread_time_ns = time.thread_time_ns  # the run's CPU time: that of the thread that runs the cell
_monotonic = time.monotonic
# Python 3.15's traceback imports _colorize lazily, on the first exception it formats, and importing it
# builds dataclasses from generated code, which a restricted execution's audit hook refuses: format one
# now, in host code before any execution, so a refusal never reads "<unprintable message>".
"".join(_traceback.TracebackException(Exception, Exception(), None).format())


def run_cell(
    session: Session,
    cell: CompiledCell | str,
    runtime: PolicyRuntime,
    limits: Limits,
    boundary: str,
    capture_factory: Callable[[int], OutputCapture] = Capture,
    measure_cpu: bool = True,
    armed: bool = True,
) -> ExecutionResult:
    """Run `cell` in `session` (the caller holds `session.lock`).

    `cell` is a compiled cell, or the source to compile (`compile_cell`, its cache first): compiled
    inside this run's output routing, so what the compiler writes (warnings) needs no routing of its
    own, and counted in the run's duration and CPU time.

    `capture_factory(limit)` makes the execution's output capture; a subprocess worker passes one
    that writes through to its file descriptors. `measure_cpu=False`: leave `usage.cpu_ms` None for
    the caller to set (a worker counts its whole process; reading this thread's CPU clock costs two
    system calls a run). `armed=False`: no deadline and no watchdog thread, for a process that must
    stay single-threaded (a spare warming up its first run before it is forked into a worker's
    sandbox); only for the host's own code.
    """
    started = _perf_counter()
    cpu_started = _thread_time_ns() if measure_cpu else None
    count = session.execution_count = session.execution_count + 1
    session.last_used = _monotonic()
    restarted = session.restarted
    session.restarted = False
    if not isinstance(cell, str) and (cell.syntax_error is not None or cell.findings):
        return _refused(session, cell, runtime, boundary, restarted, started, cpu_started)

    capture = capture_factory(limits.max_output_chars)
    out: TextSink = capture.stdout
    err: TextSink = capture.stderr
    # The execution's context: its figures, and (standing in for a capture) its output routing.
    figures = FigureRun(session.figures, limits, out, err)
    routed = None
    host_cwd: str | None = None
    host_builtins: dict[str, Any] | None = None
    try:
        # Host code, before the guards: may make pyplot headless before the cell imports it.
        routed = figures.enter()
        if isinstance(cell, str):
            cell = compile_cell(cell, runtime)  # routed here: warnings are caught by a redirect
            if cell.syntax_error is not None or cell.findings:
                return _refused(session, cell, runtime, boundary, restarted, started, cpu_started)
        sources = session.sources  # source lines for tracebacks, the most recent last
        sources.pop(cell.filename, None)
        sources[cell.filename] = (count, cell.lines)
        while len(sources) > _SOURCES_KEPT:
            del sources[next(iter(sources))]
        ns = session.namespace
        if cell.global_names:
            session.global_names = session.global_names | cell.global_names
        if cell.dynamic and (cell.body is not None and _defines_functions(cell.body)):
            session.dynamic = True
        full_diff = cell.dynamic or session.dynamic
        if full_diff:
            before: dict[str, Any] = dict(ns)
        else:
            watched = cell.names | session.global_names if session.global_names else cell.names
            before = {name: ns.get(name, _MISSING) for name in watched}
        # Once a session imported a module that can change process-wide state, check that state
        # after each of its runs (functions defined earlier may do it later); other sessions pay nothing.
        if cell.touches_host:
            session.touches_host = True
        if session.touches_host:
            host_cwd = os.getcwd()
            host_builtins = dict(builtins.__dict__)
        if cell.warnings:  # the compiler's, shown before the cell's own output
            err.write(cell.warnings)
        if armed and not watchdog.started:
            watchdog.start()  # outside the sandbox: starting a thread is refused inside it
        outcome: _Outcome | None
        stopped: BaseException | None
        token = runtime.enter(session.builtins)
        try:  # the runtime is left however this ends (a KeyboardInterrupt in the host's code here)
            # `stopped` is the deadline's ExecutionTimeout, if anything: _guarded turns the cell's own
            # exceptions into data.
            outcome, stopped = (call_armed if armed else _call_unarmed)(
                limits.timeout_s,
                session,
                _guarded,
                cell,
                ns,
                session,
                limits,
                before,
                full_diff,
                host_builtins,
                figures,
            )
            figures.close()  # what the cell left open, also after a timeout
        finally:
            runtime.exit(token)
    finally:
        # First, with no call before it: a Ctrl-C that cuts what follows short (or cut the routing's
        # start short, before `routed` was set) still leaves output routed here nowhere but to the
        # host's streams, and the run is dropped from the routing when the next one starts or ends.
        figures.finished = True
        if routed is not None:
            exit_execution(routed)
    if host_builtins is not None:
        _restore_builtins(host_builtins)  # again: a timeout may have cut the first restore short
    if host_cwd is not None and os.getcwd() != host_cwd:
        os.chdir(host_cwd)  # trusted code may chdir; the host's cwd is not the session's to change

    # Rounded to the microsecond, as round(ms, 3) would, without its decimal conversion.
    duration = round((_perf_counter() - started) * 1e6) / 1000
    stdout, stdout_cut = _text(out)
    stderr, stderr_cut = _text(err)
    # Every string from user code is cleaned where it is made; the model checks the rest. Only the
    # optional fields that say something are given.
    optional: dict[str, Any] = {}
    if stdout_cut:
        optional["stdout_truncated"] = True
    if stderr_cut:
        optional["stderr_truncated"] = True
    notes: list[str] = []
    if figures.attachments or figures.notes:
        optional["attachments"] = [_clean_attachment(a) for a in figures.attachments]
        notes = [clean(note) for note in figures.notes]  # figure titles and messages are the code's
    usage = Usage(cpu_ms=None if cpu_started is None else _cpu_ms(cpu_started))
    status = "ok"
    if outcome is None:
        if isinstance(stopped, ExecutionTimeout):  # ExecutionCancelled is one
            cancelled = isinstance(stopped, ExecutionCancelled)
            status = "cancelled" if cancelled else "timeout"
            optional["error"] = _timeout_error(stopped, session, cell, limits, duration)
            late = duration / 1000 - limits.timeout_s
            if not cancelled and late > _LATE_STOP_NOTE_S:
                notes.append(
                    f"The code was inside a C-level call when the time ran out and could only be stopped "
                    f"{late:.1f} s later. The in-process boundary cannot interrupt C code; "
                    f"boundary='subprocess' kills it on time."
                )
        else:  # a failure of the engine itself while describing the run; report it, keep the host alive
            status = "error"
            optional["error"] = ErrorInfo(
                type="InternalError",
                message=clean(f"{type(stopped).__name__} while describing the result: {stopped}"[:500]),
                hint="The code itself ran; its variables are kept. Please report this as a bug.",
            )
    else:
        shown, changes, failure = outcome
        if shown is not None:
            optional["value"], optional["value_truncated"], optional["value_type"] = shown
        if changes is not None:
            optional["changes"] = changes
        if failure is not None:
            optional["error"] = failure
            if failure.type == "SystemExit" and failure.message in ("0", "None", ""):
                notes.append("SystemExit does not end the session; its variables are kept.")
            elif failure.refused_by in ("guard", "audit_hook"):
                # The policy refused while the code ran: the same status and a finding, as when the
                # audit refuses before it runs (what ran before the refusal is kept and shown).
                status = "blocked"
                optional["findings"] = [
                    AuditFinding(
                        rule="runtime-guard" if failure.refused_by == "guard" else "audit-hook",
                        message=failure.message,
                        line=failure.line,
                        column=failure.column,
                        source_line=failure.source_line,
                    )
                ]
            else:
                status = "error"
    return ExecutionResult(
        status=status,
        session=session.name,
        execution_count=count,
        policy=runtime.name,
        boundary=boundary,
        session_restarted=restarted,
        stdout=stdout,
        stderr=stderr,
        duration_ms=duration,
        notes=notes,
        usage=usage,
        **optional,
    )


def _text(sink: TextSink) -> tuple[str, bool]:
    """A stream's text and whether it was cut (an empty BoundedText, the common case, directly)."""
    if isinstance(sink, BoundedText) and not sink.total:
        return "", False
    return sink.getvalue(), sink.truncated


def _refused(
    session: Session,
    cell: CompiledCell,
    runtime: PolicyRuntime,
    boundary: str,
    restarted: bool,
    started: float,
    cpu_started: int | None,
) -> ExecutionResult:
    """The result of a cell that does not run: a syntax error, or refused by the policy's audit."""
    fields: dict[str, Any] = {
        "status": "error",
        "session": session.name,
        "execution_count": session.execution_count,
        "policy": runtime.name,
        "boundary": boundary,
        "session_restarted": restarted,
    }
    if cell.syntax_error is not None:
        fields["error"] = cell.syntax_error
    else:
        first = cell.findings[0]
        fields["status"] = "blocked"
        fields["error"] = ErrorInfo(
            type="PolicyViolation",
            message=first.message,
            line=first.line,
            column=first.column,
            source_line=first.source_line,
            hint="Rewrite the code using only what the message above says is allowed.",
        )
        fields["findings"] = list(cell.findings)
    fields["duration_ms"] = round((_perf_counter() - started) * 1e6) / 1000
    fields["usage"] = Usage(cpu_ms=None if cpu_started is None else _cpu_ms(cpu_started))
    return ExecutionResult(**fields)


# What the guarded region found: (the trailing value's repr, whether it was cut, its type name),
# the variable changes, the cell's error.
_Outcome = tuple["tuple[str, bool, str] | None", "VariableChanges | None", "ErrorInfo | None"]


def _call_unarmed(
    timeout_s: float, owner: Session | None, fn: Any, *args: Any
) -> tuple[Any, BaseException | None]:
    """`call_armed`'s contract without its deadline."""
    del timeout_s, owner
    try:
        return fn(*args), None
    except BaseException as exc:
        return None, exc


def _guarded(
    cell: CompiledCell,
    ns: dict[str, Any],
    session: Session,
    limits: Limits,
    before: dict[str, Any],
    full_diff: bool,
    host_builtins: dict[str, Any] | None,
    figures: FigureRun,
) -> _Outcome:
    """Everything that may run user code: the cell, its value's repr, reprs of changed variables,
    the drawing of its figures."""
    value = None
    shown = None
    error = None
    try:
        try:
            if cell.body is not None:
                exec(cell.body, ns)
        finally:
            if cell.has_value:  # also after an error or a timeout: the name must not stay behind
                value = ns.pop(VALUE_NAME, None)
            if host_builtins is not None:
                _restore_builtins(host_builtins)
        if value is not None:
            text, truncated = value_repr(value, limits.max_repr_chars)
            shown = (text, truncated, type_name(value))
    except ExecutionTimeout:
        raise
    except BaseException as exc:  # SystemExit, KeyboardInterrupt, ... are the cell's, not the host's
        error = _error_info(exc, session, cell, limits.max_output_chars)
    changes = _changes(ns, before, full_diff, limits.max_repr_chars)
    figures.collect(value)
    return shown, changes, error


def _clean_attachment(attachment: Attachment) -> Attachment:
    description = clean(attachment.description)
    if description is attachment.description:
        return attachment
    return attachment.model_copy(update={"description": description})


def _restore_builtins(saved: dict[str, Any]) -> None:
    # Trusted code may change the host's builtins module, which every session and the host share.
    if builtins.__dict__ != saved:
        builtins.__dict__.clear()
        builtins.__dict__.update(saved)


def _changes(
    ns: dict[str, Any], before: dict[str, Any], full_diff: bool, limit: int
) -> VariableChanges | None:
    """What the cell bound, rebound and deleted (None: nothing)."""
    if not full_diff:  # the common case: every watched name still holds what it held
        get = ns.get
        for name, old in before.items():
            if get(name, _MISSING) is not old:
                break
        else:
            return None
    created: list[VariableInfo] = []
    rebound: list[VariableInfo] = []
    deleted: list[str] = []
    names = sorted(k for k in set(before) | set(ns) if isinstance(k, str)) if full_diff else sorted(before)
    for name in names:
        if str.startswith(name, "__"):
            continue
        old = before.get(name, _MISSING)
        new = ns.get(name, _MISSING)
        if old is new:
            continue
        if new is _MISSING:
            deleted.append(variable_name(name, limit))
        elif old is _MISSING:
            created.append(_variable(name, new, limit))
        else:
            rebound.append(_variable(name, new, limit))
    if not (created or rebound or deleted):
        return None
    return VariableChanges(created=created, rebound=rebound, deleted=deleted)


def _variable(name: str, value: Any, limit: int) -> VariableInfo:
    fields = describe_fields(name, value, limit)
    # Sizes read by duck typing may be int subclasses (a bool, an IntEnum): the model holds exact
    # ints, made here by `int.__int__`, which runs no method of the subclass.
    shape = fields.get("shape")
    if shape is not None:
        fields["shape"] = [int.__int__(d) for d in shape]
    size = fields.get("size")
    if size is not None:
        fields["size"] = int.__int__(size)
    return VariableInfo(**fields)


def _defines_functions(code: CodeType) -> bool:
    return any(isinstance(c, CodeType) for c in code.co_consts)


def _cpu_ms(started_ns: int) -> float:
    return (_thread_time_ns() - started_ns) // 1000 / 1000


# ---- errors ---------------------------------------------------------------------------------------


class _Frame:
    __slots__ = ("column", "end_column", "filename", "label", "line", "name", "source")

    def __init__(self, tb: TracebackType, session: Session, cell: CompiledCell) -> None:
        code = tb.tb_frame.f_code
        self.filename = code.co_filename
        self.name = code.co_name
        self.line = tb.tb_lineno
        self.column: int | None = None
        self.end_column: int | None = None
        positions = list(code.co_positions()) if hasattr(code, "co_positions") else []
        index = tb.tb_lasti // 2
        if 0 <= index < len(positions):
            lineno, end_lineno, col, end_col = positions[index]
            if lineno == self.line and end_lineno == self.line and col is not None and end_col is not None:
                self.column, self.end_column = col, end_col
        if self.filename == cell.filename:
            self.label, lines = "<input>", cell.lines
        else:
            number, lines = session.sources.get(self.filename, (0, ()))
            self.label = f"<cell {number}>" if number else "<earlier cell>"
        self.source = lines[self.line - 1] if 0 < self.line <= len(lines) else None


def _user_frames(tb: TracebackType | None, session: Session, cell: CompiledCell) -> list[_Frame]:
    frames = []
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.startswith(CELL_PREFIX):
            frames.append(_Frame(tb, session, cell))
        tb = tb.tb_next
    return frames


def _format_frames(frames: list[_Frame]) -> list[str]:
    out: list[str] = []
    shown = frames
    skipped = 0
    if len(frames) > _MAX_TB_FRAMES:
        half = _MAX_TB_FRAMES // 2
        shown = frames[:half] + frames[-half:]
        skipped = len(frames) - len(shown)
    for i, frame in enumerate(shown):
        if skipped and i == _MAX_TB_FRAMES // 2:
            out.append(f"  [... {skipped} more frames ...]")
        out.append(f'  File "{frame.label}", line {frame.line}, in {frame.name}')
        if frame.source is not None:
            stripped = frame.source.lstrip()
            out.append(f"    {stripped}")
            if frame.column is not None and frame.end_column is not None:
                indent = len(frame.source) - len(stripped)
                start = max(0, frame.column - indent)
                width = max(1, min(frame.end_column, len(frame.source)) - frame.column)
                if width < len(stripped):
                    out.append("    " + " " * start + "^" * width)
    return out


def _exception_only(exc: BaseException, ns: dict[str, Any]) -> str:
    try:
        # With the traceback attached, 3.12+ adds "Did you mean ...?" itself; 3.10-3.11 do it only in
        # the interpreter's excepthook, so add it here when missing.
        te = _traceback.TracebackException(type(exc), exc, exc.__traceback__, lookup_lines=False)
        text = "".join(te.format_exception_only()).rstrip("\n")
        # An exception whose str() fails reads the same on every Python (3.10 words it differently).
        text = text.replace(f"<unprintable {type(exc).__name__} object>", "<exception str() failed>")
        if "Did you mean" not in text:
            suggestion = _suggest(exc, ns)
            if suggestion:
                head, sep, rest = text.partition("\n")
                text = f"{head}. Did you mean: '{suggestion}'?{sep}{rest}"
        return clean(text)
    except ExecutionTimeout:
        raise
    except BaseException:  # a user exception whose __str__ fails
        return f"{type(exc).__name__}: <unprintable message>"


def _suggest(exc: BaseException, ns: dict[str, Any]) -> str | None:
    name = getattr(exc, "name", None)
    if not isinstance(name, str):
        return None
    if isinstance(exc, NameError):
        table = ns.get("__builtins__")
        candidates = list(ns) + (list(table) if isinstance(table, dict) else [])
    elif isinstance(exc, AttributeError) and getattr(exc, "obj", None) is not None:
        candidates = [n for n in dir(exc.obj) if not n.startswith("_")]
    else:
        return None
    matches = difflib.get_close_matches(name, candidates[:2000], n=1, cutoff=0.75)
    return matches[0] if matches else None


def _error_info(exc: BaseException, session: Session, cell: CompiledCell, limit: int) -> ErrorInfo:
    from ._events import refusal_layer  # imported here, on the error path only

    frames = _user_frames(exc.__traceback__, session, cell)
    exception_only = _exception_only(exc, session.namespace)
    if len(exception_only) > limit:
        exception_only = f"{exception_only[:limit]}... [{len(exception_only) - limit:,} more characters]"
    type_label = type(exc).__name__
    prefix = f"{type_label}: "
    at = exception_only.rfind("\n" + prefix)
    if exception_only.startswith(prefix):
        message = exception_only[len(prefix) :]
    elif at >= 0:  # a SyntaxError raised at run time: its location lines come first
        message = exception_only[at + 1 + len(prefix) :]
    else:  # no message at all: "KeyboardInterrupt"
        message = "" if exception_only == type_label else exception_only
    if isinstance(exc, MemoryError) and not message:
        message = OUT_OF_MEMORY  # Python says nothing; a boundary with a cap names it (the worker)
    here = [f for f in frames if f.filename == cell.filename]
    anchor = here[-1] if here else (frames[-1] if frames else None)
    lines = ["Traceback (most recent call last):", *_format_frames(frames), exception_only]
    return ErrorInfo(
        type=type_label,
        refused_by=refusal_layer(exc),  # for the audit trail: which protection refused, if one did
        message=message,
        line=anchor.line if anchor else None,
        column=anchor.column if anchor else None,
        end_column=anchor.end_column if anchor else None,
        source_line=anchor.source if anchor else None,
        traceback=clean("\n".join(lines)),  # frame names are the code's (`co_name` can be any string)
        hint=_hint(exc, exception_only),
    )


def _hint(exc: BaseException, text: str) -> str | None:
    if isinstance(exc, NameError):
        if "Did you mean" in text:
            return None  # a typo of a name that exists: the suggestion is the whole answer
        return "Variables persist between calls only if an earlier call defined them; define it first."
    if isinstance(exc, ModuleNotFoundError):
        return "That module is not installed here; use another approach or the standard library."
    if isinstance(exc, RecursionError):
        return "Recursion went too deep; use a loop or memoization instead."
    if isinstance(exc, KeyboardInterrupt):
        return "The run was interrupted; the session and its variables are kept."
    if isinstance(exc, MemoryError):
        return "The code ran out of memory; work on less data at a time."
    return None


def _timeout_error(
    exc: BaseException, session: Session, cell: CompiledCell, limits: Limits, duration_ms: float
) -> ErrorInfo:
    frames = _user_frames(exc.__traceback__, session, cell)
    anchor = frames[-1] if frames else None
    if isinstance(exc, ExecutionCancelled):
        kind, message = "Cancelled", f"execution was interrupted after {duration_ms / 1000:.1f} s"
        hint = "Variables assigned before the stop are kept."
    else:
        kind = "Timeout"
        message = f"execution stopped after {duration_ms / 1000:.1f} s (limit {limits.timeout_s:g} s)"
        hint = (
            "Variables assigned before the stop are kept. Make the code faster, work on less data, "
            "or split the work into several calls."
        )
    return ErrorInfo(
        type=kind,
        message=message,
        line=anchor.line if anchor else None,
        source_line=anchor.source if anchor else None,
        traceback=clean("\n".join(["Stopped at (most recent call last):", *_format_frames(frames)]))
        if frames
        else "",
        hint=hint,
    )
