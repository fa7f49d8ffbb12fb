"""The egress proxy: the only way out of a sandboxed session, deciding by name.

Security model: a session's code is hostile. Its only route to the network is its own listener on this
proxy (one per session, so a connection's session is where it arrived, never what it claims). The proxy
allows a connection only to a host and port the session's `NetworkPolicy` lists: HTTPS through CONNECT,
where the ClientHello's server name (when sent) must be the CONNECT host; plain HTTP by the absolute-form
URI, whose host the Host header must repeat. It resolves names itself and refuses any name that resolves
to a loopback, private, link-local, multicast, reserved or metadata address unless an entry lists that
exact address. Header sizes, header-read times, connections at once and bytes per session are bounded;
one client's malformed, slow or flooding connections cost only its own session's quota. It does not
inspect what flows inside an allowed TLS tunnel, except for a host one of the session's secrets lists:
there it terminates TLS with a certificate from its own authority (which the session trusts), reads the
HTTP/1.1 request inside, writes the secret in as for plain HTTP, and forwards it over TLS of its own to
the server, whose certificate it verifies.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import os
import re
import secrets as _secrets
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

from ._authority import CertificateAuthority, certificates_in, system_ca_pem
from ._policy import Entry, NetworkPolicy, non_public_kind, normalise_host, parse_address
from ._records import ConnectionRecord, Verdict
from ._tls import NotClientHello, TLSStream, read_client_hello, server_name

logger = logging.getLogger(__name__)

Resolver = Callable[[str], Sequence[str]]

_HEX = re.compile(rb"[0-9a-fA-F]{1,16}")
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"upgrade",
    }
)
_CHUNK = 1 << 16
_RECORDS_KEPT = 10_000
_ACCESS_DENIED = bytes([21, 3, 3, 0, 2, 2, 49])  # TLS record: alert, fatal, access_denied
_LOOKUPS_PER_SESSION = 4
_LOOKUP_THREADS = 64
_PLACEHOLDER_LENGTH = len("genpark-secret-") + 32
_UPSTREAM_HEAD = 1 << 18  # a server's response head (cookies can be large); the server is one we chose
# Where OpenSSL-based clients (urllib, httpx), requests, curl and pip look for the certificates to trust.
_CA_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT")


def _system_resolver(name: str) -> list[str]:
    # Not made absolute with a trailing dot: names in /etc/hosts would stop resolving. What a search
    # domain might add resolves to the local network, which the address check refuses.
    return [str(info[4][0]) for info in socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)]


class _Reader(Protocol):
    """A client's or a server's byte stream: asyncio's, or the plaintext inside a terminated TLS."""

    async def readuntil(self, separator: bytes) -> bytes: ...
    async def readexactly(self, n: int) -> bytes: ...
    async def read(self, n: int) -> bytes: ...


class _Writer(Protocol):
    def write(self, data: bytes) -> None: ...
    async def drain(self) -> None: ...
    def can_write_eof(self) -> bool: ...
    def write_eof(self) -> None: ...


class Refused(Exception):
    """A connection the proxy will not make; `status` is the HTTP status the client receives."""

    def __init__(self, reason: str, status: int = 403) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


@dataclass
class _Connection:
    """What one client connection asked for and got, filled in as it goes and recorded at its end."""

    host: str = ""
    port: int = 0
    method: str = ""
    verdict: Verdict = "refused"
    reason: str = ""
    address: str | None = None
    bytes_up: int = 0
    bytes_down: int = 0
    body_tail: bytes = b""
    reply: _Writer | None = None  # where a refusal is answered, once TLS is terminated: inside it


@dataclass
class _Session:
    name: str
    policy: NetworkPolicy
    placeholders: dict[str, str]  # placeholder -> secret name
    terminated: tuple[Entry, ...]  # the secrets' hosts: TLS to these is terminated, to write them in
    server: asyncio.AbstractServer | None = None
    adopted: asyncio.AbstractServer | None = None  # a listener handed in by serve_listener
    active: int = 0
    recorded: int = 0  # records made so far, ever (the deque keeps the last ones)
    used: int = 0
    writers: set[asyncio.StreamWriter] = field(default_factory=set)
    # Lookups run on threads; a few at a time per session, so one session's slow names cannot take
    # every thread from the others.
    resolving: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(_LOOKUPS_PER_SESSION))
    records: collections.deque[ConnectionRecord] = field(
        default_factory=lambda: collections.deque(maxlen=_RECORDS_KEPT)
    )

    def spend(self, n: int) -> bool:
        """Count `n` more bytes; False once the session's byte limit would be passed."""
        limit = self.policy.max_bytes
        if limit is not None and self.used + n > limit:
            return False
        self.used += n
        return True


