"""The egress package's public names, and that nothing else in the package loads it unless asked."""

from __future__ import annotations

import subprocess
import sys

from genpark_repl_tools import egress


def test_the_public_names() -> None:
    assert sorted(egress.__all__) == [
        "ConnectionRecord",
        "EgressProxy",
        "NetworkPolicy",
        "Secret",
        "SessionEndpoint",
        "summarise",
    ]
    assert all(getattr(egress, name).__module__.startswith(egress.__name__) for name in egress.__all__)


def test_the_core_does_not_load_it() -> None:
    code = (
        "import sys, genpark_repl_tools, genpark_repl_tools.boundaries.subprocess\n"
        f"print({egress.__name__!r} in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"
