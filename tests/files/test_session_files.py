"""Files in and out of a session, on both boundaries: upload, list, download, delete,
what a run changed, quotas, and names or links that would lead the host outside the workspace."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from genpark_repl_tools import (
    FileNotFound,
    FileQuotaExceeded,
    Limits,
    ReplEngine,
    ReplError,
    UnsafeFileName,
)

BOUNDARIES = ["inprocess", "subprocess"]
CSV = b"city,temp\nOslo,4\nLima,19\n"
BLOB = bytes(range(256)) * 40  # every byte value: a download must be byte-identical


@pytest.fixture(scope="module", params=BOUNDARIES)
def boundary(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def standard(boundary: str) -> Iterator[ReplEngine]:
    with ReplEngine(policy="standard", boundary=boundary, limits=Limits(timeout_s=20)) as engine:
        yield engine


@pytest.fixture(scope="module")
def trusted(boundary: str) -> Iterator[ReplEngine]:
    with ReplEngine(policy="trusted", boundary=boundary, limits=Limits(timeout_s=20)) as engine:
        yield engine


def workspace_of(engine: ReplEngine, session: str) -> Path:
    found = engine.boundary.session_workspace(session)
    assert found is not None
    return found.path


def test_an_upload_is_read_by_pandas(standard: ReplEngine, boundary: str) -> None:
    pytest.importorskip("pandas")
    info = standard.upload("csv", "data.csv", CSV)
    assert (info.name, info.size, info.type) == ("data.csv", len(CSV), "text/csv")
    # In-process, libraries resolve relative paths against the host's directory (docs/files.md):
    # code opens the file itself. In a worker the workspace is the current directory.
    if boundary == "inprocess":
        read = "with open('data.csv') as f:\n    df = pd.read_csv(f)"
    else:
        read = "df = pd.read_csv('data.csv')"
    result = standard.run(f"import pandas as pd\n{read}\nint(df.temp.sum())", "csv")
    assert result.ok, result.to_observation()
    assert result.value == "23"
    assert result.files == []  # the upload is not the run's change


def test_a_written_file_is_in_the_result_and_downloads_byte_identical(standard: ReplEngine) -> None:
    code = f"with open('out.bin', 'wb') as f:\n    f.write({BLOB!r})"
    result = standard.run(code, "write")
    assert result.ok, result.to_observation()
    assert [(c.name, c.change, c.size) for c in result.files] == [("out.bin", "created", len(BLOB))]
    assert "Files: wrote out.bin (10.2 KB)" in result.to_observation()
    assert standard.download("write", "out.bin") == BLOB
    assert [(f.name, f.size) for f in standard.files("write")] == [("out.bin", len(BLOB))]


def test_changes_and_deletions_are_reported_once(standard: ReplEngine) -> None:
    standard.run("with open('a.txt', 'w') as f:\n    f.write('one')", "changes")
    modified = standard.run("with open('a.txt', 'w') as f:\n    f.write('three')", "changes")
    assert [(c.name, c.change, c.size) for c in modified.files] == [("a.txt", "modified", 5)]
    assert standard.run("x = 1", "changes").files == []
    standard.delete_file("changes", "a.txt")
    assert standard.files("changes") == []
    assert standard.run("x = 2", "changes").files == []  # the host's delete is not the run's change


def test_a_deletion_by_code_is_reported(trusted: ReplEngine) -> None:
    trusted.upload("del", "old.csv", CSV)
    path = workspace_of(trusted, "del") / "old.csv"
    result = trusted.run(f"import os\nos.remove({str(path)!r})", "del")
    assert result.ok, result.to_observation()
    assert [(c.name, c.change) for c in result.files] == [("old.csv", "deleted")]
    assert "Files: deleted old.csv" in result.to_observation()


def test_nested_names_upload_and_list(standard: ReplEngine) -> None:
    standard.upload("nested", "in/raw/x.json", b"{}")
    assert [f.name for f in standard.files("nested")] == ["in/raw/x.json"]
    assert standard.download("nested", "in/raw/x.json") == b"{}"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("../escape.txt", "contains '..'"),
        ("a/../../escape.txt", "contains '..'"),
        ("/etc/passwd", "is absolute"),
        ("nul\x00byte", "contains a NUL byte"),
        ("x" * 300, "longer than 255 bytes"),
        ("", "must not be empty"),
        (".", "names the workspace itself"),
        ("tab\there", "control characters"),
    ],
)
def test_names_that_escape_are_refused(standard: ReplEngine, name: str, message: str) -> None:
    for call in (
        lambda: standard.upload("names", name, b"x"),
        lambda: standard.download("names", name),
        lambda: standard.delete_file("names", name),
    ):
        with pytest.raises(UnsafeFileName, match=re.escape(message)) as caught:
            call()
        assert isinstance(caught.value, ReplError)


def test_a_symlink_planted_by_code_does_not_lead_the_host_outside(
    trusted: ReplEngine, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text("host secret")
    os.chmod(tmp_path, 0o755)
    os.chmod(outside, 0o777)
    trusted.upload("links", "seed.txt", b"seed")
    ws = workspace_of(trusted, "links")
    code = (
        "import os\n"
        f"os.symlink({str(secret)!r}, {str(ws / 'link.txt')!r})\n"
        f"os.symlink({str(outside)!r}, {str(ws / 'dir')!r})"
    )
    result = trusted.run(code, "links")
    assert result.ok, result.to_observation()
    with pytest.raises(UnsafeFileName, match=re.escape("'link.txt' is a symlink")):
        trusted.download("links", "link.txt")
    with pytest.raises(UnsafeFileName, match=re.escape("'dir' is not a directory of the workspace")):
        trusted.download("links", "dir/secret.txt")
    with pytest.raises(UnsafeFileName, match=re.escape("'link.txt' is a symlink")):
        trusted.upload("links", "link.txt", b"overwritten")
    with pytest.raises(UnsafeFileName, match=re.escape("'dir' is not a directory of the workspace")):
        trusted.upload("links", "dir/secret.txt", b"overwritten")
    with pytest.raises(UnsafeFileName, match=re.escape("'dir' is not a directory of the workspace")):
        trusted.upload("links", "dir/new.txt", b"new")
    assert secret.read_text() == "host secret"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert [f.name for f in trusted.files("links")] == ["seed.txt"]  # links are not listed
    trusted.delete_file("links", "link.txt")  # removes the link, never its target
    assert secret.read_text() == "host secret"
    assert not (ws / "link.txt").is_symlink()


def test_a_fifo_is_not_read(trusted: ReplEngine) -> None:
    trusted.upload("fifo", "seed.txt", b"seed")
    ws = workspace_of(trusted, "fifo")
    assert trusted.run(f"import os\nos.mkfifo({str(ws / 'pipe')!r})", "fifo").ok
    with pytest.raises(UnsafeFileName, match=re.escape("not a regular file")):
        trusted.download("fifo", "pipe")  # O_NONBLOCK: refused at once, never blocks
    assert [f.name for f in trusted.files("fifo")] == ["seed.txt"]


def test_quotas(boundary: str) -> None:
    limits = Limits(timeout_s=20, max_upload_bytes=1000, max_workspace_bytes=1500)
    with ReplEngine(policy="standard", boundary=boundary, limits=limits) as engine:
        with pytest.raises(
            FileQuotaExceeded, match=re.escape("'big.bin' has 1,001 bytes; the per-file limit is 1,000 bytes")
        ):
            engine.upload("q", "big.bin", b"x" * 1001)
        engine.upload("q", "a.bin", b"x" * 900)
        # The workspace counts what its files take on disk (whole blocks), not their lengths.
        on_disk = os.stat(workspace_of(engine, "q") / "a.bin").st_blocks * 512
        assert on_disk >= 900
        with pytest.raises(
            FileQuotaExceeded,
            match=re.escape(f"would fill the workspace past its quota of 1,500 bytes ({on_disk:,} used)"),
        ):
            engine.upload("q", "b.bin", b"x" * 700)
        engine.upload("q", "a.bin", b"x" * 1000)  # replacing a file counts its old blocks out
        engine.delete_file("q", "a.bin")
        engine.upload("q", "b.bin", b"x" * 700)
        assert [(f.name, f.size) for f in engine.files("q")] == [("b.bin", 700)]
        written = engine.run("with open('c.bin', 'wb') as f:\n    f.write(b'y' * 2000)", "q")
        assert written.ok, written.to_observation()
        with pytest.raises(
            FileQuotaExceeded, match=re.escape("'c.bin' has 2,000 bytes; the download limit is 1,000 bytes")
        ):
            engine.download("q", "c.bin")


def test_missing_files_and_sessions(standard: ReplEngine) -> None:
    with pytest.raises(FileNotFound, match=re.escape("no file 'nope.txt'")):
        standard.download("never-used", "nope.txt")
    assert standard.files("never-used") == []
    standard.upload("missing", "a.txt", b"a")
    with pytest.raises(FileNotFound, match=re.escape("no file 'b.txt' in the workspace")):
        standard.download("missing", "b.txt")
    with pytest.raises(FileNotFound):
        standard.delete_file("missing", "b.txt")


def test_upload_from_a_host_path(standard: ReplEngine, tmp_path: Path) -> None:
    source = tmp_path / "report.csv"
    source.write_bytes(CSV)
    standard.upload("path", "report.csv", source)
    standard.upload("path", "again.csv", str(source))
    assert standard.download("path", "report.csv") == standard.download("path", "again.csv") == CSV
    with pytest.raises(TypeError, match=re.escape("data must be bytes or a path")):
        standard.upload("path", "x.csv", 42)  # type: ignore[arg-type]


def test_each_session_has_its_own_workspace(standard: ReplEngine) -> None:
    standard.upload("own-a", "only-a.txt", b"a")
    assert standard.files("own-b") == []
    result = standard.run("open('only-a.txt').read()", "own-b")
    assert result.status == "error"
    assert [f.name for f in standard.files("own-a")] == ["only-a.txt"]


def test_strict_code_has_no_files_but_the_host_does(boundary: str) -> None:
    with ReplEngine(policy="strict", boundary=boundary, limits=Limits(timeout_s=20)) as engine:
        engine.upload("s", "in.txt", b"data")
        assert engine.run("open('in.txt').read()", "s").status in ("blocked", "error")
        assert engine.download("s", "in.txt") == b"data"


def test_closing_a_session_removes_its_files(boundary: str) -> None:
    with ReplEngine(policy="standard", boundary=boundary, limits=Limits(timeout_s=20)) as engine:
        engine.upload("c", "a.txt", b"a")
        ws = workspace_of(engine, "c")
        assert (ws / "a.txt").exists()
        assert engine.close("c")
        assert not ws.exists()
        assert engine.files("c") == []


@pytest.mark.parametrize("checkpoints", [True, False], ids=["rolled-back", "restarted"])
def test_files_survive_a_lost_worker(checkpoints: bool) -> None:
    limits = Limits(timeout_s=20)
    with ReplEngine("trusted", boundary="subprocess", limits=limits, checkpoints=checkpoints) as engine:
        engine.upload("r", "in.csv", CSV)
        assert engine.run("with open('made.txt', 'w') as f:\n    f.write('kept')", "r").ok
        crashed = engine.run("import os\nos._exit(3)", "r")
        assert crashed.status == "crashed", crashed.to_observation()
        assert crashed.rolled_back is checkpoints, crashed.to_observation()
        after = engine.run("open('made.txt').read(), open('in.csv').read()", "r")
        # A checkpoint brings the worker back as it was before the cell; without one it starts empty.
        assert after.session_restarted is not checkpoints and after.ok, after.to_observation()
        assert after.value == repr(("kept", CSV.decode()))
        assert engine.download("r", "made.txt") == b"kept"
