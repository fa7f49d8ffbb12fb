#!/usr/bin/env python3
"""A Debian sid root that provides the CPythons pyenv does not have here (3.14 and 3.15).

    python3 scripts/pyroot.py ensure            # build the root unless a complete one exists
    python3 scripts/pyroot.py run CMD ...       # run CMD inside it, in the checkout's directory
    python3 scripts/pyroot.py remove            # delete it (refused while anything is mounted under it)

The root lives outside the checkout (default /var/tmp/genpark-pyroot-sid, or $GENPARK_PYROOT) so later runs
reuse it; a stamp file written last marks it complete, and a root without one is rebuilt from scratch.

Safety: nothing is ever mounted under the root in the host's mount namespace. Every command runs in a private
mount and PID namespace (unshare), where proc, a fresh devpts, a tmpfs /dev/shm and the checkout (bound at its
own absolute path, so venvs made inside have the same paths as seen from the host) are mounted; the mounts and
every process left behind (a redis-server, a Ray daemon) end with the command. The host's /dev is never bound.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
ROOT = Path(os.environ.get("GENPARK_PYROOT", "/var/tmp/genpark-pyroot-sid"))
STAMP = ROOT / ".genpark-pyroot-complete"
SUITE = "sid"
# The interpreters (3.14 is sid's python3), compilers and headers for a wheel that must build, the Redis store
# tests' server, and tini: the PID namespace's init, which reaps orphans so a test that waits for a worker
# to vanish does not see a zombie.
PACKAGES = (
    "python3",
    "python3-venv",
    "python3-dev",
    "python3.15",
    "python3.15-venv",
    "python3.15-dev",
    "gcc",
    "g++",
    "make",
    "redis-server",
    "tini",
    "ca-certificates",
    "git",
)
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# Inside the root nothing of the host's environment applies (its PATH, pyenv, venvs); pip uses PyPI with the
# host's CA bundle, copied in.
ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
    "PIP_CERT": str(CA_BUNDLE),
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "PIP_DEFAULT_TIMEOUT": "180",
    "DEBIAN_FRONTEND": "noninteractive",
}
PASS_ENV = ("TERM", "CI", "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")


def _digest() -> str:
    return hashlib.sha256(" ".join((SUITE, *PACKAGES)).encode()).hexdigest()


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below `path` in this process's mount namespace."""
    prefix = str(path.resolve()).rstrip("/")
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            found.append(point)
    return found


def _processes_inside(path: Path) -> list[int]:
    """Processes whose root directory is `path` (a command still running in the root)."""
    target = str(path.resolve())
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                root = os.readlink(entry / "root")
            except OSError:
                continue
            if root == target or root.startswith(target + "/"):
                pids.append(int(entry.name))
    return pids


def remove() -> None:
    """Delete the root; refused while anything is mounted under it or a process runs inside it.

    rm -rf follows bind mounts into what they show: with the host's /dev or the checkout bound under the root,
    deleting it would delete those. Our own mounts live only in private namespaces, so a mount seen here is
    someone else's, and is never deleted through.
    """
    if not ROOT.exists():
        return
    mounted = mounts_under(ROOT)
    if mounted:
        raise SystemExit(f"pyroot: refusing to delete {ROOT}: mounted under it: {', '.join(mounted)}")
    busy = _processes_inside(ROOT)
    if busy:
        raise SystemExit(f"pyroot: refusing to delete {ROOT}: processes run inside it: {busy}")
    shutil.rmtree(ROOT)


def apt_mirror() -> str:
    """The Debian mirror apt uses on this machine (deb.debian.org when none is configured)."""
    sources = [Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")]
    for source in sources:
        if not source.exists():
            continue
        text = source.read_text()
        match = re.search(r"^URIs:\s*(\S+/debian)/?\s*$", text, re.MULTILINE) or re.search(
            r"^deb\s+(?:\[[^]]*\]\s+)?(\S+/debian)/?\s", text, re.MULTILINE
        )
        if match:
            return match.group(1)
    return "http://deb.debian.org/debian"


def ensure_debootstrap() -> str:
    found = shutil.which("debootstrap") or (
        "/usr/sbin/debootstrap" if Path("/usr/sbin/debootstrap").exists() else None
    )
    if found:
        return found
    print("pyroot: installing debootstrap (apt-get) ...", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "debootstrap"], check=True, env=env)
    return shutil.which("debootstrap") or "/usr/sbin/debootstrap"


