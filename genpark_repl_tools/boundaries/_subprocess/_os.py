"""The host's OS decisions for the subprocess boundary: which user workers run as, where their
workspaces live, and what each session's directory is called."""

from __future__ import annotations

import os
import re
import shutil
import stat
import sys
import tempfile
from hashlib import sha1
from pathlib import Path
from typing import Literal

from ..._exceptions import BoundaryError
from ...policy import Policy

__all__ = ["prepare_workspace_root", "resolve_user", "session_dirname"]

_NOBODY = 65534
# The directory the workers import this boundary from (the package is checked on the way to it).
_BOUNDARIES_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def resolve_user(user: int | Literal["auto"] | None) -> tuple[int | None, str | None]:
    """The uid workers switch to (None: keep the host's), and why "auto" kept root if it did."""
    if user is None:
        return None, "user=None"
    if user != "auto":
        if not isinstance(user, int) or isinstance(user, bool) or user < 0:
            raise ValueError(f"user must be 'auto', None or a uid, got {user!r}")
        return user, None
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None, None
    blocked = _first_private_path(_interpreter_paths())
    if blocked is not None:
        return None, (
            f"{blocked} is not readable by other users, so a worker running as uid {_NOBODY} could not "
            "import from this Python installation"
        )
    return _NOBODY, None


def _interpreter_paths() -> list[str]:
    import sysconfig

    paths = {os.path.dirname(os.__file__), os.path.realpath(sys.executable), _BOUNDARIES_DIR}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path and os.path.exists(path):
            paths.add(path)
    return sorted(paths)


def _first_private_path(paths: list[str]) -> str | None:
    """The first directory on the way to `paths` that others cannot search or read, if any."""
    for path in paths:
        target = Path(path)
        for part in (*reversed(target.parents), target):
            try:
                mode = os.stat(part).st_mode
            except OSError:
                return str(part)
            needed = 0o004 if part == target and not stat.S_ISDIR(mode) else 0o001
            if part == target and stat.S_ISDIR(mode):
                needed = 0o005
            if mode & needed != needed:
                return str(part)
    return None


def prepare_workspace_root(given: str | Path | None, policy: Policy, *, dropping: bool) -> tuple[Path, bool]:
    """The directory holding the sessions' workspaces, and whether the boundary made it (and removes it)."""
    if given is None and policy.workspace is not None:
        given = policy.workspace
    if given is None:
        parent = Path(tempfile.gettempdir())
        if dropping and _closed_to_others(parent) is not None and _closed_to_others(Path("/tmp")) is None:
            # A private $TMPDIR (0700, as pytest's and some desktops' are) is closed to the workers'
            # user: their workspaces go to /tmp instead, in a 0711 directory of the boundary's own.
            parent = Path("/tmp")
        root = Path(tempfile.mkdtemp(prefix="genpark-repl-", dir=parent))
        if dropping:
            os.chmod(root, 0o711)  # the unprivileged worker must reach its own directory inside
            _check_reachable(root, owned=True)
        return root, True
    root = Path(given).resolve()
    root.mkdir(parents=True, exist_ok=True)
    if dropping:
        _check_reachable(root, owned=False)
    return root, False


def _closed_to_others(path: Path) -> Path | None:
    """The first of `path` and its parents that a user other than its owner cannot enter, if any."""
    for part in (path, *path.parents):
        try:
            if not os.stat(part).st_mode & 0o001:
                return part
        except OSError:
            return part
    return None


def _check_reachable(root: Path, *, owned: bool) -> None:
    closed = _closed_to_others(root)
    if closed is None:
        return
    if owned:
        shutil.rmtree(root, ignore_errors=True)
    raise BoundaryError(
        f"workers run as an unprivileged user and cannot reach {root}: {closed} is not searchable by "
        f"others (chmod o+x {closed}), or pass user=None"
    )


def session_dirname(session: str) -> str:
    """A directory name for any session id: readable, safe, and unique by a hash of the id."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", session)[:40].lstrip(".") or "session"
    return f"{safe}-{sha1(session.encode('utf-8', 'surrogatepass')).hexdigest()[:10]}"
