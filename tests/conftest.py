"""Setup for the whole suite."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

# A background job of a non-interactive shell (`python3 scripts/dev.py test > log &` in a script)
# starts with SIGINT ignored. Python then installs no SIGINT handler: `_thread.interrupt_main()` does
# nothing, and the CLI processes the tests start inherit the ignored signal, so every Ctrl-C test
# would fail for a reason that is not the code's. Give this process what a terminal start gives it;
# a process it starts gets the default disposition back when it execs.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


DOCKER_ENV = Path(__file__).resolve().parents[1] / "scripts" / "docker_env.py"


@pytest.fixture(scope="session")
def docker_image() -> str:
    """The container boundary's test image. scripts/docker_env.py does the work (installing docker.io,
    starting a daemon, building the images) and skips what is already done, so after the first run on
    a machine this takes about a second. Without Docker the test skips; under CI (the CI environment
    variable set) it fails instead."""
    try:
        done = subprocess.run(
            [sys.executable, str(DOCKER_ENV)], capture_output=True, text=True, timeout=900, check=False
        )
        reason = done.stderr[-3000:]
        image = json.loads(done.stdout.strip().splitlines()[-1])["test_image"] if done.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError, KeyError) as exc:
        image, reason = "", f"{type(exc).__name__}: {exc}"
    if not image:
        message = f"Docker could not be set up for the container boundary's tests: {reason}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return str(image)
