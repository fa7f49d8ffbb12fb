"""Network by name on a sandboxed boundary: a session reaches exactly what its NetworkPolicy lists.

The sessions run in real sandboxed workers; their only way out is the engine's egress proxy, whose
resolver maps the test names to the loopback servers of conftest.py. Nothing leaves this machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from genpark_repl_tools import ReplEngine
from genpark_repl_tools.egress import EgressProxy, NetworkPolicy, Secret

if TYPE_CHECKING:
    from _servers import Certificates, Recorder, Server

Resolver = Callable[[str], Sequence[str]]

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the sandboxed boundary is Linux's"
)

VALUE = "tok-the-real-value-0193"


@pytest.fixture
def network(http_server: Server, https_server: Server) -> NetworkPolicy:
    h, s = http_server.port, https_server.port
    return NetworkPolicy(
        allow=[
            *(f"api.test:{p}" for p in (h, s)),
            *(f"127.0.0.1:{p}" for p in (h, s)),
            "internal.test",
            "metadata.test",
        ],
        secrets={"API_TOKEN": Secret(value=VALUE, hosts=[f"api.test:{h}"])},
    )


@pytest.fixture
def engine(network: NetworkPolicy, recorder: Recorder, resolver: Resolver) -> Iterator[ReplEngine]:
    proxy = EgressProxy(resolver=resolver, on_record=recorder, header_timeout=2.0, idle_timeout=10)
    engine = ReplEngine(policy="trusted", boundary="subprocess", network=network, egress_proxy=proxy)
    try:
        yield engine
    finally:
        engine.close()
        proxy.close()


def _get(engine: ReplEngine, url: str, session: str = "a", headers: str = "{}") -> dict[str, object]:
    """What a urllib GET from inside the session got: status and body, or the error."""
    result = engine.run(
        "import json, urllib.request, urllib.error\n"
        "try:\n"
        f"    r = urllib.request.urlopen(urllib.request.Request({url!r}, headers={headers}), timeout=5)\n"
        "    out = {'status': r.status, 'body': r.read().decode()}\n"
        "except urllib.error.HTTPError as e:\n"
        "    out = {'status': e.code, 'reason': e.reason}\n"
        "except OSError as e:\n"
        "    out = {'error': str(e)}\n"
        "print(json.dumps(out))",
        session=session,
    )
    assert result.status == "ok", result
    answer: dict[str, object] = json.loads(result.stdout)
    answer["notes"] = result.notes
    return answer


def test_an_allowed_name_is_reached_through_the_proxy_and_the_run_says_so(
    engine: ReplEngine, http_server: Server, recorder: Recorder
) -> None:
    answer = _get(engine, f"http://api.test:{http_server.port}/hello")
    assert answer["status"] == 200
    assert json.loads(str(answer["body"]))["path"] == "/hello"
    assert answer["notes"] == ["network: 1 connection to api.test"]
    assert [(r.session, r.host, r.verdict) for r in recorder.records] == [("a", "api.test", "allowed")]


@pytest.mark.parametrize(
    ("host", "why"),
    [
        ("evil.test", "not in the allow list"),
        ("127.0.0.2", "not in the allow list"),  # an IP literal not listed
        ("internal.test", "private"),  # listed, but resolves to a private address
        ("metadata.test", "metadata"),
    ],
)
def test_what_the_policy_does_not_allow_is_refused_and_recorded(
    engine: ReplEngine, http_server: Server, recorder: Recorder, host: str, why: str
) -> None:
    port = http_server.port if "." in host and not host[0].isdigit() else 80
    answer = _get(engine, f"http://{host}:{port}/")
    assert answer.get("status") in (403, 502) or "error" in answer, answer
    assert answer["notes"] == [f"network: 1 refused: {host}"]
    (record,) = recorder.records
    assert record.verdict == "refused" and record.host == host
    assert why in record.reason or record.reason, record


def test_a_redirect_to_a_name_not_listed_is_refused(engine: ReplEngine, http_server: Server) -> None:
    to = f"http://evil.test:{http_server.port}/x"
    answer = _get(engine, f"http://api.test:{http_server.port}/redirect?to={to}")
    assert answer.get("status") == 403, answer
    assert answer["notes"] == ["network: 1 connection to api.test; 1 refused: evil.test"]


def test_no_route_around_the_proxy(engine: ReplEngine, http_server: Server) -> None:
    """Direct connections go nowhere: the worker's own namespace has only its loopback, where the
    only listener is the session's proxy. The host's loopback server is not there."""
    result = engine.run(
        "import socket\n"
        "def reach(address):\n"
        "    s = socket.socket(); s.settimeout(2)\n"
        "    try:\n"
        "        s.connect(address); return 'connected'\n"
        "    except OSError as e:\n"
        "        return type(e).__name__\n"
        "    finally:\n"
        "        s.close()\n"
        f"print(reach(('127.0.0.1', {http_server.port})), reach(('10.1.2.3', 80)),"
        " reach(('127.0.0.1', 3128)))",
    )
    host_port, outside, proxy = result.stdout.split()
    # Refused by the empty loopback, or before that by Landlock (ABI 4+: TCP to the proxy's port only).
    assert host_port in ("ConnectionRefusedError", "PermissionError"), result
    assert outside in ("OSError", "PermissionError"), result  # no route; or Landlock
    assert proxy == "connected"


def test_https_goes_through_a_connect_tunnel_with_the_servers_own_certificate(
    engine: ReplEngine, https_server: Server, certificates: Certificates
) -> None:
    engine.upload("a", "ca.pem", certificates.ca.read_bytes())
    result = engine.run(
        "import ssl, urllib.request\n"
        "context = ssl.create_default_context(cafile='ca.pem')\n"
        "handler = urllib.request.HTTPSHandler(context=context)\n"
        "opener = urllib.request.build_opener(handler)\n"
        f"print(opener.open('https://api.test:{https_server.port}/tls', timeout=5).status)",
        session="a",
    )
    assert result.status == "ok" and result.stdout.strip() == "200", result
    assert result.notes == ["network: 1 connection to api.test"]
    assert https_server.received[-1]["path"] == "/tls"


@pytest.mark.parametrize("library", ["requests", "httpx"])
def test_requests_and_httpx_use_the_proxy_unchanged(
    engine: ReplEngine, http_server: Server, https_server: Server, certificates: Certificates, library: str
) -> None:
    pytest.importorskip(library)
    engine.upload("a", "ca.pem", certificates.ca.read_bytes())
    verify = "verify='ca.pem'"
    result = engine.run(
        f"import {library}\n"
        f"print({library}.get('http://api.test:{http_server.port}/plain', timeout=5).status_code)\n"
        f"print({library}.get('https://api.test:{https_server.port}/tls', timeout=5, {verify}).status_code)\n"
        "try:\n"
        f"    {library}.get('http://evil.test:{http_server.port}/', timeout=5)\n"
        "except Exception as e:\n"
        "    print('refused', type(e).__name__)\n",
        session="a",
    )
    assert result.status == "ok", result
    lines = result.stdout.split("\n")
    assert lines[:2] == ["200", "200"], result.stdout
    assert "network: 2 connections to api.test; 1 refused: evil.test" in result.notes


def test_the_secret_reaches_its_host_and_never_the_sandbox(
    engine: ReplEngine, http_server: Server, tmp_path: Path
) -> None:
    # The test server echoes what it got; the cell keeps only the status, as a server that does not
    # echo credentials would leave it.
    sent = engine.run(
        "import os, urllib.request\n"
        f"request = urllib.request.Request('http://api.test:{http_server.port}/secret')\n"
        "request.add_header('Authorization', 'Bearer ' + os.environ['API_TOKEN'])\n"
        "with urllib.request.urlopen(request, timeout=5) as r:\n"
        "    status = r.status\n"
        "del request, r\n"
        "print(status)",
        session="a",
    )
    assert sent.stdout.strip() == "200", sent
    assert http_server.received[-1]["headers"]["Authorization"] == f"Bearer {VALUE}"  # type: ignore[index]
    # What the session holds: its environment, output, files and a snapshot of its memory.
    seen = engine.run(
        "import os\nenv = dict(os.environ)\nopen('env.txt', 'w').write(repr(env))\nprint(env['API_TOKEN'])",
        session="a",
    )
    assert seen.stdout.startswith("genpark-secret-")
    assert VALUE not in seen.stdout + sent.stdout + str(sent.changes)
    assert all(VALUE.encode() not in engine.download("a", f.name) for f in engine.files("a"))
    assert VALUE.encode() not in engine.snapshot("a").to_bytes()


def test_each_session_has_its_own_proxy(engine: ReplEngine, http_server: Server, recorder: Recorder) -> None:
    _get(engine, f"http://api.test:{http_server.port}/", session="a")
    answer = _get(engine, f"http://evil.test:{http_server.port}/", session="b")
    assert answer["notes"] == ["network: 1 refused: evil.test"]
    assert [(r.session, r.verdict) for r in recorder.records] == [("a", "allowed"), ("b", "refused")]


def test_the_network_survives_a_cell_that_kills_its_worker(engine: ReplEngine, http_server: Server) -> None:
    assert _get(engine, f"http://api.test:{http_server.port}/one")["status"] == 200
    engine.run("x = 1", session="a")
    crashed = engine.run("import os; os._exit(3)", session="a")
    assert crashed.status == "crashed" and crashed.rolled_back
    assert engine.run("x", session="a").value == "1"
    assert _get(engine, f"http://api.test:{http_server.port}/two")["status"] == 200
    engine.close("a")  # a new worker of a new session: a new namespace, served again
    assert _get(engine, f"http://api.test:{http_server.port}/three")["status"] == 200


def test_a_placeholder_kept_in_a_variable_still_works_after_hibernation(
    network: NetworkPolicy, recorder: Recorder, resolver: Resolver, http_server: Server, tmp_path: Path
) -> None:
    from genpark_repl_tools.stores import SQLiteStore

    proxy = EgressProxy(resolver=resolver, on_record=recorder)
    engine = ReplEngine(
        policy="trusted",
        boundary="subprocess",
        network=network,
        egress_proxy=proxy,
        store=SQLiteStore(tmp_path / "s.db"),
        snapshot_key=b"k" * 32,
    )
    try:
        engine.run("import os\ntoken = os.environ['API_TOKEN']", session="a")
        assert engine.hibernate("a")
        answer = _get(engine, f"http://api.test:{http_server.port}/later", headers="{'X-Token': token}")
        assert answer["status"] == 200
        assert http_server.received[-1]["headers"]["X-Token"] == VALUE  # type: ignore[index]
    finally:
        engine.close()
        proxy.close()


def test_bad_options_are_refused_clearly() -> None:
    with pytest.raises(TypeError, match="NetworkPolicy"):
        ReplEngine(boundary="subprocess", network=["api.test"])
    with pytest.raises(ValueError, match="egress_proxy serves a NetworkPolicy"):
        ReplEngine(boundary="subprocess", egress_proxy=EgressProxy())
    for policy in ("standard", "strict"):  # their audit hooks refuse every socket
        with pytest.raises(ValueError, match=r"refuses all network access in the code.*policy='trusted'"):
            ReplEngine(policy=policy, boundary="subprocess", network=NetworkPolicy(allow=["a.example"]))


def test_the_egress_folder_goes_with_the_engine(network: NetworkPolicy) -> None:
    engine = ReplEngine(policy="trusted", boundary="subprocess", network=network)
    folder = Path(engine.boundary._egress.folder)  # type: ignore[attr-defined]
    assert folder.is_dir()
    engine.close()
    assert not folder.exists()
    shutil.rmtree(folder, ignore_errors=True)


DROPPED_UNCLOSED = """
import gc, os
from genpark_repl_tools.boundaries._subprocess._egress import SessionEgress
from genpark_repl_tools.egress import NetworkPolicy
egress = SessionEgress(NetworkPolicy(allow=["example.com"]), None)
folder = egress.folder
print(os.path.isdir(folder))
egress.proxy.close()  # the proxy's own threads are not what this is about
del egress
gc.collect()
print(os.path.isdir(folder))
"""


def test_the_egress_folder_goes_with_a_boundary_dropped_unclosed() -> None:
    # In a process of its own: what the rest of a test run left behind cannot keep the object alive.
    done = subprocess.run(
        [sys.executable, "-c", DROPPED_UNCLOSED], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"], done.stdout


def _wheel(folder: Path, name: str, version: str, source: str) -> Path:
    """A minimal pure-Python wheel of one module, made here (no build tool, no network)."""
    import base64
    import hashlib
    import zipfile

    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": source.encode(),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel


@pytest.fixture
def package_index(tmp_path: Path) -> Iterator[int]:
    """A package index (PEP 503 simple layout) on loopback holding one wheel."""
    import functools
    import http.server
    import threading

    wheel = _wheel(tmp_path, "genpark_tiny", "1.0", "ANSWER = 42\n")
    project = tmp_path / "simple" / "genpark-tiny"
    project.mkdir(parents=True)
    (project / "index.html").write_text(f'<a href="/{wheel.name}">{wheel.name}</a>\n')
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def test_pip_install_reaches_an_allowed_index_and_installs_into_the_workspace(
    package_index: int, resolver: Resolver
) -> None:
    index = f"http://127.0.0.1:{package_index}/simple"
    proxy = EgressProxy(resolver=resolver)
    engine = ReplEngine(
        policy="trusted",
        boundary="subprocess",
        network=NetworkPolicy(allow=[f"127.0.0.1:{package_index}"]),
        egress_proxy=proxy,
        env={"PIP_INDEX_URL": index},
    )
    try:
        result = engine.run(
            "import subprocess, sys\n"
            "p = subprocess.run([sys.executable, '-m', 'pip', 'install', 'genpark-tiny'],"
            " capture_output=True, text=True, timeout=120)\n"
            "print(p.returncode, p.stderr[-2000:])\n"
            "import genpark_tiny\n"
            "print(genpark_tiny.ANSWER, genpark_tiny.__file__)",
        )
        assert result.status == "ok", result
        code, answer, where = result.stdout.split()[0], *result.stdout.split()[-2:]
        assert (code, answer) == ("0", "42"), result.stdout
        workspace = engine.boundary.session_workspace("default")
        assert workspace is not None
        assert Path(where) == workspace.path / ".python-packages" / "genpark_tiny.py"
        assert result.notes[-1].startswith("network: ") and "connection" in result.notes[-1]
        # Never into the interpreter's own environment.
        assert not any(Path(p, "genpark_tiny.py").exists() for p in sys.path if p)
    finally:
        engine.close()
        proxy.close()


def test_every_connection_is_in_the_engines_audit_trail(
    network: NetworkPolicy, resolver: Resolver, http_server: Server, tmp_path: Path
) -> None:
    events: list[object] = []
    proxy = EgressProxy(resolver=resolver)
    log = tmp_path / "events.jsonl"
    engine = ReplEngine(
        policy="trusted",
        boundary="subprocess",
        network=network,
        egress_proxy=proxy,
        on_event=events.append,
        refusal_log=log,
    )
    try:
        _get(engine, f"http://api.test:{http_server.port}/ok")
        _get(engine, f"http://evil.test:{http_server.port}/no")
    finally:
        engine.close()
        proxy.close()
    network_events = [e for e in events if getattr(e, "kind", None) == "network"]
    seen = [(e.session, e.host, e.port, e.verdict) for e in network_events]  # type: ignore[attr-defined]
    port = http_server.port
    assert seen == [("a", "api.test", port, "allowed"), ("a", "evil.test", port, "refused")]
    allowed, refused = network_events
    assert allowed.bytes_down > 0 and allowed.execution_count == 1  # type: ignore[attr-defined]
    assert "not in the allow list" in refused.message and refused.execution_count == 2  # type: ignore[attr-defined]
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(e["kind"], e["verdict"]) for e in logged] == [("network", "allowed"), ("network", "refused")]


def test_describe_says_what_holds_checked_from_inside_a_sandboxed_probe(engine: ReplEngine) -> None:
    claim = engine.describe()["enforced"]["network_isolation"]
    assert isinstance(claim, str) and "only way out is its egress proxy" in claim


def test_a_session_flooding_its_proxy_does_not_stop_another(
    http_server: Server, resolver: Resolver, recorder: Recorder
) -> None:
    port = http_server.port
    policy = NetworkPolicy(allow=[f"api.test:{port}", f"127.0.0.1:{port}"], max_connections=8)
    proxy = EgressProxy(resolver=resolver, on_record=recorder, header_timeout=30.0)
    engine = ReplEngine(policy="trusted", boundary="subprocess", network=policy, egress_proxy=proxy)
    try:
        # Slow clients: connections that never send a request, holding every place the policy gives.
        flood = engine.run(
            "import socket\nheld = []\n"
            "for _ in range(200):\n"
            "    s = socket.create_connection(('127.0.0.1', 3128), timeout=5)\n"
            "    held.append(s)\n"
            "len(held)",
            session="flood",
        )
        assert flood.status == "ok", flood
        assert _get(engine, f"http://api.test:{http_server.port}/busy", session="flood").get("status") != 200
        answer = _get(engine, f"http://api.test:{http_server.port}/calm", session="calm")
        assert answer["status"] == 200 and answer["notes"] == ["network: 1 connection to api.test"]
    finally:
        engine.close()
        proxy.close()


def test_a_secret_for_an_https_host_reaches_it_and_the_session_trusts_the_proxy_by_its_environment(
    https_server: Server, certificates: Certificates, resolver: Resolver
) -> None:
    pytest.importorskip("cryptography", reason="secrets over HTTPS need the network-secrets extra")
    port = https_server.port
    policy = NetworkPolicy(
        allow=[f"api.test:{port}", f"127.0.0.1:{port}"],
        secrets={"API_TOKEN": Secret(value=VALUE, hosts=[f"api.test:{port}"])},
    )
    proxy = EgressProxy(resolver=resolver, upstream_ca=certificates.ca)
    engine = ReplEngine(policy="trusted", boundary="subprocess", network=policy, egress_proxy=proxy)
    try:
        result = engine.run(
            "import os, urllib.request\n"
            f"request = urllib.request.Request('https://api.test:{port}/tls-secret')\n"
            "request.add_header('Authorization', 'Bearer ' + os.environ['API_TOKEN'])\n"
            "with urllib.request.urlopen(request, timeout=10) as r:\n"
            "    status = r.status\n"
            "del request, r\n"
            "print(status, os.environ['SSL_CERT_FILE'])",
        )
        assert result.status == "ok", result
        status, bundle = result.stdout.split()
        assert status == "200"
        assert https_server.received[-1]["headers"]["Authorization"] == f"Bearer {VALUE}"  # type: ignore[index]
        assert VALUE.encode() not in Path(bundle).read_bytes()
        assert VALUE.encode() not in engine.snapshot("default").to_bytes()
        assert result.notes == ["network: 1 connection to api.test"]
    finally:
        engine.close()
        proxy.close()


def test_the_run_tool_tells_the_model_which_hosts_it_may_reach(engine: ReplEngine) -> None:
    from genpark_repl_tools.tools import RUN_PYTHON

    text = RUN_PYTHON.describe(engine)
    assert engine.boundary.network_policy is not None
    assert f"Network: only {', '.join(engine.boundary.network_policy.allow)}, through a proxy" in text
    assert "environment variables API_TOKEN as they are" in text
    assert "Network:" not in RUN_PYTHON.describe(ReplEngine(boundary="inprocess"))


def _memory_holds(pid: int, needle: bytes) -> bool:
    """Whether any readable mapping of process `pid` holds `needle` (read through /proc/PID/mem)."""
    found = False
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            if not perms.startswith("r") or "[vvar" in line or "[vsyscall" in line:
                continue
            start, end = (int(x, 16) for x in span.split("-"))
            try:
                mem.seek(start)
                found = found or needle in mem.read(end - start)
            except (OSError, OverflowError, ValueError):
                continue
    return found


@pytest.mark.skipif(os.geteuid() != 0, reason="reading another process's memory needs root here")
def test_the_secret_value_is_nowhere_in_the_workers_memory(engine: ReplEngine, http_server: Server) -> None:
    # /big answers with filler, not an echo of the request (which would hand the value back).
    engine.run(
        "import os, urllib.request\n"
        f"request = urllib.request.Request('http://api.test:{http_server.port}/big?n=16')\n"
        "request.add_header('Authorization', 'Bearer ' + os.environ['API_TOKEN'])\n"
        "urllib.request.urlopen(request, timeout=5).close()\n"
        "del request",
        session="m",
    )
    assert http_server.received[-1]["headers"]["Authorization"] == f"Bearer {VALUE}"  # type: ignore[index]
    state = engine.boundary._sessions.find("m")  # type: ignore[attr-defined]
    pid = state.worker.pid
    placeholder = engine.run("import os; os.environ['API_TOKEN']", session="m").value.strip("'").encode()
    # The scan can see what it looks for: the placeholder the session does hold.
    assert _memory_holds(pid, placeholder)
    assert not _memory_holds(pid, VALUE.encode())
