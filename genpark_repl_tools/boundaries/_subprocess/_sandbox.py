"""What the OS offers a worker, detected once in the zygote, and how each worker applies it.

`prepare()` runs once in the zygote (single-threaded, before any worker exists): it enters a network
namespace shared by every worker, builds the seccomp program, finds the Landlock ABI and opens the
paths Landlock will allow. `apply()` runs in each freshly forked worker, in an order that matters:

    process group -> parent-death signal -> workspace -> rlimits -> no_new_privs -> drop root
    -> drop capabilities -> Landlock -> RLIMIT_NOFILE -> seccomp (last: it refuses setrlimit/setpgid)

Every step that `prepare()` reported as available must succeed in `apply()`, or the worker exits
before it runs any code (fail closed): what `describe()` claims is what every worker has.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import resource
import signal
import socket
import stat
import struct
import sys
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Prepared", "SandboxConfig", "SandboxError", "apply", "egress_listener", "prepare"]

LINUX = sys.platform.startswith("linux")

# prctl options
_PR_SET_PDEATHSIG = 1
_PR_GET_SECCOMP = 21
_PR_SET_SECCOMP = 22
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NO_NEW_PRIVS = 38
_SECCOMP_MODE_FILTER = 2

# clone/unshare flags
_CLONE_NEWNS = 0x00020000
_CLONE_NEWTIME = 0x00000080
_CLONE_NEWCGROUP = 0x02000000
_CLONE_NEWUTS = 0x04000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_NAMESPACE_FLAGS = (
    _CLONE_NEWNS,
    _CLONE_NEWTIME,
    _CLONE_NEWCGROUP,
    _CLONE_NEWUTS,
    _CLONE_NEWIPC,
    _CLONE_NEWUSER,
    _CLONE_NEWPID,
    _CLONE_NEWNET,
)

# Landlock: the syscall numbers are the same on every architecture (allocated after the unification).
_NR_LANDLOCK_CREATE_RULESET = 444
_NR_LANDLOCK_ADD_RULE = 445
_NR_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
_LANDLOCK_RULE_NET_PORT = 2
_FS_EXECUTE = 1 << 0
_FS_WRITE_FILE = 1 << 1
_FS_READ_FILE = 1 << 2
_FS_READ_DIR = 1 << 3
_FS_REMOVE_DIR = 1 << 4
_FS_REMOVE_FILE = 1 << 5
_FS_MAKE_CHAR = 1 << 6
_FS_MAKE_DIR = 1 << 7
_FS_MAKE_REG = 1 << 8
_FS_MAKE_SOCK = 1 << 9
_FS_MAKE_FIFO = 1 << 10
_FS_MAKE_BLOCK = 1 << 11
_FS_MAKE_SYM = 1 << 12
_FS_REFER = 1 << 13  # ABI 2
_FS_TRUNCATE = 1 << 14  # ABI 3
_NET_BIND_TCP = 1 << 0  # ABI 4
_NET_CONNECT_TCP = 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
_SCOPE_SIGNAL = 1 << 1

_FS_WRITE_V1 = (
    _FS_WRITE_FILE
    | _FS_REMOVE_DIR
    | _FS_REMOVE_FILE
    | _FS_MAKE_CHAR
    | _FS_MAKE_DIR
    | _FS_MAKE_REG
    | _FS_MAKE_SOCK
    | _FS_MAKE_FIFO
    | _FS_MAKE_BLOCK
    | _FS_MAKE_SYM
)
_FS_READ = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR

# Syscalls a worker never needs and that would let it leave its process group (setsid, setpgid),
# its namespaces (unshare, setns, clone with CLONE_NEW*), reach other processes (ptrace,
# process_vm_*), or touch the kernel (modules, kexec, bpf, perf, keyrings, io_uring, mounts).
_DENIED_SYSCALLS = (
    "setsid",
    "setpgid",
    "unshare",
    "setns",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsmount",
    "fsconfig",
    "fspick",
    "mount_setattr",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "keyctl",
    "add_key",
    "request_key",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "open_by_handle_at",
    "setrlimit",  # limits are set before the filter loads; code must not raise them again
)

# Read-only system paths a Python worker needs: interpreter and shared libraries, and from /etc and
# /dev only named entries. A worker that keeps uid 0 (without capabilities) still reads root-owned
# files as their owner, so /etc/shadow, private keys and raw block devices must stay outside.
# /proc/self is added per worker: it resolves to the worker's own pid.
_SYSTEM_READ_PATHS = (
    "/usr",
    "/lib",
    "/lib64",
    "/lib32",
    "/bin",
    "/sbin",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/ca-certificates",
    "/etc/pki/tls/certs",
    "/etc/pki/ca-trust/extracted",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/gai.conf",
    "/etc/mime.types",
    "/etc/os-release",
    "/etc/lsb-release",
    "/etc/debian_version",  # pip's user agent reads these (and fails without them)
    "/etc/pip.conf",
    "/etc/xdg/pip",
    "/etc/locale.alias",
    "/etc/fonts",
    "/etc/matplotlibrc",
    "/etc/alternatives",
    "/etc/magic",
    "/etc/magic.mime",
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/sys/devices/system/cpu",
    "/proc/cpuinfo",
    "/proc/meminfo",
    "/proc/stat",
)


class SandboxError(Exception):
    """A protection that was promised could not be applied; the worker must not run code."""


@dataclass
class SandboxConfig:
    """What the host asks for (sent to the zygote as JSON)."""

    uid: int | None = None
    gid: int | None = None
    network: bool = False
    confine_reads: bool = True
    read_paths: list[str] = field(default_factory=list)
    memory_mb: int | None = None
    cpu_s: float | None = None
    max_open_files: int | None = None
    max_file_size_mb: int | None = None
    max_processes: int | None = None
    # With a network policy: the loopback port a worker's egress listener takes, and whether it binds
    # in the namespace it is in (a container's, already the session's own) instead of one of its own.
    egress_port: int | None = None
    egress_in_place: bool = False

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SandboxConfig:
        return cls(**data)


@dataclass
class Prepared:
    """What the zygote found and set up; inherited by every worker it forks."""

    config: SandboxConfig
    zygote_pid: int = 0
    subreaper: bool = False
    network_namespace: str | None = None
    network_reason: str = ""
    seccomp_bpf: bytes | None = None
    seccomp_program: Any = None  # the loaded-ready sock_fprog, built once and shared copy-on-write
    seccomp_reason: str = ""
    seccomp_blocks_inet: bool = False
    seccomp_blocks_unix: bool = False
    landlock_abi: int = 0
    landlock_reason: str = ""
    read_fds: list[tuple[int, bool]] = field(default_factory=list)
    devnull_fd: int = -1
    drop_to: tuple[int, int] | None = None

    def inherited_fds(self) -> list[int]:
        fds = [fd for fd, _ in self.read_fds]
        if self.devnull_fd >= 0:
            fds.append(self.devnull_fd)
        return fds


# ---- libc -----------------------------------------------------------------------------------------


@functools.cache
def _c() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
    libc.prctl.restype = ctypes.c_int
    libc.syscall.restype = ctypes.c_long
    libc.unshare.argtypes = (ctypes.c_int,)
    libc.unshare.restype = ctypes.c_int
    return libc


def _prctl(option: int, arg2: int = 0, arg3: int = 0) -> None:
    if _c().prctl(option, arg2, arg3, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def _errno_text() -> str:
    return os.strerror(ctypes.get_errno())


# ---- prepare (zygote, once) -----------------------------------------------------------------------


def prepare(config: SandboxConfig) -> Prepared:
    prepared = Prepared(config=config, zygote_pid=os.getpid())
    if config.uid is not None:
        if os.geteuid() != 0:
            raise SandboxError(f"cannot run workers as uid {config.uid}: the host is not root")
        prepared.drop_to = (config.uid, config.gid if config.gid is not None else config.uid)
    if not LINUX:
        prepared.network_reason = prepared.seccomp_reason = prepared.landlock_reason = "not Linux"
        return prepared
    try:
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        prepared.subreaper = True
    except OSError:
        pass
    if not config.network:
        _enter_network_namespace(prepared)
    _build_seccomp(
        prepared,
        # A network policy's worker binds in a namespace of its own (in a container, the
        # container's): TCP there reaches only its egress listener (and, with Landlock, only its port).
        block_inet=not config.network and prepared.network_namespace is None and not config.egress_port,
        block_unix=not config.network,
    )
    _detect_landlock(prepared)
    libc = _c()
    for name in ("capset", "syscall", "prctl"):  # resolve once here, not in every worker
        getattr(libc, name)
    return prepared


def _enter_network_namespace(prepared: Prepared) -> None:
    # One namespace for the zygote, inherited by every worker: creating one per worker costs ~10 ms.
    # Its only interface is a loopback that is down and that workers (without CAP_NET_ADMIN)
    # cannot bring up, so no TCP/UDP goes anywhere, not even between workers.
    libc = _c()
    if os.geteuid() == 0:
        if libc.unshare(_CLONE_NEWNET) == 0:
            prepared.network_namespace = "network namespace"
            return
        prepared.network_reason = f"unshare(CLONE_NEWNET) failed: {_errno_text()}"
        return
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
        prepared.network_reason = f"unprivileged user namespaces unavailable: {_errno_text()}"
        return
    try:  # map our own ids so files keep their owner; the capabilities this gives are dropped per worker
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny")
        with open("/proc/self/uid_map", "w") as f:
            f.write(f"{uid} {uid} 1")
        with open("/proc/self/gid_map", "w") as f:
            f.write(f"{gid} {gid} 1")
    except OSError as exc:
        raise SandboxError(f"entered a user namespace but could not map ids: {exc}") from exc
    prepared.network_namespace = "network namespace (in a user namespace)"


def _build_seccomp(prepared: Prepared, *, block_inet: bool, block_unix: bool) -> None:
    arch = _seccomp_arch()
    if isinstance(arch, str):
        prepared.seccomp_reason = arch
        return
    if _c().prctl(_PR_GET_SECCOMP, 0, 0, 0, 0) < 0:
        prepared.seccomp_reason = f"the kernel has no seccomp: {_errno_text()}"
        return
    bpf = seccomp_bpf(arch, block_inet=block_inet, block_unix=block_unix)
    program = _seccomp_program(bpf)
    # A container runtime's own filter may refuse a nested one; find out here, in a throwaway
    # child, so the filter is reported unavailable instead of every worker failing to start.
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            _prctl(_PR_SET_NO_NEW_PRIVS, 1)
            _load_seccomp(program)
        except OSError as exc:
            os._exit(100 + (exc.errno or 0) % 100)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        code = os.waitstatus_to_exitcode(status)
        why = os.strerror(code - 100) if 100 <= code < 200 else f"exit status {code}"
        prepared.seccomp_reason = f"installing a seccomp filter was refused: {why}"
        return
    prepared.seccomp_bpf = bpf
    prepared.seccomp_program = program
    prepared.seccomp_blocks_inet = block_inet
    prepared.seccomp_blocks_unix = block_unix


# ---- the seccomp program (classic BPF, built here: no libseccomp needed) ---------------------------

_SYSCALLS: dict[str, dict[str, int]] = {
    # x86_64: arch/x86/entry/syscalls/syscall_64.tbl
    "x86_64": {
        "setsid": 112, "setpgid": 109, "unshare": 272, "setns": 308, "ptrace": 101,
        "process_vm_readv": 310, "process_vm_writev": 311, "mount": 165, "umount2": 166,
        "pivot_root": 155, "chroot": 161, "move_mount": 429, "open_tree": 428, "fsopen": 430,
        "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442, "kexec_load": 246,
        "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176,
        "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163, "bpf": 321,
        "perf_event_open": 298, "userfaultfd": 323, "keyctl": 250, "add_key": 248,
        "request_key": 249, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "open_by_handle_at": 304, "setrlimit": 160, "clone": 56, "clone3": 435, "prlimit64": 302,
        "socket": 41,
    },
    # aarch64: include/uapi/asm-generic/unistd.h
    "aarch64": {
        "setsid": 157, "setpgid": 154, "unshare": 97, "setns": 268, "ptrace": 117,
        "process_vm_readv": 270, "process_vm_writev": 271, "mount": 40, "umount2": 39,
        "pivot_root": 41, "chroot": 51, "move_mount": 429, "open_tree": 428, "fsopen": 430,
        "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442, "kexec_load": 104,
        "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106,
        "reboot": 142, "swapon": 224, "swapoff": 225, "acct": 89, "bpf": 280,
        "perf_event_open": 241, "userfaultfd": 282, "keyctl": 219, "add_key": 217,
        "request_key": 218, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "open_by_handle_at": 265, "setrlimit": 164, "clone": 220, "clone3": 435, "prlimit64": 261,
        "socket": 198,
    },
}  # fmt: skip
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_SYSCALL_BIT = 0x40000000

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (little-endian on both)
_DATA_NR, _DATA_ARCH = 0, 4
_BPF_LD_W_ABS = 0x20
_BPF_JEQ = 0x15
_BPF_JGE = 0x35
_BPF_JSET = 0x45
_BPF_RET = 0x06
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000


def _seccomp_arch() -> str | tuple[str, int]:
    """(name, audit arch) of this process's system calls, or why there is no filter for it."""
    machine = os.uname().machine
    name = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    if name not in _SYSCALLS:
        return f"no seccomp filter for this architecture ({machine}; x86_64 and aarch64 have one)"
    if ctypes.sizeof(ctypes.c_void_p) != 8:  # a 32-bit interpreter makes the 32-bit calls
        return f"no seccomp filter for a 32-bit interpreter on {machine}"
    return name, _AUDIT_ARCH[name]


