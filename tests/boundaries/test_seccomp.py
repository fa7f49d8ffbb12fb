"""The subprocess boundary's seccomp filter: built in (no extra, no libseccomp), what it refuses and
what it leaves alone, and what happens where a protection is missing: describe() says why, the CLI
says it once on stderr, and require= refuses to start.

A missing protection is made real the way a container runtime makes it: the host runs under an outer
seccomp filter that refuses Landlock or a nested filter, installed by a wrapper that then execs Python.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from genpark_repl_tools import Limits, ReplEngine
from genpark_repl_tools._exceptions import BoundaryError

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="seccomp is Linux-only")

_sandbox = pytest.importorskip("genpark_repl_tools.boundaries._subprocess._sandbox")
MACHINE = {"amd64": "x86_64", "arm64": "aarch64"}.get(os.uname().machine, os.uname().machine)
NR = _sandbox._SYSCALLS.get(MACHINE, {})


@pytest.fixture(scope="module")
def engine() -> Iterator[ReplEngine]:
    with ReplEngine(policy="trusted", boundary="subprocess", limits=Limits(timeout_s=10)) as engine:
        if not engine.describe()["enforced"]["syscall_filter"]:
            pytest.skip(f"no seccomp here: {engine.describe()['unavailable']}")
        yield engine


def _raw(engine: ReplEngine, call: str) -> str:
    """Run a raw system call in session code; its return value and errno, as text."""
    code = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
        f"r = {call}\nprint(r, ctypes.get_errno() if r < 0 else 0)"
    )
    result = engine.run(code, session="raw")
    assert result.status == "ok", result.error
    return result.stdout.strip()


def test_the_filter_needs_no_package(engine: ReplEngine) -> None:
    assert "seccomp" not in engine.describe()["unavailable"]
    result = engine.run("import sys\n'pyseccomp' in sys.modules", session="pkg")
    assert result.value == "False"


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        ("ptrace", "0, 0, 0, 0", errno.EPERM),  # PTRACE_TRACEME
        ("unshare", str(0x10000000), errno.EPERM),  # CLONE_NEWUSER
        ("mount", "b'none', b'/tmp', b'tmpfs', 0, None", errno.EPERM),
        ("mount_setattr", "-100, b'/', 0, None, 0", errno.EPERM),
        ("bpf", "0, None, 0", errno.EPERM),
        ("clone3", "None, 0", errno.ENOSYS),
        # The kernel reads only the low 32 bits of these: high bits set must not get past the rule.
        ("clone", f"ctypes.c_long({(1 << 32) | 0x10000000 | 17}), 0, 0, 0, 0", errno.EPERM),
        ("socket", f"ctypes.c_long({(1 << 32) | 1}), 1, 0", errno.EACCES),  # AF_UNIX
        ("socket", "1, 1, 0", errno.EACCES),
    ],
)
def test_refused_system_calls(engine: ReplEngine, name: str, args: str, expected: int) -> None:
    assert _raw(engine, f"libc.syscall({NR[name]}, {args})") == f"-1 {expected}"


def test_the_legitimate_neighbours_still_work(engine: ReplEngine) -> None:
    code = """\
import os, resource, socket
a, b = socket.socketpair()
a.send(b"x")
pid = os.fork()
if pid == 0:
    os._exit(7)
_, status = os.waitpid(pid, 0)
(b.recv(1), os.waitstatus_to_exitcode(status), resource.getrlimit(resource.RLIMIT_NOFILE)[0] > 0)
"""
    result = engine.run(code, session="neighbours")
    assert result.status == "ok", result.error
    assert result.value == "(b'x', 7, True)"
    refused = engine.run(
        "import resource\nresource.prlimit(0, resource.RLIMIT_CORE, (0, 0))", session="neighbours"
    )
    assert refused.error is not None and refused.error.type == "PermissionError"


# ---- a machine without a protection ----------------------------------------------------------------

_OUTER_FILTER = """\
#!{python}
# Runs Python under an outer seccomp filter, as a container runtime's profile would.
import os, sys
from genpark_repl_tools.boundaries._subprocess import _sandbox as s

program = [{program}]
s._prctl(s._PR_SET_NO_NEW_PRIVS, 1)
s._load_seccomp(s._seccomp_program(b"".join(s.struct.pack("=HBBI", *i) for i in program)))
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""


