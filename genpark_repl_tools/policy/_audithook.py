"""Layer 2b, the audit-hook guard: refuses what the interpreter itself reports (PEP 578 events).

One `sys.addaudithook` hook for the whole process, installed on first use and never removed
(Python cannot remove audit hooks). It judges an event only when sandboxed code is involved:

* while restricted code runs in this execution context (a ContextVar set by `activate()`), or
* for a short list of dangerous events (processes, network, files, exec, pickle, ...), when a frame
  of restricted code is anywhere on the current thread's stack: this covers restricted code that
  the host calls back later, outside any execution.

Everything else returns after one dict lookup, so the host's own imports, opens and threads are not
affected. Python's own imports of allowed modules keep working: the import machinery may read module
files, unmarshal and execute module code. Refusals raise `PolicyViolation` (a PermissionError) out
of the refused operation.
"""

from __future__ import annotations

import contextvars
import functools
import os
import site
import sys
import sysconfig
import threading
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

from ._errors import PolicyViolation

__all__ = [
    "MARK",
    "SandboxState",
    "activate",
    "data_roots",
    "deactivate",
    "host_code",
    "install",
    "plain_path",
]

# Key in a restricted session's builtins dict; its value is that session's SandboxState. Frames of
# restricted code are recognised by it (their f_builtins is that dict).
MARK = "__repl_sandbox__"

_IMPORT_MACHINERY = frozenset({"importlib._bootstrap", "importlib._bootstrap_external", "zipimport"})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC | getattr(os, "O_EXCL", 0)


class SandboxState:
    """What the hook needs to judge one restricted policy's code."""

    __slots__ = ("_workspace", "_workspace_fn", "exec_callers", "files", "policy")

    def __init__(
        self,
        policy: str,
        files: bool,
        workspace: Callable[[], str],
        exec_callers: Iterable[str] = (),
    ) -> None:
        self.policy = policy
        self.files = files
        self._workspace_fn = workspace
        self._workspace: str | None = None
        self.exec_callers = frozenset(exec_callers)

    @property
    def workspace(self) -> str:
        if self._workspace is None:
            self._workspace = os.path.realpath(self._workspace_fn())
        return self._workspace

    def refuse(self, what: str, instead: str = "") -> PolicyViolation:
        tail = f"; {instead}" if instead else ""
        return PolicyViolation(f"{what} is not allowed under policy '{self.policy}'{tail}")


_current: contextvars.ContextVar[SandboxState | None] = contextvars.ContextVar(
    "genpark_repl_sandbox", default=None
)


class _Local(threading.local):
    busy = False


class _Process:
    """Process-wide facts: whether the hook is installed, whether restricted code ever ran."""

    installed = False
    seen = False
    lock = threading.Lock()


_local = _Local()
_process = _Process()


def install() -> None:
    """Add the process-wide hook once (idempotent, thread-safe)."""
    if _process.installed:
        return
    with _process.lock:
        if not _process.installed:
            data_roots()  # computed now, outside any sandboxed context
            sys.addaudithook(_hook)
            _process.installed = True


class host_code:  # used like a function: `with host_code():`
    """Run the host's own housekeeping unjudged, even if it happens inside restricted code's call
    (a finalizer of the host's collected during a cell, for instance)."""

    __slots__ = ("_before",)

    def __enter__(self) -> None:
        self._before = _local.busy
        _local.busy = True

    def __exit__(self, *exc: object) -> None:
        _local.busy = self._before


def activate(state: SandboxState) -> contextvars.Token[SandboxState | None]:
    _process.seen = True
    return _current.set(state)


def deactivate(token: contextvars.Token[SandboxState | None]) -> None:
    _current.reset(token)


# ---- the hook ---------------------------------------------------------------------------------------

Handler = Callable[[SandboxState, str, tuple[Any, ...], FrameType], None]


def _hook(event: str, args: tuple[Any, ...]) -> None:
    entry = _HANDLERS.get(event)
    if entry is None:
        return
    if _local.busy:  # our own frame inspection below raises events too
        return
    handler, outside = entry
    state = _current.get()
    _local.busy = True
    try:
        caller = sys._getframe(1)
        if state is None:
            if not (outside and _process.seen):
                return
            state = _state_on_stack(caller)
            if state is None:
                return
        try:
            handler(state, event, args, caller)
        except PolicyViolation:
            raise
        except Exception as exc:  # a bug here must not open the sandbox: refuse instead
            raise state.refuse(f"{event} (policy check failed: {type(exc).__name__})") from None
    finally:
        _local.busy = False


def _state_on_stack(frame: FrameType | None) -> SandboxState | None:
    while frame is not None:
        state = frame.f_builtins.get(MARK)
        if state is not None:
            return state  # type: ignore[no-any-return]
        frame = frame.f_back
    return None


