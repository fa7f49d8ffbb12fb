"""Fixtures for durable sessions: a real redis-server on a free loopback port, stores, a shared key."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from genpark_repl_tools import ReplEngine


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real redis-server for this test session, stopped afterwards (scripts/dev.py test installs it)."""
    server = shutil.which("redis-server")
    if server is None:
        message = "redis-server is not on PATH; `python3 scripts/dev.py test` installs it"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    redis = pytest.importorskip("redis")
    port = _free_port()
    workdir = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [
            server,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                if client.ping():
                    break
            except redis.ConnectionError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"redis-server did not start on port {port}")
            time.sleep(0.05)
        yield url
    finally:
        client.close()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def redis_prefix() -> str:
    """A key prefix of this test's own, so tests sharing the server never see each other's keys."""
    return f"t{uuid.uuid4().hex[:12]}:"


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    return tmp_path / "sessions.db"


@pytest.fixture
def engines() -> Iterator[list[ReplEngine]]:
    """The engines a test made with `keyed_engine`, closed when it ends."""
    made: list[ReplEngine] = []
    yield made
    for engine in made:
        engine.close()
