"""The `docker` CLI calls of the container boundary, each bounded in time, failures in our words."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
from typing import TYPE_CHECKING

from ..._exceptions import BoundaryError
from ._settings import LABEL

if TYPE_CHECKING:
    from ._pool import _Launch
    from ._settings import ContainerSettings

__all__ = ["check_image", "explain_failure", "reap_orphans", "remove", "remove_labelled"]

_CALL_TIMEOUT_S = 20.0


def _docker(docker: str, *args: str, timeout: float = _CALL_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [docker, *args],
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise BoundaryError(
            f"the docker CLI ({docker!r}) is not installed or not on PATH; the container boundary needs it"
        ) from None
    except subprocess.TimeoutExpired:
        raise BoundaryError(
            f"`docker {' '.join(args[:2])}` did not answer within {timeout:g} s; is the Docker daemon "
            "healthy?"
        ) from None


def _daemon_down(text: str) -> bool:
    return "Cannot connect to the Docker daemon" in text or "Is the docker daemon running" in text


def check_image(settings: ContainerSettings) -> None:
    """BoundaryError unless the daemon answers and has the image (nothing is ever pulled)."""
    result = _docker(settings.docker, "image", "inspect", "--format", "{{.Id}}", settings.image)
    if result.returncode == 0:
        return
    text = result.stderr.strip()
    if _daemon_down(text):
        raise BoundaryError(f"the Docker daemon is not reachable: {text}")
    raise BoundaryError(
        f"image {settings.image!r} is not on this Docker host ({text or 'not found'}); build it with "
        "`genpark-repl image build --tag ...` (images are never pulled)"
    )


def explain_failure(stderr: str, launch: _Launch) -> str:
    """Why `docker run` exited before its zygote connected, for the caller."""
    image = launch.settings.image
    if _daemon_down(stderr):
        return f"the Docker daemon is not reachable: {stderr}"
    if "No such image" in stderr or "Unable to find image" in stderr:
        return f"image {image!r} is not on this Docker host; build it with `genpark-repl image build`"
    return f"the container for session {launch.session!r} ({image}) exited during start: {stderr}"


def remove(names: list[str], docker: str) -> None:
    """Force-remove containers by name (gone ones are no error)."""
    if names:
        # Best effort here: remove_labelled and reap_orphans catch what is left.
        with contextlib.suppress(BoundaryError):
            _docker(docker, "rm", "--force", *names)


def _labelled(docker: str, *filters: str) -> list[tuple[str, dict[str, str]]]:
    args = ["ps", "--all", "--no-trunc", "--format", "{{.ID}} {{.Labels}}"]
    for f in filters:
        args += ["--filter", f"label={f}"]
    result = _docker(docker, *args)
    if result.returncode != 0:
        return []
    found = []
    for line in result.stdout.splitlines():
        ident, _, labels = line.partition(" ")
        parsed = dict(item.split("=", 1) for item in labels.split(",") if "=" in item)
        found.append((ident, parsed))
    return found


def remove_labelled(settings: ContainerSettings) -> None:
    """Remove every container of this engine that is still there."""
    ids = [ident for ident, _ in _labelled(settings.docker, f"{LABEL}engine={settings.engine_id}")]
    remove(ids, settings.docker)


def reap_orphans(settings: ContainerSettings) -> list[str]:
    """Remove containers left by engines of this host that are gone (a crashed host process), and
    those of an engine that had this engine's id before; returns the ids removed."""
    host = socket.gethostname()
    orphans = []
    for ident, labels in _labelled(settings.docker, f"{LABEL}engine"):
        if labels.get(LABEL + "host") != host:
            continue  # another machine's engine, on a shared daemon: not ours to judge
        same_engine = labels.get(LABEL + "engine") == settings.engine_id
        try:
            pid = int(labels.get(LABEL + "pid", ""))
        except ValueError:
            continue
        if same_engine or not _alive(pid):
            orphans.append(ident)
    remove(orphans, settings.docker)
    return orphans


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