def _is_cell(frame: FrameType) -> bool:
    return frame.f_builtins.get(MARK) is not None


def _module(frame: FrameType) -> str:
    name = frame.f_globals.get("__name__")
    return name if isinstance(name, str) else ""


def _importing(frame: FrameType | None) -> bool:
    while frame is not None:
        if _module(frame) in _IMPORT_MACHINERY:
            return True
        frame = frame.f_back
    return False


# ---- paths ------------------------------------------------------------------------------------------


@functools.cache
def data_roots() -> tuple[str, ...]:
    """Directories libraries may read their own data from (and write caches to while imported)."""
    found: set[str] = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    try:
        found.update(site.getsitepackages())
        found.add(site.getusersitepackages())
    except AttributeError:  # some virtualenv versions lack these
        pass
    found.update(p for p in sysconfig.get_paths().values() if p)
    try:
        import zoneinfo

        found.update(zoneinfo.TZPATH)
    except ImportError:
        pass
    home = os.path.expanduser("~")
    for sub in (".config/matplotlib", ".cache/matplotlib", ".cache/fontconfig"):
        found.add(os.path.join(home, sub))
    if os.environ.get("MPLCONFIGDIR"):
        found.add(os.environ["MPLCONFIGDIR"])
    found.update(("/usr/share/fonts", "/usr/local/share/fonts", "/usr/share/zoneinfo"))
    return tuple(sorted({os.path.realpath(p) for p in found if p and os.path.isabs(p)}))


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


@functools.cache
def _path_types() -> frozenset[type]:
    import pathlib
    import posix

    return frozenset(
        {
            pathlib.PurePath,
            pathlib.PurePosixPath,
            pathlib.PureWindowsPath,
            pathlib.Path,
            pathlib.PosixPath,
            pathlib.WindowsPath,
            posix.DirEntry,
        }
    )


def plain_path(raw: Any) -> str | None:
    """`raw` as a plain str path, or None if it is not one the checks can trust.

    str and bytes subclasses are copied to plain values (their methods could lie to the checks);
    only the standard library's own path classes are asked for their path, since a user-defined
    class could answer differently each time it is asked.
    """
    kind = type(raw)
    if kind is str:
        return raw  # type: ignore[no-any-return]
    if isinstance(raw, str):
        return str.__str__(raw)
    if isinstance(raw, bytes):
        return os.fsdecode(bytes.__getitem__(raw, slice(None)))
    if kind in _path_types():
        return os.fsdecode(os.fspath(raw))
    return None


def _resolve(state: SandboxState, raw: Any, what: str) -> str:
    if isinstance(raw, int):
        raise state.refuse(f"{what} by file descriptor", "use a path inside the workspace")
    path = plain_path(raw)
    if path is None:
        raise state.refuse(f"{what} a {type(raw).__name__} path", "pass a str or a pathlib path")
    return os.path.realpath(path)


def _check_path(state: SandboxState, raw: Any, caller: FrameType, *, write: bool, what: str) -> None:
    path = _resolve(state, raw, what)
    if state.files and _inside(path, state.workspace):
        return
    if any(_inside(path, r) for r in data_roots()):
        if not write:
            return  # libraries read their own data (fonts, time zones, config) even from C code
        if not _is_cell(caller) and _importing(caller):
            return  # a library initializing its cache (matplotlib's font list) while it is imported
    if not state.files:
        raise state.refuse(f"{what} '{path}'", "this policy has no file access")
    instead = f"files are allowed only inside the workspace '{state.workspace}'"
    given = plain_path(raw)
    if given is not None and not os.path.isabs(given):
        suggestion = os.path.join(state.workspace, given)
        instead += (
            f"; relative paths given to libraries resolve against the host's directory, use '{suggestion}'"
        )
    raise state.refuse(f"{what} '{path}'", instead)


def _open(state: SandboxState, event: str, args: tuple[Any, ...], caller: FrameType) -> None:
    path, mode, flags = (*args, None, None, None)[:3]
    if isinstance(flags, int):
        write = bool(flags & _WRITE_FLAGS)
    else:
        write = isinstance(mode, str) and any(c in mode for c in "wax+")
    if _module(caller) in _IMPORT_MACHINERY:
        if write:  # bytecode caches; the import machinery handles the refusal as an OSError
            raise state.refuse("writing bytecode caches")
        if not isinstance(path, int):
            return
    _check_path(state, path, caller, write=write, what="writing to" if write else "opening")


def _listdir(state: SandboxState, event: str, args: tuple[Any, ...], caller: FrameType) -> None:
    if _module(caller) in _IMPORT_MACHINERY:
        return
    path = args[0] if args and args[0] is not None else "."
    _check_path(state, path, caller, write=False, what="listing directory")