def _arg_low(index: int) -> int:
    return 16 + 8 * index


def seccomp_bpf(arch: tuple[str, int], *, block_inet: bool, block_unix: bool) -> bytes:
    """The worker's filter as a classic BPF program (struct sock_filter[]).

    Arguments the kernel reads as 32-bit values (socket's family, clone's flags) are compared on
    their low half only: a rule on all 64 bits would let a raw call with high bits set slip past it.
    """
    name, audit = arch
    nr = _SYSCALLS[name]
    code: list[tuple[int, int, int, int]] = []

    def ld(offset: int) -> None:
        code.append((_BPF_LD_W_ABS, 0, 0, offset))

    def ret(value: int) -> None:
        code.append((_BPF_RET, 0, 0, value))

    def on_syscall(syscall: str, body: list[tuple[int, int, int, int]]) -> None:
        # `body` ends in a return on every path, so nothing after it needs the number reloaded.
        code.append((_BPF_JEQ, 0, len(body), nr[syscall]))
        code.extend(body)

    def refuse(value: int) -> tuple[int, int, int, int]:
        return (_BPF_RET, 0, 0, _RET_ERRNO | value)

    allow = (_BPF_RET, 0, 0, _RET_ALLOW)
    ld(_DATA_ARCH)
    code.append((_BPF_JEQ, 1, 0, audit))  # another ABI (i386 or arm32 compat calls): kill
    ret(_RET_KILL_PROCESS)
    ld(_DATA_NR)
    if name == "x86_64":  # x32 calls carry this bit and reach the same kernel code by other numbers
        code.append((_BPF_JGE, 0, 1, _X32_SYSCALL_BIT))
        ret(_RET_KILL_PROCESS)
    for syscall in _DENIED_SYSCALLS:
        on_syscall(syscall, [refuse(errno.EPERM)])
    namespaces = functools.reduce(lambda a, b: a | b, _NAMESPACE_FLAGS)
    on_syscall(
        "clone",
        [(_BPF_LD_W_ABS, 0, 0, _arg_low(0)), (_BPF_JSET, 0, 1, namespaces), refuse(errno.EPERM), allow],
    )
    # clone3 passes its flags in memory a filter cannot read; ENOSYS makes libc fall back to clone.
    on_syscall("clone3", [refuse(errno.ENOSYS)])
    # getrlimit is prlimit64(pid, res, NULL, &old): refuse only calls that pass a new limit (a
    # 64-bit pointer: either half non-zero).
    on_syscall(
        "prlimit64",
        [
            (_BPF_LD_W_ABS, 0, 0, _arg_low(2)),
            (_BPF_JEQ, 0, 2, 0),
            (_BPF_LD_W_ABS, 0, 0, _arg_low(2) + 4),
            (_BPF_JEQ, 1, 0, 0),
            refuse(errno.EPERM),
            allow,
        ],
    )
    families = []
    if block_inet:
        families += [socket.AF_INET, socket.AF_INET6]
    if block_unix:
        # Pathname Unix sockets are outside any network namespace, and Landlock does not cover
        # connect(): without this a worker could reach host daemons (a uid-0 worker even
        # root-only ones such as /run/docker.sock). socketpair(), which asyncio and
        # multiprocessing use, is another syscall and stays allowed.
        families.append(socket.AF_UNIX)
    if families:
        body: list[tuple[int, int, int, int]] = [(_BPF_LD_W_ABS, 0, 0, _arg_low(0))]
        for family in families:
            body += [(_BPF_JEQ, 0, 1, int(family)), refuse(errno.EACCES)]
        on_syscall("socket", [*body, allow])
    code.append(allow)
    return b"".join(struct.pack("=HBBI", *insn) for insn in code)


