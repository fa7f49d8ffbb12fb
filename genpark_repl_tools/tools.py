"""The tool layer: what every frontend offers a model, defined once.

LangChain, LlamaIndex, MCP and the CLI do not talk to the engine themselves: each calls these
functions and translates the `ToolReply` into its own types. So one call says the same words in
every frontend, engine failures are handled one way, and a model moved between frameworks meets one
tool vocabulary:

    run_python(code)        run code in the conversation's session
    list_variables()        what the session defines
    inspect_variable(name)  one variable in detail
    reset_session()         empty the session (the CLI and MCP offer it; agents' toolkits do not by
                            default: a model resetting its own state is rarely what a user wants)
    list_files()            the files in the session's workspace (name, size, type)
    download_file(name)     one file: its text when it is text, its bytes (base64) only on request
    upload_file(name, ...)  put a file into the workspace (MCP and the CLI; agents' toolkits seed
                            files from the host with `upload_files` instead)
    fork_session()          copy the session into a new one and return its id (opt-in, off by
                            default: MCP's `create_server(engine, fork=True)` and `genpark-repl mcp
                            --fork`, the toolkits' `include_fork=True`)

fork_session is useful only if the model can then work in the copy and in the original. MCP's tools
name a session in each call (session_id). The LangChain and LlamaIndex toolkits are bound to one
conversation's session: with forks on (`include_fork=True`) their tools are `forkable(spec)`, with an
optional `fork` argument naming a copy fork_session made of that conversation's session ("fork-" and 12
hex digits; the engine's session is "<conversation's session>/fork-..."), so a model reaches its own
conversation's copies and nothing else.

A frontend decides only how a conversation maps to a session id, and how a reply becomes its
framework's message. It need not name the functions: `spec.call(engine, session, arguments)` (and
`await spec.acall(...)`) calls the tool a `ToolSpec` describes with the model's arguments, so an adapter
is one generic class driven by the specs; `spec.schema` is the arguments as a pydantic model (and
`spec.signature` / `spec.docstring` as text), and `files=` (a `SessionFiles`) gives each session its
starting files on its first call.

Streaming: `run_python` / `arun_python` take `on_event`, called with each `OutputEvent` (and
`FigureEvent`) while the code runs, before the reply is returned; a frontend passes it on to its
framework's mechanism (MCP progress, LangGraph's stream writer, LlamaIndex workflow events, the
terminal). `arun_python` awaits what `on_event` returns if it is awaitable. A failing `on_event` is
dropped for the rest of the call: the code keeps running and the reply is the same.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import keyword
import re
import secrets
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, Field, create_model

from ._engine import ReplEngine
from ._exceptions import FileError, ReplError, SessionNotFound, VariableNotFound
from ._models import Attachment, ExecutionResult, FileInfo, VariableInfo
from ._observation import format_size, render_observation, render_variable, render_variables
from ._stream import FigureEvent, OutputEvent, ResultEvent
from ._text import clean as _clean
from ._text import escape_controls, escape_name

__all__ = [
    "DOWNLOAD_FILE",
    "FILE_TOOLS",
    "FORK_SESSION",
    "INSPECT_VARIABLE",
    "LIST_FILES",
    "LIST_VARIABLES",
    "RESET_SESSION",
    "RUN_PYTHON",
    "TOOLS",
    "UPLOAD_FILE",
    "OnEvent",
    "SessionFiles",
    "ToolReply",
    "ToolSpec",
    "adownload_file",
    "afork_session",
    "ainspect_variable",
    "alist_files",
    "alist_variables",
    "areset_session",
    "arun_python",
    "aupload_file",
    "download_file",
    "event_text",
    "fork_session",
    "forkable",
    "inspect_variable",
    "is_error",
    "list_files",
    "list_variables",
    "render_files",
    "reset_session",
    "run_python",
    "run_reply",
    "run_sync",
    "upload_file",
    "upload_files",
]

_LISTED_NAMES = 30  # names offered when inspect_variable misses
_T = TypeVar("_T")


@dataclass(frozen=True)
class ToolSpec:
    """A tool's model-facing contract: its name, title, description and argument descriptions
    (each a string unless `defaults` gives it a default, whose type it then has)."""

    name: str
    title: str
    description: str
    arguments: dict[str, str] = field(default_factory=dict)
    read_only: bool = False
    defaults: dict[str, Any] = field(default_factory=dict)

    @functools.cached_property
    def schema(self) -> type[BaseModel]:
        """The arguments as a pydantic model, e.g. `RunPythonInput(code: str)`."""
        fields: dict[str, Any] = {
            name: (self._type(name), Field(self.defaults.get(name, ...), description=text))
            for name, text in self.arguments.items()
        }
        model: type[BaseModel] = create_model(self.name.title().replace("_", "") + "Input", **fields)
        return model

    @property
    def signature(self) -> str:
        """The arguments as a Python signature, e.g. `(code: str)` for run_python."""
        return f"({', '.join(f'{name}: {self._type(name).__name__}' for name in self.arguments)})"

    @property
    def docstring(self) -> str:
        """The description with an `Args:` section, for frameworks that read a function's docstring."""
        args = "".join(f"\n    {n} ({self._type(n).__name__}): {text}" for n, text in self.arguments.items())
        return self.description + (f"\n\nArgs:{args}" if args else "")

    def _type(self, argument: str) -> type:
        return type(self.defaults[argument]) if argument in self.defaults else str

    def call(
        self,
        engine: ReplEngine,
        session: str,
        arguments: Mapping[str, Any],
        files: SessionFiles | None = None,
        **options: Any,
    ) -> ToolReply:
        """This tool's reply to the model's `arguments` (only the spec's own names: a model cannot pick
        the session this way), after seeding the session with the frontend's `files` on its first use.
        `options` are the frontend's: `on_event` for run_python, `include_bytes` for download_file.
        (upload_file is called directly: it takes bytes.)"""
        function = _function(self, arguments, 0)
        if files is not None:
            files.seed(engine, session)
        arguments, session, refused = _in_fork(self, engine, session, arguments, options)
        if refused is not None:
            return refused
        return function(engine, session=session, **arguments, **options)  # type: ignore[no-any-return]

    async def acall(
        self,
        engine: ReplEngine,
        session: str,
        arguments: Mapping[str, Any],
        files: SessionFiles | None = None,
        **options: Any,
    ) -> ToolReply:
        """The async twin of `call`."""
        function = _function(self, arguments, 1)
        if files is not None:
            await files.aseed(engine, session)
        arguments, session, refused = _in_fork(self, engine, session, arguments, options)
        if refused is not None:
            return refused
        return await function(engine, session=session, **arguments, **options)  # type: ignore[no-any-return]

    def describe(self, engine: ReplEngine) -> str:
        """The description with what this engine adds (policy and time limit for run_python)."""
        if self.name != RUN_PYTHON.name:
            return self.description
        policy = engine.policy
        if policy.restricted:
            rules = (
                f"Policy '{policy.name}': code it does not allow is refused before anything runs; the "
                "reply starts with 'Blocked' and says what is allowed instead."
            )
        else:
            rules = f"Policy '{policy.name}': full Python."
        network = engine.boundary.network_policy
        if network is not None:
            hosts = ", ".join(network.allow)
            rules += (
                f" Network: only {hosts}, through a proxy the usual HTTP(S)_PROXY variables name "
                "(urllib, requests, httpx and pip use it); other hosts are refused."
            )
            if network.secrets:
                names = ", ".join(sorted(network.secrets))
                rules += (
                    f" Credentials: send the environment variables {names} as they are (placeholders "
                    "the proxy replaces for their own hosts)."
                )
        return f"{self.description} One call may run for at most {engine.limits.timeout_s:g} s. {rules}"


