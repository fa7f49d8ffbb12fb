"""ReplEngine: the public face. Sessions, policy and limits in; ExecutionResult out."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import sys
import threading
import warnings
from collections.abc import AsyncGenerator, Callable, Generator, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ._boundary import BaseBoundary, ExecutionRequest
from ._compile import parse
from ._exceptions import EngineClosed, FileNotFound, FileQuotaExceeded, FilesUnavailable, SessionNotFound
from ._files import PARTIAL_SCAN_NOTE, FileTracker, WorkspaceDir
from ._host_tools import Tool, ToolRun, check_tools
from ._limits import Limits
from ._models import (
    AuditReport,
    ErrorInfo,
    ExecutionResult,
    FileInfo,
    SessionRestore,
    VariableInfo,
)
from ._observer import EventSink, Observer
from ._stream import POLL_S, WORKERS, Channel, StreamEvent, final_events
from .policy import Policy, runtime_for

if TYPE_CHECKING:
    from ._history import HistoryEntry
    from ._usage import SessionUsage
    from .snapshot import SessionSnapshot
    from .snapshot._durable import Durability
    from .stores import SessionStore

__all__ = ["ReplEngine"]

_MAX_SESSION_ID = 256
DEFAULT_POLICY = "standard"


class ReplEngine:
    """Runs agent-written Python in named sessions, one namespace per conversation.

    Security model: that of the boundary and policy it is given. The default boundary, "auto", is
    the sandboxed subprocess boundary on Linux (a worker process per session behind namespaces,
    seccomp, Landlock and rlimits, as far as the machine offers them: `describe()` says which), and
    in-process elsewhere, with a warning: there the policy guards the host against accidents and
    casual misuse, not against a determined attacker. See docs/security.md. Host `tools` run with the
    host's rights, outside the policy: offer only what the model may use (docs/code_mode.md).

        with ReplEngine(policy="trusted") as engine:
            engine.run("x = 41")
            engine.run("x + 1").value   # '42'
    """

    def __init__(
        self,
        policy: str | Policy = DEFAULT_POLICY,
        boundary: str | BaseBoundary = "auto",
        limits: Limits | None = None,
        *,
        store: SessionStore | None = None,
        snapshot_key: bytes | str | None = None,
        hibernate_after_s: float | None = None,
        save_every_s: float | None = 30.0,
        on_event: EventSink | None = None,
        refusal_log: str | os.PathLike[str] | None = None,
        tracing: bool | Any | None = None,
        audit_log: str | os.PathLike[str] | None = None,
        tools: Mapping[str, Callable[..., Any]] | None = None,
        **boundary_options: Any,
    ) -> None:
        """`boundary`: "auto" (the default: "subprocess" on Linux, else "inprocess" with a warning),
        "inprocess", "subprocess", "docker", "ray" or a BaseBoundary. With "auto" and no `store`,
        sandboxed sessions hibernate to a private temporary store when their workers run out.
        `tools`: host functions session code may call by name, on every session (see `set_tools`)."""
        checked_tools = check_tools(tools)  # before anything is started: nothing to clean up
        own_store = False
        if boundary == "auto":
            boundary = _auto_boundary()
            own_store = boundary == "subprocess" and store is None and hibernate_after_s is None
        if audit_log is not None:
            # The log's old name, kept for a release: "audit" also names the static check and the hook.
            if refusal_log is not None:
                raise TypeError("give refusal_log, not audit_log too (its deprecated name)")
            warnings.warn(
                "ReplEngine(audit_log=...) is deprecated: use refusal_log=...",
                DeprecationWarning,
                stacklevel=2,
            )
            refusal_log = audit_log
        if isinstance(boundary, BaseBoundary):
            if boundary_options:
                raise TypeError("boundary options apply only when the boundary is given by name")
            self._boundary = boundary
        else:
            resolved = Policy.preset(policy) if isinstance(policy, str) else policy
            if not isinstance(resolved, Policy):
                raise TypeError(f"policy must be a preset name or a Policy, not {type(policy).__name__}")
            self._boundary = _make_boundary(boundary, resolved, limits or Limits(), boundary_options)
        self._closed = False
        # ---- host tools: the engine's, each session's own on top, merged once per change ----
        self._tools: dict[str, Tool] = checked_tools
        self._session_tools: dict[str, dict[str, Tool]] = {}
        self._merged_tools: dict[str, dict[str, Tool]] = {}
        if checked_tools:
            try:
                self._check_tools_supported()
            except BaseException:
                self._boundary.close()
                raise
        self._files = FileTracker()  # what each session's workspace held after its last result
        self._workspaces: dict[str, str] = {}  # session -> its workspace directory, once it has one
        # ---- observability and accounting: budgets, spans, usage, refusal events, history ----
        try:
            self._observer = Observer(
                self.limits,
                self._boundary.sessions,
                on_event=on_event,
                refusal_log=refusal_log,
                tracing=tracing,
            )
        except BaseException:
            self._boundary.close()
            raise
        # ---- durable sessions ----
        self._durable: Durability | None = None
        self._snapshot_key = snapshot_key
        self._own_store: SessionStore | None = None
        if own_store:
            # Workers as a cache without a store chosen: idle sessions hibernate to a file that goes
            # with the engine, so it is written only when one does (or a cell ran without a
            # checkpoint, which only the store can roll back).
            from .stores._local import LocalStore

            try:
                self._own_store = store = LocalStore()
                if snapshot_key is None:
                    self._snapshot_key = os.urandom(32)
                save_every_s = float("inf")
            except BaseException:
                self._boundary.close()
                raise
        if store is not None or hibernate_after_s is not None:
            try:
                self._durability(store, hibernate_after_s, save_every_s)
            except BaseException:
                self._boundary.close()
                if self._own_store is not None:
                    self._own_store.close()
                raise
        # What runs a request: the boundary itself unless runs are saved to a store (set here, once:
        # a store is given only to the constructor). The observer calls it directly, so a run's stack
        # holds one frame fewer (with the audit hook installed, each new frame is a step of its walks).
        with_store = self._durable is not None and self._durable.store is not None
        self._execute = self._durable_execute if with_store else self._boundary.execute

    # ---- properties -----------------------------------------------------------------------------

    @property
    def policy(self) -> Policy:
        return self._boundary.policy

    @property
    def limits(self) -> Limits:
        return self._boundary.limits

    @property
    def boundary(self) -> BaseBoundary:
        return self._boundary

    # ---- running --------------------------------------------------------------------------------

    def run(
        self,
        code: str,
        session: str = "default",
        *,
        timeout_s: float | None = None,
        call_id: str | None = None,
    ) -> ExecutionResult:
        """Run `code` in `session` and return what happened. Errors in the code are data, not raises.

        `call_id` (the model's tool-call id, if known) goes into the span, audit events and history.
        """
        request = self._prepare(code, session, timeout_s)
        if isinstance(request, ExecutionResult):
            return request  # the result that refuses the call
        boundary = self._boundary  # what _observed does, one call fewer on every run
        return self._observer.call(
            request, call_id, boundary.policy.name, boundary.name, self._execute, self._file_changes
        )

    def _observed(self, request: ExecutionRequest, call_id: str | None) -> ExecutionResult:
        return self._observer.call(
            request, call_id, self.policy.name, self._boundary.name, self._execute, self._file_changes
        )

    async def arun(
        self,
        code: str,
        session: str = "default",
        *,
        timeout_s: float | None = None,
        call_id: str | None = None,
    ) -> ExecutionResult:
        """`run` without blocking the event loop (the code runs on a worker thread).

        Cancelling the awaiting task interrupts the code (or keeps it from starting): the session
        keeps its variables, and the cancellation propagates as usual.
        """
        request = self._prepare(code, session, timeout_s)
        if isinstance(request, ExecutionResult):
            return request
        # The caller's context goes along (as with asyncio.to_thread), so the span nests under its span.
        context = contextvars.copy_context()
        loop = asyncio.get_running_loop()
        if request.tools is not None:
            request.tools.loop = loop  # async tools run on the caller's loop, which waits meanwhile
        future = loop.run_in_executor(None, context.run, self._observed, request, call_id)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            self.cancel(request)
            raise

    def stream(
        self,
        code: str,
        session: str = "default",
        *,
        timeout_s: float | None = None,
        call_id: str | None = None,
    ) -> Generator[StreamEvent, None, None]:
        """Run `code` and yield what happens as it happens: `OutputEvent`s (stdout/stderr text, in
        order), then `FigureEvent`s, then one `ResultEvent` with the `ExecutionResult`.

        The output events carry the text the result holds (same cleaning, same bounds; a `\r`
        restarts the line). Leaving the loop early (`break`, `close()`, garbage collection) cancels
        the call: the code is interrupted and the session keeps its variables.
        """
        request = self._prepare(code, session, timeout_s)
        if isinstance(request, ExecutionResult):
            yield from final_events(request)
            return
        ended = threading.Event()
        channel = Channel(ended.set)
        finished = False
        self._start_streamed(request, call_id, channel)
        try:
            while True:
                ended.wait(POLL_S)
                events, outcome = channel.take()
                yield from events
                if outcome is not None:
                    finished = True
                    if isinstance(outcome, BaseException):
                        raise outcome
                    yield from final_events(outcome)
                    return
        finally:
            if not finished:
                self.cancel(request)

    async def astream(
        self,
        code: str,
        session: str = "default",
        *,
        timeout_s: float | None = None,
        call_id: str | None = None,
    ) -> AsyncGenerator[StreamEvent, None]:
        """`stream` for asyncio: the same events, without blocking the event loop.

        Cancelling the consuming task or closing the iterator (`aclose()`) cancels the call.
        """
        request = self._prepare(code, session, timeout_s)
        if isinstance(request, ExecutionResult):
            for event in final_events(request):
                yield event
            return
        loop = asyncio.get_running_loop()
        if request.tools is not None:
            request.tools.loop = loop
        ended = asyncio.Event()

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody is listening
                loop.call_soon_threadsafe(ended.set)

        channel = Channel(wake)
        finished = False
        waiter = asyncio.ensure_future(ended.wait())
        self._start_streamed(request, call_id, channel)
        try:
            while True:
                await asyncio.wait({waiter}, timeout=POLL_S)
                events, outcome = channel.take()
                for chunk in events:
                    yield chunk
                if outcome is not None:
                    finished = True
                    if isinstance(outcome, BaseException):
                        raise outcome
                    for event in final_events(outcome):
                        yield event
                    return
        finally:
            waiter.cancel()
            if not finished:
                self.cancel(request)

    def _start_streamed(self, request: ExecutionRequest, call_id: str | None, channel: Channel) -> None:
        request.on_output = channel.put
        context = contextvars.copy_context()  # the caller's span, as with arun

        def work() -> None:
            try:
                outcome: ExecutionResult | BaseException = context.run(self._observed, request, call_id)
            except BaseException as exc:  # handed to the consumer, raised there
                outcome = exc
            channel.finish(outcome)

        WORKERS.submit(work)

    def _prepare(
        self, code: str, session: str, timeout_s: float | None
    ) -> ExecutionRequest | ExecutionResult:
        """Check a call's arguments: the request to run, or the result that refuses it."""
        if self._closed:
            self._check_open()
        if type(session) is not str or not 0 < len(session) <= _MAX_SESSION_ID or not session.isprintable():
            _check_session(session)  # the one wording of what is wrong with it
            session = str.__str__(session)  # a str subclass: results hold exact strs (not validated)
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, not {type(code).__name__}")
        if timeout_s is not None and not timeout_s > 0:
            raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        if len(code) > self._boundary.limits.max_code_chars:
            return ExecutionResult(
                status="error",
                session=session,
                policy=self.policy.name,
                boundary=self._boundary.name,
                error=ErrorInfo(
                    type="InputTooLarge",
                    message=f"code has {len(code):,} characters; the limit is {self.limits.max_code_chars:,}",
                    hint="Send smaller pieces of code; keep data in files or variables, not in the code.",
                ),
            )
        request = ExecutionRequest(code, session, timeout_s)
        if self._tools or self._session_tools:
            tools = self._tools_of(session)
            if tools:
                request.tools = ToolRun(
                    tools, self._boundary.limits.max_tool_calls, self._observer.tracing.tracer()
                )
        return request

    # ---- host tools -----------------------------------------------------------------------------

    def set_tools(self, session: str, tools: Mapping[str, Callable[..., Any]] | None) -> None:
        """Give `session` its own host tools, on top of the engine's (a name in both: the session's
        wins); None removes them. Takes effect on the session's next run.

        Each tool is a function (sync or async) session code calls by name; it runs on the host with
        the host's rights, arguments and results crossing as copies of plain data. A name must be a
        Python identifier, not a keyword, not starting with '_' (ValueError otherwise).
        """
        self._check_open()
        _check_session(session)
        checked = check_tools(tools)
        if checked:
            self._check_tools_supported()
            self._session_tools[session] = checked
        else:
            self._session_tools.pop(session, None)
        self._merged_tools.pop(session, None)

    def _tools_of(self, session: str) -> dict[str, Tool]:
        merged = self._merged_tools.get(session)
        if merged is None:
            own = self._session_tools.get(session)
            merged = {**self._tools, **own} if own else self._tools
            if own:
                self._merged_tools[session] = merged
        return merged

    def _check_tools_supported(self) -> None:
        if not self._boundary.supports_tools:
            raise ValueError(
                f"the {self._boundary.name} boundary cannot offer host tools to session code; "
                "use boundary='inprocess' or 'subprocess'"
            )

    def _durable_execute(self, request: ExecutionRequest) -> ExecutionResult:
        assert self._durable is not None
        return self._durable.run(request, self._boundary.execute)  # lease, restore if stale, save

    def _file_changes(self, request: ExecutionRequest, result: ExecutionResult) -> None:
        """What the run did to the session's files: one stat while it has none (none at all if the
        boundary saw no write), a scan once it has."""
        path = self._workspaces.get(request.session)
        if path is None:  # asked again each run until the session has a directory
            workspace = self._boundary.session_workspace(request.session)
            if workspace is not None:
                path = self._workspaces[request.session] = str(workspace.path)
        if path is not None:
            # FileChanges it made (none, without a look at the directory, if the boundary can tell)
            stamp = self._boundary.workspace_writes(request.session)
            result.files, complete = self._files.changes(request.session, path, stamp)
            if not complete:
                result.notes.append(PARTIAL_SCAN_NOTE)

    def interrupt(self, session: str = "default") -> bool:
        """Stop the code running in `session` now; returns whether anything was running.

        The interrupted call returns with status `cancelled` and the session keeps its variables
        (the subprocess boundary kills a worker whose code ignores the interrupt, as at a timeout).
        """
        self._check_open()
        _check_session(session)
        return self._boundary.interrupt(session)

    def cancel(self, request: ExecutionRequest) -> bool:
        """Cancel one call: it will not start, or it is interrupted if it is running."""
        request.cancelled = True
        return self._boundary.interrupt(request.session, request)

    def audit(self, code: str) -> AuditReport:
        """What the static audit says about `code` under this engine's policy, without running it."""
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, not {type(code).__name__}")
        runtime = runtime_for(self.policy)
        try:
            tree = parse(code)
        except (SyntaxError, ValueError):
            # A syntax error is not the audit's to refuse: run() reports it with line and caret.
            return AuditReport(policy=self.policy.name, allowed=True)
        findings = runtime.audit(tree, code)
        return AuditReport(policy=self.policy.name, allowed=not findings, findings=findings)

    # ---- sessions -------------------------------------------------------------------------------

    def variables(self, session: str = "default", *, include_hidden: bool = False) -> list[VariableInfo]:
        """The session's variables; a session that has not run anything yet has none."""
        self._check_open()
        _check_session(session)
        self._catch_up(session)
        try:
            return self._boundary.variables(session, include_hidden=include_hidden)
        except SessionNotFound:
            return []

    def inspect(self, name: str, session: str = "default") -> VariableInfo:
        self._check_open()
        _check_session(session)
        self._catch_up(session)
        return self._boundary.inspect(session, name)

    def reset(self, session: str = "default") -> None:
        self._check_open()
        _check_session(session)
        try:
            self._boundary.reset(session)
        except SessionNotFound:
            if self.store is None or self.store.info(session) is None:
                raise  # with a store, a session saved there but not held here is reset there
        self._observer.reset(session)
        if self._durable is not None:
            self._durable.forget(session)  # with a store, the stored snapshot goes too

    # ---- files in and out of a session ----------------------------------------------------------

    def upload(
        self, session: str, name: str, data: bytes | bytearray | memoryview | str | os.PathLike[str]
    ) -> FileInfo:
        """Put a file into the session's workspace (created if needed) as `name`; returns it listed.

        `data` is the content (bytes) or the path of a file on this host (str or path-like). Names
        are relative to the workspace ('data.csv', 'in/raw.json'); `..`, absolute names and symlinks
        are refused (UnsafeFileName), as are files over Limits.max_upload_bytes or a workspace past
        Limits.max_workspace_bytes (FileQuotaExceeded). The session's code sees it at once.
        """
        from ._files import write_file

        content = self._content(data)
        workspace = self._workspace(session, create=True)
        assert workspace is not None  # create=True raises instead
        info = write_file(workspace, name, content, self.limits)
        self._files.refresh(session, workspace.path)  # an upload is not the next run's change
        return info

    def files(self, session: str = "default") -> list[FileInfo]:
        """The regular files in the session's workspace (name, size, modified, type), by name.
        Symlinks, devices and FIFOs the code made are not listed."""
        from ._files import list_files

        workspace = self._workspace(session, create=False)
        return [] if workspace is None else list_files(workspace)

    def download(self, session: str, name: str) -> bytes:
        """The content of a regular file in the session's workspace (FileNotFound if there is none;
        UnsafeFileName for a name that escapes it or is not a regular file)."""
        from ._files import check_name, read_file

        check_name(name)
        workspace = self._workspace(session, create=False)
        if workspace is None:
            raise FileNotFound(f"no file '{name}': session {session!r} has no files")
        return read_file(workspace, name, self.limits.max_upload_bytes)

    def delete_file(self, session: str, name: str) -> None:
        """Remove a file (or a symlink, never its target) from the session's workspace."""
        from ._files import check_name, delete_file

        check_name(name)
        workspace = self._workspace(session, create=False)
        if workspace is None:
            raise FileNotFound(f"no file '{name}': session {session!r} has no files")
        delete_file(workspace, name)
        self._files.refresh(session, workspace.path)

    def _workspace(self, session: str, *, create: bool) -> WorkspaceDir | None:
        self._check_open()
        _check_session(session)
        workspace = self._boundary.session_workspace(session, create=create)
        if workspace is None and create:
            raise FilesUnavailable(f"the {self._boundary.name} boundary has no workspace the host can reach")
        if workspace is not None:
            self._workspaces[session] = str(workspace.path)
        return workspace

    def _content(self, data: object) -> bytes:
        if isinstance(data, (bytes, bytearray, memoryview)):
            return bytes(data)
        if isinstance(data, (str, os.PathLike)):
            size = os.stat(data).st_size
            if size > self.limits.max_upload_bytes:
                raise FileQuotaExceeded(
                    f"{os.fspath(data)!r} has {size:,} bytes; "
                    f"the per-file limit is {self.limits.max_upload_bytes:,}"
                )
            with open(data, "rb") as f:
                return f.read(self.limits.max_upload_bytes + 1)
        else:
            raise TypeError(f"data must be bytes or a path, not {type(data).__name__}")

    # ---- durable sessions -----------------------------------------------------------------------

    def snapshot(self, session: str = "default") -> SessionSnapshot:
        """The session's variables by value and imports by name, signed with this engine's key."""
        self._check_open()
        _check_session(session)
        return self._durability().snapshot(session)

    def restore(self, session: str, snapshot: SessionSnapshot | bytes) -> SessionRestore:
        """Replace the session's state with a snapshot made with this engine's key.

        Raises SnapshotAuthError for an altered or foreign snapshot and SnapshotRefused when it
        names something the policy does not allow; either way nothing of it is loaded.
        """
        self._check_open()
        _check_session(session)
        return self._durability().restore(session, snapshot)

    def fork(self, source: str, target: str) -> SessionRestore:
        """Start session `target` as a copy of `source`: its variables, imports, the code it defined
        and its workspace files. The two are independent afterwards (closing one leaves the other).

        It goes through a snapshot of `source` restored into `target` (on every boundary that takes
        snapshots; in-process that is the session object, subprocess its worker), and what a
        snapshot cannot hold (open files, threads, processes) is listed in the returned
        SessionRestore instead of copied. On the subprocess boundary without a store, the source's
        worker hands its state straight to the target's through a memory file the target maps
        copy-on-write: that costs one copy of the arrays' bytes, plus the imports the target's new
        worker does not have yet (`preload` spares those). Elsewhere it costs a snapshot and a
        restore of that state (much slower for large arrays).
        SessionNotFound for an unknown `source`, ValueError for a `target` that exists, EngineClosed
        after close(): in each case nothing changes.
        """
        self._check_open()
        _check_session(source)
        _check_session(target)
        if source == target:
            raise ValueError(f"cannot fork session {source!r} into itself; name a new session")
        self._catch_up(source)
        held = self._boundary.sessions()
        if source not in held:
            raise SessionNotFound(f"no session {source!r} to fork (run code in it first)")
        if target in held or (self.store is not None and self.store.info(target) is not None):
            raise ValueError(f"session {target!r} exists; fork into a new name, or close it first")
        # With a store, the restore also writes the copy to it: that goes through a snapshot.
        fork_out = getattr(self._boundary, "fork_out", None) if self.store is None else None
        handoff = snapshot = None
        try:
            handoff = fork_out(source, target) if fork_out is not None else None
            if handoff is None:
                snapshot = self._durability().snapshot(source)
            source_dir = self._boundary.session_workspace(source)
            if source_dir is not None and any(source_dir.path.iterdir()):
                target_dir = self._boundary.session_workspace(target, create=True)
                if target_dir is not None:
                    _copy_workspace(source_dir.path, target_dir.path, target_dir.owner)
            if handoff is not None:
                restored: SessionRestore = self._boundary.fork_in(target, handoff)  # type: ignore[attr-defined]
            else:
                assert snapshot is not None
                restored = self._durability().restore(target, snapshot)
        except BaseException:
            with contextlib.suppress(Exception):  # nothing of the copy stays
                self.close(target)
            raise
        finally:
            if handoff is not None:
                handoff.close()
        return restored

    @property
    def store(self) -> SessionStore | None:
        """The session store this engine saves to and restores from, if any."""
        return None if self._durable is None else self._durable.store

    def _catch_up(self, session: str) -> None:
        # With a store, a session this process does not hold (or holds an old version of) comes
        # back before it is described, as before a run.
        if self._durable is not None and self._durable.store is not None:
            self._durable.catch_up(session)

    def hibernate(self, session: str = "default") -> bool:
        """Stop the session's worker now, keeping its state in the store; its next call restores it.

        False if it is running, its last change could not be saved, or there is nothing to stop.
        Needs a store (with `hibernate_after_s`, idle sessions hibernate by themselves).
        """
        self._check_open()
        _check_session(session)
        if self._durable is None or self._durable.store is None:
            raise ValueError("hibernation needs a store: ReplEngine(store=...)")
        return self._durable.hibernate(session)

    def _durability(
        self,
        store: SessionStore | None = None,
        hibernate_after_s: float | None = None,
        save_every_s: float | None = None,
    ) -> Durability:
        if self._durable is None:
            from .snapshot._durable import Durability, resolve_key

            key = resolve_key(self._snapshot_key, store)
            self._durable = Durability(self._boundary, key, store, hibernate_after_s, save_every_s)
        return self._durable

    def sessions(self) -> list[str]:
        self._check_open()
        return self._boundary.sessions()

    def describe(self) -> dict[str, Any]:
        """What the boundary and policy actually enforce on this machine."""
        return self._boundary.describe()

    def close(self, session: str | None = None) -> bool:
        """Close one session (returns whether it existed), or with no argument the whole engine."""
        if session is not None:
            self._check_open()
            _check_session(session)
            self._observer.forget(session)
            self._session_tools.pop(session, None)
            self._merged_tools.pop(session, None)
            self._files.forget(session)
            self._workspaces.pop(session, None)
            try:
                if self._own_store is not None:  # a closed session is gone, not hibernated
                    self._own_store.delete(session)
                elif self._durable is not None:  # changes left to the checkpoints are saved now
                    self._durable.flush([session])
            finally:
                closed = self._boundary.close_session(session)
            return closed
        if not self._closed:
            self._closed = True
            try:
                if self._durable is not None:
                    self._durable.close()
                    if self._own_store is None:  # what would be saved now goes with the engine
                        self._durable.flush()
            finally:
                try:
                    self._boundary.close()
                finally:
                    try:
                        self._observer.close()
                    finally:
                        if self._own_store is not None:
                            self._own_store.close()
        return True

    # ---- observability and accounting -----------------------------------------------------------

    def usage(self, session: str = "default") -> SessionUsage:
        """What `session` has used so far (calls, CPU, wall time, peak memory) and what its budget leaves."""
        _check_session(session)
        return self._observer.ledger.usage(session)

    def history(self, session: str = "default") -> list[HistoryEntry]:
        """The session's recent runs, oldest first (bounded by Limits.max_history_cells / _bytes)."""
        _check_session(session)
        return self._observer.history.entries(session)[0]

    def export_notebook(self, session: str = "default", path: str | os.PathLike[str] | None = None) -> Any:
        """The session's history as a Jupyter notebook (an nbformat NotebookNode), written to `path`
        if given. Needs the `notebook` extra (nbformat)."""
        _check_session(session)
        from .notebook import history_notebook

        entries, dropped = self._observer.history.entries(session)
        return history_notebook(
            entries, session=session, policy=self.policy.name, boundary=self._boundary.name,
            dropped=dropped, path=path,
        )  # fmt: skip

    def __enter__(self) -> ReplEngine:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._boundary.sessions())} sessions"
        return f"<ReplEngine policy={self.policy.name!r} boundary={self._boundary.name!r} {state}>"

    def _check_open(self) -> None:
        if self._closed:
            raise EngineClosed("this ReplEngine is closed; create a new one")