def _detect_landlock(prepared: Prepared) -> None:
    abi = _c().syscall(
        _NR_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), _LANDLOCK_CREATE_RULESET_VERSION
    )
    if abi <= 0:
        prepared.landlock_reason = f"Landlock unavailable: {_errno_text()}"
        return
    prepared.landlock_abi = int(abi)
    config = prepared.config
    if config.confine_reads:
        paths = [*_SYSTEM_READ_PATHS, *_python_paths(), *config.read_paths]
        seen: set[str] = set()
        for path in paths:
            if path in seen:
                continue
            seen.add(path)
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # missing paths are fine: /lib32 exists on few systems
            prepared.read_fds.append((fd, stat.S_ISDIR(os.fstat(fd).st_mode)))
    prepared.devnull_fd = os.open(os.devnull, os.O_PATH | os.O_CLOEXEC)


def _python_paths() -> list[str]:
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths.update(p for p in sys.path if p and os.path.exists(p))
    exe = os.path.realpath(sys.executable)
    paths.add(os.path.dirname(exe))
    # An editable install is found by an import hook, not through sys.path: add the package itself
    # so modules it imports lazily can still be read.
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths.add(package)
    return sorted(paths)


# ---- apply (each worker, right after fork) --------------------------------------------------------


_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1