def ensure() -> Path:
    """Build the root unless a complete one (stamp present and current) exists; return its path."""
    if STAMP.exists() and STAMP.read_text() == _digest():
        return ROOT
    if os.geteuid() != 0:
        raise SystemExit(
            "pyroot: building the Python 3.14/3.15 root needs root (debootstrap, chroot, unshare)"
        )
    if ROOT.exists() and STAMP.exists():
        # Complete but for an older package list: add what is new rather than start again.
        print(f"pyroot: updating the packages of {ROOT} ...", flush=True)
        _apt(["update", "-qq"])  # the lists may predate a package that is new in PACKAGES
        _apt(["install", "-y", "-qq", "--no-install-recommends", *PACKAGES])
        STAMP.write_text(_digest())
        return ROOT
    remove()  # a half-built root: start again
    debootstrap = ensure_debootstrap()
    mirror = apt_mirror()
    print(f"pyroot: building a Debian {SUITE} root in {ROOT} from {mirror} (a minute or two) ...", flush=True)
    ROOT.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [debootstrap, "--variant=minbase", "--include=python3,python3-venv", SUITE, str(ROOT), mirror],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    for name in ("etc/resolv.conf", str(CA_BUNDLE).lstrip("/")):
        target = ROOT / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            target.unlink()
        shutil.copyfile("/" + name, target)
    # The mirror may serve a frozen snapshot whose Release file is past its Valid-Until date.
    (ROOT / "etc/apt/apt.conf.d/99genpark-no-valid-until").write_text('Acquire::Check-Valid-Until "false";\n')
    (ROOT / "dev/ptmx").touch(exist_ok=True)  # the mount point of the devpts instance's ptmx
    _apt(["update", "-qq"])
    _apt(["install", "-y", "-qq", "--no-install-recommends", *PACKAGES])
    # ca-certificates rebuilds the bundle from Debian's list: keep the host's (it may hold a proxy's CA).
    shutil.copyfile(CA_BUNDLE, ROOT / str(CA_BUNDLE).lstrip("/"))
    STAMP.write_text(_digest())
    return ROOT


def _apt(args: list[str]) -> None:
    code = run(["apt-get", *args], cwd="/")
    if code:
        raise SystemExit(f"pyroot: apt-get {' '.join(args)} failed inside {ROOT} (exit {code})")


def command(cmd: list[str], cwd: str | Path | None = None) -> list[str]:
    """The host command that runs `cmd` inside the root, in `cwd` (default: the checkout).

    The root must exist (ensure() builds it). The mounts are made in a private mount namespace and the
    command is the child of tini, PID 1 of a PID namespace of its own: when it ends, everything it left
    running ends too, and no mount ever appears in the host's namespace.
    """
    if not (ROOT / "usr/bin").exists():
        raise SystemExit(f"pyroot: no root at {ROOT} (python3 scripts/pyroot.py ensure)")
    checkout = str(CHECKOUT)
    for mount_point in (checkout.lstrip("/"), "dev/pts", "dev/shm"):
        (ROOT / mount_point).mkdir(parents=True, exist_ok=True)
    env = {**ENV, **{k: os.environ[k] for k in PASS_ENV if k in os.environ}}
    root = shlex.quote(str(ROOT))
    setup = " && ".join(
        [
            f"mount -t proc proc {root}/proc",
            f"mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts {root}/dev/pts",
            f"mount --bind {root}/dev/pts/ptmx {root}/dev/ptmx",
            f"mount -t tmpfs -o mode=1777 tmpfs {root}/dev/shm",
            f"mount --bind {shlex.quote(checkout)} {root}{shlex.quote(checkout)}",
        ]
    )
    init = ["/usr/bin/tini", "-s", "-g", "--"] if (ROOT / "usr/bin/tini").exists() else []
    inner = ["env", "-i", *(f"{k}={v}" for k, v in env.items())]
    inner += ["sh", "-c", 'cd "$0" && exec "$@"', str(cwd or checkout), *cmd]
    script = f"{setup} && exec chroot {root} {shlex.join(init + inner)}"
    namespaces = ["--mount", "--propagation", "private", "--pid", "--fork", "--kill-child"]
    return ["unshare", *namespaces, "sh", "-c", script]


def run(cmd: list[str], cwd: str | Path | None = None) -> int:
    """Run `cmd` inside the root (see command()); return its exit status."""
    return subprocess.call(command(cmd, cwd))


def main(argv: list[str]) -> int:
    task = argv[0] if argv else "help"
    if task == "ensure":
        print(ensure())
        return 0
    if task == "run" and len(argv) > 1:
        ensure()
        return run(argv[1:], cwd=Path.cwd() if Path.cwd().is_relative_to(CHECKOUT) else None)
    if task == "remove":
        remove()
        return 0
    print(__doc__)
    return 0 if task in ("help", "-h", "--help") else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
