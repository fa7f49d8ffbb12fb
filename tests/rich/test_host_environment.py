"""A matplotlib run leaves the host's environment as it was: no MPLBACKEND, in any process
the host starts later either; pyplot is still headless inside the execution."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from genpark_repl_tools._rich import BACKEND

pytest.importorskip("matplotlib")

SCRIPT = r"""
import json, os, subprocess, sys
from genpark_repl_tools import ReplEngine
before = dict(os.environ)
with ReplEngine(policy=sys.argv[1]) as engine:
    result = engine.run(
        "import matplotlib\nimport matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\n"
        "matplotlib.get_backend()"
    )
child = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('MPLBACKEND'))"],
                       capture_output=True, text=True, check=True).stdout.strip()
import matplotlib
print(json.dumps({"status": result.status, "value": result.value, "images": len(result.attachments),
                  "changed": sorted(k for k in set(before) | set(os.environ)
                                    if before.get(k) != os.environ.get(k)),
                  "child": child, "error": str(result.error)}))
"""


def _run(policy: str) -> dict[str, Any]:
    environ = {k: v for k, v in os.environ.items() if k not in ("MPLBACKEND", "DISPLAY")}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, policy],
        capture_output=True,
        text=True,
        timeout=120,
        env=environ,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return data


@pytest.mark.parametrize("policy", ["trusted", "standard"])
def test_a_matplotlib_run_leaves_the_host_environment_unchanged(policy: str) -> None:
    out = _run(policy)
    assert (out["status"], out["value"], out["images"]) == ("ok", repr(BACKEND), 1), out
    assert out["changed"] == []
    assert out["child"] == "None"