RUN_PYTHON = ToolSpec(
    name="run_python",
    title="Run Python",
    description=(
        "Run Python code in this conversation's persistent Python session. Variables, functions and "
        "imports stay defined between calls: build on earlier results instead of recomputing them. The "
        "reply shows printed output, the value of a trailing expression (as in a notebook), errors with "
        "the failing line, which variables changed, and figures as images. An error keeps earlier "
        "variables: fix the code and run it again."
    ),
    arguments={"code": 'Python source to run, e.g. "import math\\nr = 2\\nmath.pi * r ** 2".'},
)
LIST_VARIABLES = ToolSpec(
    name="list_variables",
    title="List variables",
    description=(
        "List the variables, functions and classes defined in this conversation's Python session, each "
        "with its type, size and a one-line preview."
    ),
    read_only=True,
)
INSPECT_VARIABLE = ToolSpec(
    name="inspect_variable",
    title="Inspect a variable",
    description=(
        "Show one variable of this conversation's Python session in detail: type, length or shape, "
        "dtype and a preview of its value (large values are shortened, never printed in full)."
    ),
    arguments={"name": 'The variable\'s name, e.g. "df".'},
    read_only=True,
)
RESET_SESSION = ToolSpec(
    name="reset_session",
    title="Reset the session",
    description="Delete every variable of this conversation's Python session and start it empty.",
)
TOOLS = (RUN_PYTHON, LIST_VARIABLES, INSPECT_VARIABLE, RESET_SESSION)
FORK_SESSION = ToolSpec(  # opt-in, not in TOOLS: see the module docstring
    name="fork_session",
    title="Fork the session",
    description=(
        "Copy this Python session into a new session: variables, imports, functions and files. Use it "
        "to try an idea on the copy and keep the original: changes in one never show in the other. "
        "Returns the new session's id."
    ),
)