@dataclass(frozen=True)
class SessionEndpoint:
    """Where a session's proxy listens, and the environment its code runs with."""

    session: str
    address: tuple[str, int] | str | None  # (host, port) for TCP, a Unix socket's path, or none
    placeholders: dict[str, str]  # secret name -> placeholder

    @property
    def url(self) -> str:
        """The proxy URL on the host (a TCP listener only)."""
        if not isinstance(self.address, tuple):
            raise ValueError("only a TCP listener has a URL: forward a loopback port inside the sandbox")
        return f"http://{self.address[0]}:{self.address[1]}"

    def environment(self, proxy_url: str | None = None, ca_file: str | None = None) -> dict[str, str]:
        """The variables urllib, requests, httpx and pip read, plus the secrets' placeholders.

        `proxy_url` is the proxy as the session sees it (a forwarded port inside its sandbox); by default
        the host's own listener. `ca_file` is the bundle `EgressProxy.write_ca_bundle` wrote, as the
        session sees it: the certificates the session's clients trust, named in the variables they read.
        """
        url = proxy_url or self.url
        env = dict.fromkeys(("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"), url)
        # A NO_PROXY inherited from the host would send those names around the proxy, into nothing.
        env.update({"NO_PROXY": "", "no_proxy": ""})
        if ca_file is not None:
            env.update(dict.fromkeys(_CA_VARIABLES, ca_file))
        env.update(self.placeholders)
        return env


