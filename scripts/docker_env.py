#!/usr/bin/env python3
"""Docker for the container boundary's tests and benchmarks: a daemon, a base image, a test image.

    python3 scripts/docker_env.py            # make everything ready; prints a JSON summary as its last line
    python3 scripts/docker_env.py --no-test-image

Every step is skipped when its result is already there, so a second run on the same machine takes about a
second:
- the `docker` CLI and `dockerd`: apt-get install docker.io when either is missing;
- a daemon: when none answers, `dockerd --iptables=false --bridge=none` is started in its own session, its
  output in /var/log/genpark-dockerd.log and its pid in /var/run/genpark-dockerd.pid (it keeps running, for
  the next run; no registry is reachable here, so every image is made locally);
- the base image (genpark-repl-base:bookworm): Debian bookworm's minbase with python3 and python3-venv, made
  by debootstrap from the mirror apt uses and imported with `docker import`. The root directory is built
  beside the image's cache and deleted once imported; it is never deleted while anything is mounted under it,
  and nothing of the host (its /dev in particular) is ever bound into it;
- the test image: `genpark-repl image build` of this checkout on the base image, with a probe package that
  exists only in the image (genpark_image_probe, a wheel written here) and tqdm. Its tag carries a digest
  of the package's sources, so an edit rebuilds it (and removes the older test images). Run it with the
  checkout's venv Python (.venv/bin/python): the build runs this package's CLI.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pyroot  # scripts/pyroot.py: the Debian mirror, debootstrap, mount checks

CHECKOUT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("GENPARK_DOCKER_CACHE", "/var/tmp/genpark-docker"))
BASE_IMAGE = "genpark-repl-base:bookworm"
TEST_IMAGE = "genpark-repl-test"
PROBE = "genpark_image_probe"
DOCKERD_LOG = Path("/var/log/genpark-dockerd.log")
DOCKERD_PIDFILE = Path("/var/run/genpark-dockerd.pid")


def _log(message: str) -> None:
    print(f"docker_env: {message}", file=sys.stderr, flush=True)


def _docker(*args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], check=check, timeout=timeout, text=True, capture_output=True)


def _daemon_answers() -> bool:
    try:
        return _docker("version", "--format", "{{.Server.Version}}", check=False, timeout=15).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def ensure_installed() -> None:
    if shutil.which("docker") and shutil.which("dockerd"):
        return
    if os.geteuid() != 0:
        raise SystemExit("docker_env: docker.io is not installed and installing it needs root")
    _log("installing docker.io (apt-get) ...")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # apt's progress goes to stderr: stdout's last line is this script's summary.
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, stdout=sys.stderr)
    subprocess.run(["apt-get", "install", "-y", "-qq", "docker.io"], check=True, env=env, stdout=sys.stderr)


def ensure_daemon() -> None:
    if _daemon_answers():
        return
    _log(f"starting dockerd (log {DOCKERD_LOG}) ...")
    DOCKERD_LOG.parent.mkdir(parents=True, exist_ok=True)
    with DOCKERD_LOG.open("ab") as log:
        process = subprocess.Popen(
            ["dockerd", "--iptables=false", "--bridge=none"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # outlives this script and the test run that called it
        )
    DOCKERD_PIDFILE.write_text(f"{process.pid}\n")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"docker_env: dockerd exited with {process.returncode}; see {DOCKERD_LOG}")
        if _daemon_answers():
            return
        time.sleep(0.5)
    raise SystemExit(f"docker_env: dockerd gave no answer within 60 s; see {DOCKERD_LOG}")


def _image_exists(name: str) -> bool:
    return _docker("image", "inspect", name, check=False, timeout=30).returncode == 0


def _remove_root(root: Path) -> None:
    """rm -rf follows nothing, but a bind mount under the root would show another tree there: refuse."""
    if not root.exists():
        return
    mounted = pyroot.mounts_under(root)
    if mounted:
        raise SystemExit(f"docker_env: refusing to delete {root}: mounted under it: {', '.join(mounted)}")
    shutil.rmtree(root)


def ensure_base_image() -> str:
    if _image_exists(BASE_IMAGE):
        return BASE_IMAGE
    if os.geteuid() != 0:
        raise SystemExit("docker_env: building the base image needs root (debootstrap)")
    debootstrap = pyroot.ensure_debootstrap()
    root = CACHE / "rootfs-bookworm"
    _remove_root(root)  # a half-built root from an interrupted run: start again
    root.parent.mkdir(parents=True, exist_ok=True)
    mirror = pyroot.apt_mirror()
    _log(f"debootstrap bookworm from {mirror} into {root} (about a minute) ...")
    subprocess.run(
        [debootstrap, "--variant=minbase", "--include=python3,python3-venv", "bookworm", str(root), mirror],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    # The package caches and lists are of no use in an image that never runs apt.
    for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (root / cache).glob("*.deb" if "archives" in cache else "*_*"):
            entry.unlink()
    _log(f"importing {BASE_IMAGE} ...")
    tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
    subprocess.run(
        ["docker", "import", "-", BASE_IMAGE], stdin=tar.stdout, check=True, stdout=subprocess.DEVNULL
    )
    if tar.wait() != 0:
        raise SystemExit("docker_env: tar of the base root failed")
    _remove_root(root)
    return BASE_IMAGE


def _probe_wheel(directory: Path) -> Path:
    """A one-module wheel that exists only in the test image (no build backend or network needed)."""
    name = f"{PROBE}-1.0-py3-none-any.whl"
    path = directory / name
    files = {
        f"{PROBE}.py": b'WHERE = "image"\n',
        f"{PROBE}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {PROBE}\nVersion: 1.0\n".encode(),
        f"{PROBE}-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: docker_env\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = []
    for arcname, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{arcname},sha256={digest},{len(data)}")
    record.append(f"{PROBE}-1.0.dist-info/RECORD,,")
    files[f"{PROBE}-1.0.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(path, "w") as archive:
        for arcname, data in files.items():
            archive.writestr(zipfile.ZipInfo(arcname, (2020, 1, 1, 0, 0, 0)), data)
    return path


def _sources_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted((CHECKOUT / "genpark_repl_tools").rglob("*.py")):
        digest.update(str(path.relative_to(CHECKOUT)).encode())
        digest.update(path.read_bytes())
    digest.update((CHECKOUT / "pyproject.toml").read_bytes())
    return digest.hexdigest()[:12]


def ensure_test_image(base: str) -> str:
    tag = f"{TEST_IMAGE}:{_sources_digest()}"
    if _image_exists(tag):
        return tag
    work = CACHE / "test-image"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    wheel = _probe_wheel(work)
    requirements = work / "requirements.txt"
    # tqdm: the conformance suite checks its progress bars inside a session.
    requirements.write_text(f"{wheel}\ntqdm\n")
    _log(f"building {tag} ...")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "genpark_repl_tools.cli",
            "image",
            "build",
            "--tag",
            tag,
            "--base",
            base,
            "--requirements",
            str(requirements),
        ],
        check=True,
        cwd=CHECKOUT,
    )
    # Earlier test images (older sources) are of no further use; layers they share with this one stay.
    listed = _docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}", TEST_IMAGE, check=False)
    stale = [name for name in listed.stdout.split() if name != tag]
    if stale:
        _docker("image", "rm", *stale, check=False)
    return tag


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--no-test-image", action="store_true", help="stop after the base image")
    args = parser.parse_args()
    ensure_installed()
    ensure_daemon()
    base = ensure_base_image()
    summary = {"base_image": base}
    if not args.no_test_image:
        summary["test_image"] = ensure_test_image(base)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
