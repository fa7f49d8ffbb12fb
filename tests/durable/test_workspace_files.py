"""Workspace files are part of what a stored session keeps: a store save holds them in the same
signed blob, and a restore in another engine (another workspace root, another process's store
handle) writes them back, refusing any name or planted link that would lead out of the workspace."""

from __future__ import annotations

import hashlib
import hmac
import os
import shutil
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _durable_support import KEY

from genpark_repl_tools import Limits, ReplEngine
from genpark_repl_tools.snapshot import SessionSnapshot, SnapshotAuthError
from genpark_repl_tools.snapshot._format import MAGIC, files_section, read_manifest
from genpark_repl_tools.stores import SessionStore, SQLiteStore

pytestmark = pytest.mark.slow

BOUNDARIES = ["subprocess", "inprocess"]
CSV = b"city,temp\nOslo,3\nLima,19\n"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
WRITE = (
    "prices = [3, 19]\n"
    "with open('data.csv', 'wb') as f:\n"
    f"    f.write({CSV!r})\n"
    "with open('plot.png', 'wb') as f:\n"
    f"    f.write({PNG!r})\n"
)
READ = "prices, read('data.csv') == CSV, read('plot.png') == PNG"
# with: a file left open would be collected in this (in-process) host, which pytest turns into an error
HELPERS = (
    f"CSV = {CSV!r}\nPNG = {PNG!r}\n"
    + "def read(name):\n    with open(name, 'rb') as f:\n        return f.read()\n"
)


def engine(
    boundary: str, root: Path, store: SessionStore | None = None, policy: str = "standard", **options: Any
) -> ReplEngine:
    """An engine of its own workspace root (as another host's or process's would be)."""
    if boundary == "subprocess":
        pytest.importorskip("genpark_repl_tools.boundaries.subprocess")
        options["workspace_root"] = root
        root.mkdir(parents=True, exist_ok=True)
        for parent in root.parents:  # pytest's own temporary directories are closed to the workers' user
            if parent.stat().st_uid == os.geteuid():
                parent.chmod(parent.stat().st_mode | 0o001)
    return ReplEngine(
        policy=policy, boundary=boundary, store=store, snapshot_key=KEY, save_every_s=None, **options
    )


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore.from_path(tmp_path / "sessions.db", lease_wait_s=10) as store:
        yield store


def check_files_come_back(boundary: str, store: SessionStore, tmp_path: Path) -> None:
    with engine(boundary, tmp_path / "a", store) as first:
        assert first.run(WRITE, session="conv").status == "ok"
        first.upload("conv", "in/raw.json", b'{"k": 1}')  # a directory too
        assert first.run("prices.append(7)", session="conv").status == "ok"  # saved with the upload
        made = first.boundary.session_workspace("conv")
        assert made is not None
        first_workspace = made.path
    manifest = read_manifest(store.get("conv").data)  # type: ignore[union-attr]
    assert {(f.name, f.size) for f in manifest.files} == {
        ("data.csv", len(CSV)),
        ("plot.png", len(PNG)),
        ("in/raw.json", 8),
    }
    assert manifest.files_not_saved is None

    with engine(boundary, tmp_path / "b", store) as second:
        assert second.files("conv") == []  # another root: nothing of the first engine's there
        assert second.run(HELPERS, session="conv").status == "ok"
        result = second.run(READ, session="conv")
        assert (result.status, result.value) == ("ok", "([3, 19, 7], True, True)")
        restored = second.run("1", session="conv")  # restored on the first run, not again
        assert restored.session_restored is None
        assert second.download("conv", "in/raw.json") == b'{"k": 1}'
        workspace = second.boundary.session_workspace("conv")
        assert workspace is not None
        assert workspace.path != first_workspace  # in-process: a temporary root of each engine's own
        if workspace.owner is not None:  # a worker of another user must own what it gets back
            assert os.stat(workspace.path / "data.csv").st_uid == workspace.owner[0]


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_files_come_back_in_another_engine(boundary: str, sqlite_store: SQLiteStore, tmp_path: Path) -> None:
    check_files_come_back(boundary, sqlite_store, tmp_path)


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_the_restore_says_which_files_came_back(
    boundary: str, sqlite_store: SQLiteStore, tmp_path: Path
) -> None:
    with engine(boundary, tmp_path / "a", sqlite_store) as first:
        assert first.run(WRITE, session="conv").status == "ok"
    with engine(boundary, tmp_path / "b", sqlite_store) as second:
        result = second.run("len(prices)", session="conv")
        assert result.session_restored is not None
        assert sorted(result.session_restored.files) == ["data.csv", "plot.png"]
        assert "Its workspace files are back: data.csv, plot.png." in result.to_observation()