def _wrapper(tmp_path: Path, refuse: str) -> str:
    ld, jeq, ret = _sandbox._BPF_LD_W_ABS, _sandbox._BPF_JEQ, _sandbox._BPF_RET
    err, allow = _sandbox._RET_ERRNO, _sandbox._RET_ALLOW
    if refuse == "landlock":  # a kernel or profile without Landlock
        program = [(ld, 0, 0, 0), (jeq, 0, 1, 444), (ret, 0, 0, err | errno.ENOSYS), (ret, 0, 0, allow)]
    else:  # a profile that refuses a nested seccomp filter
        program = [
            (ld, 0, 0, 0),
            (jeq, 0, 3, NR_PRCTL[MACHINE]),
            (ld, 0, 0, 16),
            (jeq, 0, 1, _sandbox._PR_SET_SECCOMP),
            (ret, 0, 0, err | errno.EINVAL),
            (ret, 0, 0, allow),
        ]
    path = tmp_path / f"python-without-{refuse}"
    path.write_text(_OUTER_FILTER.format(python=sys.executable, program=", ".join(map(str, program))))
    path.chmod(0o755)
    return str(path)


NR_PRCTL = {"x86_64": 157, "aarch64": 167}


@pytest.fixture(scope="module")
def has_all() -> None:
    with ReplEngine(boundary="subprocess") as engine:
        if engine.describe()["unavailable"]:
            pytest.skip(f"this machine already lacks protections: {engine.describe()['unavailable']}")


@pytest.mark.usefixtures("has_all")
@pytest.mark.parametrize(
    ("missing", "claim", "why"),
    [
        ("landlock", "filesystem_confinement", "Landlock unavailable"),
        ("seccomp", "syscall_filter", "installing a seccomp filter was refused"),
    ],
)
def test_a_missing_protection_is_reported_and_can_be_required(
    tmp_path: Path, missing: str, claim: str, why: str
) -> None:
    python = _wrapper(tmp_path, missing)
    with ReplEngine(policy="trusted", boundary="subprocess", python=python) as engine:
        described = engine.describe()
        assert why in described["unavailable"][missing]
        assert described["enforced"][claim] is False
        assert engine.run("6 * 7").value == "42"  # code still runs, without it
        other = "seccomp" if missing == "landlock" else "landlock"
        assert other not in described["unavailable"]
    with ReplEngine(boundary="subprocess", python=python, require=(other,)) as engine:
        assert engine.run("1").status == "ok"
    with pytest.raises(BoundaryError) as refused:
        ReplEngine(boundary="subprocess", python=python, require=(missing, other))
    message = str(refused.value)
    assert f"not active here: {missing}" in message and why in message
    assert other not in message.split("(", maxsplit=1)[0]


@pytest.mark.usefixtures("has_all")
def test_the_cli_says_what_is_missing_once_and_require_refuses(tmp_path: Path) -> None:
    python = _wrapper(tmp_path, "landlock")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENPARK")}
    # The REPL on piped input; switching the policy builds a second engine: still one notice.
    repl = subprocess.run(
        [python, "-m", "genpark_repl_tools", "--boundary", "subprocess"],
        input="6 * 7\n:policy trusted\n1 + 1\n",
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
        env=env,
    )
    assert repl.returncode == 0, repl.stderr
    assert "42" in repl.stdout
    notices = [line for line in repl.stderr.splitlines() if "landlock is not available" in line]
    assert len(notices) == 1, repl.stderr
    assert "Landlock unavailable" in notices[0]
    # `run` has the same engine options as `mcp` and needs no MCP SDK (the core suite runs without it).
    run = subprocess.run(
        [python, "-m", "genpark_repl_tools", "run", "--boundary", "subprocess", "--require", "landlock", "-"],
        input="1",
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
        env=env,
    )
    assert run.returncode == 2, run.stderr
    assert "required protections are not active here: landlock" in run.stderr
    assert "Landlock unavailable" in run.stderr


def test_the_filter_refuses_an_unknown_architecture(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "uname", lambda: os.uname_result(("Linux", "h", "6", "1", "riscv64")))
    reason = _sandbox._seccomp_arch()
    assert reason == "no seccomp filter for this architecture (riscv64; x86_64 and aarch64 have one)"
