"""A session's workspace files in a store save: packed on the host, written back on a restore.

Security model: the session's code chose what its workspace holds and how it is named, and a
restore may write into a workspace where links were planted. Packing reads regular files only,
through `_files.read_file` (no symlink followed at any depth; the opened descriptor is checked to be
a regular file, so FIFOs and devices are never opened for reading), within a byte budget and the
walk's bounds on entries, depth and time. Writing back checks each name as an upload's
(`check_name`: relative, no '..', bounded), walks to its directory one component at a time without
following a link (a link in the way refuses that file), refuses a symlink, directory or special file
at the name itself, and writes a fresh temporary file renamed into place. The section is read only
after the snapshot's HMAC, which covers it, was checked.

The section's layout: `_format.files_section`.
"""

from __future__ import annotations

import os

from .._exceptions import FileError, FileQuotaExceeded
from .._files import (
    MAX_DEPTH,
    MAX_SCANNED,
    QUOTA_SCAN_SECONDS,
    WorkspaceDir,
    _directory,  # the walk to a name's directory that follows no link (uploads use it too)
    _refuse_special,
    check_name,
    read_file,
    walk,
    write_at,
)
from .._limits import Limits
from ._format import FileEntry, files_index, files_section

__all__ = ["pack_files", "restore_files"]

_LARGEST_SHOWN = 3


def _size(size: int) -> str:
    return f"{size:,} bytes" if size < 1_000_000 else f"{size / 1e6:,.1f} MB"


def pack_files(
    workspace: WorkspaceDir | None, budget: int, limit: str = "the limit"
) -> tuple[bytes | None, str | None]:
    """The files section of `workspace`'s regular files, at most `budget` bytes (what `limit`, a
    name for the model, leaves for them), and None; or, when
    they do not fit or cannot all be seen, a section holding none of them and the reason. (None,
    None): there are no files. All or none: a part of them could be a state the session never had."""
    if workspace is None:
        return None, None
    found = walk(workspace.path, max_seconds=QUOTA_SCAN_SECONDS)
    if not found.complete:
        reason = (
            f"the workspace has more than {MAX_SCANNED:,} entries or {MAX_DEPTH} levels, or took too "
            "long to read; delete files and directories that are not needed"
        )
        return files_section([], reason), reason
    if not found.files:
        return None, None
    budget = max(budget, 0)
    total = sum(st.st_size for _, st in found.files)
    sizes = {name: st.st_size for name, st in found.files}
    if total > budget:
        return _refused(sizes, total, budget, limit)
    entries: list[FileEntry] = []
    contents: list[bytes] = []
    left = budget
    for name, st in sorted(found.files):
        try:
            data = read_file(workspace, name, left)
        except FileQuotaExceeded:  # it grew past what is left since the walk
            return _refused(sizes, total, budget, limit)
        except FileError:  # removed, or replaced by a link or a FIFO, since the walk: not one to keep
            continue
        left -= len(data)
        entries.append((name, len(data), st.st_mtime_ns))
        contents.append(data)
    section = files_section(entries, None, contents)
    if len(section) > budget:  # the index itself did not fit
        return _refused(sizes, len(section), budget, limit)
    return section, None


def _refused(sizes: dict[str, int], total: int, budget: int, limit: str) -> tuple[bytes, str]:
    largest = sorted(sizes.items(), key=lambda item: -item[1])[:_LARGEST_SHOWN]
    shown = ", ".join(f"{name} ({_size(size)})" for name, size in largest)
    reason = (
        f"they take {_size(total)}, over the {_size(budget)} {limit} leaves for them; "
        f"the largest: {shown}. Delete what is not needed to make them fit"
    )
    return files_section([], reason), reason


def restore_files(
    workspace: WorkspaceDir, section: bytes | memoryview, limits: Limits
) -> tuple[list[str], list[str]]:
    """Write an authenticated section's files into `workspace`: the names the workspace now holds as
    the snapshot had them, and warnings (files not written, and why; files that were not saved).

    A file already there with the snapshot's size and modification time is left as it is: the
    workspace this engine kept while the session hibernated needs no copy."""
    entries, reason, at = files_index(section)
    warnings = [] if reason is None else [f"the workspace files were not saved with this session: {reason}"]
    total = sum(size for _, size, _ in entries)
    if total > limits.max_workspace_bytes:
        warnings.append(
            f"the stored workspace files ({_size(total)}) are over this engine's workspace quota of "
            f"{_size(limits.max_workspace_bytes)} (Limits.max_workspace_bytes); none were written back"
        )
        return [], warnings
    view = memoryview(section)
    back: list[str] = []
    for name, size, mtime in entries:
        data = view[at : at + size]
        at += size
        try:
            parts = check_name(name)
            _write(workspace, parts, data, mtime)
        except (FileError, OSError) as exc:
            warnings.append(f"workspace file {name!r:.80} was not written back: {exc}")
            continue
        back.append("/".join(parts))
    return back, warnings


def _write(workspace: WorkspaceDir, parts: list[str], data: memoryview, mtime_ns: int) -> None:
    shown = "/".join(parts)
    with _directory(workspace.path, parts, create=True, owner=workspace.owner) as dfd:
        try:
            old: os.stat_result | None = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            old = None
        if old is not None:
            _refuse_special(old, shown)
            if old.st_size == len(data) and old.st_mtime_ns == mtime_ns:
                return
        # So the next restore on this host sees the file is there already.
        write_at(dfd, parts[-1], data, workspace.owner, mtime_ns)