# ---- files in and out of a session ----
LIST_FILES = ToolSpec(
    name="list_files",
    title="List files",
    description=(
        "List the files in this conversation's Python session's working directory (the files you "
        "were given and the ones your code wrote), each with its size and type. Code opens them by "
        "name, e.g. open('data.csv')."
    ),
    read_only=True,
)
DOWNLOAD_FILE = ToolSpec(
    name="download_file",
    title="Read a file",
    description=(
        "Read one file of this conversation's Python session's working directory: its text when it "
        "is text (long files are shortened), otherwise its size and type."
    ),
    arguments={"name": 'The file\'s name as list_files shows it, e.g. "clean.csv".'},
    read_only=True,
)
UPLOAD_FILE = ToolSpec(
    name="upload_file",
    title="Upload a file",
    description=(
        "Put a file into this conversation's Python session's working directory, where code opens it "
        "by name. An existing file of that name is replaced."
    ),
    arguments={
        "name": 'The file\'s name, relative to the working directory, e.g. "data.csv".',
        "content": "The file's content: text, or base64 when content_base64 is true.",
        "content_base64": "Whether content is base64-encoded bytes.",
    },
    defaults={"content_base64": False},
)
FILE_TOOLS = (LIST_FILES, DOWNLOAD_FILE, UPLOAD_FILE)
_LISTED_FILES = 50


@dataclass
class ToolReply:
    """One tool call's answer, for every frontend.

    `text` is what the model reads; `images` go to the model as image content where the framework
    allows it; `data` is plain JSON for programs (the telemetry); `is_error` says the call did not
    do what was asked: the code failed, was refused, timed out, was cancelled or crashed, a variable
    does not exist, or the engine itself failed (then `failure` names the exception type).
    """

    tool: str
    text: str
    session: str
    is_error: bool = False
    images: list[Attachment] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    failure: str | None = None
    result: ExecutionResult | None = None  # run_python's result, for frontends that render it themselves


# ---- the tools -------------------------------------------------------------------------------------


