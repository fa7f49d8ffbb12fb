"""The in-process boundary: the caller's own process, microseconds per call."""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._boundary import BaseBoundary, ExecutionRequest, cancelled_before_start
from .._capture import StreamingCapture
from .._files import WorkspaceDir
from .._host_tools import ToolRun, ToolStubs
from .._limits import Limits
from .._models import ExecutionResult, SessionRestore, VariableInfo
from .._runner import run_cell
from .._session import Session, SessionTable
from ..policy import Policy, PolicyRuntime, runtime_for, session_workspace
from ..policy._audithook import forget_writes, write_stamp
from ._subprocess._os import session_dirname

if TYPE_CHECKING:
    from ..snapshot import SessionSnapshot

__all__ = ["InProcessBoundary"]


class InProcessBoundary(BaseBoundary):
    """Runs code on the calling thread, in a namespace per session.

    Security model: namespace isolation plus the policy's audit and runtime guards. This protects the
    host from accidents and casual misuse; it is not an OS sandbox. Code runs with the host's
    privileges, memory and CPU limits are not enforced, and C-level calls cannot be interrupted
    (a timeout lands when they return). Run untrusted code on the subprocess boundary.
    """

    name = "inprocess"
    supports_tools = True

    def __init__(self, policy: Policy, limits: Limits) -> None:
        super().__init__(policy, limits)
        self._runtime = runtime_for(policy)
        self._own_dirs = policy.restricted and bool(policy.files)  # each session works in its directory
        # Restricted code writes files only where the audit hook lets it, and the hook stamps each
        # write it allows in a workspace: a run without one changed nothing there (workspace_writes).
        self._stamped = policy.restricted and bool(policy.files)
        self._sessions: SessionTable[Session] = SessionTable(limits.max_sessions)
        self._running: dict[str, ExecutionRequest] = {}  # session -> the call running in it
        # Per-session workspaces: <temporary root>/<session_dirname>, made on first use and
        # removed with the session; the root goes with the boundary. A policy that names a workspace
        # (Policy.with_workspace) gets exactly that directory, shared by every session.
        self._root: Path | None = None
        self._root_lock = threading.Lock()
        self._made: dict[str, str] = {}  # sessions whose directory exists -> its path
        self._cleanup: weakref.finalize[Any, Any] | None = None

    @property
    def runtime(self) -> PolicyRuntime:
        """The policy's mechanism these sessions run under (snapshots load through it)."""
        return self._runtime

    def session(self, name: str, *, create: bool = False) -> Session:
        """The session object itself, for the engine's snapshots; SessionNotFound unless `create`."""
        if create:
            return self._sessions.get_or_create(name, self._new_session)
        return self._sessions.get(name)

    # ---- snapshots ------------------------------------------------------------------------------

    supports_snapshots = True

    def snapshot_session(self, session: str, key: bytes) -> SessionSnapshot:
        from ..snapshot._save import take_snapshot

        state = self._sessions.get(session)
        with state.lock:
            return take_snapshot(state, self._runtime, self.limits, key)

    def restore_session(self, session: str, snapshot: SessionSnapshot, key: bytes) -> SessionRestore:
        from ..snapshot._format import SANDBOXED_ORIGIN, SnapshotRefused
        from ..snapshot._load import restore_snapshot

        header = snapshot.header_data(key)  # authenticates first
        if header.get("origin") == SANDBOXED_ORIGIN and not self.policy.restricted:
            # A sandboxed worker wrote this payload (the host only signed it); under `trusted` it
            # would be rebuilt with the host's full rights.
            raise SnapshotRefused(
                "the snapshot was made inside a sandboxed subprocess worker; restoring it in-process "
                f"under the {self.policy.name!r} policy would give its contents this process's rights "
                "(restore it on the subprocess boundary, or in-process under strict or standard)",
                reason="made in a sandboxed worker",
            )
        state = self._sessions.get_or_create(session, self._new_session)
        with state.lock:
            return restore_snapshot(state, self._runtime, self.limits, snapshot, key)

    # ---- contract -------------------------------------------------------------------------------

    def execute(self, request: ExecutionRequest) -> ExecutionResult:
        if self._closed:
            self._check_open()
        name = request.session
        session = self._sessions.get_or_create(name, self._new_session)
        runtime = self._runtime
        limits = self.limits
        if request.timeout_s is not None and request.timeout_s != limits.timeout_s:
            limits = limits.model_copy(update={"timeout_s": request.timeout_s})
        # Code under a restricted policy with files uses its session's own directory (made once).
        token = None
        if self._own_dirs:
            token = session_workspace.set(self._made.get(name) or self._workspace_path(name, make=True))
        try:
            # Not `with` (nor acquire() before a try): from 3.13 a KeyboardInterrupt can surface
            # right after acquire() returns and would leave the session locked; in the try it
            # reaches the finally, where the RLock's release refuses if this thread does not hold it.
            try:
                session.lock.acquire()
                if request.cancelled:
                    count = session.execution_count
                    return cancelled_before_start(request, self.policy.name, self.name, count)
                self._running[name] = request
                tools = request.tools
                if tools is not None or session.tools is not None:
                    _offer_tools(session, tools, limits.timeout_s)
                try:
                    if request.on_output is None:
                        return run_cell(session, request.code, runtime, limits, self.name)
                    streaming = functools.partial(StreamingCapture, on_output=request.on_output)
                    return run_cell(session, request.code, runtime, limits, self.name, streaming)
                finally:
                    self._running.pop(name, None)
                    session.cancel_pending = False
                    if session.tools is not None:
                        session.tools.run = None
            finally:
                try:  # noqa: SIM105 - not contextlib.suppress: its __enter__ is a call an interrupt can follow
                    session.lock.release()
                except RuntimeError:  # not held: interrupted before acquire() returned
                    pass
        finally:
            if token is not None:
                session_workspace.reset(token)

    def variables(self, session: str, *, include_hidden: bool = False) -> list[VariableInfo]:
        s = self._sessions.get(session)
        with s.lock:
            return s.variables(self.limits, include_hidden)

    def inspect(self, session: str, name: str) -> VariableInfo:
        s = self._sessions.get(session)
        with s.lock:
            return s.inspect(name, self.limits)

    def reset(self, session: str) -> None:
        s = self._sessions.get(session)
        with s.lock:
            s.reset()

    def interrupt(self, session: str, request: ExecutionRequest | None = None) -> bool:
        s = self._sessions.find(session)
        running = self._running.get(session)
        if s is None or running is None or (request is not None and running is not request):
            return False
        return s.interrupt()

    def close_session(self, session: str) -> bool:
        s = self._sessions.pop(session)
        if s is None:
            return False
        with s.lock:
            s.namespace.clear()
        if self._root is not None and self.policy.workspace is None:  # its own files go with it
            path = self._made.pop(session, None)
            if path is not None:
                forget_writes(path)
            shutil.rmtree(self._root / session_dirname(session), ignore_errors=True)
        return True

    def workspace_writes(self, session: str) -> int | None:
        if not self._stamped:
            return None  # trusted code writes where it likes, unseen
        path = self._made.get(session)
        return None if path is None else write_stamp(path)

    def session_workspace(self, session: str, *, create: bool = False) -> WorkspaceDir | None:
        # None until the session's directory exists: a session that never used files costs nothing.
        if create:
            self._check_open()
            self._sessions.get_or_create(session, self._new_session)
            return WorkspaceDir(Path(self._workspace_path(session, make=True)))
        path = self._made.get(session)
        if path is None or self._sessions.find(session) is None:
            return None
        return WorkspaceDir(Path(path))

    def _workspace_path(self, session: str, *, make: bool) -> str:
        path = self._made.get(session)
        if path is not None:
            return path
        root = self._root or self._make_root()
        if self.policy.workspace is not None:
            path = str(root)  # the policy names one directory: every session shares it, as it says
        else:
            path = os.path.join(root, session_dirname(session))
        if make:
            os.makedirs(path, mode=0o700, exist_ok=True)
            self._made[session] = path
        return path

    def _make_root(self) -> Path:
        with self._root_lock:
            if self._root is None:
                if self.policy.workspace is not None:
                    root = Path(self.policy.workspace).resolve()
                    root.mkdir(parents=True, exist_ok=True)
                else:
                    root = Path(os.path.realpath(tempfile.mkdtemp(prefix="genpark-ws-")))
                    self._cleanup = weakref.finalize(self, shutil.rmtree, root, ignore_errors=True)
                self._root = root
            return self._root

    def sessions(self) -> list[str]:
        return self._sessions.names()

    def close(self) -> None:
        super().close()
        if self._cleanup is not None:
            self._cleanup()  # the temporary workspace root this boundary made

    def describe(self) -> dict[str, Any]:
        return {
            "boundary": self.name,
            "policy": self.policy.name,
            "enforced": {
                "namespace_isolation": True,
                "timeout": "pure-Python code and time.sleep; C-level calls only when they return",
                "output_bounds": True,
                "memory_limit": False,
                "cpu_limit": False,
                "network_isolation": False,
                "filesystem_confinement": self.policy.restricted,
                "crash_isolation": False,
            },
        }

    def _new_session(self, name: str) -> Session:
        return Session(name, self._runtime)


def _offer_tools(session: Session, tools: ToolRun | None, timeout_s: float) -> None:
    """Put the run's host tools in the session's builtins (and take away those it no longer has)."""
    stubs = session.tools
    if stubs is None:
        stubs = session.tools = ToolStubs()
    stubs.install(session.builtins, tools.offer() if tools is not None else ())
    stubs.run = tools
    if tools is not None:
        tools.begin(timeout_s)
