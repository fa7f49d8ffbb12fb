"""A boundary's side of the egress proxy: each session's proxy session, environment and network line.

Security model: host code. A worker of a boundary with a network policy binds a loopback port in a
network namespace of its own and passes the listening socket out with its READY; the proxy serves it as
that session's listener, so a connection's session is the worker it came from, never what it says.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import shutil
import socket
import tempfile
import threading
import weakref

from ...egress import ConnectionRecord, EgressProxy, NetworkPolicy, SessionEndpoint, summarise

__all__ = ["EGRESS_PORT", "SessionEgress"]

# The port a worker's listener takes on its own loopback: every session sees the same proxy URL.
EGRESS_PORT = 3128
# How long a run's report waits for the proxy to see connections its cell closed.
_SETTLE_S = 0.05
_CA_BUNDLE = "ca-bundle.pem"


class SessionEgress:
    """The proxy sessions of one boundary's sessions (thread-safe)."""

    def __init__(self, policy: NetworkPolicy, proxy: EgressProxy | None) -> None:
        self.policy = policy
        self.proxy = proxy if proxy is not None else EgressProxy()
        self._owns_proxy = proxy is None
        self._key = os.urandom(32)
        self._lock = threading.Lock()
        self._open: dict[str, int] = {}  # session -> records reported so far
        self.port = EGRESS_PORT
        # Files the workers read (made here, before the zygote opens its read paths): searchable
        # and readable by the workers' user, written by the host only.
        self.folder = tempfile.mkdtemp(prefix="genpark-egress-")
        os.chmod(self.folder, 0o755)
        # Removed by close(), or when this object goes unclosed (a boundary dropped without close()),
        # or at the latest when the process exits.
        self._remove_folder = weakref.finalize(self, shutil.rmtree, self.folder, True)
        self.folder_inside = self.folder  # the folder as workers see it (the container boundary's mounts it)
        # Secrets for hosts that may speak TLS: the proxy terminates it with an authority of its own,
        # which the sessions' clients must trust (a bundle of it and the system's authorities).
        self._ca_bundle = ""
        if any(entry.ports != (80,) for secret in policy.secrets.values() for entry in secret.entries()):
            try:
                self.proxy.write_ca_bundle(os.path.join(self.folder, _CA_BUNDLE))
            except ImportError:
                if any(443 in e.ports for secret in policy.secrets.values() for e in secret.entries()):
                    self.close()
                    raise
            else:
                self._ca_bundle = _CA_BUNDLE

    def environment(self, session: str) -> dict[str, str]:
        """The session's proxy variables, secrets' placeholders and (with secrets for HTTPS hosts) the
        bundle of authorities its clients trust; opens its proxy session if needed.

        A placeholder is the same for the session as long as this boundary lives (derived from a key
        of its own), so one the code kept in a variable still works after the session hibernated."""
        placeholders = {name: self._placeholder(session, name) for name in self.policy.secrets}
        with self._lock:
            if session not in self._open:
                placeholders = self.proxy.open_session(
                    session, self.policy, tcp=False, placeholders=placeholders
                ).placeholders
                self._open[session] = 0
        ca_file = os.path.join(self.folder_inside, self._ca_bundle) if self._ca_bundle else None
        return SessionEndpoint(session, None, placeholders).environment(self.url, ca_file)

    def _placeholder(self, session: str, name: str) -> str:
        digest = hmac.new(self._key, f"{session}\0{name}".encode(), hashlib.sha256).hexdigest()
        return "genpark-secret-" + digest[:32]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{EGRESS_PORT}"

    def serve(self, session: str, listener: socket.socket) -> None:
        self.proxy.serve_listener(session, listener)

    def report(self, session: str) -> tuple[str, list[ConnectionRecord]]:
        """What the session's connections did since the last report: the run's network line ("" if
        there were none) and their records."""
        with self._lock:
            seen = self._open.get(session)
        if seen is None:
            return "", []
        self.proxy.settle(session, _SETTLE_S)
        records, total = self.proxy.records_since(session, seen)
        with self._lock:
            if session in self._open:
                self._open[session] = total
        return summarise(records), records

    def close_session(self, session: str) -> None:
        with self._lock:
            if self._open.pop(session, None) is None:
                return
        self.proxy.close_session(session)

    def close(self) -> None:
        with self._lock:
            sessions = list(self._open)
            self._open.clear()
        for session in sessions:
            self.proxy.close_session(session)
        if self._owns_proxy:
            self.proxy.close()
        self._remove_folder()
