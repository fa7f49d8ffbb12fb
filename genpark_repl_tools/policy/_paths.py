"""pathlib for restricted sessions: no metadata of paths outside the workspace.

`os.stat`, `os.lstat`, `os.readlink`, `os.path.realpath` and the `pwd`/`grp` lookups raise no audit
event, so the audit hook cannot see `Path.stat()`, `exists()`, `owner()`, `readlink()` or
`resolve()`. `SessionPath` (what a session's `pathlib.Path` is meant to be) checks those itself
against the workspace of the execution running in this context: relative paths mean the workspace
(as the session's `open()` does), and the host's directories (`Path.cwd()`, `Path.home()`,
`expanduser()`) are the workspace too. Outside an execution every metadata call is refused. Opening,
listing and changing files go through the audit hook as before (it accepts this class as a path).

Security model: the checks resolve symbolic links on the host's side before looking, so a link in the
workspace that points outside is refused like its target, and refusals name the path as given, never
where a link leads. One class for every session: it is not a per-session object another session
could reach.
"""

from __future__ import annotations

import contextvars
import os
import pathlib
from collections.abc import Callable
from typing import Any

from ._errors import PolicyViolation

__all__ = ["SessionPath", "enter", "exit"]

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