def egress_listener(prepared: Prepared) -> socket.socket | None:
    """In a freshly forked worker of a boundary with a network policy, before `apply`: a network
    namespace of the worker's own with its loopback up, and a socket listening on 127.0.0.1 there
    for the host's egress proxy to serve (the worker passes it out and keeps no copy). Its own
    namespace, so no other session's code can connect to this session's proxy. None when the port
    is taken: in a container, a worker started again binds in the container's namespace, where the
    host still serves the listener of the first one. Raises SandboxError."""
    import fcntl

    config = prepared.config
    assert config.egress_port is not None
    try:
        if not config.egress_in_place:
            # Needs CAP_SYS_ADMIN (held until apply drops it: root, or the zygote's user namespace).
            if _c().unshare(_CLONE_NEWNET) != 0:
                raise SandboxError(f"unshare(CLONE_NEWNET) for the egress listener failed: {_errno_text()}")
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                request = struct.pack("16sH14x", b"lo", 0)
                flags = struct.unpack_from("16sH", fcntl.ioctl(s, _SIOCGIFFLAGS, request))[1]
                fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.bind(("127.0.0.1", config.egress_port))
            listener.listen(64)
        except OSError as exc:
            listener.close()
            if exc.errno == errno.EADDRINUSE and config.egress_in_place:
                return None
            raise
    except OSError as exc:
        raise SandboxError(f"the egress listener could not be set up: {exc}") from exc
    return listener


