"""`genpark-repl`: try the engine by hand, run or audit a script, or serve it over MCP.

    genpark-repl                          interactive REPL (shows what a model would see)
    genpark-repl run script.py            run a file as one cell; the exit code is its status
    genpark-repl audit script.py          the policy's static verdict, without running anything
    genpark-repl mcp                      an MCP stdio server (needs genpark-repl-tools[mcp])
    genpark-repl mcp --transport http     the same over streamable HTTP (see docs/cli.md)
    genpark-repl mcp --store sqlite:PATH  sessions kept in a store: handles survive a restart
    genpark-repl store list --store SPEC  the sessions in a store (also: show ID, delete ID)
    genpark-repl image build --tag TAG    an image for --boundary docker (--base IMAGE, --requirements FILE)

Exit codes of `run` (and `audit`): 0 ok, 1 error in the code (audit: a syntax error), 2 usage or setup
error (or the engine failed), 3 blocked by the policy, 4 timeout, 5 crashed, 6 cancelled.
"""

from __future__ import annotations

import argparse
import ast
import base64
import binascii
import codeop
import contextlib
import dataclasses
import importlib
import importlib.util
import itertools
import json
import os
import signal
import sys
import time
import tokenize
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from pydantic import ValidationError

from . import tools
from ._engine import DEFAULT_POLICY, ReplEngine
from ._exceptions import MissingDependency, ReplError
from ._limits import Limits
from ._models import ExecutionResult
from ._observation import _status_line
from ._stream import OutputEvent
from ._text import escape_controls, escape_name
from .policy import Policy
from .tools import ToolReply

if TYPE_CHECKING:
    from .egress import NetworkPolicy
    from .stores import SessionStore

__all__ = [
    "EXIT_BLOCKED",
    "EXIT_CANCELLED",
    "EXIT_CRASHED",
    "EXIT_ERROR",
    "EXIT_OK",
    "EXIT_TIMEOUT",
    "EXIT_USAGE",
    "build_parser",
    "exit_code",
    "main",
    "repl",
    "save_figures",
]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2  # argparse's own code for a bad command line
EXIT_BLOCKED = 3
EXIT_TIMEOUT = 4
EXIT_CRASHED = 5
EXIT_CANCELLED = 6

_STATUS_EXIT = {
    "ok": EXIT_OK,
    "error": EXIT_ERROR,
    "blocked": EXIT_BLOCKED,
    "timeout": EXIT_TIMEOUT,
    "crashed": EXIT_CRASHED,
    "cancelled": EXIT_CANCELLED,
}

_N = TypeVar("_N", int, float)

_PROG = "genpark-repl"
_REPL_SESSION = "repl"
_PS1, _PS2 = ">>> ", "... "
_HISTORY_ENV = "GENPARK_REPL_HISTORY"
_HISTORY_DEFAULT = "~/.genpark_repl_history"
# Bearer tokens for `mcp --transport http`: never a command-line value, which `ps` shows to every user.
_TOKENS_ENV = "GENPARK_REPL_MCP_TOKENS"
_IMAGE_SUFFIXES = {
    "image/png": ".png",
    "image/jpeg": ".jpg",
    "image/gif": ".gif",
    "image/webp": ".webp",
    "image/svg+xml": ".svg",
}


class UsageError(Exception):
    """A bad command line or an unusable setup: reported in one line, exit code 2."""


def exit_code(result: ExecutionResult) -> int:
    """The process exit code for a run's status."""
    return _STATUS_EXIT[result.status]


# ---- command line ------------------------------------------------------------------------------


def _number(
    convert: Callable[[str], _N], expected: str, valid: Callable[[_N], bool], bounds: str
) -> Callable[[str], _N]:
    """An argparse `type`: `convert` the text, then refuse a value outside `bounds` in one line."""

    def parse(text: str) -> _N:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not valid(value):
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {text}")
        return value

    return parse


_positive_float = _number(float, "a number", lambda value: value > 0, "> 0")
_positive_int = _number(int, "a whole number", lambda value: value > 0, "> 0")
_port = _number(int, "a port number", lambda value: 0 <= value <= 65535, "0-65535")


def _policy_help() -> str:
    # Presets come from Policy itself, so a new preset shows up here without a CLI change.
    names = _known_policies()
    listed = f" ({', '.join(names)})" if names else ""
    return f"policy preset{listed}; default: {DEFAULT_POLICY}"


def _known_policies() -> list[str]:
    try:
        Policy.preset("\0")  # no preset has this name: the refusal lists the ones that exist
    except ValueError as exc:
        _, _, known = str(exc).partition("choose one of: ")
        return [name.strip() for name in known.split(",") if name.strip()]
    return []


def _engine_opts() -> argparse.ArgumentParser:
    engine_opts = argparse.ArgumentParser(add_help=False)
    engine_opts.add_argument(
        "--boundary",
        default=argparse.SUPPRESS,
        metavar="NAME",
        help="where code runs: subprocess (the default; inprocess, said on stderr, where it cannot run "
        "here), inprocess, or docker (with --image)",
    )
    engine_opts.add_argument(
        "--timeout", type=_positive_float, default=argparse.SUPPRESS, metavar="SECONDS", help="per execution"
    )
    engine_opts.add_argument(
        "--memory-mb",
        type=_positive_int,
        default=argparse.SUPPRESS,
        metavar="MB",
        help="memory cap (enforced by the subprocess boundary)",
    )
    engine_opts.add_argument(
        "--cpu-s",
        type=_positive_float,
        default=argparse.SUPPRESS,
        metavar="SECONDS",
        help="CPU-time cap (enforced by the subprocess boundary)",
    )
    engine_opts.add_argument(
        "--require",
        action="append",
        default=argparse.SUPPRESS,
        metavar="PROTECTION",
        help="refuse to start unless this OS protection is active: seccomp, landlock, network_namespace "
        "or a key of describe()'s 'enforced' (repeatable; subprocess boundary)",
    )
    engine_opts.add_argument(
        "--preload",
        action="append",
        default=argparse.SUPPRESS,
        metavar="MODULE",
        help="a module the sandbox imports once, before any session, so each session starts with it "
        "(repeatable; mcp preloads the installed data stack its policy allows: numpy, pandas, "
        "matplotlib.pyplot)",
    )
    engine_opts.add_argument(
        "--no-preload", action="store_true", default=argparse.SUPPRESS, help="mcp: preload nothing"
    )
    engine_opts.add_argument(
        "--allow-host",
        action="append",
        default=argparse.SUPPRESS,
        metavar="ENTRY",
        help="a name the sandboxed code may reach, through an egress proxy on this host: host:port, "
        "*.domain:port, host (ports 80 and 443) or address:port (repeatable; needs --policy trusted "
        "and the subprocess or docker boundary; docs/network.md)",
    )
    # The container boundary's settings (docs/container.md); each needs --boundary docker.
    for flag, kind, metavar, text in _DOCKER_FLAGS:
        engine_opts.add_argument(
            flag,
            type=kind,
            action="append" if flag == "--workspace-allow" else "store",
            default=argparse.SUPPRESS,
            metavar=metavar,
            help=text,
        )
    return engine_opts


