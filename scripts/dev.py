#!/usr/bin/env python3
"""Project tasks that work on a fresh clone with only python3 and pip.

    python3 scripts/dev.py demo     # run examples/quickstart.py
    python3 scripts/dev.py test     # run every test (creates .venv and installs what tests need)
    python3 scripts/dev.py lint     # ruff + mypy
    python3 scripts/dev.py test-matrix [3.10 ...] [core|full] [--except 3.X] [pytest args]  # every Python
    python3 scripts/dev.py smoke [3.10 ...]  # a plain pip install of the checkout, checked per Python
    python3 scripts/dev.py bench [--quick]   # benchmarks against bare exec and peers

Each task creates `.venv` on first use and reinstalls only when a requirements file changed;
test-matrix does the same with one `.venv-py3XX` (core) or `.venv-py3XX-full` per Python version.
3.10-3.13 come from pyenv (or PATH, or `pyenv install`); 3.14 and 3.15 from a Debian sid root built on first
use in /var/tmp (scripts/pyroot.py, needs root), whose venvs are made and run inside it. test-matrix with
no arguments: the full suite on 3.10 and 3.15, the core suite on the others, two runs at a time. A missing
Python fails.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import venv
import xml.etree.ElementTree as ET
from pathlib import Path

import pyroot  # scripts/pyroot.py: the Debian root that provides the CPythons pyenv lacks

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


# Installed with the test profile, without their dependencies: langgraph-codeact 0.1.3 (its latest release)
# declares langgraph<0.4, which the rest cannot share, yet runs on langgraph 1.x (its tests show it).
NO_DEPS = ["langgraph-codeact==0.1.3"]


def _ensure_venv(profile: str) -> None:
    _ensure_env(VENV, PY, PROFILES[profile], profile)


def _ensure_env(
    venv_dir: Path, python: Path, args: list[str], profile: str, base: str | None = None, rooted: bool = False
) -> None:
    """Create `venv_dir` with `base` (default: this interpreter) and install `args` unless already done.

    rooted: `base` is an interpreter of the Debian root; the venv is made and filled inside it.
    """
    inside = pyroot.command if rooted else _host
    if base is None and _made_by_another_python(venv_dir):
        # A .venv left by another interpreter (an older python3, or one since upgraded) would fail in
        # odd ways on every later run: made again with this one.
        print(f"{venv_dir.relative_to(ROOT)} was made by another Python; making it again ...", flush=True)
        shutil.rmtree(venv_dir)
    # lexists: the python of a venv made in the root links to the root's interpreter, absent on the host.
    if not os.path.lexists(python):
        print(f"creating {venv_dir.relative_to(ROOT)} ...", flush=True)
        if base is None:
            venv.EnvBuilder(with_pip=True).create(venv_dir)
        else:
            subprocess.run(inside([base, "-m", "venv", str(venv_dir)]), check=True)
    no_deps = NO_DEPS if "requirements/dev.txt" in args else []
    digest = hashlib.sha256(" ".join([*args, *no_deps]).encode())
    for i, arg in enumerate(args):
        if i and args[i - 1] == "-r":
            digest.update((ROOT / arg).read_bytes())
        if i and args[i - 1] == "-e":
            for name in ("pyproject.toml",):
                path = ROOT / arg.split("[")[0] / name
                if path.exists():
                    digest.update(path.read_bytes())
    stamp = venv_dir / f".installed-{profile}"
    if stamp.exists() and stamp.read_text() == digest.hexdigest():
        return
    print(
        f"installing the {profile} dependencies into {venv_dir.relative_to(ROOT)} "
        "(first run takes a minute or two) ...",
        flush=True,
    )
    subprocess.run(
        inside([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args]),
        cwd=ROOT,
        check=True,
    )
    if no_deps:
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps"]
        subprocess.run(inside([*pip, *no_deps]), cwd=ROOT, check=True)
    stamp.write_text(digest.hexdigest())


def _host(cmd: list[str]) -> list[str]:
    return cmd


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
    args = ["-e", ".[sandbox,ray]"]  # ray: benchmarks/ray_bench.py's figures are in the report
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


# ---- test-matrix: the suite on every Python the package claims -------------------------------------
# requires-python's floor up to the current CPython. pyenv provides 3.10-3.13; 3.14 and 3.15 come from a
# Debian sid root (scripts/pyroot.py) and run inside it. The oldest and newest run everything; the others
# run the core suite (tests/security and tests/policy included) in a venv without any framework (the core
# must not need one). A full run takes 9.5-13 minutes on two cores shared with other work (5-7.5 minutes of
# CPU), a core run about half: .ci/run's header has the whole budget.
MATRIX = ("3.10", "3.11", "3.12", "3.13", "3.14", "3.15")
FULL_ON = ("3.10", "3.15")
# Runs at once: a suite waits on workers, sleeps and timeouts for a third of its time, so two share the two
# cores well (the full runs go first, being the longest). Each run's output is printed when it ends.
JOBS = 2
# The container boundary's tests run once, in `dev.py test`: its host side is the same code on every Python,
# and its workers run the image's Python, not the matrix's (a rooted Python has no Docker daemon to reach).
# Tests elsewhere that need Docker carry the `docker` mark.
MATRIX_IGNORE = ["--ignore=tests/container", "-m", "not docker"]
ROOTED = ("3.14", "3.15")  # not in pyenv here: sid's python3 is 3.14, and it packages python3.15
CORE_ARGS = ["-e", ".[sandbox]", "-r", "requirements/core.txt"]
# The core suite: everything under tests/ that needs no framework. The MCP tests need the mcp extra and
# the LangChain example needs LangChain; the full runs cover both.
CORE_PYTEST = [
    "tests",
    "--ignore=tests/mcp",
    "--ignore=tests/docs",  # the docs show the MCP server and the frameworks: the full runs cover them
    "--ignore=tests/frontends",
    "--ignore=tests/files/test_frontend_files.py",
    "--ignore=tests/files/test_mcp_files.py",
    "--ignore=tests/cli/test_cli_mcp_fork.py",
    "--ignore=tests/durable/test_adapters_store.py",
    "--ignore=tests/boundaries/test_ray_conformance.py",
    "--ignore=tests/boundaries/test_ray_cluster.py",
    "--ignore=tests/boundaries/test_ray_node_loss.py",
    "--ignore=tests/boundaries/test_ray_store.py",
    "--deselect=tests/examples/test_examples.py::test_langchain_agent_offline",
]
FRAMEWORKS = ("langchain_core", "langchain", "llama_index", "mcp")
# What a full run must have, by import name: without one, tests skip (importorskip) and the run looks green.
# NOT_BEFORE: a package requirements/dev.txt leaves out from that Python on (a marker: no release there
# yet); there the full run says so and those tests skip with the cause. Anywhere else a missing one fails.
FULL_MODULES = (
    *FRAMEWORKS,
    "langgraph",
    "langgraph_codeact",
    "langchain_tests",
    "smolagents",
    "ray",
    "redis",
    "nbformat",
    "opentelemetry.sdk",
)
NOT_BEFORE = {"ray": "3.15"}  # Ray has no release for 3.15 yet


def _claimed_floor() -> str:
    match = re.search(r'requires-python\s*=\s*">=\s*(\d+\.\d+)', (ROOT / "pyproject.toml").read_text())
    if not match:
        raise SystemExit('test-matrix: pyproject.toml has no requires-python = ">=3.X"')
    return match.group(1)


def _version_of(python: Path | str) -> str | None:
    try:
        done = subprocess.run(
            [str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _pyenv_pythons(version: str) -> list[Path]:
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"

    def patch(path: Path) -> int:
        tail = path.parent.parent.name[len(version) + 1 :]
        return int(tail) if tail.isdigit() else -1

    found = [p for p in root.glob(f"{version}.*/bin/python{version}") if patch(p) >= 0]
    return sorted(found, key=patch, reverse=True)


def _find_python(version: str) -> Path:
    """An interpreter for `version`: pyenv's versions, then PATH, then `pyenv install`; never skipped.

    For ROOTED versions: the Debian root's interpreter (a path inside the root), built on first use.
    """
    if version in ROOTED:
        pyroot.ensure()
        python = Path(f"/usr/bin/python{version}")
        found = subprocess.run(
            pyroot.command([str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]),
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        if found != version:
            raise SystemExit(f"test-matrix: the root {pyroot.ROOT} has no Python {version} ({python})")
        return python
    candidates = _pyenv_pythons(version)
    on_path = shutil.which(f"python{version}")
    if on_path:
        candidates.append(Path(on_path))
    for candidate in candidates:
        if _version_of(candidate) == version:
            return candidate
    pyenv = shutil.which("pyenv") or str(
        Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "bin/pyenv"
    )
    if Path(pyenv).exists():
        print(f"Python {version} not found; installing it with pyenv (several minutes) ...", flush=True)
        subprocess.run([pyenv, "install", "--skip-existing", version], check=False)
        for candidate in _pyenv_pythons(version):
            if _version_of(candidate) == version:
                return candidate
    raise SystemExit(
        f"test-matrix: Python {version} is not available (looked in ~/.pyenv/versions and PATH"
        f"{', and pyenv could not install it' if Path(pyenv).exists() else '; pyenv is not installed'}). "
        f"The package claims {_claimed_floor()}+, so every version in {', '.join(MATRIX)} must run."
    )


def _junit_counts(path: Path) -> dict[str, int]:
    counts = dict.fromkeys(("tests", "failures", "errors", "skipped", "xfailed"), 0)
    if path.exists():
        root = ET.parse(path).getroot()
        for suite in root.iter("testsuite"):
            for key in ("tests", "failures", "errors", "skipped"):
                counts[key] += int(suite.get(key, "0"))
        counts["xfailed"] = sum(1 for s in root.iter("skipped") if s.get("type") == "pytest.xfail")
        counts["skipped"] -= counts["xfailed"]
    return counts


def _matrix_run(version: str, full: bool, rest: list[str]) -> tuple[str, int, dict[str, int]]:
    started = time.monotonic()
    base = _find_python(version)
    rooted = version in ROOTED
    inside = pyroot.command if rooted else _host
    tag = f"py{version.replace('.', '')}"
    venv_dir = ROOT / f".venv-{tag}{'-full' if full else ''}"
    python = venv_dir / ("Scripts" if os.name == "nt" else "bin") / "python"
    profile = PROFILES["test"] if full else CORE_ARGS
    _ensure_env(venv_dir, python, profile, "full" if full else "core", str(base), rooted)
    if full and not rooted:
        _ensure_redis_server()  # the root has its own
    label = f"{version} {'full' if full else 'core'}"
    probe = "import importlib.util as u, sys; print(*[m for m in sys.argv[1:] if u.find_spec(m)])"
    present = subprocess.run(
        inside([str(python), "-c", probe, *(FULL_MODULES if full else FRAMEWORKS)]),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not full and present:
        # The core suite must run without any framework: prove that none is installed in its venv.
        raise SystemExit(f"test-matrix: the {label} venv has frameworks installed: {', '.join(present)}")
    if full:
        minor = int(version.split(".")[1])
        missing = [m for m in FULL_MODULES if m not in present]
        left_out = [m for m in missing if m in NOT_BEFORE and minor >= int(NOT_BEFORE[m].split(".")[1])]
        if len(left_out) < len(missing):
            unexpected = ", ".join(m for m in missing if m not in left_out)
            raise SystemExit(f"test-matrix: the {label} venv lacks {unexpected} (requirements/dev.txt)")
        for module in left_out:
            print(
                f"==> Python {label}: {module} is not installed (requirements/dev.txt leaves it out from "
                f"{NOT_BEFORE[module]} on: no release yet); its tests skip",
                flush=True,
            )
    # The report goes inside the checkout, which a rooted run sees at the same path.
    with tempfile.TemporaryDirectory(dir=venv_dir, prefix="junit-") as tmp:
        report = Path(tmp) / "junit.xml"
        # Paths named on the command line replace `tests`; the core suite's exclusions still apply.
        named = any(not arg.startswith("-") and (ROOT / arg.split("::")[0]).exists() for arg in rest)
        paths = ([] if full else CORE_PYTEST[1:]) if named else ([] if full else CORE_PYTEST)
        where = f" (in {pyroot.ROOT})" if rooted else ""
        print(
            f"==> Python {label}{where}: {python.relative_to(ROOT)} -m pytest {' '.join(paths)}", flush=True
        )
        cmd = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
        code = subprocess.call(inside([*cmd, *paths, *MATRIX_IGNORE, *rest]), cwd=ROOT)
        counts = _junit_counts(report)
    if code == 0 and counts["tests"] == 0:
        code = 5  # no tests ran: never a pass
    counts["seconds"] = round(time.monotonic() - started)  # venv set-up included
    return label, code, counts


def _matrix_child(version: str, full: bool, rest: list[str]) -> tuple[str, int, dict[str, int]]:
    """One run of a parallel matrix, as a child `dev.py test-matrix`, its output printed when it ends."""
    label = f"{version} {'full' if full else 'core'}"
    with tempfile.TemporaryDirectory(prefix="genpark-matrix-") as tmp:
        row, log = Path(tmp, "row.json"), Path(tmp, "log")
        print(f"==> Python {label}: started", flush=True)
        with log.open("wb") as out:
            code = subprocess.call(
                [sys.executable, __file__, "test-matrix", version, "full" if full else "core", *rest],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "GENPARK_MATRIX_ROW": str(row)},
            )
        with _print_lock:
            print(f"\n==> Python {label}: its output\n", flush=True)
            sys.stdout.buffer.write(log.read_bytes())
            sys.stdout.flush()
        if not row.exists():  # it failed before its suite ran (no interpreter, a venv that did not build)
            empty = dict.fromkeys(("tests", "failures", "errors", "skipped", "xfailed", "seconds"), 0)
            return label, code or 1, empty
        found_label, found_code, counts = json.loads(row.read_text())[0]
        return str(found_label), int(found_code), dict(counts)


_print_lock = threading.Lock()


def _test_matrix(rest: list[str]) -> int:
    # --except 3.X: a version another step already covers (.ci/run: the README's test command).
    excepted = [rest[i + 1] for i, arg in enumerate(rest[:-1]) if arg == "--except"]
    rest = [arg for i, arg in enumerate(rest) if arg != "--except" and (i == 0 or rest[i - 1] != "--except")]
    versions = [arg for arg in rest if re.fullmatch(r"3\.\d+", arg)]
    kinds = [arg for arg in rest if arg in ("core", "full")]
    rest = [arg for arg in rest if arg not in versions and arg not in kinds]
    if _claimed_floor() != MATRIX[0]:
        raise SystemExit(
            f"test-matrix: requires-python says {_claimed_floor()}+ but MATRIX starts at {MATRIX[0]}"
        )
    unknown = sorted(set(versions + excepted) - set(MATRIX))
    if unknown:
        raise SystemExit(f"test-matrix: {', '.join(unknown)} not in the matrix ({', '.join(MATRIX)})")
    chosen = [v for v in versions or MATRIX if v not in excepted]
    runs: list[tuple[str, bool]] = []
    if "core" in kinds or not kinds:
        # A full run includes the core suite: by default the core-only run (no framework installed)
        # covers the versions the full runs do not, so every version runs the core suite once.
        runs += [(v, False) for v in chosen if "core" in kinds or v not in FULL_ON]
    if "full" in kinds:  # asked for by name: every chosen version, also one CI runs core-only
        runs += [(v, True) for v in chosen]
    elif not kinds:
        runs += [(v, True) for v in FULL_ON if v in chosen]
    if not runs:
        raise SystemExit("test-matrix: nothing to run (name a version with core or full)")
    runs.sort(key=lambda run: not run[1])
    if len(runs) == 1 or os.environ.get("GENPARK_MATRIX_ROW"):
        rows = [_matrix_run(version, full, rest) for version, full in runs]
        if os.environ.get("GENPARK_MATRIX_ROW"):  # a run of a parallel matrix: its row goes to the parent
            Path(os.environ["GENPARK_MATRIX_ROW"]).write_text(json.dumps(rows))
    else:
        with concurrent.futures.ThreadPoolExecutor(JOBS) as pool:
            rows = list(pool.map(lambda run: _matrix_child(run[0], run[1], rest), runs))
    print("\ntest-matrix:")
    for label, code, counts in rows:
        verdict = "ok" if code == 0 else f"FAILED (pytest exit {code})"
        failed = counts["failures"] + counts["errors"]
        passed = counts["tests"] - failed - counts["skipped"] - counts["xfailed"]
        print(
            f"  Python {label:<9} {passed:>5} passed {counts['skipped']:>3} skipped "
            f"{counts['xfailed']:>3} xfailed {failed:>3} failed {counts['seconds']:>5} s  {verdict}"
        )
    return 0 if all(code == 0 for _, code, _ in rows) else 1


# ---- smoke: a plain install of the checkout, in a fresh venv, on each version -----------------------
# What the README shows, checked on what `pip install` puts in site-packages (scripts/smoke_check.py).
# pandas and matplotlib: two of its checks use the data stack. pip's cache keeps the downloaded wheels.
SMOKE_PACKAGES = ["pandas", "matplotlib"]
RELEASE_FILES = ("pyproject.toml", "README.md", "LICENSE", "genpark_repl_tools")


def _smoke_run(version: str) -> tuple[str, int, int]:
    started = time.monotonic()
    base = _find_python(version)
    rooted = version in ROOTED
    # A rooted run's files go in the root's /tmp, where its interpreter sees them.
    with tempfile.TemporaryDirectory(
        prefix="genpark-smoke-", dir=pyroot.ROOT / "tmp" if rooted else None
    ) as tmp:
        seen = f"/tmp/{Path(tmp).name}" if rooted else tmp
        # A copy of what a release holds: building in the checkout would ship whatever a stale build/ has.
        for name in RELEASE_FILES:
            source = ROOT / name
            if source.is_dir():
                shutil.copytree(source, Path(tmp, "src", name), ignore=shutil.ignore_patterns("__pycache__"))
            else:
                Path(tmp, "src").mkdir(exist_ok=True)
                shutil.copyfile(source, Path(tmp, "src", name))
        python = f"{seen}/venv/bin/python"
        print(f"==> smoke check on Python {version}: a fresh venv, pip install of the checkout", flush=True)
        steps = [
            [str(base), "-m", "venv", f"{seen}/venv"],
            [
                python,
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                f"{seen}/src",
                *SMOKE_PACKAGES,
            ],
            [python, str(ROOT / "scripts/smoke_check.py")],
        ]
        code = 0
        for step in steps:
            code = subprocess.call(pyroot.command(step, seen) if rooted else step, cwd=tmp)
            if code:
                break
    return version, code, round(time.monotonic() - started)


def _smoke(rest: list[str]) -> int:
    unknown = sorted(set(rest) - set(MATRIX))
    if unknown:
        raise SystemExit(f"smoke: {', '.join(unknown)} not in the matrix ({', '.join(MATRIX)})")
    rows = [_smoke_run(version) for version in rest or MATRIX]
    print("\nsmoke:")
    for version, code, seconds in rows:
        print(f"  Python {version:<5} {seconds:>5} s  {'ok' if code == 0 else f'FAILED (exit {code})'}")
    return 0 if all(code == 0 for _, code, _ in rows) else 1


def _made_by_another_python(venv_dir: Path) -> bool:
    """Whether `venv_dir` is a venv whose interpreter is not this one's major.minor version."""
    try:
        config = (venv_dir / "pyvenv.cfg").read_text()
    except OSError:
        return False
    found = re.search(r"^version(?:_info)?\s*=\s*(\d+)\.(\d+)", config, re.MULTILINE)
    return found is not None and (int(found[1]), int(found[2])) != sys.version_info[:2]


# The oldest Python the package supports (requires-python); CI tests every version from it to 3.15.
OLDEST = (3, 10)


def main(argv: list[str]) -> int:
    if sys.version_info < OLDEST:
        raise SystemExit(
            f"dev.py: this is Python {sys.version.split()[0]}; genpark-repl-tools needs Python "
            f"{OLDEST[0]}.{OLDEST[1]} or newer (3.10 to 3.15 are tested). Run it with a supported one, "
            "e.g. `python3.12 scripts/dev.py demo`."
        )
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
        code |= _run([str(PY), "-m", "mypy"])
        # The scripts CI runs with, checked as strictly (pyroot is imported by name from scripts/).
        scripts = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "scripts").glob("*.py"))
        env = {**os.environ, "MYPYPATH": str(ROOT / "scripts")}
        return code | subprocess.call([str(PY), "-m", "mypy", *scripts], cwd=ROOT, env=env)
    if task == "bench":
        return _bench(rest)
    if task == "test-matrix":
        return _test_matrix(rest)
    if task == "smoke":
        return _smoke(rest)
    print(__doc__)
    return 0 if task in ("help", "-h", "--help") else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
