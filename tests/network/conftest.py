"""Real servers on loopback for the egress proxy's tests, and names mapped to them.

Nothing leaves this machine: every name resolves, through the proxy's resolver option, to a loopback
server started here or to a non-public address the proxy must refuse before connecting.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterator

import pytest
from _pki import make_pki
from _servers import Certificates, Recorder, Server, resolve, serve

from genpark_repl_tools.egress import EgressProxy, NetworkPolicy


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    """A test CA and a server certificate for the test names and 127.0.0.1, made with the openssl CLI."""
    d = tmp_path_factory.mktemp("pki")
    return Certificates(*make_pki(d, ["api.test", "other.test", "evil.test"], ("127.0.0.1",)))


@pytest.fixture(scope="session")
def http_server() -> Iterator[Server]:
    yield from serve(None)


@pytest.fixture(scope="session")
def https_server(certificates: Certificates) -> Iterator[Server]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificates.cert, certificates.key)
    yield from serve(context)


@pytest.fixture
def client_tls(certificates: Certificates) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certificates.ca))


@pytest.fixture
def resolver() -> Callable[[str], list[str]]:
    return resolve


@pytest.fixture
def policy(http_server: Server, https_server: Server) -> NetworkPolicy:
    """api.test on both servers' ports; 127.0.0.1 on those ports too, since the test servers are on
    loopback and the proxy refuses loopback unless the exact address is listed."""
    h, s = http_server.port, https_server.port
    return NetworkPolicy(
        allow=[
            f"api.test:{h}",
            f"api.test:{s}",
            f"127.0.0.1:{h}",
            f"127.0.0.1:{s}",
            f"other.test:{h}",
            f"other.test:{s}",
            "loop.test:8080",
            "internal.test",
            "metadata.test",
            f"mixed.test:{h}",
        ]
    )


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def proxy(recorder: Recorder) -> Iterator[EgressProxy]:
    with EgressProxy(resolver=resolve, on_record=recorder, header_timeout=1.0, idle_timeout=10) as p:
        yield p
