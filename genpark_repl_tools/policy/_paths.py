"""pathlib for restricted sessions: no metadata of paths outside the workspace.

`os.stat`, `os.lstat`, `os.readlink`, `os.path.realpath` and the `pwd`/`grp` lookups raise no audit
event, so the audit hook cannot see `Path.stat()`, `exists()`, `owner()`, `readlink()` or
`resolve()`. `SessionPath` (what a session's `pathlib.Path` is meant to be) checks those itself
against the workspace of the execution running in this context: relative paths mean the workspace
(as the session's `open()` does), and the host's directories (`Path.cwd()`, `Path.home()`,
`expanduser()`) are the workspace too. Outside an execution every metadata call is refused. Opening,
listing and changing files go through the audit hook as before (it accepts this class as a path).

Libraries resolve relative paths themselves, against the current directory (`pd.read_csv('data.csv')`,
`np.save`, `fig.savefig`, C code). On Linux the thread that runs a cell gets a working directory of
its own (`unshare(CLONE_FS)`), which is the session's workspace for the cell's duration
(`enter_directory`): every library's relative path then means the workspace, the audit hook (which
resolves relative paths against the calling thread's directory) judges the path the kernel will
open, and no other thread, nor the process as other threads see it, changes directory.

Security model: the checks resolve symbolic links on the host's side before looking, so a link in the
workspace that points outside is refused like its target, and refusals name the path as given, never
where a link leads. One class for every session: it is not a per-session object another session
could reach.
"""

from __future__ import annotations

import contextvars
import os
import pathlib
import sys
from collections.abc import Callable
from typing import Any

from ._errors import PolicyViolation

__all__ = ["SessionPath", "enter", "enter_directory", "exit", "exit_directory"]

# (policy name, workspace or None) of the execution running in this context.
_current: contextvars.ContextVar[tuple[str, str | None] | None] = contextvars.ContextVar(
    "genpark_repl_paths", default=None
)

# Methods that read metadata of the path itself (they raise no audit event).
_METADATA = (
    "stat",
    "lstat",
    "exists",
    "is_dir",
    "is_file",
    "is_symlink",
    "is_socket",
    "is_fifo",
    "is_block_device",
    "is_char_device",
    "is_mount",
    "owner",
    "group",
    "readlink",
    "samefile",
)

_Base: Any = type(pathlib.Path())


def enter(policy: str, workspace: str | None) -> contextvars.Token[tuple[str, str | None] | None]:
    """For the runtime: path checks in this context use this policy's workspace until `exit`."""
    return _current.set((policy, workspace))  # resolved by the caller (the runtime resolves it once)


def exit(token: contextvars.Token[tuple[str, str | None] | None]) -> None:
    _current.reset(token)


def enter_directory(workspace: str | None) -> int | None:
    """For the runtime, before the audit hook is active: make this thread's working directory its
    own and the workspace, until `exit_directory`.

    Returns a descriptor of the directory the thread had, or None where nothing was changed: no
    workspace, inside another execution (its directory stays), or no per-thread directory here
    (not Linux, or unshare refused by a seccomp filter): relative paths given to libraries then
    resolve against the host's directory and the audit hook refuses them.
    """
    if workspace is None or _current.get() is not None:
        return None
    libc = _thread_directory()
    if libc is None:
        return None
    # From the first cell on, this thread's directory, root and umask are its own. They stay the
    # same as the other threads' (the host's) outside cells; only a later os.chdir() in the host is
    # then seen by the thread that makes it (and threads it starts), not by this one.
    if libc.unshare(_CLONE_FS) != 0:  # refused (a seccomp filter): never tried again
        _libc[0] = None
        return None
    # A descriptor, not a name: the way back even if the directory is renamed or removed meanwhile.
    # O_PATH: it needs no read permission on the host's directory (fchdir accepts it).
    host: int = libc.open(b".", _DIRECTORY_FLAGS)
    if host < 0:
        return None
    if libc.chdir(os.fsencode(workspace)) != 0:
        os.close(host)
        return None
    return host