# Positions of path arguments (and of dir_fd arguments, which must be None) in each write event.
_WRITE_EVENTS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "os.remove": ((0,), (1,)),
    "os.rename": ((0, 1), (2, 3)),
    "os.mkdir": ((0,), (2,)),
    "os.rmdir": ((0,), (1,)),
    "os.chmod": ((0,), (2,)),
    "os.chown": ((0,), (3,)),
    "os.link": ((0, 1), (2, 3)),
    "os.truncate": ((0,), ()),
    "os.utime": ((0,), (3,)),
    "os.setxattr": ((0,), ()),
    "os.removexattr": ((0,), ()),
    "shutil.copyfile": ((0, 1), ()),
    "shutil.copymode": ((0, 1), ()),
    "shutil.copystat": ((0, 1), ()),
    "shutil.copytree": ((0, 1), ()),
    "shutil.move": ((0, 1), ()),
    "shutil.rmtree": ((0,), (1,)),
    "shutil.chown": ((0,), ()),
    "shutil.unpack_archive": ((0, 1), ()),
    "tempfile.mkstemp": ((0,), ()),
    "tempfile.mkdtemp": ((0,), ()),
}
_READ_EVENTS = {"os.getxattr": (0,), "os.listxattr": (0,)}


def _write_path(state: SandboxState, event: str, args: tuple[Any, ...], caller: FrameType) -> None:
    if _module(caller) in _IMPORT_MACHINERY:
        raise state.refuse("writing bytecode caches")
    paths, fds = _WRITE_EVENTS[event]
    for i in fds:
        if i < len(args) and args[i] not in (None, -1):  # -1: no dir_fd given
            raise state.refuse(
                f"{event} relative to a directory descriptor", "use a path inside the workspace"
            )
    for i in paths:
        if i < len(args) and args[i] is not None:
            _check_path(state, args[i], caller, write=True, what=f"{event} on")


def _read_path(state: SandboxState, event: str, args: tuple[Any, ...], caller: FrameType) -> None:
    for i in _READ_EVENTS[event]:
        if i < len(args) and args[i] is not None:
            _check_path(state, args[i], caller, write=False, what=f"{event} on")


# ---- everything else --------------------------------------------------------------------------------


def _exec(state: SandboxState, event: str, args: tuple[Any, ...], caller: FrameType) -> None:
    if _module(caller) in state.exec_callers or _importing(caller):
        return
    raise state.refuse(
        "running code built at run time (exec, eval, templates, string annotations)",
        "write the code directly",
    )


def _marshal(state: SandboxState, event: str, args: tuple[Any, ...], caller: FrameType) -> None:
    if _importing(caller):
        return
    raise state.refuse("loading code objects (marshal)")


def _from_cell(what: str) -> Handler:
    def handler(state: SandboxState, event: str, args: tuple[Any, ...], caller: FrameType) -> None:
        if _is_cell(caller):
            detail = f" '{args[1]}'" if event.startswith("object.") and len(args) > 1 else ""
            raise state.refuse(f"{what}{detail}")

    return handler


def _always(what: str, instead: str = "") -> Handler:
    def handler(state: SandboxState, event: str, args: tuple[Any, ...], caller: FrameType) -> None:
        raise state.refuse(f"{what} ({event})", instead)

    return handler


def _unless_importing(what: str) -> Handler:
    """Refused for restricted code, allowed while a library initializes (numpy sets env vars)."""

    def handler(state: SandboxState, event: str, args: tuple[Any, ...], caller: FrameType) -> None:
        if not _importing(caller):
            raise state.refuse(f"{what} ({event})")

    return handler


_PROCESSES = _always("starting or signalling processes")
_NETWORK = _always("network access")
_NATIVE = _always("native code and raw memory (ctypes)")
_INTROSPECTION = _always("interpreter introspection")
_TRACING = _always("tracing and profiling hooks")
_SETTINGS = _unless_importing("changing process-wide settings")

