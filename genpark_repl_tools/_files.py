"""Files in and out of a session: the host's own operations on a session's workspace directory.

Security model: the session's code may have planted anything in its workspace (symlinks to
`/etc`, FIFOs, device nodes, deep trees). Every host operation starts from a descriptor of the
workspace directory and walks the name one component at a time with `openat`-style calls
(`dir_fd=`, `O_NOFOLLOW`, `O_DIRECTORY`), so no symlink, at any depth and whenever it was
planted, redirects a host read or write outside the workspace. Reads open the final component
`O_NOFOLLOW | O_NONBLOCK` and accept only a regular file (checked with `fstat` on the opened
descriptor, so a swap after the check cannot change what is read). Writes go to a fresh temporary
name (`O_CREAT | O_EXCL`) and are renamed over the target inside the same directory descriptor,
so a symlink at the target is replaced, never followed. The workspace directory itself is trusted
(the boundary made it; sandboxed code cannot replace it).
"""

from __future__ import annotations

import mimetypes
import os
import re
import secrets
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ._exceptions import FileNotFound, FileQuotaExceeded, UnsafeFileName
from ._limits import Limits
from ._models import FileChange, FileInfo

__all__ = ["FileTracker", "WorkspaceDir", "check_name", "list_files", "read_file", "write_file"]

MAX_NAME_CHARS = 1024  # the whole relative name
MAX_COMPONENT_BYTES = 255  # one path component, as the filesystem counts it
MAX_DEPTH = 16
MAX_SCANNED = 10_000  # entries of every kind one walk looks at; a larger workspace is seen in part
MAX_SCAN_SECONDS = 0.05  # host time one walk may take: it runs after every run of a session with files
QUOTA_SCAN_SECONDS = 1.0  # an upload's walk: refused when it cannot finish, so it gets longer

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

Snapshot = dict[str, tuple[int, int]]  # name -> (size, mtime_ns)

_UPLOAD_TEMP = re.compile(r"\.upload-[0-9a-f]{12}\.part")  # write_file's own name, while it writes
_perf_counter = time.perf_counter


@dataclass(frozen=True, slots=True)
class WorkspaceDir:
    """Where a session's files live on this host, and who must own what the host puts there."""

    path: Path
    owner: tuple[int, int] | None = None  # (uid, gid) of the worker, when it runs as another user


def check_name(name: object) -> list[str]:
    """The name's components, or UnsafeFileName saying why it is refused."""
    if not isinstance(name, str):
        raise UnsafeFileName(f"a file name must be a str, not {type(name).__name__}")
    shown = repr(name)[:80]
    if not name:
        raise UnsafeFileName("a file name must not be empty")
    if "\x00" in name:
        raise UnsafeFileName(f"file name {shown} contains a NUL byte")
    if len(name) > MAX_NAME_CHARS:
        raise UnsafeFileName(f"file name is {len(name):,} characters long; the limit is {MAX_NAME_CHARS:,}")
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise UnsafeFileName(f"file name {shown} is absolute; use a name relative to the workspace")
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts:
        raise UnsafeFileName(f"file name {shown} names the workspace itself, not a file in it")
    if ".." in parts:
        raise UnsafeFileName(f"file name {shown} contains '..'; names must stay inside the workspace")
    if len(parts) > MAX_DEPTH:
        raise UnsafeFileName(
            f"file name {shown} is nested {len(parts)} directories deep; the limit is {MAX_DEPTH}"
        )
    for part in parts:
        if len(part.encode("utf-8", "surrogateescape")) > MAX_COMPONENT_BYTES:
            raise UnsafeFileName(
                f"a component of file name {shown} is longer than {MAX_COMPONENT_BYTES} bytes"
            )
        if not part.isprintable():
            raise UnsafeFileName(f"file name {shown} contains control characters")
    return parts