def exit_directory(host: int | None) -> None:
    """Put back the directory `enter_directory` found (after the audit hook is no longer active)."""
    if host is None:
        return
    libc = _libc[0]
    try:
        if libc is None or libc.unshare(_CLONE_FS) != 0 or libc.fchdir(host) != 0:
            # Never expected (both worked for this thread moments ago); leaving the workspace as the
            # host's directory would give the host's relative paths to the session.
            raise OSError("could not restore the working directory of this thread after a cell")
    finally:
        os.close(host)


# libc's own calls, through ctypes: os.chdir and os.open raise audit events, and the hook would
# look at each of them (a frame walk) although the host makes them.
_CLONE_FS = 0x200  # <sched.h>: the same value on every Linux architecture
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | getattr(os, "O_PATH", 0)
_libc: list[Any] = []


def _thread_directory() -> Any:
    """libc (unshare, open, chdir, fchdir) where a thread can have a directory of its own, else None."""
    if _libc:
        return _libc[0]
    found: Any = None
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            found = ctypes.CDLL(None)
            for name, argtypes in (
                ("unshare", (ctypes.c_int,)),
                ("open", (ctypes.c_char_p, ctypes.c_int)),
                ("chdir", (ctypes.c_char_p,)),
                ("fchdir", (ctypes.c_int,)),
            ):
                function = getattr(found, name)
                function.argtypes = argtypes
                function.restype = ctypes.c_int
        except (OSError, AttributeError):
            found = None
    _libc.append(found)
    return found


def _workspace() -> str:
    current = _current.get()
    if current is None or current[1] is None:
        policy = current[0] if current is not None else "restricted"
        raise PolicyViolation(
            f"reading file metadata is not allowed under policy '{policy}'; this policy has no file access"
        )
    return current[1]


def _inside(path: str) -> str:
    """`path` (relative: to the workspace) resolved, if it is inside the workspace."""
    root = _workspace()
    joined = os.path.join(root, path)
    real = os.path.realpath(joined)
    if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
        current = _current.get()
        policy = current[0] if current is not None else "restricted"
        raise PolicyViolation(
            f"reading metadata of '{os.path.normpath(joined)}' is not allowed under policy '{policy}'; "
            f"paths are available only inside the workspace '{root}'"
        )
    return real


def _checked(name: str) -> Callable[..., Any]:
    method = getattr(_Base, name)

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        text = os.fspath(self)
        _inside(text)
        # The call itself uses the unresolved path (lstat and is_symlink look at the link).
        target = _Base(os.path.join(_workspace(), text))
        if name == "samefile" and args:
            other = os.fspath(args[0])
            _inside(other)
            args = (os.path.join(_workspace(), other), *args[1:])
        return method(target, *args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = method.__doc__
    return call


class SessionPath(_Base):  # type: ignore[misc]
    """`pathlib.Path` as restricted code sees it: metadata only inside the workspace."""

    __slots__ = ()

    def resolve(self, strict: bool = False) -> SessionPath:
        return type(self)(_inside(os.fspath(self)))

    def absolute(self) -> SessionPath:
        return type(self)(os.path.join(_workspace(), os.fspath(self)))

    def expanduser(self) -> SessionPath:
        text = os.fspath(self)
        if text == "~" or text.startswith("~" + os.sep):
            return type(self)(_workspace() + text[1:])
        if text.startswith("~"):
            current = _current.get()
            policy = current[0] if current is not None else "restricted"
            raise PolicyViolation(
                f"expanding another user's home directory is not allowed under policy '{policy}'"
            )
        return self

    @classmethod
    def cwd(cls) -> SessionPath:
        return cls(_workspace())

    @classmethod
    def home(cls) -> SessionPath:
        return cls(_workspace())


for _name in _METADATA:
    setattr(SessionPath, _name, _checked(_name))
SessionPath.__module__ = "pathlib"
SessionPath.__name__ = SessionPath.__qualname__ = "Path"