_HANDLERS: dict[str, tuple[Handler, bool]] = {
    "open": (_open, True),
    "os.listdir": (_listdir, True),
    "os.scandir": (_listdir, True),
    **dict.fromkeys(_WRITE_EVENTS, (_write_path, True)),
    **dict.fromkeys(_READ_EVENTS, (_read_path, True)),
    "os.symlink": (_always("creating symbolic links"), True),
    "shutil.make_archive": (_always("creating archives"), True),
    "exec": (_exec, True),
    "marshal.load": (_marshal, True),
    "marshal.loads": (_marshal, True),
    "pickle.find_class": (_always("loading pickles", "pickles can run arbitrary code"), True),
    "code.__new__": (_always("creating code objects"), True),
    "function.__new__": (_always("creating functions from code objects"), True),
    "sys._getframe": (_from_cell("reading interpreter frames"), False),
    "object.__getattr__": (_from_cell("reading internal attribute"), False),
    "object.__setattr__": (_from_cell("setting internal attribute"), False),
    "object.__delattr__": (_from_cell("deleting internal attribute"), False),
    "sys._current_frames": (_INTROSPECTION, True),
    "sys._current_exceptions": (_INTROSPECTION, True),
    "gc.get_objects": (_INTROSPECTION, True),
    "gc.get_referrers": (_INTROSPECTION, True),
    "gc.get_referents": (_INTROSPECTION, True),
    "sys.addaudithook": (_always("adding audit hooks"), True),
    "sys.settrace": (_TRACING, True),
    "sys.setprofile": (_TRACING, True),
    "sys._settraceallthreads": (_TRACING, True),
    "sys._setprofileallthreads": (_TRACING, True),
    "sys.monitoring.register_callback": (_TRACING, True),
    "sys.set_asyncgen_hook_firstiter": (_TRACING, True),
    "sys.set_asyncgen_hook_finalizer": (_TRACING, True),
    "sys.remote_exec": (_TRACING, True),
    "builtins.input": (_always("reading the host's stdin"), True),
    "builtins.breakpoint": (_always("starting a debugger"), True),
    "pdb.Pdb": (_always("starting a debugger"), True),
    "_thread.start_new_thread": (_always("starting threads"), True),
    "subprocess.Popen": (_PROCESSES, True),
    "os.system": (_PROCESSES, True),
    "os.exec": (_PROCESSES, True),
    "os.posix_spawn": (_PROCESSES, True),
    "os.spawn": (_PROCESSES, True),
    "os.fork": (_PROCESSES, True),
    "os.forkpty": (_PROCESSES, True),
    "os.kill": (_PROCESSES, True),
    "os.killpg": (_PROCESSES, True),
    "os.startfile": (_PROCESSES, True),
    "pty.spawn": (_PROCESSES, True),
    "signal.pthread_kill": (_PROCESSES, True),
    "webbrowser.open": (_PROCESSES, True),
    "ensurepip.bootstrap": (_PROCESSES, True),
    "os.chdir": (_SETTINGS, True),
    "os.putenv": (_SETTINGS, True),
    "os.unsetenv": (_SETTINGS, True),
    "resource.setrlimit": (_SETTINGS, True),
    "resource.prlimit": (_SETTINGS, True),
    "os.lockf": (_SETTINGS, True),
    "fcntl.fcntl": (_SETTINGS, True),
    "fcntl.ioctl": (_SETTINGS, True),
    "fcntl.flock": (_SETTINGS, True),
    "fcntl.lockf": (_SETTINGS, True),
    "syslog.openlog": (_SETTINGS, True),
    "syslog.syslog": (_SETTINGS, True),
    "syslog.setlogmask": (_SETTINGS, True),
    "syslog.closelog": (_SETTINGS, True),
    "mmap.__new__": (_always("mapping memory"), True),
    "sqlite3.connect": (_always("opening databases"), True),
    "sqlite3.connect/handle": (_always("opening databases"), True),
    "sqlite3.enable_load_extension": (_NATIVE, True),
    "sqlite3.load_extension": (_NATIVE, True),
    "urllib.Request": (_NETWORK, True),
    "http.client.connect": (_NETWORK, True),
    "http.client.send": (_NETWORK, True),
    **{
        f"{mod}.{what}": (_NETWORK, True)
        for mod, whats in {
            "ftplib": ("connect", "sendcmd"),
            "smtplib": ("connect", "send"),
            "poplib": ("connect", "putline"),
            "imaplib": ("open", "send"),
            "nntplib": ("connect", "putline"),
            "telnetlib": ("Telnet.open", "Telnet.write"),
        }.items()
        for what in whats
    },
    **{
        f"socket.{what}": (_NETWORK, True)
        for what in (
            "__new__",
            "bind",
            "connect",
            "getaddrinfo",
            "gethostbyaddr",
            "gethostbyname",
            "gethostname",
            "getnameinfo",
            "getservbyname",
            "getservbyport",
            "sendmsg",
            "sendto",
            "sethostname",
        )
    },
    **{
        f"ctypes.{what}": (_NATIVE, True)
        for what in (
            "PyObj_FromPtr",
            "addressof",
            "call_function",
            "cdata",
            "cdata/buffer",
            "create_string_buffer",
            "create_unicode_buffer",
            "dlopen",
            "dlsym",
            "dlsym/handle",
            "get_errno",
            "get_last_error",
            "set_errno",
            "set_exception",
            "set_last_error",
            "string_at",
            "wstring_at",
            "seh_exception",
        )
    },
}
