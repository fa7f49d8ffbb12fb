"""The proxy's own certificate authority, for the hosts where it terminates TLS to write secrets in.

Security model: the authority's key lives in this process's memory only and dies with it; sessions get
its certificate (to trust) and never a key. A certificate is issued only for a name the proxy is about to
serve to a session that asked for it with CONNECT, and only for hosts one of that session's secrets lists,
so what a worker trusting this authority can be shown is confined to those hosts. Needs the
`cryptography` package (the `network-secrets` extra), imported only by this module.
"""

from __future__ import annotations

import collections
import datetime
import ipaddress
import os
import re
import ssl
import tempfile
import threading
from typing import TYPE_CHECKING

from ._policy import parse_address

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import ec

_LEAVES_KEPT = 256  # a wildcard secret host can name many hosts: keep the recent ones' contexts
_LEAF_DAYS = 397  # the longest a server certificate may live for clients that check it
_LEAF_RENEW = datetime.timedelta(days=30)


def _load_cryptography() -> None:
    try:
        import cryptography  # noqa: F401
    except ImportError:
        raise ImportError(
            "secrets for HTTPS hosts need the cryptography package: install "
            "genpark-repl-tools[network-secrets] (pip install 'genpark-repl-tools[network-secrets]')",
            name="cryptography",
        ) from None


class CertificateAuthority:
    """A certificate authority made in memory, issuing server certificates one name at a time.

    Thread-safe: `pem` is read from any thread, `server_context` is called on the proxy's thread.
    """

    def __init__(self) -> None:
        _load_cryptography()
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        now = datetime.datetime.now(datetime.timezone.utc)
        self._key = ec.generate_private_key(ec.SECP256R1())
        # A random serial part in the name: two engines' authorities are never confused in a bundle.
        name = x509.Name(
            [x509.NameAttribute(NameOID.COMMON_NAME, f"genpark egress proxy CA {os.urandom(4).hex()}")]
        )
        public = self._key.public_key()
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.pem: bytes = self._cert.public_bytes(serialization.Encoding.PEM)
        # One key for every server certificate: a leaf's key protects nothing the authority's does not.
        self._leaf_key: ec.EllipticCurvePrivateKey = ec.generate_private_key(ec.SECP256R1())
        self._leaves: collections.OrderedDict[str, tuple[ssl.SSLContext, datetime.datetime]] = (
            collections.OrderedDict()
        )
        self._lock = threading.Lock()

    def server_context(self, host: str) -> ssl.SSLContext:
        """A server-side TLS context presenting a certificate for `host` (a normalised name or address)."""
        now = datetime.datetime.now(datetime.timezone.utc)
        with self._lock:
            kept = self._leaves.get(host)
            if kept is not None and kept[1] > now:
                self._leaves.move_to_end(host)
                return kept[0]
        context = self._issue(host, now)
        with self._lock:
            self._leaves[host] = (context, now + _LEAF_RENEW)
            while len(self._leaves) > _LEAVES_KEPT:
                self._leaves.popitem(last=False)
        return context

    def _issue(self, host: str, now: datetime.datetime) -> ssl.SSLContext:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        address = parse_address(host)
        alt: x509.GeneralName = (
            x509.IPAddress(ipaddress.ip_address(address)) if address is not None else x509.DNSName(host)
        )
        public = self._leaf_key.public_key()
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
            .issuer_name(self._cert.subject)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(min(now + datetime.timedelta(days=_LEAF_DAYS), self._cert.not_valid_after_utc))
            .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )
        chain = cert.public_bytes(serialization.Encoding.PEM) + self.pem
        key = self._leaf_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.options |= ssl.OP_NO_RENEGOTIATION  # a client's renegotiations would cost only the proxy
        context.set_alpn_protocols(["http/1.1"])  # the proxy reads HTTP/1.1 inside, never HTTP/2
        # The ssl module loads a certificate chain from a file only: one of the owner's alone, gone at once.
        fd, path = tempfile.mkstemp(prefix="genpark-egress-leaf-", suffix=".pem")
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(chain + key)
            context.load_cert_chain(path)
        finally:
            os.unlink(path)
        return context


_PEM_BLOCK = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+?-----END CERTIFICATE-----")
_HASHED_NAME = re.compile(r"[0-9a-f]{8}\.[0-9]+")


def certificates_in(data: bytes) -> list[bytes]:
    """The PEM certificate blocks in `data`, each ending in a newline; nothing else (a key, say)."""
    return [block.replace(b"\r\n", b"\n") + b"\n" for block in _PEM_BLOCK.findall(data)]


def system_ca_pem() -> bytes:
    """The certificates the `ssl` module trusts by default here (what urllib verifies against), as PEM:
    the default CA file's, then those in the default CA directory under the hashed names OpenSSL reads."""
    paths = ssl.get_default_verify_paths()
    files = [paths.cafile] if paths.cafile else []
    if paths.capath and os.path.isdir(paths.capath):
        files += sorted(
            os.path.join(paths.capath, name)
            for name in os.listdir(paths.capath)
            if _HASHED_NAME.fullmatch(name)
        )
    blocks: dict[bytes, None] = {}  # ordered, without repeats (the directory repeats the file's)
    for path in files:
        try:
            with open(path, "rb") as file:
                data = file.read()
        except OSError:
            continue
        for block in certificates_in(data):
            blocks.setdefault(block, None)
    return b"".join(blocks)
