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
        "-e", ".[mcp]",
        "-e", "integrations/langchain",
        "-e", "integrations/llamaindex",
        "-r", "requirements/dev.txt",
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
    print(f"installing the {profile} dependencies into .venv (first run takes a minute or two) ...", flush=True)
    subprocess.run([str(PY), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
                   cwd=ROOT, check=True)
    stamp.write_text(digest.hexdigest())


def _run(cmd: list[str]) -> int:
    return subprocess.call(cmd, cwd=ROOT)


def main(argv: list[str]) -> int:
    task = argv[0] if argv else "help"
    rest = argv[1:]
    if task == "demo":
        _ensure_venv("demo")
        return _run([str(PY), "examples/quickstart.py", *rest])
    if task == "test":
        _ensure_venv("test")
        return _run([str(PY), "-m", "pytest", *rest])
    if task == "lint":
        _ensure_venv("test")
        code = _run([str(PY), "-m", "ruff", "check", "."])
        code |= _run([str(PY), "-m", "ruff", "format", "--check", "."])
        return code | _run([str(PY), "-m", "mypy"])
    if task == "bench":
        _ensure_venv("test")
        return _run([str(PY), "benchmarks/run.py", *rest])
    print(__doc__)
    return 0 if task in ("help", "-h", "--help") else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