def test_files_come_back_through_redis(redis_url: str, redis_prefix: str, tmp_path: Path) -> None:
    from genpark_repl_tools.stores import RedisStore

    with RedisStore(redis_url, prefix=redis_prefix, lease_wait_s=10) as store:
        check_files_come_back("subprocess", store, tmp_path)


def test_a_hibernated_session_finds_its_files_where_they_were(
    sqlite_store: SQLiteStore, tmp_path: Path
) -> None:
    with engine("subprocess", tmp_path / "a", sqlite_store) as same:
        assert same.run(WRITE, session="conv").status == "ok"
        workspace = same.boundary.session_workspace("conv")
        assert workspace is not None
        before = os.stat(workspace.path / "data.csv")
        assert same.hibernate("conv")
        result = same.run("len(prices)", session="conv")
        assert result.session_restored is not None
        assert sorted(result.session_restored.files) == ["data.csv", "plot.png"]
        after = os.stat(workspace.path / "data.csv")
        # Left as it was: the same inode, not a copy written over it.
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_only_regular_files_are_saved(sqlite_store: SQLiteStore, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("host secret")
    code = (
        "import os\n"
        "open('kept.txt', 'w').write('kept')\n"
        "os.mkfifo('pipe')\n"
        f"os.symlink({str(outside)!r}, 'alias.txt')\n"
    )
    with engine("subprocess", tmp_path / "a", sqlite_store, policy="trusted") as first:
        assert first.run(code, session="conv").status == "ok"
    blob = sqlite_store.get("conv").data  # type: ignore[union-attr]
    assert b"host secret" not in blob  # the link was not followed by the host that packed the files
    assert [f.name for f in read_manifest(blob).files] == ["kept.txt"]
    with engine("subprocess", tmp_path / "b", sqlite_store, policy="trusted") as second:
        result = second.run("import os; sorted(os.listdir('.'))", session="conv")
        assert (result.status, result.value) == ("ok", "['kept.txt']")


# ---- hostile blobs: signed with the key (a key holder, or a bug), still refused name by name ----


def blob_with_files(boundary: str, root: Path, files: dict[str, bytes]) -> bytes:
    """A real session's snapshot with a files section of these names, signed with the key."""
    with engine(boundary, root) as source:
        source.run("x = 1", session="src")
        bare = source.snapshot("src")
    entries = [(name, len(data), 1_700_000_000_000_000_000) for name, data in files.items()]
    section = files_section(entries, None, list(files.values()))
    return bare.with_files(section, KEY).to_bytes()


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_names_that_leave_the_workspace_are_refused(boundary: str, tmp_path: Path) -> None:
    blob = blob_with_files(
        boundary,
        tmp_path / "src",
        {
            "../escaped.txt": b"out",
            "../../escaped.txt": b"out",
            str(tmp_path / "absolute.txt"): b"out",
            "ok/nested.txt": b"in",
        },
    )
    with engine(boundary, tmp_path / "root" / "ws") as target:
        restored = target.restore("conv", blob)
        assert restored.files == ["ok/nested.txt"]
        assert target.download("conv", "ok/nested.txt") == b"in"
        warnings = " ".join(restored.warnings)
        assert "contains '..'" in warnings and "is absolute" in warnings
        assert list(tmp_path.rglob("*escaped*")) == []
        assert not (tmp_path / "absolute.txt").exists()


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_links_planted_in_the_target_workspace_are_not_followed(boundary: str, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("untouched")
    blob = blob_with_files(
        boundary,
        tmp_path / "src",
        {"sub/victim.txt": b"overwritten", "link.txt": b"overwritten", "ok.txt": b"ok"},
    )
    with engine(boundary, tmp_path / "root" / "ws") as target:
        workspace = target.boundary.session_workspace("conv", create=True)
        assert workspace is not None
        workspace.path.mkdir(parents=True, exist_ok=True)
        os.symlink(outside, workspace.path / "sub")  # a directory link on the way
        os.symlink(outside / "victim.txt", workspace.path / "link.txt")  # a link at the name itself
        restored = target.restore("conv", blob)
        assert restored.files == ["ok.txt"]
        assert len([w for w in restored.warnings if "was not written back" in w]) == 2
        assert (outside / "victim.txt").read_text() == "untouched"
        assert sorted(p.name for p in outside.iterdir()) == ["victim.txt"]
        assert os.path.islink(workspace.path / "link.txt")  # refused, not replaced either


def test_the_files_are_inside_what_the_hmac_covers(tmp_path: Path) -> None:
    blob = bytearray(blob_with_files("inprocess", tmp_path / "src", {"data.csv": CSV}))
    assert blob.startswith(b"GPRSNAP2")
    blob[blob.index(CSV)] ^= 1  # one bit of the file's bytes
    with engine("inprocess", tmp_path / "ws") as target:
        with pytest.raises(SnapshotAuthError):
            target.restore("conv", bytes(blob))
        assert target.files("conv") == []


def test_the_manifest_lists_only_what_the_files_section_holds(tmp_path: Path) -> None:
    # A sandboxed worker writes the header: files it claims there are not listed.
    with engine("inprocess", tmp_path / "src") as source:
        source.run("x = 1", session="src")
        bare = source.snapshot("src")
    header = json_header(bare)
    header["manifest"]["files"] = [
        {"name": "forged.txt", "size": 1, "modified": "2026-01-01T00:00:00Z", "type": "x"}
    ]
    claimed = SessionSnapshot.sign(header, bare.payload, bare.buffers, KEY)
    assert claimed.manifest.files == []
    assert SessionSnapshot.from_bytes(claimed.to_bytes()).manifest.files == []


def json_header(snapshot: SessionSnapshot) -> dict[str, Any]:
    import json

    data: dict[str, Any] = json.loads(snapshot.header)
    return data


# ---- limits and older blobs ----------------------------------------------------------------------


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_files_over_the_quota_are_left_out_and_the_run_says_so(
    boundary: str, sqlite_store: SQLiteStore, tmp_path: Path
) -> None:
    limits = Limits(max_workspace_bytes=4_000)
    code = (
        "kept = 42\n"
        "with open('big.bin', 'wb') as f:\n    f.write(b'x' * 5_000)\n"
        "with open('small.txt', 'w') as f:\n    f.write('s')\n"
    )
    with engine(boundary, tmp_path / "a", sqlite_store, limits=limits) as first:
        result = first.run(code, session="conv")
        assert result.status == "ok"
        note = " ".join(result.notes)
        assert "workspace files were not saved to the store" in note
        assert "big.bin (5,000 bytes)" in note and "Its variables were saved." in note
    manifest = read_manifest(sqlite_store.get("conv").data)  # type: ignore[union-attr]
    assert manifest.files == [] and manifest.files_not_saved is not None
    with engine(boundary, tmp_path / "b", sqlite_store, limits=limits) as second:
        back = second.run("kept", session="conv")
        assert (back.status, back.value) == ("ok", "42")
        assert "the workspace files were not saved with this session" in back.to_observation()
        assert second.files("conv") == []


@pytest.mark.parametrize("limit", ["snapshot", "store"])
def test_files_that_would_pass_the_blob_limits_are_left_out(limit: str, tmp_path: Path) -> None:
    # Within the workspace quota, but the blob would pass the snapshot limit or the store's entry
    # limit, which would refuse the variables with it: the files stay out, the variables go in.
    cap = 40_000
    limits = Limits(max_snapshot_bytes=cap) if limit == "snapshot" else Limits()
    code = "kept = 42\nwith open('big.bin', 'wb') as f:\n    f.write(b'x' * 50_000)\n"
    with (
        SQLiteStore.from_path(tmp_path / "s.db", max_entry_bytes=cap if limit == "store" else None) as store,
        engine("inprocess", tmp_path / "a", store, limits=limits) as first,
    ):
        result = first.run(code, session="conv")
        note = " ".join(result.notes)
        which = "Limits.max_snapshot_bytes" if limit == "snapshot" else "the store's max_entry_bytes"
        assert f"{which}, beside the variables, leaves for them" in note
        assert "Its variables were saved." in note
        stored = store.get("conv")
        assert stored is not None and len(stored.data) <= cap
        assert read_manifest(stored.data).files_not_saved is not None


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_a_blob_of_the_older_format_loads(boundary: str, sqlite_store: SQLiteStore, tmp_path: Path) -> None:
    # Laid out by hand as blobs were before they could hold files, and signed the same way.
    with engine(boundary, tmp_path / "src") as source:
        source.run("values = {'a': [1, 2]}", session="src")
        bare = source.snapshot("src")
    buffers = [bytes(b) for b in bare.buffers]
    body = b"".join(
        [
            b"GPRSNAP1",
            struct.pack("<I", len(bare.header)),
            bare.header,
            struct.pack("<Q", len(bare.payload)),
            bare.payload,
            struct.pack("<I", len(buffers)),
            *(struct.pack("<Q", len(b)) + b for b in buffers),
        ]
    )
    assert MAGIC == b"GPRSNAP1"
    sqlite_store.put("conv", body + hmac.new(KEY, body, hashlib.sha256).digest())
    with engine(boundary, tmp_path / "b", sqlite_store) as target:
        result = target.run("values['a']", session="conv")
        assert (result.status, result.value) == ("ok", "[1, 2]")
        assert result.session_restored is not None and result.session_restored.files == []


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="workers of another user need root"
)
def test_files_come_back_owned_by_the_workers_user(sqlite_store: SQLiteStore) -> None:
    # Outside pytest's own temporary directory, which only root may enter.
    root = Path(tempfile.mkdtemp(prefix="genpark-owner-"))
    try:
        root.chmod(0o711)
        with engine("subprocess", root / "a", sqlite_store) as first:
            first.upload("conv", "in/raw.json", b"{}")
            assert first.run(WRITE, session="conv").status == "ok"
        with engine("subprocess", root / "b", sqlite_store, user=65534) as second:
            # The worker may change what came back, and add files beside it.
            code = (
                "with open('data.csv', 'a') as f:\n    f.write('Rome,12\\n')\n"
                "with open('in/more.json', 'w') as f:\n    f.write('{}')\n"
                "len(open('data.csv').read().splitlines())"
            )
            result = second.run(code, session="conv")
            assert (result.status, result.value) == ("ok", "4")
            workspace = second.boundary.session_workspace("conv")
            assert workspace is not None and workspace.owner == (65534, 65534)
            for name in ("data.csv", "plot.png", "in", "in/raw.json"):
                assert os.stat(workspace.path / name).st_uid == 65534, name
    finally:
        shutil.rmtree(root, ignore_errors=True)