class EgressProxy:
    """An HTTP(S) forward proxy that lets each session reach only the names its policy lists.

    Security model: see this module's docstring. Runs its own event loop on a daemon thread; every public
    method is safe to call from any other thread.

    `resolver` maps a name to its addresses (the system's by default; tests map names to loopback
    servers). `on_record` is called on the proxy's thread with each connection's record when it ends; an
    exception it raises is logged, never fatal. `upstream_ca` is a PEM file of certificate authorities
    trusted for servers besides the system's, where the proxy terminates TLS (and, through
    `write_ca_bundle`, by the sessions for their own TLS).
    """

    def __init__(
        self,
        *,
        resolver: Resolver | None = None,
        on_record: Callable[[ConnectionRecord], None] | None = None,
        header_timeout: float = 10.0,
        idle_timeout: float = 300.0,
        connect_timeout: float = 10.0,
        max_header_bytes: int = 16 * 1024,
        upstream_ca: str | os.PathLike[str] | None = None,
    ) -> None:
        self._resolver = resolver or _system_resolver
        self._upstream_ca = os.fspath(upstream_ca) if upstream_ca is not None else None
        # Made on first need, with the first session whose secrets have an HTTPS host.
        self._terminator: tuple[CertificateAuthority, ssl.SSLContext] | None = None
        self._authority_lock = threading.Lock()
        self._lookups = concurrent.futures.ThreadPoolExecutor(_LOOKUP_THREADS, "genpark-egress-lookup")
        self._records_lock = threading.Lock()
        self._on_record = on_record
        self.header_timeout = header_timeout
        self.idle_timeout = idle_timeout
        self.connect_timeout = connect_timeout
        self.max_header_bytes = max_header_bytes
        self._sessions: dict[str, _Session] = {}
        self._adopted: set[asyncio.Task[None]] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="genpark-egress-proxy", daemon=True)
        self._thread.start()

    # ----------------------------------------------------------------- lifecycle (any thread)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def _call(self, coroutine: Any, timeout: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def open_session(
        self,
        session: str,
        policy: NetworkPolicy,
        *,
        unix_path: str | None = None,
        tcp: bool = True,
        placeholders: dict[str, str] | None = None,
    ) -> SessionEndpoint:
        """Open `session`'s side of the proxy, with its own listener: a Unix socket at `unix_path` (mode
        0600) if given, else loopback TCP on a free port if `tcp`, else none (connections then come in
        through `serve_listener` or `serve_socket` only).

        `placeholders` (secret name -> placeholder) are those of an earlier opening of the same session,
        so that a placeholder its code kept in a variable still works; by default new ones are made."""
        if self._loop.is_closed():
            raise RuntimeError("the proxy is closed")
        terminated = tuple(
            entry
            for secret in policy.secrets.values()
            for entry in secret.entries()
            if entry.ports != (80,)  # a host on port 80 alone is plain HTTP: nothing to terminate
        )
        if terminated:
            try:
                self._terminating()
            except ImportError:
                # Refused here rather than mid-connection where HTTPS is certain; a secret's host on
                # another port may well be plain HTTP, which needs no extra (a CONNECT to it is refused).
                if any(443 in entry.ports for entry in terminated):
                    raise
        given = placeholders or {}
        placeholders = {}
        for name in sorted(policy.secrets):
            value = given.get(name, "")
            if not re.fullmatch(r"genpark-secret-[0-9a-f]{32}", value):
                value = f"genpark-secret-{_secrets.token_hex(16)}"
            placeholders[name] = value
        state = _Session(session, policy, {value: name for name, value in placeholders.items()}, terminated)
        address: tuple[str, int] | str | None = self._call(self._listen(state, unix_path, tcp))
        return SessionEndpoint(session, address, placeholders)

    async def _listen(
        self, state: _Session, unix_path: str | None, tcp: bool
    ) -> tuple[str, int] | str | None:
        if state.name in self._sessions:
            raise ValueError(f"session {state.name!r} is already open")

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._serve(state, reader, writer)

        address: tuple[str, int] | str | None = None
        if unix_path is not None:
            state.server = await asyncio.start_unix_server(serve, unix_path, limit=self.max_header_bytes)
            os.chmod(unix_path, 0o600)  # whoever connects speaks as this session: its owner only
            address = unix_path
        elif tcp:
            state.server = await asyncio.start_server(serve, "127.0.0.1", 0, limit=self.max_header_bytes)
            address = state.server.sockets[0].getsockname()[:2]
        self._sessions[state.name] = state
        return address

    def serve_listener(self, session: str, sock: socket.socket) -> None:
        """Accept `session`'s connections on a listening stream socket; the proxy owns it from here.

        This is how a sandbox with no route to the host reaches the proxy: its worker binds a loopback
        port in a network namespace of its own and passes the listening socket out (SCM_RIGHTS). A
        listener handed in before for the session is closed (its worker was replaced); one for a
        session that is not open is closed.
        """
        sock.setblocking(False)
        self._call(self._serve_listener(session, sock))

    async def _serve_listener(self, session: str, sock: socket.socket) -> None:
        state = self._sessions.get(session)
        if state is None:
            sock.close()
            return

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._serve(state, reader, writer)

        if state.adopted is not None:
            state.adopted.close()
        state.adopted = await asyncio.start_server(serve, sock=sock, limit=self.max_header_bytes)

    def serve_socket(self, session: str, sock: socket.socket) -> None:
        """Serve one connected stream socket as a connection of `session`; the proxy owns it from here.

        This is how connections arrive from a sandbox with no route to the host: a forwarder inside
        makes a socketpair per client and passes one end out (SCM_RIGHTS) to be served here. A socket
        for a session that is not open is closed.
        """
        sock.setblocking(False)
        self._loop.call_soon_threadsafe(self._adopt, session, sock)

    def _adopt(self, session: str, sock: socket.socket) -> None:
        state = self._sessions.get(session)
        if state is None:
            sock.close()
            return
        task = self._loop.create_task(self._serve_adopted(state, sock))
        self._adopted.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(self._adopted.discard)

    async def _serve_adopted(self, state: _Session, sock: socket.socket) -> None:
        try:
            reader, writer = await asyncio.open_connection(sock=sock, limit=self.max_header_bytes)
        except OSError:
            sock.close()
            return
        await self._serve(state, reader, writer)

    def _terminating(self) -> tuple[CertificateAuthority, ssl.SSLContext]:
        """The authority the proxy issues certificates with and the context it verifies servers with."""
        with self._authority_lock:
            if self._terminator is None:
                authority = CertificateAuthority()  # an ImportError naming the extra without cryptography
                upstream = ssl.create_default_context()
                if self._upstream_ca is not None:
                    upstream.load_verify_locations(self._upstream_ca)
                upstream.set_alpn_protocols(["http/1.1"])
                self._terminator = authority, upstream
            return self._terminator

    def ca_pem(self) -> bytes:
        """The certificate of the authority this proxy issues its TLS certificates with, as PEM (made now
        if it was not yet). Sessions with secrets for HTTPS hosts must trust it: see write_ca_bundle."""
        return self._terminating()[0].pem

    def write_ca_bundle(self, path: str | os.PathLike[str]) -> None:
        """Write the certificates a session should trust to `path` (mode 0644, replaced whole): the
        system's (what urllib trusts here), `upstream_ca`'s, and this proxy's authority."""
        bundle = system_ca_pem()
        if self._upstream_ca is not None:
            with open(self._upstream_ca, "rb") as file:
                bundle += b"".join(certificates_in(file.read()))  # a key kept beside them stays out
        bundle += self.ca_pem()
        target = os.fspath(path)
        fd, temporary = tempfile.mkstemp(dir=os.path.dirname(target) or ".", prefix=".ca-bundle-")
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(bundle)
            os.chmod(temporary, 0o644)
            os.replace(temporary, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise

    def records(self, session: str) -> list[ConnectionRecord]:
        """The session's connections so far (the most recent 10,000), oldest first."""
        state = self._sessions.get(session)
        if state is None:
            return []
        with self._records_lock:  # appended to on the proxy's thread
            return list(state.records)

    def records_since(self, session: str, seen: int) -> tuple[list[ConnectionRecord], int]:
        """The session's records made after the first `seen` ever made (those still kept), and how many
        it has made in all: pass that as `seen` next time."""
        state = self._sessions.get(session)
        if state is None:
            return [], seen
        with self._records_lock:
            total = state.recorded
            new = min(total - seen, len(state.records))
            return (list(state.records)[len(state.records) - new :] if new > 0 else []), total

    def settle(self, session: str, timeout: float) -> None:
        """Wait up to `timeout` seconds while the session has connections open: a client that closed its
        end is recorded once the proxy sees that, a moment later, on its own thread."""
        state = self._sessions.get(session)
        if state is None or self._loop.is_closed():
            return
        deadline = time.monotonic() + timeout
        while state.active and time.monotonic() < deadline:
            time.sleep(0.002)

    def close_session(self, session: str) -> None:
        """Stop the session's listener and cut its open connections."""
        if not self._loop.is_closed():
            self._call(self._close_session(session))

    async def _close_session(self, session: str) -> None:
        state = self._sessions.pop(session, None)
        if state is None:
            return
        for server in (state.server, state.adopted):
            if server is not None:
                server.close()
        for writer in list(state.writers):
            writer.transport.abort()

    def close(self) -> None:
        """Close every session and stop the proxy's thread."""
        if self._loop.is_closed():
            return
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _shutdown(self) -> None:
        # Every connection's task ends (and records itself) before the loop stops: a task left
        # pending would be destroyed with its sockets unclosed.
        for session in list(self._sessions):
            await self._close_session(session)
        tasks = asyncio.all_tasks() - {asyncio.current_task()}
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        self._lookups.shutdown(wait=False, cancel_futures=True)  # a stuck lookup is left to finish alone

    def __enter__(self) -> EgressProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- one client connection (loop thread)

    async def _serve(
        self, state: _Session, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        conn = _Connection()
        try:
            if state.active >= state.policy.max_connections:
                raise Refused(
                    f"too many connections at once (limit {state.policy.max_connections})", status=429
                )
            if state.policy.max_bytes is not None and state.used >= state.policy.max_bytes:
                raise Refused(f"the session's byte limit ({state.policy.max_bytes}) is reached", status=429)
        except Refused as refusal:
            conn.verdict, conn.reason = "refused", refusal.reason
            writer.transport.abort()  # no reply: answering a flood politely is what it wants
            self._record(state, conn)
            return
        state.active += 1
        state.writers.add(writer)
        try:
            await self._handle(state, conn, reader, writer)
        except Refused as refusal:
            # 502: allowed, but the name did not resolve or its server did not answer
            conn.verdict = "failed" if refusal.status == 502 else "refused"
            conn.reason = refusal.reason
            await self._reply(conn.reply or writer, refusal.status, refusal.reason)
        except Exception as exc:  # the proxy outlives whatever one connection does
            if not conn.reason:  # else the reason was set where the connection was cut
                conn.reason = f"cut: {type(exc).__name__}: {exc}"[:200]
                if conn.verdict == "refused":  # nothing was decided yet: an error, not a refusal
                    conn.verdict = "failed"
            if not isinstance(exc, (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError)):
                logger.exception("egress proxy: unexpected error on a %s connection", state.name)
        finally:
            state.writers.discard(writer)
            writer.close()
            try:
                self._record(state, conn)
            finally:
                # Only once it is recorded: settle() waits while a connection is active, so a run's
                # report never misses a connection whose reply the code has already read.
                state.active -= 1

    def _record(self, state: _Session, conn: _Connection) -> None:
        record = ConnectionRecord(
            session=state.name,
            host=conn.host,
            port=conn.port,
            method=conn.method,
            verdict=conn.verdict,
            reason=conn.reason,
            address=conn.address,
            bytes_up=conn.bytes_up,
            bytes_down=conn.bytes_down,
        )
        with self._records_lock:
            state.records.append(record)
            state.recorded += 1
        if self._on_record is not None:
            try:
                self._on_record(record)
            except Exception:
                logger.exception("egress proxy: the on_record callback failed")

    async def _reply(self, writer: _Writer, status: int, reason: str) -> None:
        """A short refusal the client's library shows its caller: the reason is in the status line."""
        phrase = re.sub(r"[^\x20-\x7e]", "?", f"Refused by the egress proxy: {reason}")[:300]
        body = phrase.encode("ascii") + b"\n"
        head = (
            f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        with contextlib.suppress(OSError, asyncio.TimeoutError):
            writer.write(head.encode("ascii") + body)
            await asyncio.wait_for(writer.drain(), 5)

    async def _read_head(self, reader: _Reader, timeout: float) -> bytes:
        try:
            return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        except asyncio.TimeoutError:
            raise Refused(f"no complete request head within {timeout:g} s", status=408) from None
        except asyncio.LimitOverrunError:
            raise Refused(f"request head larger than {self.max_header_bytes} bytes", status=431) from None
        except asyncio.IncompleteReadError:
            raise Refused("the client closed before a complete request head", status=400) from None

    async def _handle(
        self, state: _Session, conn: _Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        head = await self._read_head(reader, self.header_timeout)
        method, target, headers = _parse_request(head)
        conn.method = method.decode("ascii")
        hosts = [value for name, value in headers if name.lower() == b"host"]
        if len(hosts) > 1:
            raise Refused("more than one Host header", status=400)
        if method == b"CONNECT":
            host, port = _split_authority(target.decode("ascii"), default_port=None)
            conn.host, conn.port = host, port
            if hosts and _split_authority(hosts[0].decode("latin-1"), default_port=port) != (host, port):
                raise Refused(f"the Host header does not match CONNECT {host}:{port}", status=400)
            if any(entry.matches(host, port) for entry in state.terminated):
                conn.method = "CONNECT+TLS"
                await self._terminate(state, conn, reader, writer)
            else:
                await self._tunnel(state, conn, reader, writer)
            return
        url = target.decode("ascii")
        parts = urlsplit(url)
        if parts.scheme.lower() != "http" or not parts.netloc:
            raise Refused("expected an absolute http:// URI (use CONNECT for https)", status=400)
        if "@" in parts.netloc:
            raise Refused("user information in the URI is not forwarded", status=400)
        host, port = _split_authority(parts.netloc, default_port=80)
        conn.host, conn.port = host, port
        if not hosts:
            raise Refused("no Host header", status=400)
        if _split_authority(hosts[0].decode("latin-1"), default_port=80) != (host, port):
            raise Refused(f"the Host header does not match the URI's host {host}:{port}", status=400)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        await self._forward(state, conn, method, path.encode("ascii"), headers, reader, writer)

    # ----------------------------------------------------------------- deciding

    async def _decide(self, state: _Session, conn: _Connection) -> list[str]:
        """The addresses to try for conn.host:conn.port, or Refused."""
        host, port, policy = conn.host, conn.port, state.policy
        literal = parse_address(host)
        if literal is not None:
            if not policy.allows(str(literal), port):
                raise Refused(f"IP address {host} port {port} is not in the allow list")
            return [str(literal)]
        if not policy.allows(host, port):
            raise Refused(f"{host}:{port} is not in the allow list")
        try:
            found = await asyncio.wait_for(self._lookup(state, host), self.connect_timeout)
        except (OSError, asyncio.TimeoutError, UnicodeError) as exc:
            raise Refused(f"{host} does not resolve ({type(exc).__name__})", status=502) from None
        addresses = []
        for text in found:
            address = parse_address(str(text).split("%")[0])
            if address is None:
                raise Refused(f"{host} resolved to something that is not an address", status=502)
            kind = non_public_kind(address)
            if kind is not None and not policy.allows_address(address, port):
                raise Refused(f"{host} resolves to a {kind} address ({address})")
            addresses.append(str(address))
        if not addresses:
            raise Refused(f"{host} does not resolve", status=502)
        return addresses

    async def _lookup(self, state: _Session, host: str) -> Sequence[str]:
        async with state.resolving:
            return await asyncio.get_running_loop().run_in_executor(self._lookups, self._resolver, host)

    async def _connect(
        self, conn: _Connection, addresses: list[str], tls: ssl.SSLContext | None = None
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to the first address that answers; over TLS with `tls`, the server's certificate
        verified for conn.host."""
        error: BaseException | None = None
        for address in addresses:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(
                        address,
                        conn.port,
                        limit=_UPSTREAM_HEAD,
                        ssl=tls,
                        server_hostname=conn.host if tls is not None else None,
                    ),
                    self.connect_timeout,
                )
            except ssl.SSLCertVerificationError as exc:
                # Another address of the name would not make this server's certificate any better.
                raise Refused(
                    f"{conn.host}:{conn.port}'s certificate is not trusted ({exc.verify_message})", status=502
                ) from None
            except (OSError, asyncio.TimeoutError) as exc:
                error = exc
                continue
            conn.address = address
            return reader, writer
        raise Refused(f"could not connect to {conn.host}:{conn.port} ({type(error).__name__})", status=502)

    # ----------------------------------------------------------------- HTTPS: CONNECT tunnels

    async def _tunnel(
        self, state: _Session, conn: _Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        addresses = await self._decide(state, conn)
        up_reader, up_writer = await self._connect(conn, addresses)
        try:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            raw = await self._client_hello(conn, reader, writer)
            if raw is None:
                return
            conn.verdict = "allowed"
            await self._send(state, conn, up_writer, raw, up=True)
            await self._relay(state, conn, reader, writer, up_reader, up_writer)
        finally:
            up_writer.transport.abort()

    async def _client_hello(
        self, conn: _Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bytes | None:
        """The client's ClientHello records, if they are one for the CONNECT host; else None, with the
        connection's refusal set."""
        try:
            raw, hello = await asyncio.wait_for(read_client_hello(reader), self.header_timeout)
            sni = server_name(hello)
        except NotClientHello as exc:
            conn.verdict, conn.reason = "refused", str(exc)
            return None
        except asyncio.TimeoutError:
            conn.verdict = "refused"
            conn.reason = f"no TLS ClientHello within {self.header_timeout:g} s"
            return None
        except asyncio.IncompleteReadError:
            conn.verdict, conn.reason = "refused", "the client closed before its TLS ClientHello"
            return None
        if sni is not None and _same_name(sni) != conn.host:
            conn.verdict, conn.reason = "refused", f"TLS server name {sni!r} is not the CONNECT host"
            # A fatal access_denied alert: the client's TLS library names it, where a bare
            # close would read as a network fault.
            writer.write(_ACCESS_DENIED)
            await writer.drain()
            return None
        return raw

    # ----------------------------------------------------------------- HTTPS to a secret's host: terminated

    async def _terminate(
        self, state: _Session, conn: _Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """TLS with the client under this proxy's certificate for the CONNECT host, one HTTP/1.1 request
        read inside and forwarded as plain HTTP's are (secrets written in), over TLS to the server."""
        try:
            authority, upstream = self._terminating()
        except ImportError as exc:
            raise Refused(str(exc), status=501) from None
        addresses = await self._decide(state, conn)
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        raw = await self._client_hello(conn, reader, writer)
        if raw is None:
            return
        # Issuing a certificate takes milliseconds of CPU (a wildcard host can name many): on a thread,
        # a few at a time per session, so one session's names never stall the loop for the others.
        async with state.resolving:
            context = await asyncio.get_running_loop().run_in_executor(
                self._lookups, authority.server_context, conn.host
            )
        inside = TLSStream(context, reader, writer, limit=self.max_header_bytes)
        try:
            await asyncio.wait_for(inside.handshake(raw), self.header_timeout)
        except (ssl.SSLError, ConnectionError) as exc:
            conn.verdict = "refused"
            conn.reason = f"TLS with the client failed ({_tls_error(exc)}): does it trust the proxy's CA?"
            return
        except asyncio.TimeoutError:
            conn.verdict = "refused"
            conn.reason = f"no TLS handshake within {self.header_timeout:g} s"
            return
        conn.reply = inside
        head = await self._read_head(inside, self.header_timeout)
        method, target, headers = _parse_request(head)
        if method == b"CONNECT" or not target.startswith(b"/"):
            raise Refused("expected a request for a path (origin form) inside TLS", status=400)
        hosts = [value for name, value in headers if name.lower() == b"host"]
        if len(hosts) != 1:
            raise Refused("expected one Host header", status=400)
        if _split_authority(hosts[0].decode("latin-1"), default_port=443) != (conn.host, conn.port):
            raise Refused(f"the Host header does not match CONNECT {conn.host}:{conn.port}", status=400)
        await self._forward(
            state, conn, method, target, headers, inside, inside, addresses=addresses, tls=upstream
        )

    async def _send(
        self, state: _Session, conn: _Connection, writer: _Writer, data: bytes, *, up: bool
    ) -> None:
        if not state.spend(len(data)):
            conn.reason = f"the session's byte limit ({state.policy.max_bytes}) is reached"
            raise ConnectionAbortedError(conn.reason)
        if up:
            conn.bytes_up += len(data)
        else:
            conn.bytes_down += len(data)
        writer.write(data)
        await asyncio.wait_for(writer.drain(), self.idle_timeout)

    async def _pump(
        self,
        state: _Session,
        conn: _Connection,
        source: _Reader,
        sink: _Writer,
        *,
        up: bool,
    ) -> None:
        while True:
            data = await asyncio.wait_for(source.read(_CHUNK), self.idle_timeout)
            if not data:
                if sink.can_write_eof():
                    with contextlib.suppress(OSError):
                        sink.write_eof()
                return
            await self._send(state, conn, sink, data, up=up)

    async def _relay(
        self,
        state: _Session,
        conn: _Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> None:
        tasks = [
            asyncio.ensure_future(self._pump(state, conn, reader, up_writer, up=True)),
            asyncio.ensure_future(self._pump(state, conn, up_reader, writer, up=False)),
        ]
        try:
            pending: set[asyncio.Future[None]] = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    task.result()  # a limit or an error ends both directions
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # ----------------------------------------------------------------- plain HTTP

    async def _forward(
        self,
        state: _Session,
        conn: _Connection,
        method: bytes,
        path: bytes,
        headers: list[tuple[bytes, bytes]],
        reader: _Reader,
        writer: _Writer,
        *,
        addresses: list[str] | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """Forward one request in origin form to conn.host (over `tls` if given; to `addresses` if
        already decided) with its secrets written in, and the response back."""
        length, chunked = _body_framing(headers)
        connection_named = {
            token.strip().lower()
            for name, value in headers
            if name.lower() == b"connection"
            for token in value.split(b",")
        }
        kept = [
            (name, value)
            for name, value in headers
            if name.lower() not in _HOP_BY_HOP and name.lower() not in connection_named
        ]
        head = b"%s %s HTTP/1.1\r\n" % (method, path)
        head += b"".join(b"%s: %s\r\n" % pair for pair in kept)
        head += b"Connection: close\r\n\r\n"
        head = self._secrets(state, conn, head)
        # The body's start is read before connecting, so a placeholder in a small body is refused
        # before the server hears anything.
        first = b""
        if length:
            try:
                first = await asyncio.wait_for(reader.readexactly(min(length, _CHUNK)), self.idle_timeout)
            except asyncio.IncompleteReadError:
                raise Refused("the client closed before its request body ended", status=400) from None
            self._no_placeholder_in_body(state, conn, first)
        if addresses is None:
            addresses = await self._decide(state, conn)
        up_reader, up_writer = await self._connect(conn, addresses, tls)
        conn.verdict = "allowed"
        try:
            await self._send(state, conn, up_writer, head + first, up=True)
            if chunked:
                await self._copy_chunked(state, conn, reader, up_writer)
            elif length > len(first):
                await self._copy_exactly(state, conn, reader, up_writer, length - len(first))
            response = await asyncio.wait_for(up_reader.readuntil(b"\r\n\r\n"), self.idle_timeout)
            await self._send(state, conn, writer, _close_response(response), up=False)
            await self._pump(state, conn, up_reader, writer, up=False)
        finally:
            up_writer.transport.abort()

    def _secrets(self, state: _Session, conn: _Connection, head: bytes) -> bytes:
        """Swap each placeholder for its secret if the request goes to one of the secret's hosts."""
        for placeholder, name in state.placeholders.items():
            token = placeholder.encode("ascii")
            if token not in head:
                continue
            secret = state.policy.secrets[name]
            if not any(entry.matches(conn.host, conn.port) for entry in secret.entries()):
                raise Refused(f"secret {name}'s placeholder sent to {conn.host}, not one of its hosts")
            value = secret.value.get_secret_value().encode("ascii")
            head = head.replace(token, value)
        return head

    async def _copy_exactly(
        self,
        state: _Session,
        conn: _Connection,
        reader: _Reader,
        writer: _Writer,
        length: int,
    ) -> None:
        while length:
            data = await asyncio.wait_for(reader.read(min(length, _CHUNK)), self.idle_timeout)
            if not data:
                raise asyncio.IncompleteReadError(b"", length)
            self._no_placeholder_in_body(state, conn, data)
            length -= len(data)
            await self._send(state, conn, writer, data, up=True)

    async def _copy_chunked(
        self, state: _Session, conn: _Connection, reader: _Reader, writer: _Writer
    ) -> None:
        while True:
            line = await asyncio.wait_for(reader.readuntil(b"\r\n"), self.idle_timeout)
            size_text = line.split(b";", 1)[0].strip()
            if (
                not size_text
                or len(size_text) > 16
                or not all(c in b"0123456789abcdefABCDEF" for c in size_text)
            ):
                raise ConnectionAbortedError("malformed chunk size")
            size = int(size_text, 16)
            await self._send(state, conn, writer, line, up=True)
            if size == 0:
                while True:  # trailers, up to the empty line
                    trailer = await asyncio.wait_for(reader.readuntil(b"\r\n"), self.idle_timeout)
                    await self._send(state, conn, writer, trailer, up=True)
                    if trailer == b"\r\n":
                        return
            await self._copy_exactly(state, conn, reader, writer, size)
            crlf = await asyncio.wait_for(reader.readexactly(2), self.idle_timeout)
            if crlf != b"\r\n":
                raise ConnectionAbortedError("malformed chunk end")
            await self._send(state, conn, writer, crlf, up=True)

    def _no_placeholder_in_body(self, state: _Session, conn: _Connection, data: bytes) -> None:
        # Bodies are not rewritten; a placeholder in one is refused whatever the host, so it never
        # travels anywhere in place of its value. The previous read's tail catches one split in two.
        seen = conn.body_tail + data
        for placeholder, name in state.placeholders.items():
            if placeholder.encode("ascii") in seen:
                reason = f"secret {name}'s placeholder in a request body (only headers are rewritten)"
                if conn.verdict != "allowed":
                    raise Refused(reason)
                conn.verdict, conn.reason = "refused", reason
                raise ConnectionAbortedError(reason)
        conn.body_tail = seen[-_PLACEHOLDER_LENGTH:]


# --------------------------------------------------------------------- parsing helpers


def _tls_error(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason)
    return type(exc).__name__


def _same_name(name: str) -> str:
    try:
        return normalise_host(name)
    except ValueError:
        return name


def _parse_request(head: bytes) -> tuple[bytes, bytes, list[tuple[bytes, bytes]]]:
    """(method, target, headers) of a request head, or Refused for anything not strictly HTTP/1.x."""
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0"):
        raise Refused("malformed request line", status=400)
    method, target, _ = parts
    if not target or any(c <= 0x20 or c >= 0x7F for c in target):
        raise Refused("malformed request target", status=400)
    headers = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):
            raise Refused("malformed header line", status=400)
        value = value.strip(b" \t")
        if any((c < 0x20 and c != 0x09) or c == 0x7F for c in value):
            raise Refused("control character in a header value", status=400)
        headers.append((name, value))
    return method, target, headers


def _split_authority(authority: str, *, default_port: int | None) -> tuple[str, int]:
    """(normalised host, port) of `host:port` or `[v6]:port`, or Refused."""
    text = authority.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else (None if not rest else "x")
    elif text.count(":") == 1:
        host, _, port_text_ = text.partition(":")
        port_text = port_text_
    elif parse_address(text) is None and ":" in text:
        # An IPv6 Host header some clients (httpx) send without brackets; an ambiguous one then
        # fails the comparison with the URI's host, which is a refusal.
        host, _, port_text = text.rpartition(":")
    else:
        host, port_text = text, None
    if port_text is None:
        if default_port is None:
            raise Refused(f"no port in {authority!r}", status=400)
        port = default_port
    elif port_text.isdigit() and 0 < int(port_text) < 65536:
        port = int(port_text)
    else:
        raise Refused(f"bad port in {authority!r}", status=400)
    try:
        return normalise_host(host), port
    except ValueError:
        raise Refused(f"not a host name: {host!r}", status=400) from None


def _body_framing(headers: list[tuple[bytes, bytes]]) -> tuple[int, bool]:
    """(Content-Length, chunked) of a request; Refused for framing two parsers could read differently."""
    lengths = [value for name, value in headers if name.lower() == b"content-length"]
    encodings = [value for name, value in headers if name.lower() == b"transfer-encoding"]
    if encodings:
        if lengths or len(encodings) > 1 or encodings[0].strip().lower() != b"chunked":
            raise Refused("only Transfer-Encoding: chunked, alone, is forwarded", status=400)
        return 0, True
    if len(set(lengths)) > 1 or (lengths and not lengths[0].isdigit()) or (lengths and len(lengths[0]) > 18):
        raise Refused("bad Content-Length", status=400)
    return (int(lengths[0]) if lengths else 0), False


def _close_response(head: bytes) -> bytes:
    """The response head with its connection closed after it: the proxy serves one request a connection."""
    lines = head[:-4].split(b"\r\n")
    kept = [
        line
        for line in lines[1:]
        if line.split(b":", 1)[0].strip().lower() not in (b"connection", b"keep-alive")
    ]
    return b"\r\n".join([lines[0], *kept, b"Connection: close"]) + b"\r\n\r\n"
