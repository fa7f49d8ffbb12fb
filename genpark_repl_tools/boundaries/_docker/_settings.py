"""The container settings of the container boundary, and the mount rules checked before Docker is called."""

from __future__ import annotations

import os
import re
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..._exceptions import BoundaryError
from ..._limits import Limits

__all__ = ["CONTAINER_WORKSPACE", "LABEL", "ContainerSettings", "MountRefused", "check_mounts"]

# Where the session's workspace is mounted in its container (also the working directory), and where
# the directory holding the zygote's control socket is mounted (read-only).
CONTAINER_WORKSPACE = "/workspace"
CONTAINER_RUN_DIR = "/run/genpark"
# With a network policy: the host's egress folder (the proxy's certificate authority), read-only.
CONTAINER_EGRESS_DIR = "/run/genpark-egress"
# Every container carries these labels: LABEL + "engine" (the engine's id), "session", "host" (this
# machine's name) and "pid" (the host process), so an engine, or a later one after a crash, finds its own.
LABEL = "genpark-repl."
# What the zygote and a checkpoint copy need beside the session's memory: the container's cgroup
# counts the pages they do not share with the worker.
_CONTAINER_HEADROOM_MB = 128


class MountRefused(BoundaryError):
    """A workspace root or allowlist root broke a mount rule; raised before any container starts."""


@dataclass(frozen=True)
class ContainerSettings:
    """What every container of one boundary is started with (`describe()["container"]` shows them)."""

    image: str
    network: str = "none"
    cpus: float | None = 1.0
    pids_limit: int | None = 256
    read_only: bool = True
    tmpfs_mb: int = 64
    user: str = ""  # "uid:gid"; empty: 65534:65534 when the host is root, else the host's own ids
    memory_mb: int | None = None  # from Limits.memory_mb, plus headroom for the zygote
    engine_id: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    docker: str = "docker"
    start_timeout_s: float = 30.0
    egress_folder: str | None = None  # mounted read-only at CONTAINER_EGRESS_DIR when set

    @classmethod
    def build(cls, limits: Limits, **options: Any) -> ContainerSettings:
        settings = cls(**{k: v for k, v in options.items() if v is not None or k == "cpus"})
        if not settings.image or not isinstance(settings.image, str):
            raise ValueError("the container boundary needs image='NAME[:TAG]' (see genpark-repl image build)")
        if settings.network != "none" and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", settings.network):
            raise ValueError(f"network must be 'none' or a Docker network name, got {settings.network!r}")
        if settings.network in ("host",) or settings.network.startswith("container"):
            raise ValueError(f"network={settings.network!r} would share a namespace with another; refused")
        if settings.cpus is not None and settings.cpus <= 0:
            raise ValueError("cpus must be positive or None")
        if settings.pids_limit is not None and settings.pids_limit <= 0:
            raise ValueError("pids_limit must be positive or None")
        user = settings.user or _default_user()
        if not re.fullmatch(r"\d+:\d+", user) or user.split(":")[0] == "0":
            raise ValueError(f"user must be 'UID:GID' of a user other than root, got {user!r}")
        memory = None if limits.memory_mb is None else limits.memory_mb + _CONTAINER_HEADROOM_MB
        return cls(**{**settings.__dict__, "user": user, "memory_mb": memory})

    @property
    def uid(self) -> int:
        return int(self.user.split(":")[0])

    @property
    def gid(self) -> int:
        return int(self.user.split(":")[1])

    def labels(self, session: str) -> dict[str, str]:
        return {
            LABEL + "engine": self.engine_id,
            LABEL + "session": session,
            LABEL + "host": socket.gethostname(),
            LABEL + "pid": str(os.getpid()),
        }

    def run_options(self) -> list[str]:
        """The `docker run` options every container of this boundary gets (all but mounts and labels)."""
        options = [
            "--network",
            self.network,
            "--user",
            self.user,
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--tmpfs",
            f"/tmp:rw,nosuid,nodev,size={self.tmpfs_mb}m",
            "--workdir",
            CONTAINER_WORKSPACE,
        ]
        if self.read_only:
            options.append("--read-only")
        if self.memory_mb is not None:
            options += ["--memory", f"{self.memory_mb}m", "--memory-swap", f"{self.memory_mb}m"]
        if self.cpus is not None:
            options += ["--cpus", f"{self.cpus:g}"]
        if self.pids_limit is not None:
            options += ["--pids-limit", str(self.pids_limit)]
        return options

    def describe(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "network": self.network,
            "memory_mb": self.memory_mb,
            "cpus": self.cpus,
            "pids_limit": self.pids_limit,
            "read_only_root": self.read_only,
            "tmp": f"tmpfs, {self.tmpfs_mb} MiB",
            "user": self.user,
            "capabilities": "none (all dropped, no-new-privileges)",
            "workspace": CONTAINER_WORKSPACE,
            "labels": {LABEL + "engine": self.engine_id},
        }


def _default_user() -> str:
    if os.geteuid() == 0:
        return "65534:65534"
    return f"{os.getuid()}:{os.getgid()}"


def check_mounts(workspace_root: str | Path | None, allowlist: list[str | Path] | None) -> Path | None:
    """The workspace root to mount sessions from, after every rule held; MountRefused names the first
    path and rule that did not. None: no root was given and none is allowed (a temporary one is used).

    Rules, each checked before Docker is called:
    - every allowlist root is an absolute, existing directory given in canonical form (no symlink,
      no '..', no trailing parts to resolve): one stale or invalid root refuses, even if another matches;
    - the workspace root is the same, and is not the filesystem's root;
    - with an allowlist, the workspace root lies under (or is) one of its roots; with an allowlist and
      no workspace root, there is nothing allowed to mount, so it is refused too.
    """
    roots = [_canonical(path, "workspace_allowlist root") for path in (allowlist or [])]
    if workspace_root is None:
        if allowlist is not None:
            raise MountRefused(
                "workspace_allowlist is set but workspace_root is not: name the directory to mount "
                "(workspace_root=...) under one of the allowlist's roots"
            )
        return None
    root = _canonical(workspace_root, "workspace_root")
    if root == Path(root.anchor):
        raise MountRefused(f"workspace_root {str(root)!r} is the filesystem's root; choose a directory")
    if allowlist is not None and not any(root == allowed or allowed in root.parents for allowed in roots):
        raise MountRefused(
            f"workspace_root {str(root)!r} is not under any workspace_allowlist root "
            f"({', '.join(repr(str(r)) for r in roots) or 'the allowlist is empty'})"
        )
    return root


def _canonical(given: str | Path, what: str) -> Path:
    text = os.fspath(given)
    if not os.path.isabs(text):
        raise MountRefused(f"{what} {text!r} is not an absolute path")
    path = Path(text)
    if not path.exists():
        raise MountRefused(f"{what} {text!r} does not exist")
    if not path.is_dir():
        raise MountRefused(f"{what} {text!r} is not a directory")
    real = os.path.realpath(text)
    if real != text.rstrip("/") and not (real == "/" and text == "/"):
        raise MountRefused(f"{what} {text!r} is not canonical: it resolves to {real!r}; give that path")
    return Path(real)
