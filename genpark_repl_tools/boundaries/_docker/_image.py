"""`genpark-repl image build`: an image for the container boundary, built without network access.

Wheels are prepared on the host (this package, its dependencies and the task requirements, for the
base image's Python and platform), copied into the build context, and installed in a venv with
`pip install --no-index`; `docker build --network none` then has nothing to fetch. The Dockerfile
written here is the one docs/container.md shows for teams with their own pipelines.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ..._exceptions import BoundaryError

__all__ = ["DOCKERFILE", "build_image"]

VENV = "/opt/genpark"
DOCKERFILE = f"""\
ARG BASE
FROM ${{BASE}}
COPY wheels /tmp/genpark-wheels
RUN python3 -m venv {VENV} \\
 && {VENV}/bin/pip install --no-index --no-cache-dir \\
      --find-links /tmp/genpark-wheels /tmp/genpark-wheels/*.whl \\
 && rm -rf /tmp/genpark-wheels
ENV PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /workspace
"""
# What the base image's python3 says about itself: the wheels must fit it, not the host.
_TARGET = (
    "import json, platform, sys, sysconfig; print(json.dumps({'version': '%d.%d' % sys.version_info[:2],"
    " 'machine': platform.machine(), 'glibc': platform.libc_ver()[1]}))"
)


def _run(command: list[str], what: str, **kw: object) -> str:
    result = subprocess.run(command, check=False, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    if result.returncode != 0:
        raise BoundaryError(
            f"{what} failed (exit {result.returncode}): {(result.stderr or result.stdout)[-3000:]}"
        )
    return str(result.stdout)


def _platforms(target: dict[str, str]) -> list[str]:
    machine = target["machine"]
    tags = [f"linux_{machine}"]
    if target.get("glibc"):
        major, minor = (int(x) for x in target["glibc"].split(".")[:2])
        if major == 2:
            tags += [f"manylinux_2_{m}_{machine}" for m in range(minor, 4, -1)]
            tags += [f"manylinux2014_{machine}", f"manylinux2010_{machine}", f"manylinux1_{machine}"]
    return tags


def _package_wheel(into: Path) -> Path:
    """This package as a wheel: built from its checkout, or fetched by version when it is installed."""
    __version__ = sys.modules[__name__.partition(".")[0]].__version__
    checkout = Path(__file__).resolve().parents[3]
    if (checkout / "pyproject.toml").exists() and (checkout / "genpark_repl_tools").is_dir():
        # Built from a clean copy: an in-tree build reuses build/lib, where a module deleted from
        # the checkout would live on and be installed in the image.
        source = into.parent / "source"
        shutil.copytree(
            checkout / "genpark_repl_tools",
            source / "genpark_repl_tools",
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            if (checkout / name).exists():
                shutil.copy2(checkout / name, source / name)
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                # In isolation, as any pip install of it: pyproject's build requirements, not whatever
                # this environment has (a Python 3.11 venv's setuptools 65 cannot build a wheel alone).
                "-w",
                str(into),
                str(source),
            ],
            "pip wheel of this checkout",
        )
        shutil.rmtree(source)
    else:
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "-d",
                str(into),
                f"genpark-repl-tools=={__version__}",
            ],
            "pip download of genpark-repl-tools",
        )
    found = sorted(into.glob("genpark_repl_tools-*.whl"))
    if not found:
        raise BoundaryError("no genpark_repl_tools wheel was produced")
    return found[-1]


def build_image(
    tag: str,
    base: str,
    requirements: str | Path | None = None,
    *,
    docker: str = "docker",
    echo: bool = True,
) -> str:
    """Build `tag` from `base` with this package and `requirements`; returns the image id."""
    target = json.loads(
        _run(
            [docker, "run", "--rm", "--pull", "never", "--network", "none", base, "python3", "-c", _TARGET],
            f"reading the Python of base image {base!r}",
        )
    )
    with tempfile.TemporaryDirectory(prefix="genpark-image-") as tmp:
        context = Path(tmp)
        wheels = context / "wheels"
        wheels.mkdir()
        own = _package_wheel(wheels)
        download = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--only-binary=:all:",
            "--python-version",
            target["version"],
            "--implementation",
            "cp",
            "-d",
            str(wheels),
            *(arg for platform in _platforms(target) for arg in ("--platform", platform)),
            str(own),
        ]
        if requirements is not None:
            download += ["-r", str(Path(requirements).resolve())]
        _run(download, f"pip download of the wheels for Python {target['version']} ({target['machine']})")
        (context / "Dockerfile").write_text(DOCKERFILE)
        if echo:
            names = sorted(p.name for p in wheels.glob("*.whl"))
            print(f"building {tag} from {base} with {len(names)} wheels: {', '.join(names)}", file=sys.stderr)
        _run(
            [docker, "build", "--network", "none", "--build-arg", f"BASE={base}", "--tag", tag, str(context)],
            f"docker build of {tag}",
            env={**os.environ, "DOCKER_BUILDKIT": "0"},  # the classic builder: no BuildKit needed
        )
    return _run([docker, "image", "inspect", "--format", "{{.Id}}", tag], "docker image inspect").strip()