def apply(prepared: Prepared, workspace: str) -> None:
    """Sandbox the calling (freshly forked, single-threaded) process. Raises SandboxError."""
    config = prepared.config
    step = "process group"
    try:
        os.setpgid(0, 0)
        if LINUX:
            step = "parent-death signal"
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != prepared.zygote_pid:  # the zygote died before the line above
                raise SandboxError("the zygote exited while the worker started")
        step = "workspace"
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.chdir(workspace)
        if prepared.drop_to is not None:
            os.chown(workspace, *prepared.drop_to)
        step = "resource limits"
        _set_limits(config, prepared)
        if LINUX:
            step = "no_new_privs"
            _prctl(_PR_SET_NO_NEW_PRIVS, 1)
        if prepared.drop_to is not None:
            step = "dropping root"
            uid, gid = prepared.drop_to
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
                raise SandboxError("setresuid/setresgid did not take effect")
        if LINUX:
            step = "capabilities"
            _drop_capabilities()
        if prepared.landlock_abi:
            step = "Landlock"
            _landlock(prepared, workspace)
        step = "open-file limit"
        if config.max_open_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (config.max_open_files, config.max_open_files))
        if prepared.seccomp_program is not None:
            step = "seccomp"
            _load_seccomp(prepared.seccomp_program)
    except SandboxError:
        raise
    except (OSError, ValueError) as exc:
        raise SandboxError(f"{step}: {exc}") from exc


