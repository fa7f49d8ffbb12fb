"""A test certificate authority and a server certificate, made with the openssl CLI (no Python package
needed), for the loopback HTTPS servers of the network tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def make_pki(folder: Path, names: list[str], addresses: tuple[str, ...] = ()) -> tuple[Path, Path, Path]:
    """(authority, certificate, key) in `folder`: a CA valid two days, and a server certificate for
    `names` and `addresses` signed by it. Skips the test without the openssl command."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is needed to make a test certificate")

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], cwd=folder, check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=genpark test CA", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", f"/CN={names[0]}")  # fmt: skip
    alt = ",".join([*(f"DNS:{n}" for n in names), *(f"IP:{a}" for a in addresses)])
    (folder / "ext.cnf").write_text(
        f"subjectAltName={alt}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
    )
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf")  # fmt: skip
    return folder / "ca.pem", folder / "server.pem", folder / "server.key"
