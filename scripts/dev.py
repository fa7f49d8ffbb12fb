#!/usr/bin/env python3
"""Project tasks that work on a fresh clone with only python3 and pip.

    python3 scripts/dev.py demo     # run examples/quickstart.py
    python3 scripts/dev.py test     # run every test (creates .venv and installs what tests need)
    python3 scripts/dev.py lint     # ruff + mypy
    python3 scripts/dev.py bench [--quick]   # benchmarks against bare exec and peers

Each task creates `.venv` on first use and reinstalls only when a requirements file changed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"

# What each task installs into .venv, on top of the core package itself.
PROFILES: dict[str, list[str]] = {
    "demo": ["-e", "."],
    "test": [
        "-e",
        ".[mcp]",
        "-e",
        "integrations/langchain",
        "-e",
        "integrations/llamaindex",
        "-r",
        "requirements/dev.txt",
    ],
}


def _ensure_venv(profile: str) -> None:
    if not PY.exists():
        print(f"creating {VENV.relative_to(ROOT)} ...", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    args = PROFILES[profile]
    digest = hashlib.sha256(" ".join(args).encode())
    for i, arg in enumerate(args):
        if i and args[i - 1] == "-r":
            digest.update((ROOT / arg).read_bytes())
        if i and args[i - 1] == "-e":
            for name in ("pyproject.toml",):
                path = ROOT / arg.split("[")[0] / name
                if path.exists():
                    digest.update(path.read_bytes())
    stamp = VENV / f".installed-{profile}"
    if stamp.exists() and stamp.read_text() == digest.hexdigest():
        return
    print(
        f"installing the {profile} dependencies into .venv (first run takes a minute or two) ...", flush=True
    )
    subprocess.run(
        [str(PY), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args], cwd=ROOT, check=True
    )
    stamp.write_text(digest.hexdigest())


def _ensure_redis_server() -> None:
    """The Redis store's tests start a real redis-server; install it with apt-get where it is missing."""
    if shutil.which("redis-server") or not shutil.which("apt-get"):
        return
    sudo = ["sudo"] if hasattr(os, "geteuid") and os.geteuid() != 0 else []
    print("installing redis-server (apt-get) for the Redis store tests ...", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run([*sudo, "apt-get", "update", "-qq"], check=False, env=env)
    subprocess.run([*sudo, "apt-get", "install", "-y", "-qq", "redis-server"], check=False, env=env)


def _run(cmd: list[str]) -> int:
    return subprocess.call(cmd, cwd=ROOT)


# ---- bench: a separate .venv-bench, so the peers never enter the test environment -----------------
BENCH_VENV = ROOT / ".venv-bench"
BENCH_PY = BENCH_VENV / ("Scripts" if os.name == "nt" else "bin") / "python"


def _bench_stamp(with_peers: bool) -> tuple[list[str], Path, str]:
    args = ["-e", ".[sandbox]"]
    if (ROOT / "integrations/langchain/pyproject.toml").exists():
        args += ["-e", "integrations/langchain"]
    if with_peers:
        args += ["-r", "benchmarks/requirements.txt"]
    digest = hashlib.sha256(" ".join(args).encode())
    for path in ("pyproject.toml", "integrations/langchain/pyproject.toml", "benchmarks/requirements.txt"):
        if (ROOT / path).exists():
            digest.update((ROOT / path).read_bytes())
    stamp = BENCH_VENV / (".installed-bench" if with_peers else ".installed-bench-core")
    return args, stamp, digest.hexdigest()


def _ensure_bench_venv(with_peers: bool) -> Path:
    """.venv-bench: the project and its LangChain adapter, plus (with_peers) the tools compared with."""
    args, stamp, digest = _bench_stamp(with_peers)
    if BENCH_PY.exists() and stamp.exists() and stamp.read_text() == digest:
        return BENCH_PY
    if not BENCH_PY.exists():
        print(f"creating {BENCH_VENV.relative_to(ROOT)} ...", flush=True)
        venv.EnvBuilder(with_pip=True).create(BENCH_VENV)
    what = "the project and the benchmark peers" if with_peers else "the project"
    print(f"installing {what} into .venv-bench ...", flush=True)
    pip = [str(BENCH_PY), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, *args], cwd=ROOT, check=True)
    stamp.write_text(digest)
    return BENCH_PY


def _bench(rest: list[str]) -> int:
    # --quick uses the peers when a full run installed them, and does not wait for their install otherwise.
    _, stamp, digest = _bench_stamp(with_peers=True)
    with_peers = "--quick" not in rest or (stamp.exists() and stamp.read_text() == digest)
    try:
        python = _ensure_bench_venv(with_peers)
    except (subprocess.CalledProcessError, OSError) as exc:
        # Offline or a peer that does not install here: still measure our own executors.
        print(f"could not set up .venv-bench ({exc}); benchmarking our executors only", file=sys.stderr)
        _ensure_venv("test")
        python = PY
        if not any(arg.startswith("--executors") for arg in rest):
            rest = [*rest, "--executors", "ours"]
    return _run([str(python), "benchmarks/run.py", *rest])


def main(argv: list[str]) -> int:
    task = argv[0] if argv else "help"
    rest = argv[1:]
    if task == "demo":
        _ensure_venv("demo")
        return _run([str(PY), "examples/quickstart.py", *rest])
    if task == "test":
        _ensure_venv("test")
        _ensure_redis_server()
        return _run([str(PY), "-m", "pytest", *rest])
    if task == "lint":
        _ensure_venv("test")
        code = _run([str(PY), "-m", "ruff", "check", "."])
        code |= _run([str(PY), "-m", "ruff", "format", "--check", "."])
        return code | _run([str(PY), "-m", "mypy"])
    if task == "bench":
        return _bench(rest)
    print(__doc__)
    return 0 if task in ("help", "-h", "--help") else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