def _set_limits(config: SandboxConfig, prepared: Prepared) -> None:
    mib = 1024 * 1024
    if config.memory_mb is not None:
        resource.setrlimit(resource.RLIMIT_AS, (config.memory_mb * mib, config.memory_mb * mib))
    if config.cpu_s is not None:
        # SIGXCPU at the soft limit; the hard limit (one second later) is SIGKILL should it be caught.
        soft = max(1, int(config.cpu_s + 0.999))
        resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 1))
    if config.max_file_size_mb is not None:
        # Ignored SIGXFSZ turns "killed" into an OSError (EFBIG) the code can see and report.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        size = config.max_file_size_mb * mib
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    if config.max_processes is not None and prepared.drop_to is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (config.max_processes, config.max_processes))


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _drop_capabilities() -> None:
    # Root that dropped to another uid has none left; a worker in a user namespace (non-root host)
    # still holds that namespace's full set, which this clears.
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    if _c().capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), f"capset: {_errno_text()}")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    # The kernel's struct is packed (12 bytes). Python 3.14+ asks that a packed layout be named: "ms"
    # packs these two fields as GCC's `packed` does (older Pythons ignore the name and pack the same way).
    _layout_ = "ms"
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPortAttr(ctypes.Structure):
    _layout_ = "ms"
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def landlock_rights(prepared: Prepared) -> tuple[int, int, int]:
    """(handled fs, handled net, scoped) for this ABI and configuration."""
    abi = prepared.landlock_abi
    write = _FS_WRITE_V1 | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
    fs = write | (_FS_READ if prepared.config.confine_reads else 0)
    net = 0
    config = prepared.config
    # With a network policy, TCP goes only to the egress listener's port (the rule _landlock adds).
    if abi >= 4 and not config.network and (prepared.network_namespace is None or config.egress_port):
        net = _NET_BIND_TCP | _NET_CONNECT_TCP
    scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if abi >= 6 else 0
    return fs, net, scoped


def _landlock(prepared: Prepared, workspace: str) -> None:
    libc = _c()
    abi = prepared.landlock_abi
    fs, net, scoped = landlock_rights(prepared)
    attr = _RulesetAttr(fs, net, scoped)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset = libc.syscall(_NR_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), f"landlock_create_ruleset: {_errno_text()}")
    opened: list[int] = []
    try:

        def allow(fd: int, rights: int) -> None:
            rule = _PathBeneathAttr(rights & fs, fd)
            if libc.syscall(
                _NR_LANDLOCK_ADD_RULE, ruleset, _LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(rule), 0
            ):
                raise OSError(ctypes.get_errno(), f"landlock_add_rule: {_errno_text()}")

        file_rights = _FS_EXECUTE | _FS_READ_FILE
        for fd, is_dir in prepared.read_fds:
            allow(fd, _FS_READ if is_dir else file_rights)
        if prepared.config.confine_reads:
            try:
                self_fd = os.open(f"/proc/{os.getpid()}", os.O_PATH | os.O_CLOEXEC)
            except OSError:
                pass
            else:
                opened.append(self_fd)
                allow(self_fd, _FS_READ)
        allow(prepared.devnull_fd, _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE)
        ws_fd = os.open(workspace, os.O_PATH | os.O_CLOEXEC | os.O_DIRECTORY)
        opened.append(ws_fd)
        allow(ws_fd, fs)
        if net and prepared.config.egress_port:
            port_rule = _NetPortAttr(_NET_CONNECT_TCP, prepared.config.egress_port)
            rule_type = _LANDLOCK_RULE_NET_PORT
            if libc.syscall(_NR_LANDLOCK_ADD_RULE, ruleset, rule_type, ctypes.byref(port_rule), 0):
                raise OSError(ctypes.get_errno(), f"landlock_add_rule (port): {_errno_text()}")
        if libc.syscall(_NR_LANDLOCK_RESTRICT_SELF, ruleset, 0) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_restrict_self: {_errno_text()}")
    finally:
        os.close(ruleset)
        for fd in opened:
            os.close(fd)
    for fd in prepared.inherited_fds():  # the rules hold their own references now
        os.close(fd)


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _seccomp_program(bpf: bytes) -> tuple[_SockFprog, Any]:
    count = len(bpf) // ctypes.sizeof(_SockFilter)
    program = (_SockFilter * count).from_buffer_copy(bpf)
    return _SockFprog(count, ctypes.cast(program, ctypes.POINTER(_SockFilter))), program


def _load_seccomp(program: tuple[_SockFprog, Any]) -> None:
    fprog = program[0]  # program[1] keeps the filter array alive
    if _c().prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"seccomp: {_errno_text()}")