@contextmanager
def _directory(root: Path, parts: list[str], *, create: bool, owner: tuple[int, int] | None) -> Iterator[int]:
    """A descriptor of the directory holding `parts[-1]`, walked without following any symlink."""
    try:
        fd = os.open(root, _DIR_FLAGS)
    except FileNotFoundError:
        if not create:
            raise FileNotFound("the session has no files yet") from None
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        if owner is not None:
            os.chown(root, *owner)
        fd = os.open(root, _DIR_FLAGS)
    try:
        for i, part in enumerate(parts[:-1]):
            shown = "/".join(parts[: i + 1])
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise FileNotFound(f"no directory '{shown}' in the workspace") from None
                os.mkdir(part, 0o700, dir_fd=fd)
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                if owner is not None:
                    os.fchown(child, *owner)
            except OSError as exc:  # ELOOP: a symlink; ENOTDIR: a file
                raise UnsafeFileName(
                    f"'{shown}' is not a directory of the workspace (a symlink or a file)"
                ) from exc
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _entry(fd: int, name: str, shown: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _refuse_special(st: os.stat_result, shown: str) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeFileName(
            f"'{shown}' is a symlink; only regular files in the workspace are read or replaced"
        )
    if stat.S_ISDIR(st.st_mode):
        raise UnsafeFileName(f"'{shown}' is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeFileName(f"'{shown}' is not a regular file (a device, FIFO or socket)")


def read_file(ws: WorkspaceDir, name: str, max_bytes: int) -> bytes:
    parts = check_name(name)
    shown = "/".join(parts)
    with _directory(ws.path, parts, create=False, owner=None) as dfd:
        try:
            fd = os.open(parts[-1], _READ_FLAGS, dir_fd=dfd)
        except FileNotFoundError:
            raise FileNotFound(f"no file '{shown}' in the workspace") from None
        except OSError as exc:  # ELOOP: the last component is a symlink
            st = _entry(dfd, parts[-1], shown)
            if st is not None:
                _refuse_special(st, shown)
            raise UnsafeFileName(f"'{shown}' cannot be read: {exc.strerror}") from exc
        try:
            st = os.fstat(fd)
            _refuse_special(st, shown)
            if st.st_size > max_bytes:
                raise FileQuotaExceeded(
                    f"'{shown}' has {st.st_size:,} bytes; the download limit is {max_bytes:,} bytes"
                )
            chunks = []
            total = 0
            while chunk := os.read(fd, 1 << 20):
                total += len(chunk)
                if total > max_bytes:  # grew while being read
                    raise FileQuotaExceeded(
                        f"'{shown}' is larger than the download limit of {max_bytes:,} bytes"
                    )
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)


def write_file(ws: WorkspaceDir, name: str, data: bytes, limits: Limits) -> FileInfo:
    parts = check_name(name)
    shown = "/".join(parts)
    if len(data) > limits.max_upload_bytes:
        raise FileQuotaExceeded(
            f"'{shown}' has {len(data):,} bytes; the per-file limit is {limits.max_upload_bytes:,} bytes"
        )
    # Every entry counts at what it takes on disk, whatever its name or kind; a workspace too big
    # to count within the walk's bounds is refused rather than guessed.
    found = walk(ws.path, max_seconds=QUOTA_SCAN_SECONDS)
    if not found.complete:
        raise FileQuotaExceeded(
            f"uploading '{shown}' was refused: the workspace is too large to check its quota (over "
            f"{MAX_SCANNED:,} entries or {MAX_DEPTH} levels); delete files or directories first"
        )
    used = found.disk_bytes
    with _directory(ws.path, parts, create=True, owner=ws.owner) as dfd:
        old = _entry(dfd, parts[-1], shown)
        if old is not None:
            _refuse_special(old, shown)
            if old.st_nlink == 1:  # the last link: its blocks are freed when it is replaced
                used -= _disk_bytes(old)
        if used + len(data) > limits.max_workspace_bytes:
            raise FileQuotaExceeded(
                f"uploading '{shown}' ({len(data):,} bytes) would fill the workspace past its quota "
                f"of {limits.max_workspace_bytes:,} bytes ({used:,} used)"
            )
        st = write_at(dfd, parts[-1], data, ws.owner)
    return _info(shown, st)


def write_at(
    dfd: int, name: str, data: bytes | memoryview, owner: tuple[int, int] | None, mtime_ns: int | None = None
) -> os.stat_result:
    """Write `data` as `name` in the directory `dfd`: whole, under a temporary name walks skip, then
    renamed into place, which replaces a link planted at the name and never follows it."""
    tmp = f".upload-{secrets.token_hex(6)}.part"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
    try:
        try:
            if owner is not None:
                os.fchown(fd, *owner)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if mtime_ns is not None:
                os.utime(fd, ns=(mtime_ns, mtime_ns))
            st = os.fstat(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp, dir_fd=dfd)
        raise
    return st


def delete_file(ws: WorkspaceDir, name: str) -> None:
    parts = check_name(name)
    shown = "/".join(parts)
    with _directory(ws.path, parts, create=False, owner=None) as dfd:
        st = _entry(dfd, parts[-1], shown)
        if st is None:
            raise FileNotFound(f"no file '{shown}' in the workspace")
        if stat.S_ISDIR(st.st_mode):
            raise UnsafeFileName(f"'{shown}' is a directory; delete the files in it")
        os.unlink(parts[-1], dir_fd=dfd)  # unlink removes a symlink itself, never its target


def _info(name: str, st: os.stat_result) -> FileInfo:
    return FileInfo(
        name=name,
        size=st.st_size,
        modified=datetime.fromtimestamp(st.st_mtime, tz=timezone.utc),
        type=mimetypes.guess_type(name)[0] or "application/octet-stream",
    )


class Scan:
    """What one bounded walk of a workspace saw: its regular files, the bytes on disk of every entry
    it looked at, and whether it saw everything (`complete`; False when a bound stopped it)."""

    __slots__ = ("complete", "disk_bytes", "files")

    def __init__(self) -> None:
        self.files: list[tuple[str, os.stat_result]] = []
        self.disk_bytes = 0
        self.complete = True


class FileList(list[FileInfo]):
    """`list_files`' answer: a list of FileInfo that also says whether the walk saw everything."""

    complete = True


def _disk_bytes(st: os.stat_result) -> int:
    # What the entry really takes on disk: a sparse file counts its blocks, not its length.
    blocks = getattr(st, "st_blocks", None)
    return st.st_size if blocks is None else blocks * 512


def walk(path: Path | str, *, max_entries: int = MAX_SCANNED, max_seconds: float = MAX_SCAN_SECONDS) -> Scan:
    """Every entry under `path` (directories, links, FIFOs as well as files), looked at without
    following a symlink, until `max_entries` entries, MAX_DEPTH levels or `max_seconds` of the
    host's time: the session's code chose the tree's shape, so each bound holds whatever it is."""
    scan = Scan()
    deadline = _perf_counter() + max_seconds
    seen = 0
    linked: set[tuple[int, int]] = set()  # hard links are on disk once

    def visit(fd: int, prefix: str, depth: int) -> bool:
        """False once a bound stopped the walk."""
        nonlocal seen
        with os.scandir(fd) as entries:
            for entry in entries:
                seen += 1
                if seen > max_entries or _perf_counter() > deadline:
                    return False
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:  # gone since it was listed
                    continue
                if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                    key = (st.st_dev, st.st_ino)
                    if key in linked:
                        continue
                    linked.add(key)
                scan.disk_bytes += _disk_bytes(st)
                name = prefix + entry.name
                if stat.S_ISREG(st.st_mode):
                    if not _UPLOAD_TEMP.fullmatch(entry.name):
                        scan.files.append((name, st))
                elif stat.S_ISDIR(st.st_mode):
                    if depth + 1 >= MAX_DEPTH:
                        scan.complete = False  # deeper entries exist and are not looked at
                        continue
                    try:
                        child = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                    except OSError:  # replaced by a link or removed since it was listed
                        continue
                    try:
                        if not visit(child, name + "/", depth + 1):
                            return False
                    finally:
                        os.close(child)
        return True

    try:
        root = os.open(path, _DIR_FLAGS)
    except FileNotFoundError:
        return scan
    try:
        if not visit(root, "", 0):
            scan.complete = False
    finally:
        os.close(root)
    return scan


def list_files(ws: WorkspaceDir) -> FileList:
    found = walk(ws.path)
    listed = FileList(sorted((_info(name, st) for name, st in found.files), key=lambda f: f.name))
    listed.complete = found.complete
    return listed


def diff(before: Snapshot, after: Snapshot, *, complete: bool = True) -> list[FileChange]:
    """What changed from `before` to `after`; a name missing from an incomplete `after` may only be
    out of the part looked at, so it is not reported deleted."""
    changes: list[FileChange] = []
    for name, (size, mtime) in after.items():
        old = before.get(name)
        if old is None:
            changes.append(FileChange(name=name, change="created", size=size))
        elif old != (size, mtime):
            changes.append(FileChange(name=name, change="modified", size=size))
    if complete:
        changes.extend(FileChange(name=name, change="deleted") for name in before.keys() - after.keys())
    return sorted(changes, key=lambda c: c.name)


PARTIAL_SCAN_NOTE = (
    f"The workspace is too large to scan in full ({MAX_SCANNED:,} entries, {MAX_DEPTH} levels); "
    "file changes are listed for the part scanned. Delete files and directories you no longer need."
)


class FileTracker:
    """What each session's workspace held after its last result, to report what a run changed.

    Cost for a session that never had files: one `stat` of its workspace directory per run (its
    modification time changes when an entry is added or removed), none when the boundary's write
    stamp says the run wrote nothing there. Once a file is there, the workspace is walked after
    each run, within `walk`'s bounds (entries of every kind, depth, host time): a file opened in an
    earlier run can be written without a new stamp.
    """

    def __init__(self) -> None:
        self._known: dict[str, Snapshot] = {}  # sessions with files: their last scan
        self._empty: dict[str, int] = {}  # sessions without: their directory's mtime_ns
        self._stamps: dict[str, int] = {}  # sessions without: the write stamp when it was taken

    def changes(
        self, session: str, path: Path | str | None, stamp: int | None = None
    ) -> tuple[list[FileChange], bool]:
        """What the run that just ended changed in `path`, and whether the whole workspace was
        looked at (False: a bound of `walk` stopped it; PARTIAL_SCAN_NOTE says so). `stamp` is the
        boundary's write stamp (BaseBoundary.workspace_writes), taken after the run; None: the
        directory is looked at."""
        if path is None:
            return [], True
        before = self._known.get(session)
        if before is None:
            if stamp is not None and self._stamps.get(session) == stamp:
                return [], True  # empty when last looked at, and nothing written there since
            try:
                mtime = os.stat(path).st_mtime_ns
            except OSError:
                return [], True
            if stamp is not None:
                self._stamps[session] = stamp  # taken before the look: a later write differs
            if self._empty.get(session) == mtime:
                return [], True
            self._empty[session] = mtime
            before = {}
        after, complete = self._rescan(session, path)
        return diff(before, after, complete=complete), complete

    def refresh(self, session: str, path: Path) -> None:
        """After a host operation: what the host did is not the next run's change."""
        self._stamps.pop(session, None)  # the next run looks at the directory again
        if not self._rescan(session, path)[0]:
            try:
                self._empty[session] = os.stat(path).st_mtime_ns
            except OSError:
                self._empty.pop(session, None)

    def _rescan(self, session: str, path: Path | str) -> tuple[Snapshot, bool]:
        """What `path` holds now (within the walk's bounds), kept as the session's last known state."""
        found = walk(path)
        after = {name: (st.st_size, st.st_mtime_ns) for name, st in found.files}
        if after:
            self._known[session] = after
            self._empty.pop(session, None)
        else:
            self._known.pop(session, None)
        return after, found.complete

    def forget(self, session: str) -> None:
        self._known.pop(session, None)
        self._empty.pop(session, None)
        self._stamps.pop(session, None)
