"""The Pythons the package claims are the ones CI runs; the root that provides two is deleted safely."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
PYROOT = str(SCRIPTS / "pyroot.py")


@pytest.fixture(name="dev", scope="module")
def dev_fixture() -> Iterator[ModuleType]:
    sys.path.insert(0, str(SCRIPTS))
    try:
        import dev

        yield dev
    finally:
        sys.path.remove(str(SCRIPTS))


def test_requires_python_has_a_floor_and_no_cap(dev: ModuleType) -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == f">={dev.MATRIX[0]}"


def test_classifiers_name_exactly_the_matrix(dev: ModuleType) -> None:
    classifiers = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["classifiers"]
    named = [
        m.group(1)
        for c in classifiers
        if (m := re.fullmatch(r"Programming Language :: Python :: (3\.\d+)", c))
    ]
    assert named == list(dev.MATRIX)


def test_matrix_is_consecutive_and_runs_everything_on_its_ends(dev: ModuleType) -> None:
    minors = [int(v.split(".")[1]) for v in dev.MATRIX]
    assert minors == list(range(minors[0], minors[-1] + 1))
    assert set(dev.FULL_ON) == {dev.MATRIX[0], dev.MATRIX[-1]}
    assert set(dev.ROOTED) <= set(dev.MATRIX)


def test_full_runs_excuse_exactly_what_requirements_leave_out(dev: ModuleType) -> None:
    # A package dev.txt installs only below some Python may be missing from a full run there; nothing else.
    left_out = {}
    for line in (REPO / "requirements/dev.txt").read_text().splitlines():
        marked = re.match(r'([A-Za-z0-9_.-]+)[^;#]*;\s*python_version\s*<\s*"(3\.\d+)"', line)
        if marked:
            left_out[marked.group(1).replace("-", "_")] = marked.group(2)
    assert left_out == dev.NOT_BEFORE
    assert set(dev.NOT_BEFORE) <= set(dev.FULL_MODULES)


# ---- the Debian root: never deleted through a mount -----------------------------------------------
def _no_private_mounts() -> str | None:
    """Why this process cannot make a private mount namespace, or None if it can."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "needs root and unshare (a private mount namespace)"
    probe = ["unshare", "--mount", "--propagation", "private", "true"]
    done = subprocess.run(probe, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode:
        # In the 3.14/3.15 root (a chroot) / is no mount point, so its propagation cannot be changed.
        return f"no private mount namespace here: {done.stderr.strip()}"
    return None


NO_PRIVATE_MOUNTS = _no_private_mounts()
needs_root = pytest.mark.skipif(NO_PRIVATE_MOUNTS is not None, reason=str(NO_PRIVATE_MOUNTS))

# In a private mount namespace (gone when the process ends): mount a tmpfs under the fake root, try to
# delete the root, and report whether the file on the tmpfs survived.
REMOVE_WITH_A_MOUNT = """
mount -t tmpfs tmpfs "$GENPARK_PYROOT/inside" && echo precious > "$GENPARK_PYROOT/inside/file" &&
{ python3 "$1" remove; echo "remove exit $?"; } ; cat "$GENPARK_PYROOT/inside/file"
"""


@needs_root
def test_remove_refuses_a_root_with_a_mount_under_it(tmp_path: Path) -> None:
    root = tmp_path / "pyroot"
    (root / "inside").mkdir(parents=True)
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", REMOVE_WITH_A_MOUNT, "sh", PYROOT],
        env={**os.environ, "GENPARK_PYROOT": str(root)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "remove exit 1" in done.stdout, done
    assert f"refusing to delete {root}: mounted under it: {root}/inside" in done.stderr
    assert done.stdout.rstrip().endswith("precious")
    assert (root / "inside").is_dir()


def test_remove_deletes_a_root_with_nothing_mounted(tmp_path: Path) -> None:
    root = tmp_path / "pyroot"
    (root / "inside").mkdir(parents=True)
    (root / "inside/file").write_text("stale")
    subprocess.run(
        [sys.executable, PYROOT, "remove"],
        env={**os.environ, "GENPARK_PYROOT": str(root)},
        check=True,
        timeout=60,
    )
    assert not root.exists()


def _oldest_unsupported() -> Path | None:
    """An interpreter older than the floor, where this machine has one (pyenv keeps 3.7-3.9 here)."""
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    found = sorted(root.glob("3.[6789].*/bin/python3"))
    return found[-1] if found else None


def test_dev_script_refuses_an_unsupported_python_before_making_anything(tmp_path: Path) -> None:
    old = _oldest_unsupported()
    if old is None:
        pytest.skip("no Python older than 3.10 on this machine")
    clone = tmp_path / "clone"
    shutil.copytree(SCRIPTS, clone / "scripts")
    shutil.copy(REPO / "pyproject.toml", clone)
    command = [str(old), "scripts/dev.py", "demo"]
    done = subprocess.run(command, cwd=clone, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0
    assert "needs Python 3.10 or newer" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not (clone / ".venv").exists()


def test_a_venv_made_by_another_python_is_made_again(dev: ModuleType, tmp_path: Path) -> None:
    other = "3.9.18" if sys.version_info[:2] != (3, 9) else "3.12.1"
    (tmp_path / "pyvenv.cfg").write_text(f"home = /usr/bin\nversion = {other}\n")
    assert dev._made_by_another_python(tmp_path)
    mine = ".".join(map(str, sys.version_info[:3]))
    (tmp_path / "pyvenv.cfg").write_text(f"home = /usr/bin\nversion_info = {mine}.final.0\n")
    assert not dev._made_by_another_python(tmp_path)
    assert not dev._made_by_another_python(tmp_path / "absent")
