"""The egress package's public names, and that nothing else in the package loads it unless asked."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

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


@pytest.mark.skipif(
    importlib.util.find_spec("cryptography") is None, reason="needs the network-secrets extra"
)
def test_cryptography_is_loaded_only_for_a_secret_over_https() -> None:
    code = (
        "import sys\n"
        "from genpark_repl_tools.egress import EgressProxy, NetworkPolicy, Secret\n"
        "with EgressProxy() as proxy:\n"
        "    proxy.open_session('a', NetworkPolicy(allow=['api.example.com']))\n"
        "    plain = Secret(value='v', hosts=['api.example.com:80'])\n"
        "    proxy.open_session('b', NetworkPolicy(allow=['api.example.com'], secrets={'T': plain}))\n"
        "    print('cryptography' in sys.modules)\n"
        "    https = Secret(value='v', hosts=['api.example.com:443'])\n"
        "    proxy.open_session('c', NetworkPolicy(allow=['api.example.com'], secrets={'T': https}))\n"
        "    print('cryptography' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["False", "True"]