_DOCKER_FLAGS: tuple[tuple[str, Callable[[str], Any], str, str], ...] = (
    ("--image", str, "IMAGE", "image of the docker boundary's containers (genpark-repl image build)"),
    ("--network", str, "NAME", "docker boundary: the containers' network (default: none)"),
    ("--cpus", float, "N", "docker boundary: CPUs per container (default: 1)"),
    ("--pids-limit", int, "N", "docker boundary: processes per container (default: 256)"),
    ("--workspace-root", str, "DIR", "docker boundary: host directory holding the session workspaces"),
    ("--workspace-allow", str, "DIR", "docker boundary: a root workspace-root must lie under (repeatable)"),
    (
        "--warm-containers",
        int,
        "N",
        "docker boundary: containers started ahead for new sessions (default: 0)",
    ),
)


def build_parser() -> argparse.ArgumentParser:
    # Options live on parent parsers with SUPPRESS defaults, so `genpark-repl --json` and
    # `genpark-repl run --json FILE` both work and a subcommand never resets a value given before it.
    policy_opts = argparse.ArgumentParser(add_help=False)
    policy_opts.add_argument("--policy", default=argparse.SUPPRESS, metavar="NAME", help=_policy_help())

    # Every command defaults to the sandboxed boundary where it can run (_sandboxed_engine).
    engine_opts = _engine_opts()

    files_opts = argparse.ArgumentParser(add_help=False)
    files_opts.add_argument(
        "--upload",
        action="append",
        type=Path,
        default=argparse.SUPPRESS,
        metavar="PATH",
        help="put this file into the session's workspace first, under its own name (repeatable)",
    )
    files_opts.add_argument(
        "--download",
        action="append",
        default=argparse.SUPPRESS,
        metavar="NAME",
        help="after the run (the REPL: on leaving), save this workspace file into the current "
        "directory, never overwriting (repeatable)",
    )

    output_opts = argparse.ArgumentParser(add_help=False)
    output_opts.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print the telemetry as JSON instead of the observation",
    )
    output_opts.add_argument(
        "--save-figures",
        type=Path,
        default=argparse.SUPPRESS,
        metavar="DIR",
        help="write image attachments (figures) into DIR",
    )

    parser = argparse.ArgumentParser(
        prog=_PROG,
        parents=[policy_opts, engine_opts, files_opts, output_opts],
        description="Run Python the way an LLM agent's tool does: per-session namespaces, policies, "
        "limits and structured telemetry. Without a command: an interactive REPL.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="In the REPL:\n"
        + _HELP.split("\n\n", 1)[1]
        + "\n\nexit codes (run, audit): 0 ok, 1 error, 2 usage, 3 blocked, 4 timeout, 5 crashed, 6 cancelled",
    )
    from . import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = commands.add_parser(
        "run",
        parents=[policy_opts, engine_opts, files_opts, output_opts],
        help="run a file (or - for stdin) as one cell",
        description="Run a script as one cell and print the observation (or the telemetry with --json). "
        "Exit code: 0 ok, 1 error, 2 usage, 3 blocked, 4 timeout, 5 crashed.",
    )
    run.add_argument("file", metavar="FILE", help="Python file, or - to read stdin")

    audit = commands.add_parser(
        "audit",
        parents=[policy_opts],
        help="the policy's static audit of a file, without running it",
        description="Print what the policy's static audit refuses in a file, without running it. "
        "It judges the text only: files opened, names built at run time, processes, sockets and "
        "threads are seen by the run, whose runtime guards can still block it. "
        "Exit code: 0 allowed, 1 syntax error, 2 usage, 3 blocked.",
    )
    audit.add_argument("file", metavar="FILE", help="Python file, or - to read stdin")
    audit.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print the report as JSON"
    )

    mcp = commands.add_parser(
        "mcp",
        parents=[
            policy_opts,
            engine_opts,
        ],
        help="serve the engine over MCP (stdio or streamable HTTP)",
        description="An MCP server with the tools run_python, list_variables, inspect_variable and "
        "reset_session, on stdin/stdout or over streamable HTTP. Code runs on the subprocess boundary "
        "unless --boundary says otherwise (in-process where the OS has no subprocess boundary; the "
        "server says so on stderr). Needs genpark-repl-tools[mcp].",
        epilog=f"HTTP bearer tokens come from ${_TOKENS_ENV} or --token-file, one a line: TOKEN or "
        "NAME TOKEN. They are required unless --host is loopback. See docs/cli.md.",
        # `--token SECRET` must not pass as an abbreviation of --token-file: secrets stay out of `ps`.
        allow_abbrev=False,
    )
    mcp.add_argument(
        "--max-sessions",
        type=_positive_int,
        default=argparse.SUPPRESS,
        metavar="N",
        help="live sessions at most",
    )
    mcp.add_argument(
        "--max-code-chars",
        type=_positive_int,
        default=argparse.SUPPRESS,
        metavar="N",
        help="largest code accepted in one call (default: 500000)",
    )
    mcp.add_argument(
        "--log-level",
        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
        default="WARNING",
        help="server log level (logs go to stderr; default: WARNING)",
    )
    mcp.add_argument(
        "--store",
        default=None,
        metavar="SPEC",
        help="keep sessions in a store (sqlite:PATH or redis://HOST:PORT/DB) so handles survive a "
        "restart; the snapshot key comes from $GENPARK_REPL_SNAPSHOT_KEY",
    )
    mcp.add_argument(
        "--hibernate-after",
        type=_positive_float,
        default=None,
        metavar="SECONDS",
        help="with --store: stop idle sessions' workers after this long; they come back on their next call",
    )
    mcp.add_argument(
        "--fork",
        action="store_true",
        default=False,
        help="offer the fork_session tool: the model copies a session and works in either (off by default)",
    )
    mcp.add_argument("--transport", choices=["stdio", "http"], default="stdio", help="default: stdio")
    http = mcp.add_argument_group("streamable HTTP (--transport http)")
    http.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    http.add_argument("--port", type=_port, default=8000, help="TCP port (default: 8000; 0 picks a free one)")
    http.add_argument("--path", default="/mcp", help="endpoint path (default: /mcp)")
    http.add_argument(
        "--token-file",
        type=Path,
        default=None,
        metavar="FILE",
        help=f"bearer tokens, one a line (TOKEN or NAME TOKEN); or set ${_TOKENS_ENV}",
    )
    http.add_argument(
        "--accept-host",
        action="append",
        default=[],
        metavar="HOST",
        help="a Host header to accept besides loopback, e.g. mcp.example.com:* (behind a reverse proxy)",
    )
    http.add_argument(
        "--max-calls-per-client",
        type=_positive_int,
        default=4,
        metavar="N",
        help="tool calls one client may run at once (default: 4)",
    )
    http.add_argument(
        "--max-sessions-per-client",
        type=_positive_int,
        default=16,
        metavar="N",
        help="live sessions one client may hold (default: 16)",
    )
    http.add_argument(
        "--max-body-bytes",
        type=_positive_int,
        default=4 * 1024 * 1024,
        metavar="N",
        help="largest HTTP request body (default: 4194304)",
    )
    image = commands.add_parser(
        "image",
        help="build an image for the docker boundary",
        description="Build an image for --boundary docker: this package and the requirements are "
        "prepared as wheels on this host and installed with pip --no-index in a build without network "
        "(docs/container.md shows the equivalent Dockerfile).",
    )
    image.add_argument("action", choices=["build"])
    image.add_argument("--tag", required=True, metavar="TAG", help="the image's name, e.g. my-tasks:1.0")
    image.add_argument(
        "--base",
        default="python:3.11-slim",
        metavar="IMAGE",
        help="an image with python3 and venv on this Docker host",
    )
    image.add_argument(
        "--requirements", type=Path, metavar="FILE", help="the task packages (pip requirements)"
    )
    store = commands.add_parser(
        "store",
        help="list, show or delete the sessions in a session store",
        description="Inspect a session store: list its sessions (size, age), show one's manifest (what "
        "was saved, what was not and why; read without checking the snapshot key), delete one.",
    )
    store.add_argument("action", choices=["list", "show", "delete"])
    store.add_argument("session", nargs="?", metavar="ID", help="the session (show, delete)")
    store.add_argument(
        "--store", required=True, metavar="SPEC", help="sqlite:PATH or redis://HOST:PORT/DB[#PREFIX]"
    )
    store.add_argument("--json", action="store_true", default=False, help="print JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `genpark-repl` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "run":
            return _cmd_run(args)
        if args.command == "audit":
            return _cmd_audit(args)
        if args.command == "mcp":
            return _cmd_mcp(args)
        if args.command == "store":
            return _cmd_store(args)
        if args.command == "image":
            return _cmd_image(args)
        return _cmd_repl(args)
    except UsageError as exc:
        print(f"{_PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130  # the shell's convention for SIGINT
    except BrokenPipeError:
        # The reader went away (`| head`): silence the flush at exit instead of a traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_ERROR


# ---- engine ------------------------------------------------------------------------------------


def _make_engine(
    args: argparse.Namespace,
    policy: str | None = None,
    store: SessionStore | None = None,
    **limit_overrides: Any,
) -> ReplEngine:
    if not hasattr(args, "boundary"):
        return _sandboxed_engine(args, policy, store, limit_overrides)
    limits: dict[str, Any] = dict(limit_overrides)
    for option, field in (("timeout", "timeout_s"), ("memory_mb", "memory_mb"), ("cpu_s", "cpu_s")):
        if hasattr(args, option):
            limits[field] = getattr(args, option)
    options: dict[str, Any] = {"boundary": args.boundary}
    if hasattr(args, "require"):
        if options["boundary"] not in ("subprocess", "auto"):
            raise UsageError("--require needs --boundary subprocess: only it has OS protections")
        options["require"] = tuple(args.require)
    if getattr(args, "preload", None):
        if options["boundary"] not in ("subprocess", "auto", "docker"):
            raise UsageError("--preload needs a sandboxed boundary (in-process, nothing starts ahead)")
        options["preload"] = tuple(args.preload)
    given = {
        flag: getattr(args, flag[2:].replace("-", "_"))
        for flag, *_ in _DOCKER_FLAGS
        if hasattr(args, flag[2:].replace("-", "_"))
    }
    if given and options["boundary"] != "docker":
        raise UsageError(f"{', '.join(given)}: container settings, used only with --boundary docker")
    if given:
        names = {"--workspace-allow": "workspace_allowlist"}
        options.update({names.get(flag, flag[2:].replace("-", "_")): value for flag, value in given.items()})
    name = policy or getattr(args, "policy", None)
    if hasattr(args, "allow_host"):
        if "--network" in given:
            raise UsageError(
                "--allow-host and --network: choose one (--allow-host: only the listed names, through "
                "the egress proxy; --network NAME: whatever that Docker network reaches)"
            )
        options["network"] = _network_policy(args.allow_host, options["boundary"], name)
    if name is not None:
        options["policy"] = name
    if store is not None:
        options["store"] = store
        if getattr(args, "hibernate_after", None) is not None:
            options["hibernate_after_s"] = args.hibernate_after
    try:
        engine = ReplEngine(limits=Limits(**limits), **options)
        if engine.boundary.name in ("subprocess", "docker"):
            _say_unavailable(engine)
        return engine
    except ImportError as exc:
        raise UsageError(f"boundary {options['boundary']!r} is not available here: {exc}") from exc
    except ValidationError as exc:  # a limit out of range: name it without pydantic's boilerplate
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise UsageError(f"invalid limit ({problems})") from exc
    except (ValueError, TypeError, ReplError) as exc:
        raise UsageError(str(exc)) from exc


def _network_policy(entries: Sequence[str], boundary: str, policy: str | None) -> NetworkPolicy:
    """--allow-host: the names the sessions' code may reach through the engine's egress proxy."""
    if boundary == "inprocess":
        raise UsageError(
            "--allow-host needs a sandboxed boundary (subprocess or docker): in-process code has this "
            "process's whole network, which cannot be confined to a list of names"
        )
    if boundary not in ("subprocess", "auto", "docker"):
        raise UsageError(f"--allow-host needs --boundary subprocess or docker, not {boundary}")
    from .egress import NetworkPolicy

    try:
        network = NetworkPolicy(allow=entries)
    except ValidationError as exc:
        # The entry's own message (it names the entry), without pydantic's wrapping.
        error = exc.errors()[0]
        raise UsageError(f"--allow-host {error.get('ctx', {}).get('error', error['msg'])}") from None
    name = policy or DEFAULT_POLICY
    try:
        restricted = Policy.preset(name).restricted
    except ValueError:  # an unknown name: the engine says so when it is built
        restricted = False
    if restricted:
        # Restricted policies refuse every socket in the code itself (their audit hook), so the
        # proxy would never see a request. Changing the policy is the user's call, not ours.
        raise UsageError(
            f"--allow-host: policy '{name}' refuses all network access in the code, so no listed name "
            "could be reached; add --policy trusted (the sandbox still confines the code, and the "
            "proxy lets it reach only the listed names)"
        )
    return network


_SAID_UNAVAILABLE: set[str] = set()


def _say_unavailable(engine: ReplEngine) -> None:
    """Each OS protection this machine lacks, once per process on stderr (describe() lists them too)."""
    try:
        unavailable = engine.describe().get("unavailable", {})
    except ReplError:  # a boundary that cannot start says so when it is used
        return
    for protection, reason in unavailable.items():
        line = f"{_PROG}: {protection} is not available, code runs without it: {reason}"
        if line not in _SAID_UNAVAILABLE:
            _SAID_UNAVAILABLE.add(line)
            print(line, file=sys.stderr, flush=True)


def _cmd_image(args: argparse.Namespace) -> int:
    from .boundaries._docker._image import build_image

    if args.requirements is not None and not args.requirements.is_file():
        raise UsageError(f"no requirements file at {args.requirements}")
    try:
        ident = build_image(args.tag, args.base, args.requirements)
    except ReplError as exc:
        print(f"{_PROG}: image build failed: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(f"{args.tag} {ident}")
    return EXIT_OK


def _read_source(file: str) -> tuple[str, str]:
    """The code and a short name for it (used to name saved figures)."""
    if file == "-":
        return sys.stdin.read(), "stdin"
    path = Path(file)
    try:
        # tokenize.open honours a PEP 263 coding line, as `python FILE` does.
        with tokenize.open(path) as handle:
            return handle.read(), path.stem or "script"
    except FileNotFoundError:
        raise UsageError(f"no such file: {file}") from None
    except (OSError, SyntaxError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {file}: {exc}") from exc


# ---- run and audit -----------------------------------------------------------------------------


def _cmd_run(args: argparse.Namespace) -> int:
    code, name = _read_source(args.file)
    with _make_engine(args) as engine, contextlib.ExitStack() as stack:
        upload_paths(engine, "run", getattr(args, "upload", ()))
        out = _report_stream(stack)
        reply = tools.run_python(engine, code, "run")
        print(_render(reply, getattr(args, "json", False)), file=out)
        result = reply.result
        if result is None:  # the engine itself failed; the reply says how
            return EXIT_USAGE
        figures = getattr(args, "save_figures", None)
        if figures is not None:
            try:
                for path in save_figures(result, figures, prefix=name):
                    print(f"Saved figure: {path}", file=sys.stderr)
            except OSError as exc:  # the run's status still decides the exit code
                print(f"{_PROG}: cannot save figures: {exc}", file=sys.stderr)
        for line in download_names(engine, "run", getattr(args, "download", ()), Path.cwd()):
            print(line, file=sys.stderr)
    return exit_code(result)


def upload_paths(engine: ReplEngine, session: str, paths: Sequence[Path]) -> None:
    """--upload: each file into the session's workspace under its own name (a usage error if refused)."""
    for path in paths:
        try:
            engine.upload(session, path.name, path)
        except OSError as exc:
            raise UsageError(f"cannot upload {path}: {exc.strerror or exc}") from exc
        except ReplError as exc:
            raise UsageError(f"cannot upload {path}: {exc}") from exc


def download_names(engine: ReplEngine, session: str, names: Sequence[str], directory: Path) -> list[str]:
    """--download / :download: save workspace files into `directory`; one line per file saying where."""
    lines = []
    for name in names:
        try:
            data = engine.download(session, name)
            stem, dot, suffix = Path(name).name.rpartition(".")
            saved = _write_new(directory, stem if dot else suffix, f".{suffix}" if dot else "", data)
        except (ReplError, OSError, UsageError) as exc:
            lines.append(f"Cannot download {name}: {exc}")
            continue
        lines.append(f"Saved file: {saved}")
    return lines


def _report_stream(stack: contextlib.ExitStack) -> TextIO:
    """stdout, reserved for `run`'s report until `stack` closes: what the code writes to file
    descriptor 1 itself (`os.write(1, ...)`, C printf) goes to stderr, so `--json` output stays JSON."""
    import io

    from ._capture import reserved_stdout

    try:
        on_fd1 = sys.stdout.fileno() == 1
    except (AttributeError, OSError, ValueError):  # replaced by the caller (tests, an embedding app)
        return sys.stdout
    if not on_fd1:
        return sys.stdout
    out = io.TextIOWrapper(
        stack.enter_context(reserved_stdout()), encoding=sys.stdout.encoding, errors=sys.stdout.errors
    )
    stack.callback(out.detach)  # the descriptor is reserved_stdout's to close
    stack.callback(out.flush)
    return out


# What the static audit cannot judge, said wherever it allows code: `run` can still be blocked.
_AUDIT_SEES_TEXT_ONLY = (
    "The audit judges the text only. Only the run sees the files code opens, names it builds "
    "(getattr, imports by a computed name), and the processes, sockets and threads it starts: the "
    "policy's runtime guards can still block those (run's exit code 3)."
)


def _cmd_audit(args: argparse.Namespace) -> int:
    code, _ = _read_source(args.file)
    try:
        ast.parse(code)
    except SyntaxError as exc:
        print(f"Syntax error at line {exc.lineno}: {exc.msg}")
        return EXIT_ERROR
    except ValueError as exc:  # source with NUL bytes
        print(f"Cannot parse: {exc}")
        return EXIT_ERROR
    # The audit needs only the policy: no boundary options, no workers started.
    with _make_engine(
        argparse.Namespace(policy=getattr(args, "policy", None), boundary="inprocess")
    ) as engine:
        report = engine.audit(code)
    if getattr(args, "json", False):
        print(report.model_dump_json(indent=2))
    elif report.allowed and not engine.policy.restricted:
        print(f"Allowed under policy '{report.policy}' (it refuses nothing).")
    elif report.allowed:
        print(f"Allowed by the static audit of policy '{report.policy}'.\n{_AUDIT_SEES_TEXT_ONLY}")
    else:
        print(f"Blocked by policy '{report.policy}':\n{report.describe()}")
    return EXIT_OK if report.allowed else EXIT_BLOCKED


def _cmd_mcp(args: argparse.Namespace) -> int:
    try:
        from . import mcp_server
    except MissingDependency as exc:
        raise UsageError(str(exc)) from exc
    http = args.transport == "http"
    tokens = _mcp_tokens(args, mcp_server.load_tokens) if http else None
    if http and not tokens and not mcp_server.is_loopback(args.host):
        raise UsageError(
            f"--host {args.host} is not loopback: anyone who can reach it could run code. Give bearer "
            f"tokens in ${_TOKENS_ENV} or --token-file (see docs/cli.md)."
        )
    limits = {name: getattr(args, name) for name in ("max_sessions", "max_code_chars") if hasattr(args, name)}
    if args.hibernate_after is not None and args.store is None:
        raise UsageError("--hibernate-after needs --store")
    _server_preload(args)
    with contextlib.ExitStack() as stack:
        store = None if args.store is None else stack.enter_context(_open_store(args.store))
        engine = stack.enter_context(_make_engine(args, None, store, **limits))
        return _serve_mcp(args, engine, tokens, http)


# What a server preloads by default. A server starts many sessions from one zygote, so importing these
# once there (about 0.75 s at start) takes them off each new conversation's first call: a first pandas
# call answers in tens of milliseconds instead of 300-500, a first figure in about 130 ms instead of
# 900 (and matplotlib's font cache is built once, not in each session's workspace). `run` and the REPL
# start one session, which would pay the same import either way: they preload nothing.
_DATA_STACK = ("numpy", "pandas", "matplotlib.pyplot")


def _server_preload(args: argparse.Namespace) -> None:
    """A server's default --preload on a sandboxed boundary: the data stack, unless --preload or
    --no-preload says otherwise."""
    sandboxed = getattr(args, "boundary", "auto") != "inprocess"
    if sandboxed and not hasattr(args, "preload") and not getattr(args, "no_preload", False):
        args.preload = _data_stack(getattr(args, "policy", None))


def _data_stack(policy: str | None) -> list[str]:
    """The modules of _DATA_STACK installed here that `policy` lets sessions import."""
    try:
        chosen = Policy.preset(policy or DEFAULT_POLICY)
    except ValueError:  # an unknown name: the engine says so when it is built
        return []
    found = []
    for module in _DATA_STACK:
        top = module.partition(".")[0]
        allowed = not chosen.restricted or chosen.allows_module(module)
        if allowed and importlib.util.find_spec(top) is not None:
            found.append(module)
    return found


def _serve_mcp(
    args: argparse.Namespace, engine: ReplEngine, tokens: dict[str, str] | None, http: bool
) -> int:
    from . import mcp_server

    if not http:
        mcp_server.serve_stdio(engine, log_level=args.log_level, fork=args.fork)
        return EXIT_OK
    http_limits = mcp_server.HttpLimits(
        calls_per_client=args.max_calls_per_client,
        sessions_per_client=args.max_sessions_per_client,
        max_body_bytes=args.max_body_bytes,
    )
    # uvicorn stops on SIGTERM, then raises it again: as SystemExit, not death by signal, the
    # engine is closed on the way out (worker processes stopped, workspaces removed).
    signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        mcp_server.serve_http(
            engine,
            host=args.host,
            port=args.port,
            tokens=tokens,
            limits=http_limits,
            path=args.path,
            allowed_hosts=tuple(args.accept_host),
            log_level=args.log_level,
            fork=args.fork,
        )
    except OSError as exc:  # the address is taken, or not this machine's
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from exc
    return EXIT_OK


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _sandboxed_engine(
    args: argparse.Namespace, policy: str | None, store: SessionStore | None, limits: dict[str, Any]
) -> ReplEngine:
    """The engine when no --boundary is given: the model's code is untrusted, so the sandboxed
    boundary ("auto": subprocess on Linux); where this OS cannot run it, in-process, said on stderr."""
    chosen = argparse.Namespace(**vars(args), boundary="auto")
    try:
        if not sys.platform.startswith("linux"):
            raise ImportError(f"it needs Linux, this is {sys.platform}")
        importlib.import_module(".boundaries.subprocess", __package__)  # needs fork and fcntl
    except ImportError as exc:
        reason = f"the subprocess boundary is not available on this OS ({exc})"
    else:
        engine = _make_engine(chosen, policy, store, **limits)
        try:
            engine.describe()  # starts the worker template, so a broken setup shows now, not mid-call
        except ReplError as exc:
            engine.close()
            reason = f"the subprocess boundary did not start ({exc})"
        else:
            return engine
    if hasattr(args, "memory_mb") or hasattr(args, "cpu_s"):
        raise UsageError(f"{reason}; --memory-mb and --cpu-s need it")
    if hasattr(args, "allow_host"):
        raise UsageError(f"{reason}; --allow-host needs it")
    print(
        f"{_PROG}: {reason}; running code in-process instead: the policy's guards without an OS "
        "sandbox (docs/security.md). --boundary inprocess silences this.",
        file=sys.stderr,
        flush=True,
    )
    chosen.boundary = "inprocess"
    vars(chosen).pop("preload", None)  # a head start for sandboxed sessions only
    return _make_engine(chosen, policy, store, **limits)


@contextlib.contextmanager
def _open_store(spec: str) -> Any:
    from .stores import StoreError, open_store

    try:
        store = open_store(spec)
    except (ValueError, StoreError, MissingDependency, OSError) as exc:
        raise UsageError(f"cannot open the store {spec!r}: {exc}") from exc
    try:
        yield store
    finally:
        store.close()


def _cmd_store(args: argparse.Namespace) -> int:
    from .snapshot import SnapshotError, read_manifest

    if args.action != "list" and not args.session:
        raise UsageError(f"store {args.action} needs a session ID")
    with _open_store(args.store) as store:
        if args.action == "list":
            entries = store.list()
            now = time.time()
            if args.json:
                rows = [{**dataclasses.asdict(e), "age_s": round(now - e.saved_at, 3)} for e in entries]
                print(json.dumps(rows, indent=2))
                return EXIT_OK
            print(f"{'SESSION':<32} {'VERSION':>7} {'SIZE':>10} {'AGE':>9}")
            for entry in entries:
                print(
                    f"{_clip(escape_name(entry.session), 32):<32} {entry.version:>7} "
                    f"{_size(entry.size):>10} {_age(now - entry.saved_at):>9}"
                )
            print(f"{len(entries)} session(s)")
            return EXIT_OK
        if args.action == "delete":
            if store.delete(args.session):
                print(f"deleted {args.session}")
                return EXIT_OK
            print(f"{_PROG}: no session {args.session!r} in the store", file=sys.stderr)
            return EXIT_ERROR
        stored = store.get(args.session)
        if stored is None:
            print(f"{_PROG}: no session {args.session!r} in the store", file=sys.stderr)
            return EXIT_ERROR
        try:
            manifest = read_manifest(stored.data)
        except (SnapshotError, ValueError, KeyError) as exc:
            print(f"{_PROG}: the stored blob is not a readable snapshot: {exc}", file=sys.stderr)
            return EXIT_ERROR
        entry = stored.entry
        if args.json:
            data = {
                "entry": vars(entry),
                "manifest": manifest.model_dump(mode="json"),
                "authenticated": False,
            }
            print(json.dumps(data, indent=2))
            return EXIT_OK
        age = _age(time.time() - entry.saved_at)
        # What a stored blob names is read unauthenticated: each name is shown on one line, escaped.
        print(
            escape_name(
                f"session {entry.session}: version {entry.version}, {_size(entry.size)}, saved {age} ago"
            )
        )
        print(
            f"made {manifest.created_at:%Y-%m-%d %H:%M:%S} UTC, execution {manifest.execution_count}, "
            f"policy {escape_name(manifest.policy)}, Python {escape_name(manifest.python)}"
        )
        for variable in manifest.saved:
            print(
                "  saved      " + escape_name(f"{variable.name}: {variable.type} ({_size(variable.bytes)})")
            )
        for name, module in manifest.imports.items():
            print(f"  import     {escape_name(name)} = {escape_name(module)}")
        for skipped in manifest.not_saved:
            print("  not saved  " + escape_name(f"{skipped.name}: {skipped.type} ({skipped.reason})"))
        if manifest.libraries:
            libraries = ", ".join(f"{k} {v}" for k, v in sorted(manifest.libraries.items()))
            print("libraries: " + escape_name(libraries))
        print("(read without checking the snapshot key: for display only)")
        return EXIT_OK


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:,} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _mcp_tokens(args: argparse.Namespace, load: Callable[..., dict[str, str]]) -> dict[str, str] | None:
    """Bearer tokens from the environment and/or --token-file; None when neither gives any."""
    sources: list[tuple[str, str]] = []
    env = os.environ.get(_TOKENS_ENV, "")
    if env.strip():
        sources.append((f"${_TOKENS_ENV}", env))
    if args.token_file is not None:
        try:
            sources.append((str(args.token_file), args.token_file.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read --token-file {args.token_file}: {exc}") from exc
    tokens: dict[str, str] = {}
    for source, text in sources:
        try:
            tokens.update(load(text, source=source))
        except ValueError as exc:
            raise UsageError(str(exc)) from None  # never echo the file: it holds secrets
    return tokens or None


def _render(reply: ToolReply, as_json: bool) -> str:
    # json.dumps escapes what a terminal or a pipe could not carry (lone surrogates, control bytes).
    return json.dumps(reply.data, indent=2) if as_json else reply.text


def save_figures(result: ExecutionResult, directory: Path, prefix: str = "figure") -> list[Path]:
    """Write the result's image attachments into `directory` (created if needed); never overwrites."""
    paths: list[Path] = []
    for index, attachment in enumerate(result.attachments, 1):
        if attachment.kind != "image":
            continue
        try:
            data = base64.b64decode(attachment.data_base64, validate=True)
        except (binascii.Error, ValueError):
            warnings.warn(f"attachment {index} is not valid base64; not saved", RuntimeWarning, stacklevel=2)
            continue
        directory.mkdir(parents=True, exist_ok=True)
        suffix = _IMAGE_SUFFIXES.get(attachment.mime_type, ".bin")
        stem = f"{prefix}-{result.execution_count}-{index}"
        paths.append(_write_new(directory, stem, suffix, data))
    return paths


def _write_new(directory: Path, stem: str, suffix: str, data: bytes) -> Path:
    for attempt in range(1, 10_000):
        path = directory / (f"{stem}{suffix}" if attempt == 1 else f"{stem}.{attempt}{suffix}")
        try:
            with path.open("xb") as handle:  # "x": an earlier figure is never overwritten
                handle.write(data)
        except FileExistsError:
            continue
        return path
    raise UsageError(f"too many files named {stem}* in {directory}")


# ---- the interactive REPL ----------------------------------------------------------------------

_HELP = """\
Type Python; a statement that is not complete yet continues on the next line (end a block with an
empty line). After each run you see the observation a model would get (--json: the telemetry).

  :vars            the session's variables
  :inspect NAME    one variable in detail
  :reset           delete every variable
  :files           the files in the session's workspace
  :upload PATH     put a file into the workspace
  :download NAME   save a workspace file into the current directory
  :fork [NAME]     copy the session (variables, imports, files) and go on in the copy
  :session [NAME]  the sessions, or go on in session NAME
  :policy [NAME]   show the policy and what is enforced; with NAME, switch (variables are lost)
  :help            this text (help works too)
  :quit            leave (exit, quit and Ctrl-D work too)"""
# Typed alone at the prompt, these do what they do in Python's own REPL instead of running as code
# (where the policy may refuse them, or SystemExit would merely end the cell).
_LEAVE = frozenset({"exit", "exit()", "quit", "quit()"})
_HELP_WORDS = frozenset({"help", "help()"})


def _cmd_repl(args: argparse.Namespace) -> int:
    engine = _make_engine(args)
    try:
        upload_paths(engine, _REPL_SESSION, getattr(args, "upload", ()))
    except UsageError:
        engine.close()
        raise
    interactive = sys.stdin.isatty()

    def switch(policy: str) -> ReplEngine:
        return _make_engine(args, policy=policy)

    history = _setup_history() if interactive else None
    try:
        return repl(
            engine,
            stdin=sys.stdin,
            stdout=sys.stdout,
            interactive=interactive,
            json_output=getattr(args, "json", False),
            figures_dir=getattr(args, "save_figures", None),
            switch_policy=switch,
            downloads=getattr(args, "download", ()),
        )
    finally:
        if history is not None:
            history()


def _setup_history() -> Callable[[], None] | None:
    """Load readline history; returns the function that saves it (None without readline)."""
    try:
        import readline
    except ImportError:  # Windows without pyreadline: plain input() still works
        return None
    path = Path(os.environ.get(_HISTORY_ENV, _HISTORY_DEFAULT)).expanduser()
    with contextlib.suppress(OSError):  # first run, or an unreadable file: start empty
        readline.read_history_file(path)
    readline.set_history_length(2000)

    def save() -> None:
        with contextlib.suppress(OSError):  # a read-only home must not make leaving an error
            readline.write_history_file(path)

    return save


def repl(
    engine: ReplEngine,
    *,
    stdin: TextIO,
    stdout: TextIO,
    interactive: bool = False,
    json_output: bool = False,
    figures_dir: Path | None = None,
    switch_policy: Callable[[str], ReplEngine] | None = None,
    downloads: Sequence[str] = (),
) -> int:
    """Read-eval-print loop over `engine`'s "repl" session; returns the exit code. Closes the engine
    (after saving the workspace files named in `downloads` into the current directory).

    With `interactive`, lines are read with `input()` (readline editing and history) and prompts are
    shown; otherwise lines come from `stdin` silently, so the REPL can be driven by a pipe.
    """
    state = _ReplState(engine, stdout, json_output, figures_dir, switch_policy)
    state.live = interactive and not json_output  # a person watches: print output as it comes
    if interactive:
        state.say(
            f"{_PROG}: policy '{engine.policy.name}', {engine.boundary.name} boundary, "
            f"{engine.limits.timeout_s:g} s timeout. :help for commands, :quit to leave."
        )
    buffer: list[str] = []
    try:
        while True:
            try:
                line = _read_line(_PS2 if buffer else _PS1, stdin, interactive)
            except EOFError:
                if buffer:  # a pipe may end without the blank line that closes a block
                    state.run("\n".join(buffer))
                if interactive:
                    state.say("")
                return EXIT_OK
            except KeyboardInterrupt:
                state.say("\nKeyboardInterrupt")
                buffer.clear()
                continue
            if not buffer and line.strip() in _LEAVE:
                return EXIT_OK  # what leaves Python's own REPL leaves this one
            if not buffer and line.strip() in _HELP_WORDS:
                state.say(_HELP)
                continue
            if not buffer and line.strip().startswith(":"):
                if not state.command(line.strip()):
                    return EXIT_OK
                continue
            if not buffer and not line.strip():
                continue
            buffer.append(line)
            if _is_complete(buffer):
                source = "\n".join(buffer)
                buffer.clear()
                state.run(source)
    finally:
        try:
            for message in download_names(state.engine, state.session, downloads, Path.cwd()):
                state.say(message)
        finally:
            state.engine.close()


def _read_line(prompt: str, stdin: TextIO, interactive: bool) -> str:
    if interactive:
        return input(prompt)
    line = stdin.readline()
    if not line:
        raise EOFError
    return line.rstrip("\r\n")


def _is_complete(lines: list[str]) -> bool:
    """Whether the lines are ready to run: the interactive interpreter's rule, plus an escape hatch."""
    try:
        # "single" is the interactive interpreter's mode: a compound statement stays open until a blank
        # line, so `if x:` can be followed by `else:`.
        code = codeop.compile_command("\n".join(lines), "<repl>", "single")
    except (SyntaxError, OverflowError, ValueError):
        # Invalid as one interactive statement (a block followed by more code, a typo): hand it to the
        # engine, which compiles it as a module and reports a real error with line and caret.
        return True
    # Two blank lines run what is there even if a bracket or string is still open: the engine says why.
    return code is not None or (len(lines) > 2 and not lines[-1].strip() and not lines[-2].strip())


class _ReplState:
    """What the REPL holds between lines. Security model: the engine's policy and boundary; the REPL
    runs the person's own code, who already has a shell, so it adds nothing of its own."""

    def __init__(
        self,
        engine: ReplEngine,
        stdout: TextIO,
        json_output: bool,
        figures_dir: Path | None,
        switch_policy: Callable[[str], ReplEngine] | None,
    ) -> None:
        self.engine = engine
        self.stdout = stdout
        self.json_output = json_output
        self.figures_dir = figures_dir
        self.switch_policy = switch_policy
        self.live = False
        self._shown = ""  # the output printed live during the current call (its last characters)
        self.session = _REPL_SESSION  # the one the person works in (:fork and :session change it)

    def say(self, text: str) -> None:
        self.stdout.write(text + "\n")
        self.stdout.flush()

    def run(self, source: str) -> None:
        self._shown = ""
        try:
            reply = tools.run_python(self.engine, source, self.session, self._show if self.live else None)
        except KeyboardInterrupt:
            self.say("\nKeyboardInterrupt" if self._shown[-1:] not in ("", "\n") else "KeyboardInterrupt")
            return
        result = reply.result
        if self._shown and result is not None and not (result.stdout_truncated or result.stderr_truncated):
            if not self._shown.endswith("\n"):
                self.stdout.write("\n")
            # The output is on the screen already: the reply says the rest (value, error, changes),
            # under the status line of the whole result (the quiet copy's would say "no output").
            quiet = result.model_copy(update={"stdout": "", "stderr": ""})
            reply = tools.run_reply(quiet, reply.session, self.engine.limits.max_observation_chars)
            self.say(reply.text.replace(_status_line(quiet), _status_line(result), 1))
        else:
            self.say(_render(reply, self.json_output))
        result = reply.result
        if self.figures_dir is not None and result is not None:
            try:
                for path in save_figures(result, self.figures_dir):
                    self.say(f"Saved figure: {path}")
            except OSError as exc:
                self.say(f"Cannot save figures: {exc}")

    def _show(self, event: Any) -> None:
        if isinstance(event, OutputEvent) and event.text:
            # Control characters escaped as in an observation; a \r stays one, so a progress bar redraws.
            self.stdout.write("\r".join(escape_controls(part) for part in event.text.split("\r")))
            self.stdout.flush()
            self._shown = (self._shown + event.text)[-2:]

    def command(self, line: str) -> bool:
        """Run a `:command`; False means leave the REPL."""
        name, _, arg = line.partition(" ")
        arg = arg.strip()
        if name in (":quit", ":q", ":exit"):
            return False
        if name == ":help":
            self.say(_HELP)
        elif name == ":vars":
            self._vars()
        elif name == ":inspect":
            self._inspect(arg)
        elif name == ":reset":
            self._reset()
        elif name == ":files":
            self.say(_render(tools.list_files(self.engine, self.session), self.json_output))
        elif name == ":download":
            if not arg:
                self.say("Usage: :download NAME")
            for message in download_names(self.engine, self.session, [arg] if arg else [], Path.cwd()):
                self.say(message)
        elif name == ":upload":
            self._upload(arg)
        elif name == ":policy":
            self._policy(arg)
        elif name == ":fork":
            self._fork(arg)
        elif name == ":session":
            self._session(arg)
        else:
            self.say(f"Unknown command {name}; :help lists the commands.")
        return True

    def _vars(self) -> None:
        self.say(_render(tools.list_variables(self.engine, self.session), self.json_output))

    def _inspect(self, name: str) -> None:
        if not name:
            self.say("Usage: :inspect NAME")
            return
        self.say(_render(tools.inspect_variable(self.engine, name, self.session), self.json_output))

    def _upload(self, path: str) -> None:
        if not path:
            self.say("Usage: :upload PATH")
            return
        try:
            upload_paths(self.engine, self.session, [Path(path).expanduser()])
        except UsageError as exc:
            self.say(str(exc))
            return
        self.say(f"Uploaded {Path(path).name}.")

    def _reset(self) -> None:
        self.say(_render(tools.reset_session(self.engine, self.session), self.json_output))

    def _fork(self, name: str) -> None:
        known = set(self.engine.sessions())
        target = name or next(
            f"{_REPL_SESSION}-{n}" for n in itertools.count(2) if f"{_REPL_SESSION}-{n}" not in known
        )
        if target in known:
            self.say(f"Session {target!r} exists; :fork with another name.")
            return
        reply = tools.fork_session(self.engine, self.session, target=target)
        self.say(_render(reply, self.json_output))
        if not reply.is_error:
            self.say(f"Now in session {target!r} (:session {self.session} goes back).")
            self.session = target

    def _session(self, name: str) -> None:
        known = self.engine.sessions()
        if not name:
            listed = ", ".join(f"{s} (current)" if s == self.session else s for s in known)
            self.say(f"Sessions: {listed or self.session + ' (current)'}.")
        elif name not in known:
            self.say(f"No session {name!r}; :session lists them, :fork makes one.")
        else:
            self.session = name
            self.say(f"Now in session {name!r}.")

    def _policy(self, name: str) -> None:
        if not name:
            described = self.engine.describe()
            self.say(f"Policy '{self.engine.policy.name}' on the {self.engine.boundary.name} boundary.")
            for key, value in described.get("enforced", {}).items():
                self.say(f"  {key}: {value}")
            known = _known_policies()
            if known:
                self.say(f"Presets: {', '.join(known)} (switch with :policy NAME)")
            return
        if self.switch_policy is None:
            self.say("Switching policy is not available here.")
            return
        try:
            engine = self.switch_policy(name)
        except UsageError as exc:
            self.say(str(exc))
            return
        self.engine.close()
        self.engine = engine
        self.session = _REPL_SESSION
        self.say(f"Policy '{engine.policy.name}' now; the session starts empty.")


if __name__ == "__main__":
    raise SystemExit(main())