def _check_session(session: object) -> None:
    if not isinstance(session, str):
        raise TypeError(f"session must be a str, not {type(session).__name__}")
    if not session or len(session) > _MAX_SESSION_ID or not session.isprintable():
        raise ValueError(f"session id must be 1-{_MAX_SESSION_ID} printable characters, got {session!r:.80}")


def _copy_workspace(source: Path, target: Path, owner: tuple[int, int] | None) -> None:
    """Copy a workspace's directories and regular files (symlinks as links, never followed; FIFOs,
    sockets and devices are skipped: opening one could block or reach outside)."""
    import shutil
    import stat

    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    for root, dirs, files in os.walk(source):
        here = target / os.path.relpath(root, source)
        for name in [*dirs, *files]:
            src, dst = os.path.join(root, name), here / name
            mode = os.lstat(src).st_mode
            if stat.S_ISLNK(mode):
                os.symlink(os.readlink(src), dst)
            elif stat.S_ISDIR(mode):
                dst.mkdir(mode=0o700)
            elif stat.S_ISREG(mode):
                shutil.copy2(src, dst, follow_symlinks=False)
            else:
                continue
            if owner is not None:
                os.chown(dst, *owner, follow_symlinks=False)


def _auto_boundary() -> str:
    """The boundary "auto" stands for: the sandboxed one where the OS has its protections (Linux),
    in-process elsewhere, said once per place that builds such an engine."""
    if sys.platform.startswith("linux"):
        return "subprocess"
    warnings.warn(
        f"genpark-repl-tools: no sandboxed boundary on {sys.platform} (it needs Linux); code runs "
        "in-process with the policy's guards only, not a sandbox (docs/security.md). Pass "
        "boundary='inprocess' to choose that and silence this warning.",
        RuntimeWarning,
        stacklevel=3,
    )
    return "inprocess"


def _make_boundary(name: str, policy: Policy, limits: Limits, options: dict[str, Any]) -> BaseBoundary:
    if name == "inprocess":
        from .boundaries.inprocess import InProcessBoundary

        if options:
            raise TypeError(f"the inprocess boundary takes no options, got {sorted(options)}")
        return InProcessBoundary(policy, limits)
    if name == "subprocess":
        from .boundaries.subprocess import SubprocessBoundary

        return SubprocessBoundary(policy, limits, **options)
    if name == "ray":
        from .boundaries.ray import RayBoundary  # MissingDependency without the `ray` extra

        return RayBoundary(policy, limits, **options)
    if name == "docker":
        from .boundaries.docker import DockerBoundary

        return DockerBoundary(policy, limits, **options)
    raise ValueError(
        f"unknown boundary {name!r}; choose 'auto', 'inprocess', 'subprocess', 'docker' or 'ray',"
        " or pass a BaseBoundary"
    )
