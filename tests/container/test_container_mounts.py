"""The mount rules of the container boundary, one by one: each refusal names the path and the rule, and
comes before Docker is called (a stand-in docker CLI records every call; none may happen)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from genpark_repl_tools import Limits, Policy
from genpark_repl_tools._exceptions import BoundaryError
from genpark_repl_tools.boundaries.docker import DockerBoundary, MountRefused


@pytest.fixture
def recorder(tmp_path: Path) -> tuple[str, Path]:
    """A docker CLI that records its arguments and fails: any call is visible in the log."""
    log = tmp_path / "docker-calls.log"
    script = tmp_path / "docker"
    script.write_text(f'#!/bin/sh\necho "$@" >> {log}\necho "recorder: no daemon" >&2\nexit 1\n')
    script.chmod(0o755)
    return str(script), log


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    base = tmp_path / "srv"
    (base / "agents" / "ws").mkdir(parents=True)
    (base / "other").mkdir()
    (base / "file").write_text("x")
    (base / "link").symlink_to(base / "agents")
    return base


def _refused(recorder: tuple[str, Path], root: object, allowlist: object = None) -> str:
    docker, log = recorder
    with pytest.raises(MountRefused) as caught:
        DockerBoundary(
            Policy.preset("standard"),
            Limits(),
            image="any:1",
            docker=docker,
            workspace_root=root,  # type: ignore[arg-type]
            workspace_allowlist=allowlist,  # type: ignore[arg-type]
        )
    assert not log.exists(), f"docker was called: {log.read_text()}"
    return str(caught.value)


def test_a_relative_workspace_root_is_refused(recorder: tuple[str, Path]) -> None:
    message = _refused(recorder, "agents/ws")
    assert "'agents/ws'" in message and "not an absolute path" in message


def test_a_missing_workspace_root_is_refused(recorder: tuple[str, Path], tree: Path) -> None:
    missing = str(tree / "nowhere")
    message = _refused(recorder, missing)
    assert repr(missing) in message and "does not exist" in message


def test_a_file_as_workspace_root_is_refused(recorder: tuple[str, Path], tree: Path) -> None:
    message = _refused(recorder, str(tree / "file"))
    assert "is not a directory" in message


def test_a_workspace_root_through_a_symlink_is_refused(recorder: tuple[str, Path], tree: Path) -> None:
    message = _refused(recorder, str(tree / "link" / "ws"))
    assert "not canonical" in message and repr(str(tree / "agents" / "ws")) in message


def test_a_workspace_root_with_dot_dot_is_refused(recorder: tuple[str, Path], tree: Path) -> None:
    message = _refused(recorder, f"{tree}/other/../agents/ws")
    assert "not canonical" in message


def test_the_filesystem_root_is_refused(recorder: tuple[str, Path]) -> None:
    assert "filesystem's root" in _refused(recorder, "/")


def test_a_workspace_root_outside_the_allowlist_is_refused(recorder: tuple[str, Path], tree: Path) -> None:
    message = _refused(recorder, str(tree / "other"), [str(tree / "agents")])
    assert repr(str(tree / "other")) in message and "not under any workspace_allowlist root" in message


def test_a_sibling_with_a_common_prefix_is_not_under_the_root(recorder: tuple[str, Path], tree: Path) -> None:
    (tree / "agents-evil").mkdir()
    message = _refused(recorder, str(tree / "agents-evil"), [str(tree / "agents")])
    assert "not under any workspace_allowlist root" in message


def test_one_stale_allowlist_root_refuses_even_when_another_matches(
    recorder: tuple[str, Path], tree: Path
) -> None:
    stale = str(tree / "gone")
    message = _refused(recorder, str(tree / "agents" / "ws"), [str(tree / "agents"), stale])
    assert "workspace_allowlist root" in message and repr(stale) in message and "does not exist" in message


def test_a_non_canonical_allowlist_root_refuses(recorder: tuple[str, Path], tree: Path) -> None:
    message = _refused(recorder, str(tree / "agents" / "ws"), [str(tree / "agents"), str(tree / "link")])
    assert "workspace_allowlist root" in message and "not canonical" in message


def test_an_allowlist_without_a_workspace_root_is_refused(recorder: tuple[str, Path], tree: Path) -> None:
    assert "workspace_root is not" in _refused(recorder, None, [str(tree / "agents")])


def test_an_empty_allowlist_allows_nothing(recorder: tuple[str, Path], tree: Path) -> None:
    message = _refused(recorder, str(tree / "agents"), [])
    assert "the allowlist is empty" in message


def test_a_policy_workspace_is_held_to_the_same_rules(recorder: tuple[str, Path], tree: Path) -> None:
    docker, log = recorder
    policy = Policy.preset("standard").model_copy(update={"workspace": str(tree / "link")})
    with pytest.raises(MountRefused, match="not canonical"):
        DockerBoundary(policy, Limits(), image="any:1", docker=docker)
    assert not log.exists()


@pytest.mark.parametrize("allowlist", [None, "parent", "itself"])
def test_a_canonical_root_passes_the_rules_and_reaches_docker(
    recorder: tuple[str, Path], tree: Path, allowlist: str | None
) -> None:
    """The legitimate neighbour: the rules let it through, and only then is Docker asked (here the
    stand-in fails, as a missing daemon would, with a clear error)."""
    docker, log = recorder
    root = tree / "agents" / "ws"
    roots = {None: None, "parent": [str(tree / "agents")], "itself": [str(root) + os.sep]}[allowlist]
    with pytest.raises(BoundaryError, match="not on this Docker host") as caught:
        DockerBoundary(
            Policy.preset("standard"),
            Limits(),
            image="any:1",
            docker=docker,
            workspace_root=str(root),
            workspace_allowlist=roots,
        )
    assert not isinstance(caught.value, MountRefused)
    assert log.read_text().startswith("image inspect")