# What run_python calls with each event while the code runs (arun_python awaits an awaitable reply).
OnEvent = Callable[[OutputEvent | FigureEvent], object]


def run_python(engine: ReplEngine, code: str, session: str, on_event: OnEvent | None = None) -> ToolReply:
    try:
        if on_event is None:
            result = engine.run(code, session)
        else:
            result = _streamed(engine.stream(code, session), _Guarded(on_event))
    except ReplError as exc:
        return _failure(RUN_PYTHON, session, exc)
    return run_reply(result, session, engine.limits.max_observation_chars)


async def arun_python(
    engine: ReplEngine, code: str, session: str, on_event: OnEvent | None = None
) -> ToolReply:
    try:
        if on_event is None:
            result = await engine.arun(code, session)
        else:
            guarded = _Guarded(on_event)
            events = engine.astream(code, session)
            try:
                async for event in events:
                    if isinstance(event, ResultEvent):
                        result = event.result
                    else:
                        await guarded.acall(event)
            finally:
                await events.aclose()  # now, not at garbage collection: cancels the call if it still runs
    except ReplError as exc:
        return _failure(RUN_PYTHON, session, exc)
    return run_reply(result, session, engine.limits.max_observation_chars)


def _streamed(events: Any, guarded: _Guarded) -> ExecutionResult:
    try:
        for event in events:
            if isinstance(event, ResultEvent):
                return event.result
            guarded.call(event)
    finally:
        events.close()
    raise AssertionError("a stream always ends with its result")  # pragma: no cover


def event_text(event: OutputEvent, max_chars: int = 2000) -> str:
    """An output chunk as one message (a progress note, a log line): each line's latest state (what
    follows its last restarting `\\r`), control characters escaped as in the observation, the last
    `max_chars` characters, stderr marked."""
    lines = [line.rstrip("\r").rsplit("\r", 1)[-1] for line in event.text.split("\n")]
    text = escape_controls("\n".join(lines))
    if len(text) > max_chars:
        text = "..." + text[-max_chars:]
    return text if event.stream == "stdout" else f"[stderr] {text}"


class _Guarded:
    """A frontend's `on_event`; after its first failure it is not called again for this call."""

    __slots__ = ("_fn",)

    def __init__(self, fn: OnEvent) -> None:
        self._fn: OnEvent | None = fn

    def call(self, event: OutputEvent | FigureEvent) -> None:
        if self._fn is not None:
            try:
                self._fn(event)
            except Exception:  # the consumer's problem; the run and its reply go on
                self._fn = None

    async def acall(self, event: OutputEvent | FigureEvent) -> None:
        if self._fn is not None:
            try:
                reply = self._fn(event)
                if inspect.isawaitable(reply):
                    await reply
            except Exception:  # the consumer's problem; the run and its reply go on
                self._fn = None


def list_variables(engine: ReplEngine, session: str) -> ToolReply:
    try:
        infos = engine.variables(session)
    except ReplError as exc:
        return _failure(LIST_VARIABLES, session, exc)
    return ToolReply(
        tool=LIST_VARIABLES.name,
        text=_clean(render_variables(infos, engine.limits.max_observation_chars)),
        session=session,
        data={"variables": [info.model_dump(mode="json") for info in infos]},
    )


def inspect_variable(engine: ReplEngine, name: str, session: str) -> ToolReply:
    try:
        info = engine.inspect(name, session)
    except (SessionNotFound, VariableNotFound):
        return _not_defined(engine, name, session)
    except ReplError as exc:
        return _failure(INSPECT_VARIABLE, session, exc)
    return _inspect_reply(engine, info, session)


def reset_session(engine: ReplEngine, session: str) -> ToolReply:
    try:
        engine.reset(session)
    except SessionNotFound:
        pass  # nothing ran in it yet: it is already empty
    except ReplError as exc:
        return _failure(RESET_SESSION, session, exc)
    return ToolReply(
        tool=RESET_SESSION.name,
        text="Session reset: every variable is gone.",
        session=session,
        data={"reset": True},
    )


