"""The container boundary: each session in its own Docker container, built from a reviewed image.

    ReplEngine(boundary="docker", image="my-tasks:1.0")
    ReplEngine(boundary="docker", image="my-tasks:1.0", workspace_root="/srv/agents/ws",
               workspace_allowlist=["/srv/agents"], limits=Limits(memory_mb=1024))

It is the subprocess boundary with another launcher: one container per session, started on the
session's first call and kept while the session lives, running the zygote of the subprocess boundary
(the image's own python3 and genpark_repl_tools), which forks the session's worker inside. Variables,
streaming, interrupts, timeouts, files, snapshots and checkpoint rollback go through the same host code.
See docs/container.md.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._limits import Limits
from ..policy import Policy
from ._docker import _cli
from ._docker._pool import ContainerPool
from ._docker._settings import (
    CONTAINER_EGRESS_DIR,
    CONTAINER_WORKSPACE,
    ContainerSettings,
    MountRefused,
    check_mounts,
)
from ._subprocess._spawn import WorkerPool
from .subprocess import DEFAULT_MEMORY_MB, SubprocessBoundary

if TYPE_CHECKING:
    from ..egress import EgressProxy, NetworkPolicy

__all__ = ["DockerBoundary", "MountRefused"]


class DockerBoundary(SubprocessBoundary):
    """Runs each session in its own container, its worker forked there by the subprocess boundary's zygote.

    Security model: the container is the boundary (its own root filesystem, read-only; no network;
    memory, CPU and process limits; a non-root user without capabilities; only the session's workspace
    mounted from the host), and inside it the subprocess boundary's sandbox and the policy apply as
    on that boundary. Nothing is pulled: the image must be on the Docker host (genpark-repl image
    build). Docker is driven through its CLI, which must be installed.

    Options (all keyword; those of SubprocessBoundary not listed here work the same):
        image           the image sessions run in (required)
        network         "none" (default), a Docker network name (an explicit choice), or a
                        NetworkPolicy: no network but the names it lists, through the engine's
                        egress proxy (as on the subprocess boundary; see docs/network.md)
        egress_proxy    the EgressProxy that serves a NetworkPolicy (default: one of its own)
        cpus            CPUs each container may use (default 1.0; None: no cap)
        pids_limit      processes each container may hold (default 256; None: no cap)
        read_only       read-only root filesystem (default True; /tmp is a tmpfs either way)
        tmpfs_mb        size of /tmp (default 64)
        user            "UID:GID" the container runs as (default 65534:65534 when the host is root,
                        else the host's own ids; root is refused)
        workspace_root  host directory holding the sessions' workspaces (default: a temporary one);
                        it must exist and be canonical
        workspace_allowlist  roots workspace_root must lie under; each must exist and be canonical
        engine_id       the label that marks this engine's containers (default: random). A later
                        engine given the same id removes what an earlier one left
        docker          the docker CLI to run (default "docker")
        start_timeout_s how long a container may take to connect (default 30)
        warm_containers containers kept started ahead for new sessions (default 0): a new session
                        takes one and is ready in milliseconds; each costs a zygote's memory while it waits
    Memory is Limits.memory_mb (default 4096) inside, plus 128 MiB for the zygote in the container's cap.
    """

    name = "docker"
    # A session's container has a network namespace of its own (--network none: loopback only),
    # where its worker's egress listener binds.
    _egress_in_place = True

    def __init__(
        self,
        policy: Policy,
        limits: Limits,
        *,
        image: str,
        network: str | NetworkPolicy = "none",
        egress_proxy: EgressProxy | None = None,
        cpus: float | None = 1.0,
        pids_limit: int | None = 256,
        read_only: bool = True,
        tmpfs_mb: int = 64,
        user: str | None = None,
        workspace_root: str | Path | None = None,
        workspace_allowlist: Iterable[str | Path] | None = None,
        engine_id: str | None = None,
        docker: str = "docker",
        start_timeout_s: float = 30.0,
        warm_containers: int = 0,
        session_ttl_s: float | None = 600.0,
        max_workers: int | None = 32,
        preload: Iterable[str] = (),
        env: dict[str, str] | None = None,
        kill_grace_s: float = 0.25,
        max_processes: int | None = None,
        require: Iterable[str] = (),
        default_memory_mb: int | None = DEFAULT_MEMORY_MB,
        checkpoints: bool = True,
    ) -> None:
        # Every mount rule is checked before Docker is called (and before anything is created).
        root = check_mounts(
            workspace_root if workspace_root is not None else policy.workspace,
            None if workspace_allowlist is None else list(workspace_allowlist),
        )
        if limits.memory_mb is None and default_memory_mb is not None:
            limits = limits.model_copy(update={"memory_mb": default_memory_mb})
        self.container = ContainerSettings.build(
            limits,
            image=image,
            network=network if isinstance(network, str) else "none",
            cpus=cpus,
            pids_limit=pids_limit,
            read_only=read_only,
            tmpfs_mb=tmpfs_mb,
            user=user,
            engine_id=engine_id,
            docker=docker,
            start_timeout_s=start_timeout_s,
        )
        if warm_containers < 0:
            raise ValueError("warm_containers must be >= 0")
        self._warm = warm_containers
        _cli.check_image(self.container)
        _cli.reap_orphans(self.container)
        super().__init__(
            policy,
            limits,
            workspace_root=root,
            session_ttl_s=session_ttl_s,
            max_workers=max_workers,
            # Inside the container: the network is the container's (none by default), reads are
            # confined to the image's system and Python paths by Landlock, the user is already not root.
            network=network != "none" if isinstance(network, str) else network,
            egress_proxy=egress_proxy,
            read_paths=(),
            user=self.container.uid,
            preload=preload,
            env=env,
            kill_grace_s=kill_grace_s,
            max_processes=max_processes,
            require=require,
            default_memory_mb=default_memory_mb,
            checkpoints=checkpoints,
        )

    def _make_pool(
        self,
        config: dict[str, Any],
        env: dict[str, str],
        python: str | None,
        limits: Limits,
        max_workers: int | None,
    ) -> WorkerPool:
        # The zygote runs in the container as the container's user: it switches to no other uid, and
        # it sees paths as the container does.
        sandbox = {**config["sandbox"], "uid": None, "gid": None, "read_paths": []}
        if self._egress is not None:  # its certificate authority, mounted read-only
            self.container = dataclasses.replace(self.container, egress_folder=self._egress.folder)
            self._egress.folder_inside = CONTAINER_EGRESS_DIR
            sandbox["read_paths"] = [CONTAINER_EGRESS_DIR]
        config = {**config, "sandbox": sandbox, "workspace_root": "/tmp"}
        # The same interface as WorkerPool, one container per session.
        return ContainerPool(config, env, limits, max_workers, self.container, self._root, self._warm)  # type: ignore[return-value]

    def describe(self) -> dict[str, Any]:
        description = super().describe()
        description["container"] = {**self.container.describe(), "warm_containers": self._warm}
        # The container's user is the one the worker runs as; no switch happens inside.
        description["enforced"]["privileges"] = (
            f"the container's user ({self.container.user}), no capabilities (all dropped, no-new-privileges)"
        )
        description["workspace_mount"] = f"{description['workspace_root']}/<session> -> {CONTAINER_WORKSPACE}"
        # The container's own network namespace stands for the one the zygote could not make in it.
        if self.container.network == "none":
            description["unavailable"].pop("network_namespace", None)
        return description

    def close(self) -> None:
        super().close()
        if not self._owns_root:
            shutil.rmtree(self._root / ".probe", ignore_errors=True)
