"""pathlib for a restricted session: no metadata of paths outside the workspace.

`os.stat`, `os.lstat`, `os.readlink`, `os.path.realpath` and the `pwd`/`grp` lookups raise no audit
event, so the audit hook cannot see `Path.stat()`, `exists()`, `owner()`, `readlink()` or
`resolve()`. The session's pathlib classes check those themselves: relative paths mean the
workspace (as the session's `open()` does), and the host's directories (`Path.cwd()`, `Path.home()`,
`expanduser()`) are the workspace too. Opening, listing and changing files go through the audit hook
as before.

Security model: the checks resolve symbolic links on the host's side before looking, so a link in the
workspace that points outside is refused like the target itself. A race (a link changed between the
check and the call) needs a second actor writing into the workspace at the same moment.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable
from typing import Any

from ._errors import PolicyViolation

__all__ = ["session_path_classes"]

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


def session_path_classes(
    workspace: Callable[[], str], refuse: Callable[[str, str], PolicyViolation]
) -> dict[type, type]:
    """Real pathlib class -> the session's checked subclass (for `pathlib.Path` and `PosixPath`)."""
    base: Any = type(pathlib.Path())

    def inside(path: str) -> str:
        root = os.path.realpath(workspace())
        joined = os.path.join(root, path)
        real = os.path.realpath(joined)
        if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
            # Named as given: the message must not say where a link leads.
            raise refuse(
                f"reading metadata of '{os.path.normpath(joined)}'",
                f"paths are available only inside the workspace '{root}'",
            )
        return real

    def checked(name: str) -> Callable[..., Any]:
        method = getattr(base, name)

        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            target = self._in_workspace()
            if name == "samefile" and args:
                other = args[0]
                args = (os.fspath(type(self)(other)._in_workspace()), *args[1:])
                del other
            return method(target, *args, **kwargs)

        call.__name__ = call.__qualname__ = name
        call.__doc__ = method.__doc__
        return call

    def _in_workspace(self: Any) -> Any:
        text = os.fspath(self)
        inside(text)
        # Relative paths mean the workspace; the call itself uses the unresolved path (lstat and
        # is_symlink look at the link, not its target).
        return base(os.path.join(os.path.realpath(workspace()), text))

    def resolve(self: Any, strict: bool = False) -> Any:
        return type(self)(inside(os.fspath(self)))

    def absolute(self: Any) -> Any:
        return type(self)(os.path.join(os.path.realpath(workspace()), os.fspath(self)))

    def expanduser(self: Any) -> Any:
        text = os.fspath(self)
        if text == "~" or text.startswith("~" + os.sep):
            return type(self)(os.path.realpath(workspace()) + text[1:])
        if text.startswith("~"):
            raise refuse("expanding another user's home directory", "use paths inside the workspace")
        return self

    def here(cls: Any) -> Any:
        return cls(os.path.realpath(workspace()))

    namespace: dict[str, Any] = {name: checked(name) for name in _METADATA}
    namespace.update(
        _in_workspace=_in_workspace,
        resolve=resolve,
        absolute=absolute,
        expanduser=expanduser,
        cwd=classmethod(here),
        home=classmethod(here),
        __module__="pathlib",
        __qualname__="Path",
        __slots__=(),
    )
    session = type("Path", (base,), namespace)
    return {pathlib.Path: session, base: session}