def fork_session(
    engine: ReplEngine, session: str, *, target: str | None = None, label: str | None = None
) -> ToolReply:
    """Fork `session` into `target` (the frontend's id for the copy; a new random one by default).
    The reply's session is the copy's. `label`: the copy's `fork` argument (forkable tools)."""
    target = target or f"fork-{secrets.token_hex(6)}"
    try:
        restored = engine.fork(session, target)
    except ReplError as exc:
        return _failure(FORK_SESSION, session, exc)
    copied = len(restored.restored)
    copy = "the new session" if label is None else f'the copy fork="{label}"'
    text = f"Forked: {copy} holds a copy of this one ({copied} names"
    if restored.not_saved:
        lost = ", ".join(escape_name(v.name) for v in restored.not_saved[:_LISTED_NAMES])
        text += f"; not copied, define again there: {lost}"
    text += "). Changes in one never show in the other."
    if label is not None:
        text += f' Pass fork="{label}" to work in the copy; leave fork out for the original.'
    data: dict[str, Any] = {
        "source": session,
        "copied": list(restored.restored),
        "not_copied": [v.name for v in restored.not_saved],
    }
    if label is not None:
        data["fork"] = label
    return ToolReply(tool=FORK_SESSION.name, text=_clean(text), session=target, data=data)


async def afork_session(
    engine: ReplEngine, session: str, *, target: str | None = None, label: str | None = None
) -> ToolReply:
    return await _to_thread(functools.partial(fork_session, target=target, label=label), engine, session)


# ---- forks in a toolkit bound to one conversation's session ----
_FORK_ID = re.compile(r"fork-[0-9a-f]{12}")
_IN_FORK = (
    'The id of a copy fork_session made, e.g. "fork-3f2a9c01b7d4", to work in that copy. Leave it out '
    "for this conversation's session."
)
_FORK_OF = (
    'The id of a copy to fork in turn, e.g. "fork-3f2a9c01b7d4". Leave it out to copy this '
    "conversation's session."
)


_FORKABLE: dict[int, tuple[ToolSpec, ToolSpec]] = {}  # id(spec): (spec, its forkable twin), made once


def forkable(spec: ToolSpec) -> ToolSpec:
    """`spec` with an optional `fork` argument, for a toolkit bound to one conversation's session that
    offers fork_session: it names a copy of that session fork_session made (omitted: the session
    itself). `call` maps it to the copy's session id, under the conversation's own."""
    if "fork" in spec.arguments:
        return spec
    made = _FORKABLE.get(id(spec))
    if made is None or made[0] is not spec:
        text = _FORK_OF if spec.name == FORK_SESSION.name else _IN_FORK
        twin = dataclasses.replace(
            spec, arguments={**spec.arguments, "fork": text}, defaults={**spec.defaults, "fork": ""}
        )
        made = _FORKABLE[id(spec)] = (spec, twin)
    return made[1]


def _in_fork(
    spec: ToolSpec, engine: ReplEngine, session: str, arguments: Mapping[str, Any], options: dict[str, Any]
) -> tuple[Mapping[str, Any], str, ToolReply | None]:
    """A forkable spec's arguments without `fork`, the session it names, and a refusal if it names
    no copy of `session` (so a typo never starts an empty session). fork_session's copy is named
    under `session` whichever copy it was made from."""
    if "fork" not in spec.arguments:
        return arguments, session, None
    arguments = dict(arguments)
    fork = str(arguments.pop("fork", "") or "")
    if spec.name == FORK_SESSION.name:
        options["label"] = label = f"fork-{secrets.token_hex(6)}"
        options["target"] = f"{session}/{label}"
    if not fork:
        return arguments, session, None
    name = f"{session}/{fork}"
    try:
        known = _FORK_ID.fullmatch(fork) is not None and name in engine.sessions()
    except ReplError as exc:
        return arguments, session, _failure(spec, session, exc)
    if known:
        return arguments, name, None
    text = _clean(
        f"No copy fork={fork!r:.40} of this conversation's session: pass an id fork_session returned, "
        "or leave fork out for the original."
    )
    refused = ToolReply(
        tool=spec.name,
        text=text,
        session=session,
        is_error=True,
        data={"failure": "UnknownFork", "message": text},
        failure="UnknownFork",
    )
    return arguments, session, refused


# Listing, inspecting and resetting are quick but may wait for a busy session or a worker process:
# the async twins run them on a worker thread so the event loop keeps serving.


async def alist_variables(engine: ReplEngine, session: str) -> ToolReply:
    return await _to_thread(list_variables, engine, session)


async def ainspect_variable(engine: ReplEngine, name: str, session: str) -> ToolReply:
    return await _to_thread(inspect_variable, engine, name, session)


async def areset_session(engine: ReplEngine, session: str) -> ToolReply:
    return await _to_thread(reset_session, engine, session)


async def _to_thread(fn: Callable[..., _T], *args: Any) -> _T:
    import asyncio

    return await asyncio.to_thread(fn, *args)


def run_sync(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run `coro` to completion from synchronous code (a sync tool that needs an async framework API).

    Outside an event loop this is `asyncio.run`; on a thread whose loop is running it runs on a helper
    thread instead of refusing (objects bound to that loop may not tolerate it)."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


# ---- files -----------------------------------------------------------------------------------------


def list_files(engine: ReplEngine, session: str) -> ToolReply:
    try:
        infos = engine.files(session)
    except ReplError as exc:
        return _file_failure(LIST_FILES, session, exc)
    return ToolReply(
        tool=LIST_FILES.name,
        text=_clean(render_files(infos)),
        session=session,
        data={"files": [info.model_dump(mode="json") for info in infos]},
    )


def download_file(engine: ReplEngine, name: str, session: str, *, include_bytes: bool = False) -> ToolReply:
    """The file's text for the model when it is UTF-8 text (cut to the observation budget); its bytes
    go into `data["content_base64"]` only with `include_bytes`."""
    try:
        content = engine.download(session, name)
    except ReplError as exc:
        return _file_failure(DOWNLOAD_FILE, session, exc)
    import mimetypes

    size = format_size(len(content))
    media = mimetypes.guess_type(name)[0] or "application/octet-stream"
    data: dict[str, Any] = {"file": {"name": name, "size": len(content), "type": media}}
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or "\x00" in text:
        body = f"{name} ({size}, {media}): binary content, not shown."
    else:
        limit = engine.limits.max_observation_chars - 100
        shown = text if len(text) <= limit else text[:limit] + "\n[... shortened ...]"
        body = f"{name} ({size}, {media}):\n{shown}"
        data["text"] = shown
    if include_bytes:
        import base64

        data["content_base64"] = base64.b64encode(content).decode("ascii")
    return ToolReply(tool=DOWNLOAD_FILE.name, text=_clean(body), session=session, data=data)


def upload_file(engine: ReplEngine, name: str, content: bytes | str, session: str) -> ToolReply:
    """Put `content` (bytes, or text written as UTF-8) into the session's workspace as `name`."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    try:
        info = engine.upload(session, name, data)
    except ReplError as exc:
        return _file_failure(UPLOAD_FILE, session, exc)
    return ToolReply(
        tool=UPLOAD_FILE.name,
        text=_clean(f"Uploaded {info.name} ({format_size(info.size)}, {info.type})."),
        session=session,
        data={"file": info.model_dump(mode="json")},
    )


def upload_files(engine: ReplEngine, files: Any, session: str) -> list[FileInfo]:
    """Seed a session from the host: `files` maps names to bytes or host paths, or is a list of host
    paths (each uploaded under its own file name). Raises on a refused name or quota (the host's
    misconfiguration, not the model's)."""
    import os

    items = files.items() if hasattr(files, "items") else ((os.path.basename(os.fspath(p)), p) for p in files)
    return [engine.upload(session, name, value) for name, value in items]


class SessionFiles:
    """Files every session of a frontend starts with: uploaded the first time a session is used
    (`seed`), so each conversation gets its own copy. `files` is what `upload_files` takes."""

    def __init__(self, files: Any) -> None:
        import os
        import threading

        if hasattr(files, "items"):
            self.files: dict[str, Any] = dict(files.items())
        else:
            self.files = {os.path.basename(os.fspath(p)): p for p in files}
        self._seeded: set[tuple[int, str]] = set()
        self._lock = threading.Lock()

    def seed(self, engine: ReplEngine, session: str) -> None:
        key = (id(engine), session)
        if not self.files or key in self._seeded:
            return
        with self._lock:
            if key not in self._seeded:
                upload_files(engine, self.files, session)
                self._seeded.add(key)

    async def aseed(self, engine: ReplEngine, session: str) -> None:
        """`seed` from async code: the upload runs on a worker thread, and only the first time."""
        if self.files and (id(engine), session) not in self._seeded:
            await _to_thread(self.seed, engine, session)


async def alist_files(engine: ReplEngine, session: str) -> ToolReply:
    return await _to_thread(list_files, engine, session)


async def adownload_file(
    engine: ReplEngine, name: str, session: str, *, include_bytes: bool = False
) -> ToolReply:
    import asyncio

    return await asyncio.to_thread(download_file, engine, name, session, include_bytes=include_bytes)


async def aupload_file(engine: ReplEngine, name: str, content: bytes | str, session: str) -> ToolReply:
    return await _to_thread(upload_file, engine, name, content, session)


def render_files(infos: list[FileInfo]) -> str:
    """The files as a model reads them: one line each, 'clean.csv  3.2 KB  text/csv'."""
    if not infos:
        return "No files yet."
    lines = [f"{escape_name(f.name)}  {format_size(f.size)}  {f.type}" for f in infos[:_LISTED_FILES]]
    if len(infos) > _LISTED_FILES:
        lines.append(f"[... and {len(infos) - _LISTED_FILES} more files]")
    if getattr(infos, "complete", True) is False:  # a FileList whose walk stopped at a bound
        lines.append("[listed in part: the workspace is too large to scan in full]")
    return f"Files ({len(infos)}):\n" + "\n".join(lines)


def _file_failure(spec: ToolSpec, session: str, exc: ReplError) -> ToolReply:
    if not isinstance(exc, FileError):
        return _failure(spec, session, exc)
    kind = type(exc).__name__
    return ToolReply(
        tool=spec.name,
        text=_clean(f"{kind}: {exc}"),
        session=session,
        is_error=True,
        data={"failure": kind, "message": _clean(str(exc))},
        failure=kind,
    )


_FUNCTIONS: dict[str, tuple[Callable[..., ToolReply], Callable[..., Awaitable[ToolReply]]]] = {
    RUN_PYTHON.name: (run_python, arun_python),
    LIST_VARIABLES.name: (list_variables, alist_variables),
    INSPECT_VARIABLE.name: (inspect_variable, ainspect_variable),
    RESET_SESSION.name: (reset_session, areset_session),
    FORK_SESSION.name: (fork_session, afork_session),
    LIST_FILES.name: (list_files, alist_files),
    DOWNLOAD_FILE.name: (download_file, adownload_file),
}  # upload_file takes bytes, not the model's base64 flag: its frontends call it themselves


def _function(spec: ToolSpec, arguments: Mapping[str, Any], which: int) -> Callable[..., Any]:
    if not spec.arguments.keys() >= arguments.keys():
        unknown = ", ".join(sorted(arguments.keys() - spec.arguments.keys()))
        raise TypeError(f"{spec.name} takes no argument {unknown}")
    return _FUNCTIONS[spec.name][which]


def is_error(data: dict[str, Any]) -> bool:
    """A reply's `is_error`, recovered from its `data` alone (for frameworks that keep only the data,
    such as LangChain's artifact)."""
    if "failure" in data:
        return True
    if "status" in data:  # run_python: the ExecutionResult
        return bool(data["status"] != "ok")
    return "variable" in data and data["variable"] is None  # inspect_variable of an undefined name


# ---- rendering -------------------------------------------------------------------------------------


def run_reply(result: ExecutionResult, session: str, max_chars: int | None = None) -> ToolReply:
    """run_python's reply for a result in hand (a frontend that adjusted the result renders it here)."""
    attachments = result.attachments
    return ToolReply(
        tool=RUN_PYTHON.name,
        text=_clean(render_observation(result, max_chars=max_chars)),
        session=session,
        is_error=not result.ok,
        images=[a for a in attachments if a.kind == "image"] if attachments else [],
        data=result.model_dump(mode="json"),
        result=result,
    )


def _inspect_reply(engine: ReplEngine, info: VariableInfo, session: str) -> ToolReply:
    text = render_variable(info)
    limit = engine.limits.max_observation_chars
    if len(text) > limit:
        text = text[: limit - 20] + "\n[... shortened ...]"
    return ToolReply(
        tool=INSPECT_VARIABLE.name,
        text=_clean(text),
        session=session,
        data={"variable": info.model_dump(mode="json")},
    )


def _not_defined(engine: ReplEngine, name: str, session: str) -> ToolReply:
    try:
        known = [v.name for v in engine.variables(session)]
    except ReplError:
        known = []
    more = f" and {len(known) - _LISTED_NAMES} more" if len(known) > _LISTED_NAMES else ""
    defined = f"Defined: {', '.join(known[:_LISTED_NAMES])}{more}." if known else "Nothing is defined yet."
    return ToolReply(
        tool=INSPECT_VARIABLE.name,
        text=_clean(f"Not defined: {name!r:.100}. {defined}"),
        session=session,
        is_error=True,
        data={"variable": None, "defined": known},
    )


def _failure(spec: ToolSpec, session: str, exc: ReplError) -> ToolReply:
    """An engine failure (closed, at capacity, a worker lost) as a reply the model can relay: never an
    exception in the agent's loop. (A session id the engine rejects is the frontend's misconfiguration,
    not the model's: that TypeError/ValueError propagates.)"""
    kind = type(exc).__name__
    text = f"Tool failure, not an error in your code: {kind}: {exc}"
    return ToolReply(
        tool=spec.name,
        text=_clean(text),
        session=session,
        is_error=True,
        data={"failure": kind, "message": _clean(str(exc))},
        failure=kind,
    )


# The one-off host tool that hands variables to a session; a name no agent's tool is likely to have.
_VALUES_TOOL = "genpark_sent_values"


def send_values(
    engine: ReplEngine, session: str, tools: Mapping[str, Callable[..., Any]], values: Mapping[str, Any]
) -> None:
    """Assign `values` ({name: value}) in `session` as copies of plain data, for the CodeAct executors
    (smolagents' `send_variables`, a LangGraph state's context). They cross like a host tool's result:
    a one-off tool returns them to one run of `a, b, = <tool>()`; then the session's tools are `tools`
    again. Raises ValueError when a name is not a plain identifier or the run fails."""
    bad = [name for name in values if not name.isidentifier() or keyword.iskeyword(name)]
    if bad:
        raise ValueError(f"not a variable name: {', '.join(map(repr, bad))}")
    found = tuple(values.values())
    engine.set_tools(session, {**tools, _VALUES_TOOL: lambda: found})
    try:
        result = engine.run(f"{', '.join(values)}, = {_VALUES_TOOL}()", session)
    finally:
        engine.set_tools(session, dict(tools) or None)
    if result.status != "ok":
        raise ValueError(f"could not set {', '.join(values)} in the session: {result.to_observation()}")
