"""The engine as an MCP server: run Python, list and inspect variables, reset a session.

    genpark-repl mcp --policy trusted --timeout 10        # stdio, for any MCP client
    genpark-repl mcp --transport http --port 8000         # streamable HTTP (see docs/cli.md)

    from genpark_repl_tools import ReplEngine
    from genpark_repl_tools.mcp_server import create_server
    create_server(ReplEngine()).run("stdio")

`genpark-repl mcp` runs code on the subprocess boundary unless --boundary says otherwise (in-process,
said on stderr, where that boundary cannot run); so does a `ReplEngine()` you build yourself on Linux
(elsewhere it is in-process, with a warning).

The protocol is stateless (mcp >= 2), so a conversation's state needs an explicit handle: every tool takes
an optional `session_id` and every result returns it. `run_python` without one starts a new session.
Over HTTP (`http_app`, `serve_http`) each bearer token is a client: its handles name sessions only it can
reach, and it has its own limits on concurrent calls and sessions.
Needs the `mcp` extra: `pip install 'genpark-repl-tools[mcp]'`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import ipaddress
import json
import secrets
import socket
import sys
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from . import tools
from ._engine import ReplEngine
from ._exceptions import MissingDependency, ReplError
from ._models import ExecutionResult, FileInfo, VariableInfo
from ._stream import FigureEvent, OutputEvent
from ._text import escape_name
from .tools import ToolReply


def _missing_sdk_message(error: ImportError) -> str:
    from importlib.metadata import PackageNotFoundError, version

    install = (
        "install genpark-repl-tools[mcp]: pip install 'genpark-repl-tools[mcp]' "
        "(from a checkout: pip install -e '.[mcp]')"
    )
    try:
        found = version("mcp")
    except PackageNotFoundError:
        return f"the MCP server needs the MCP SDK; {install}"
    if int(found.split(".")[0]) < 2:
        return f"the MCP server needs mcp>=2.3 (MCPServer), found mcp {found}; {install}"
    return f"the MCP SDK (mcp {found}) could not be imported: {error}; {install}"


try:
    import anyio.to_thread
    from mcp.server.auth.middleware.auth_context import get_access_token
    from mcp.server.auth.provider import AccessToken
    from mcp.server.auth.settings import AuthSettings
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.context import Context
    from mcp.server.mcpserver.exceptions import ResourceError, ToolError, UnexpectedToolError
    from mcp.shared.exceptions import MCPError
    from mcp_types import (
        INVALID_PARAMS,
        CallToolResult,
        ContentBlock,
        ImageContent,
        InputRequiredResult,
        TextContent,
        ToolAnnotations,
    )
    from mcp_types import (
        Resource as MCPResource,
    )
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test without the SDK
    raise MissingDependency(_missing_sdk_message(exc)) from exc

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = [
    "FILE_URI",
    "FilesOutput",
    "HttpLimits",
    "ImageInfo",
    "InspectOutput",
    "LogLevel",
    "ResetOutput",
    "RunOutput",
    "UploadOutput",
    "VariablesOutput",
    "create_server",
    "http_app",
    "is_loopback",
    "load_tokens",
    "result_to_mcp",
    "serve_http",
    "serve_stdio",
]

SERVER_NAME = "genpark-repl"

_ISSUED_KEPT = 100_000  # remembered session ids; the oldest are forgotten first
_PROGRESS_CHARS = 2000  # the tail of an output chunk a progress message carries

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]

# The client a tool call comes from: over HTTP the token's client name plus "/", prefixed to every engine
# session id, so a handle names a session of its own client only. Empty over stdio (one client).
_CLIENT: ContextVar[str] = ContextVar("genpark_repl_mcp_client", default="")

_INSTRUCTIONS = (
    "Runs Python in persistent sessions. Call run_python without session_id to start a session; "
    "pass the session_id from its result to later calls to keep using its variables."
)

# What MCP adds to the core's tool descriptions: the protocol is stateless, so sessions are handles.
_RUN_HANDLE = " Pass the session_id from a result to keep its variables; omit it to start a new session."
_RESET_HANDLE = " The session_id stays valid for run_python."
_UPLOAD_HANDLE = " Omit session_id to start a new session with this file; its session_id comes back."
_FORK_HANDLE = " Pass the session_id to copy; the copy's session_id comes back."

# A session's files as MCP resources: listed by resources/list, read through this template.
FILE_URI = "genpark-repl://sessions/{session_id}/files/{name}"
_LISTED_RESOURCES = 1000

# Shown to the model in the input schemas: the argument contract is part of the API.
_CODE = Field(description=tools.RUN_PYTHON.arguments["code"])
_NEW_OR_OLD_SESSION = Field(
    description="session_id from an earlier result, to keep its variables. Omit to start a new session."
)
_SESSION = Field(description="session_id returned by run_python.")
_NAME = Field(description=tools.INSPECT_VARIABLE.arguments["name"])
_FILE_NAME = Field(description=tools.UPLOAD_FILE.arguments["name"])
_FILE_CONTENT = Field(description=tools.UPLOAD_FILE.arguments["content"])
_FILE_BASE64 = Field(description=tools.UPLOAD_FILE.arguments["content_base64"])


# ---- structured output (the telemetry, with an output schema) -----------------------------------


class _Output(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ImageInfo(_Output):
    """An image the run produced; its bytes are the image block at `content_index`."""

    content_index: int = Field(description="Index of the image block in the result's content.")
    mime_type: str
    description: str = ""
    width: int | None = None
    height: int | None = None


class RunOutput(_Output):
    """What `run_python` did."""

    session_id: str = Field(description="Pass it back as session_id to keep using this session.")
    new_session: bool = Field(description="True when this call started the session.")
    result: ExecutionResult = Field(
        description="The run's telemetry. Attachments are sent as image content blocks, listed in `images`."
    )
    images: list[ImageInfo] = Field(default_factory=list)


class VariablesOutput(_Output):
    session_id: str
    variables: list[VariableInfo]


class InspectOutput(_Output):
    session_id: str
    variable: VariableInfo | None = Field(description="None when the name is not defined (is_error).")


class ResetOutput(_Output):
    session_id: str
    reset: bool = Field(description="True: every variable of the session is gone.")


class ForkOutput(_Output):
    session_id: str = Field(description="The copy's session: pass it to work there.")
    source_session_id: str = Field(description="The session copied; it goes on unchanged.")
    copied: list[str] = Field(description="The names copied.")
    not_copied: list[str] = Field(description="Names a snapshot cannot hold: define them again in the copy.")


class FilesOutput(_Output):
    session_id: str
    files: list[FileInfo] = Field(description="Files in the session's workspace; read one as a resource.")


class UploadOutput(_Output):
    session_id: str = Field(description="Pass it to run_python to use the file there.")
    new_session: bool = Field(description="True when this call started the session.")
    file: FileInfo


# ---- rendering: the tool layer's reply as an MCP result ------------------------------------------


def result_to_mcp(
    result: ExecutionResult, session_id: str, *, new_session: bool = False, max_chars: int | None = None
) -> CallToolResult:
    """One run as an MCP tool result (see `_to_mcp`); for callers holding an ExecutionResult."""
    return _to_mcp(tools.run_reply(result, session_id, max_chars), new_session=new_session)


def _to_mcp(reply: ToolReply, *, new_session: bool = False) -> CallToolResult:
    """The reply's text (plus the session handle line), images as image blocks, data as structured
    output. `is_error` is the tool layer's: the code failed, was refused, timed out or crashed, the
    variable does not exist, or the engine failed."""
    text = reply.text
    if reply.tool == tools.RUN_PYTHON.name and reply.failure is None:
        # The protocol is stateless: the model must pass this handle back to keep its variables.
        hint = f' (new; pass session_id="{reply.session}" to keep these variables)' if new_session else ""
        text += f"\nSession: {reply.session}{hint}"
    elif reply.tool == tools.FORK_SESSION.name and reply.failure is None:
        text += f'\nSession: {reply.session} (the copy; pass session_id="{reply.session}" to work there)'
    content: list[ContentBlock] = [TextContent(type="text", text=text)]
    if reply.failure is not None:
        return CallToolResult(content=content, is_error=True)
    images: list[ImageInfo] = []
    for attachment in reply.images:
        images.append(
            ImageInfo(
                content_index=len(content),
                mime_type=attachment.mime_type,
                description=attachment.description,
                width=attachment.width,
                height=attachment.height,
            )
        )
        content.append(
            ImageContent(type="image", data=attachment.data_base64, mime_type=attachment.mime_type)
        )
    output: _Output
    if reply.result is not None:
        # The bytes travel once, as image blocks; the telemetry describes them instead of repeating them.
        telemetry = reply.result.model_copy(update={"attachments": []})
        output = RunOutput(session_id=reply.session, new_session=new_session, result=telemetry, images=images)
    elif reply.tool == tools.LIST_VARIABLES.name:
        output = VariablesOutput(session_id=reply.session, variables=reply.data["variables"])
    elif reply.tool == tools.INSPECT_VARIABLE.name:
        output = InspectOutput(session_id=reply.session, variable=reply.data.get("variable"))
    elif reply.tool == tools.LIST_FILES.name:
        output = FilesOutput(session_id=reply.session, files=reply.data["files"])
    elif reply.tool == tools.UPLOAD_FILE.name:
        output = UploadOutput(session_id=reply.session, new_session=new_session, file=reply.data["file"])
    elif reply.tool == tools.FORK_SESSION.name:
        output = ForkOutput(
            session_id=reply.session,
            source_session_id=reply.data["source"],
            copied=reply.data["copied"],
            not_copied=reply.data["not_copied"],
        )
    else:
        output = ResetOutput(session_id=reply.session, reset=True)
    return CallToolResult(
        content=content, structured_content=output.model_dump(mode="json"), is_error=reply.is_error
    )


# ---- the tools ---------------------------------------------------------------------------------


class _ReplTools:
    """The four tools of the core's tool layer, bound to one engine, with explicit session handles.

    Security model: the engine's policy and boundary (see `ReplEngine`). Over stdio a client can reach
    every session whose id it knows. Over HTTP every engine session id starts with the calling client's
    name (`_CLIENT`), so a handle only ever names a session of the client that presents it.
    """

    def __init__(self, engine: ReplEngine, *, max_sessions_per_client: int | None = None) -> None:
        self._engine = engine
        self._max_sessions = max_sessions_per_client
        # Engine session ids this server handed out. A boundary may close a session on its own (the
        # subprocess boundary closes idle ones); its id stays usable for run_python, which starts it
        # again. Touched only on the event loop, so no lock.
        self._issued: OrderedDict[str, None] = OrderedDict()
        self._starting: set[str] = set()  # engine ids of new sessions whose first run is under way

    async def run_python(
        self,
        code: Annotated[str, _CODE],
        session_id: Annotated[str | None, _NEW_OR_OLD_SESSION] = None,
        ctx: Context | None = None,  # bare: the SDK finds the parameter by its class
    ) -> Annotated[CallToolResult, RunOutput]:
        new_session = session_id is None
        client = _CLIENT.get()
        session_id, live = await self._handle(session_id)
        engine_id = client + session_id
        async with self._starting_session(engine_id, await self._not_live(engine_id)):
            reply = await tools.arun_python(self._engine, code, engine_id, _progress(ctx))
        if reply.result is not None:
            self._issue(engine_id)
            update: dict[str, Any] = {}
            if client:
                update["session"] = session_id  # the client's handle, not the engine's scoped id
            if not live and not reply.result.session_restarted and reply.result.session_restored is None:
                # The boundary forgot the session without saying so; the model must not expect old
                # variables.
                update["session_restarted"] = True
            if update:
                result = reply.result.model_copy(update=update)
                reply = tools.run_reply(result, session_id, self._engine.limits.max_observation_chars)
        reply.session = session_id
        return _to_mcp(reply, new_session=new_session)

    async def list_variables(
        self, session_id: Annotated[str, _SESSION]
    ) -> Annotated[CallToolResult, VariablesOutput]:
        return _to_mcp(_as_handle(await tools.alist_variables(self._engine, await self._known(session_id))))

    async def inspect_variable(
        self, name: Annotated[str, _NAME], session_id: Annotated[str, _SESSION]
    ) -> Annotated[CallToolResult, InspectOutput]:
        reply = await tools.ainspect_variable(self._engine, name, await self._known(session_id))
        return _to_mcp(_as_handle(reply))

    async def reset_session(
        self, session_id: Annotated[str, _SESSION]
    ) -> Annotated[CallToolResult, ResetOutput]:
        return _to_mcp(_as_handle(await tools.areset_session(self._engine, await self._known(session_id))))

    async def fork_session(
        self, session_id: Annotated[str, _SESSION]
    ) -> Annotated[CallToolResult, ForkOutput]:
        source = await self._known(session_id)
        handle = f"s-{secrets.token_hex(6)}"
        engine_id = _CLIENT.get() + handle
        async with self._starting_session(engine_id, True):  # the copy counts against the client's limit
            reply = await tools.afork_session(self._engine, source, target=engine_id)
        if reply.failure is None:
            self._issue(engine_id)
            reply.data["source"] = session_id
        return _to_mcp(_as_handle(reply))

    async def list_files(
        self, session_id: Annotated[str, _SESSION]
    ) -> Annotated[CallToolResult, FilesOutput]:
        reply = await tools.alist_files(self._engine, await self._known(session_id))
        text = reply.text
        if not reply.is_error and reply.data["files"]:
            text += f"\nEach is a resource: {FILE_URI.replace('{session_id}', session_id)}"
        reply.text = text
        return _to_mcp(_as_handle(reply))

    async def upload_file(
        self,
        name: Annotated[str, _FILE_NAME],
        content: Annotated[str, _FILE_CONTENT],
        content_base64: Annotated[bool, _FILE_BASE64] = False,
        session_id: Annotated[str | None, _NEW_OR_OLD_SESSION] = None,
    ) -> Annotated[CallToolResult, UploadOutput]:
        new_session = session_id is None
        session_id, _ = await self._handle(session_id)
        engine_id = _CLIENT.get() + session_id
        starting = await self._not_live(engine_id)
        data: bytes | str = content
        if content_base64:
            import base64
            import binascii

            try:
                data = base64.b64decode(content, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise ToolError(
                    f"content is not valid base64 ({exc}); send text with content_base64=false"
                ) from exc
        async with self._starting_session(engine_id, starting):
            reply = await tools.aupload_file(self._engine, name, data, engine_id)
        if not reply.is_error:
            self._issue(engine_id)
        reply.session = session_id
        return _to_mcp(reply, new_session=new_session and not reply.is_error)

    async def read_file(self, session_id: str, name: str) -> str | bytes:
        """A file of the session as a resource: text when it is UTF-8, else bytes."""
        engine_id = _client() + session_id
        if engine_id not in self._issued and engine_id not in await anyio.to_thread.run_sync(
            self._engine.sessions
        ):
            raise ResourceError(f"unknown session_id {session_id!r:.80}")
        try:
            content = await anyio.to_thread.run_sync(self._engine.download, engine_id, name)
        except ReplError as exc:
            raise ResourceError(f"{type(exc).__name__}: {exc}") from exc
        try:
            return content.decode("utf-8")
        except UnicodeDecodeError:
            return content

    async def file_resources(self) -> list[MCPResource]:
        """The files of the sessions this client holds, as resources (bounded)."""
        client = _client()
        live = set(await anyio.to_thread.run_sync(self._engine.sessions))
        found: list[MCPResource] = []
        for engine_id in list(self._issued)[::-1]:
            if not engine_id.startswith(client) or engine_id not in live:
                continue
            handle = engine_id.removeprefix(client)
            infos = await anyio.to_thread.run_sync(self._engine.files, engine_id)
            for info in infos:
                found.append(
                    MCPResource(
                        uri=FILE_URI.format(session_id=handle, name=quote(info.name, safe="")),
                        name=escape_name(info.name),
                        description=f"File of session {handle} ({info.size:,} bytes)",
                        mime_type=info.type,
                        size=info.size,
                    )
                )
                if len(found) >= _LISTED_RESOURCES:
                    return found
        return found

    def _issue(self, engine_id: str) -> None:
        self._issued[engine_id] = None
        self._issued.move_to_end(engine_id)
        while len(self._issued) > _ISSUED_KEPT:
            self._issued.popitem(last=False)

    async def _handle(self, session_id: str | None) -> tuple[str, bool]:
        """The handle a call that may start a session runs in (a new one for None), and whether that
        session is live (False: it was closed and the call starts it again)."""
        if session_id is None:
            return f"s-{secrets.token_hex(6)}", True
        return session_id, await self._require_session(session_id, running=True)

    async def _known(self, session_id: str) -> str:
        """The engine's id of an existing session the client names (a ToolError if there is none)."""
        await self._require_session(session_id)
        return _CLIENT.get() + session_id

    async def _not_live(self, engine_id: str) -> bool:
        """Whether a call on `engine_id` starts it: a new session, or one woken from the store or
        started again after it was closed."""
        return engine_id not in await anyio.to_thread.run_sync(self._engine.sessions)

    @contextlib.asynccontextmanager
    async def _starting_session(self, engine_id: str, new: bool) -> AsyncIterator[None]:
        """Around the call that may start session `engine_id`: a `new` one (not live) is counted
        against its client's limit before the first await, so concurrent calls cannot all pass it."""
        if not new:
            yield
            return
        self._starting.add(engine_id)
        try:
            await self._check_session_room(_CLIENT.get(), engine_id)
            yield
        finally:
            self._starting.discard(engine_id)

    async def _check_session_room(self, client: str, new: str) -> None:
        """Refuse the new session `new` (in `_starting`) beyond the client's limit."""
        if self._max_sessions is None:
            return
        live = await anyio.to_thread.run_sync(self._engine.sessions)
        # Hibernated sessions count as much as live ones: each handle can wake its own, so a client
        # could otherwise open new sessions while its old ones sleep, then wake them all.
        resumable: list[str] = []
        store = self._engine.store
        if store is not None:
            entries = await anyio.to_thread.run_sync(store.list)
            resumable = [entry.session for entry in entries]
        held = {sid for sid in (*live, *resumable, *self._starting) if sid.startswith(client)}
        others = len(held - {new})
        if others >= self._max_sessions:
            raise ToolError(
                f"this client already has {self._max_sessions} sessions, the server's limit per client: "
                "pass the session_id of one of them to keep working there (reset_session empties it), or "
                "wait until an idle one is closed. Sessions saved in the store count too."
            )

    async def _require_session(self, session_id: str, *, running: bool = False) -> bool:
        """True if the session is live; False if it was closed but `running` may start it again."""
        engine_id = _CLIENT.get() + session_id
        if engine_id in await anyio.to_thread.run_sync(self._engine.sessions):
            return True
        store = self._engine.store
        if store is not None and await anyio.to_thread.run_sync(store.info, engine_id) is not None:
            return True  # saved by this server before a restart, or by another one: it comes back
        if engine_id in self._issued:
            if running:
                return False
            raise ToolError(
                f"session {session_id!r} was closed (idle too long, or by the host) and its variables are "
                "gone. run_python with this session_id starts it again, empty."
            )
        raise ToolError(
            f"unknown session_id {session_id!r:.80}: no such session on this server (it may have "
            "restarted). Call run_python without session_id to start a new session."
        )


def _client() -> str:
    """The calling client's prefix outside a tool call (resources): the token's client over HTTP."""
    client = _CLIENT.get()
    if client:
        return client
    access = get_access_token()
    return "" if access is None else f"{access.client_id}/"


def _progress(ctx: Context[Any, Any] | None) -> tools.OnEvent | None:
    """Output while the code runs, as progress notifications (sent only if the client asked for
    progress with a progressToken): progress counts the chunks, the message is the chunk's text."""
    if ctx is None:
        return None
    sent = 0

    async def report(event: OutputEvent | FigureEvent) -> None:
        nonlocal sent
        if isinstance(event, OutputEvent):
            sent += 1
            await ctx.report_progress(sent, None, tools.event_text(event, _PROGRESS_CHARS))

    return report


def _as_handle(reply: ToolReply) -> ToolReply:
    """The reply with the client's handle in place of the engine's session id (they differ over HTTP)."""
    client = _CLIENT.get()
    if client:
        reply.session = reply.session.removeprefix(client)
    return reply


class _ReplServer(MCPServer[Any]):
    """MCPServer with argument errors a model can act on. Security model: that of its tools (`_ReplTools`).

    An unknown tool is a protocol error (JSON-RPC -32602, per the MCP spec); wrong, missing or unknown
    arguments come back as a tool error (`is_error`) saying which argument and what is expected, so the
    model can correct the call. The SDK's own messages carry pydantic's internals and ignore unknown keys.
    """

    files: _ReplTools | None = None  # set by _add_tools: resources/list lists its sessions' files

    async def list_resources(self) -> list[MCPResource]:
        listed = await super().list_resources()
        if self.files is not None:
            listed.extend(await self.files.file_resources())
        return listed

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        tools = {tool.name: tool for tool in await self.list_tools()}
        tool = tools.get(name)
        if tool is None:
            known = ", ".join(sorted(tools))
            raise MCPError(code=INVALID_PARAMS, message=f"Unknown tool {name!r:.80}. Tools: {known}.")
        accepted = tool.input_schema.get("properties", {})
        unknown = sorted(set(arguments) - set(accepted))
        if unknown:
            raise ToolError(
                f"{name}: unknown argument(s) {', '.join(f'{key!r:.60}' for key in unknown[:10])}; "
                f"it takes {_describe_arguments(tool.input_schema)}."
            )
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise  # a crash: the SDK logs it and tells the client only "Error executing tool <name>"
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError):
                raise ToolError(_validation_message(name, cause, tool.input_schema)) from cause
            # One prefix for every refusal, whoever raised it: "<tool>: <what to do>".
            message = str(exc).removeprefix(f"Error executing tool {name}: ")
            raise ToolError(f"{name}: {message}") from cause


def _describe_arguments(schema: dict[str, Any]) -> str:
    required = set(schema.get("required", ()))
    parts = []
    for arg, spec in schema.get("properties", {}).items():
        kinds = [s.get("type") for s in spec.get("anyOf", [spec]) if s.get("type") not in (None, "null")]
        text = f"{arg} ({' or '.join(kinds) or 'any'}"
        parts.append(text + (")" if arg in required else ", optional)"))
    return ", ".join(parts) or "no arguments"


def _validation_message(tool: str, error: ValidationError, schema: dict[str, Any]) -> str:
    problems = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "arguments"
        problems.append(f"{where}: {item['msg']}")
    return f"{tool}: invalid arguments ({'; '.join(problems)}); it takes {_describe_arguments(schema)}."


def create_server(
    engine: ReplEngine, *, name: str = SERVER_NAME, log_level: LogLevel = "WARNING", fork: bool = False
) -> MCPServer[Any]:
    """An MCP server whose tools run code in `engine`'s sessions. The caller owns (and closes) the engine.
    `fork` adds the fork_session tool (off by default)."""
    from . import __version__

    server = _ReplServer(
        name=name,
        version=__version__,
        instructions=_INSTRUCTIONS,
        log_level=log_level,
    )
    _add_tools(server, engine, _ReplTools(engine), fork=fork)
    return server


def _add_tools(
    server: MCPServer[Any], engine: ReplEngine, handlers: _ReplTools, *, fork: bool = False
) -> None:
    if isinstance(server, _ReplServer):
        server.files = handlers
    server.resource(
        FILE_URI,
        name="session_file",
        title="A file of a session",
        description="A file in a session's working directory (list_files names them).",
    )(handlers.read_file)
    offered: list[tuple[tools.ToolSpec, Callable[..., Any], str]] = [
        (tools.RUN_PYTHON, handlers.run_python, _RUN_HANDLE),
        (tools.LIST_VARIABLES, handlers.list_variables, ""),
        (tools.INSPECT_VARIABLE, handlers.inspect_variable, ""),
        (tools.RESET_SESSION, handlers.reset_session, _RESET_HANDLE),
        (tools.LIST_FILES, handlers.list_files, ""),
        (tools.UPLOAD_FILE, handlers.upload_file, _UPLOAD_HANDLE),
    ]
    if fork:
        offered.append((tools.FORK_SESSION, handlers.fork_session, _FORK_HANDLE))
    for spec, handler, extra in offered:
        server.add_tool(
            handler,
            name=spec.name,
            title=spec.title,
            description=spec.describe(engine) + extra,
            annotations=ToolAnnotations(
                title=spec.title,
                read_only_hint=spec.read_only,
                destructive_hint=spec is tools.RESET_SESSION,
                idempotent_hint=spec not in (tools.RUN_PYTHON, tools.UPLOAD_FILE, tools.FORK_SESSION),
            ),
        )


def serve_stdio(engine: ReplEngine, *, log_level: LogLevel = "WARNING", fork: bool = False) -> None:
    """Serve `engine` over stdin/stdout until the client disconnects.

    Only the protocol writes to the original stdout. For the server's lifetime file descriptor 1
    points at stderr, so what code writes below `sys.stdout` (`os.write(1, ...)`, C `printf`, child
    processes; in-process, nothing captures those) lands in the client's log, never in the JSON-RPC
    channel, whatever `sys.stdout` is.
    """
    from ._capture import reserved_stdout

    server = create_server(engine, log_level=log_level, fork=fork)
    # The SDK's stdio transport takes explicit streams only at its lower level.
    lowlevel = getattr(server, "_lowlevel_server", None)
    if lowlevel is None:  # pragma: no cover - another SDK layout: its transport diverts fd 1 too (2.3+)
        server.run("stdio")
        return
    with reserved_stdout() as wire:
        anyio.run(_serve_stdio, lowlevel, wire)


async def _serve_stdio(lowlevel: Any, wire: Any) -> None:
    import io

    from mcp.server.stdio import stdio_server

    stdout = anyio.wrap_file(io.TextIOWrapper(wire, encoding="utf-8"))
    async with stdio_server(stdout=stdout) as (read_stream, write_stream):
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


# ---- streamable HTTP ---------------------------------------------------------------------------

DEFAULT_PATH = "/mcp"
_MIN_TOKEN_CHARS = 16
_CLIENT_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-@")


class HttpLimits(BaseModel):
    """What one client of the HTTP server may hold at once (a client is a bearer token's name; without
    tokens, every caller together). `None` lifts a limit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    calls_per_client: int | None = Field(default=4, gt=0, description="Tool calls running at once.")
    sessions_per_client: int | None = Field(default=16, gt=0, description="Live sessions (handles).")
    max_body_bytes: int = Field(default=4 * 1024 * 1024, gt=0, description="Largest HTTP request body.")
    # Connections are capped and timed before any token is read: those limits are per peer address
    # and for the whole server, not per client.
    max_connections: int | None = Field(
        default=256,
        gt=0,
        description="Open connections, all peers together (serve_http: at most half the open-file limit).",
    )
    connections_per_peer: int | None = Field(
        default=32, gt=0, description="Open connections from one address."
    )
    header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="Seconds a request's headers may take to arrive; slower ones are closed.",
    )


def is_loopback(host: str) -> bool:
    """Whether binding `host` serves this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def load_tokens(text: str, *, source: str = "tokens") -> dict[str, str]:
    """Parse bearer tokens: one a line, `TOKEN` or `NAME TOKEN`; blank lines and `#` comments skipped.

    Returns {token: client name}. A name groups tokens into one client (so a token can be rotated
    without losing its sessions); a token without one is its own client, named after its hash.
    """
    found: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        if len(fields) > 2:
            raise ValueError(
                f"{source}, line {number}: expected TOKEN or NAME TOKEN, found {len(fields)} fields"
            )
        token = fields[-1]
        if len(token) < _MIN_TOKEN_CHARS or not token.isascii() or not token.isprintable():
            raise ValueError(
                f"{source}, line {number}: a token needs at least {_MIN_TOKEN_CHARS} printable ASCII "
                "characters (make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))')"
            )
        if len(fields) == 2:
            name = fields[0]
            if len(name) > 64 or not set(name) <= _CLIENT_NAME_CHARS:
                raise ValueError(f"{source}, line {number}: a client name is 1-64 of A-Z a-z 0-9 _ . - @")
        else:
            name = "token-" + hashlib.sha256(token.encode()).hexdigest()[:12]
        if found.setdefault(token, name) != name:
            raise ValueError(f"{source}, line {number}: this token is already listed for {found[token]!r}")
    if not found:
        raise ValueError(f"{source}: no token found")
    return found


class _StaticTokens:
    """The SDK's TokenVerifier for a fixed set of bearer tokens, each naming a client.

    Security model: a token is a shared secret; it is compared by its SHA-256 digest in constant time,
    so neither its length nor a prefix leaks through timing. Use TLS (a reverse proxy) off loopback.
    """

    def __init__(self, tokens: Mapping[str, str]) -> None:
        self._digests = [(hashlib.sha256(t.encode()).digest(), name) for t, name in tokens.items()]

    async def verify_token(self, token: str) -> AccessToken | None:
        digest = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        client = None
        for known, name in self._digests:  # no early exit: every token costs the same
            if hmac.compare_digest(known, digest):
                client = name
        return None if client is None else AccessToken(token=token, client_id=client, scopes=[])


# The MCP authorization spec's protected-resource metadata must name an OAuth authorization server;
# with fixed tokens there is none, so none is served (a client looking for it gets a 404) and the 401
# says instead how to pass a token (RFC 6750's challenge; the SDK's says only "Authentication required").
_TOKEN_HINT = (
    "send the header 'Authorization: Bearer TOKEN' with a token from this server's operator "
    "(fixed tokens: no OAuth sign-in)"
)
_CHALLENGE = f'Bearer realm="genpark-repl", error="invalid_token", error_description="{_TOKEN_HINT}"'


class _SayHowToSendAToken:
    """ASGI middleware: every 401 carries `_CHALLENGE` and `_TOKEN_HINT` in place of the SDK's words."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        replaced = False

        async def reply(message: Any) -> None:
            nonlocal replaced
            if message["type"] == "http.response.start" and message["status"] == 401:
                replaced = True
                body = json.dumps({"error": "invalid_token", "error_description": _TOKEN_HINT}).encode()
                headers = [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", _CHALLENGE.encode()),
                ]
                await send({"type": "http.response.start", "status": 401, "headers": headers})
                await send({"type": "http.response.body", "body": body})
            elif not (replaced and message["type"] == "http.response.body"):  # the SDK's body goes
                await send(message)

        await self.app(scope, receive, reply)


class _HttpReplServer(_ReplServer):
    """`_ReplServer` for many clients: each call runs as its token's client (`_CLIENT`), and a client
    with `calls_per_client` calls running is refused another. Security model: `_ReplTools` over HTTP."""

    def __init__(self, *, calls_per_client: int | None, **options: Any) -> None:
        super().__init__(**options)
        self._calls_per_client = calls_per_client
        self._running: dict[str, int] = {}  # touched only on the event loop

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        access = get_access_token()
        client = "" if access is None else f"{access.client_id}/"
        running = self._running.get(client, 0)
        if self._calls_per_client is not None and running >= self._calls_per_client:
            raise ToolError(
                f"{name}: this client already has {running} calls running, the server's limit per client; "
                "wait for one to finish, then call again."
            )
        self._running[client] = running + 1
        scope = _CLIENT.set(client)
        try:
            return await super().call_tool(name, arguments, context)
        finally:
            _CLIENT.reset(scope)
            self._running[client] -= 1
            if not self._running[client]:
                del self._running[client]


def http_app(
    engine: ReplEngine,
    *,
    tokens: Mapping[str, str] | None = None,
    limits: HttpLimits | None = None,
    host: str = "127.0.0.1",
    path: str = DEFAULT_PATH,
    allowed_hosts: tuple[str, ...] = (),
    name: str = SERVER_NAME,
    log_level: LogLevel = "WARNING",
    fork: bool = False,
) -> Starlette:
    """The MCP server as an ASGI app speaking streamable HTTP at `path`; run it with any ASGI server.

    `tokens` ({token: client name}, see `load_tokens`): every request needs `Authorization: Bearer
    TOKEN`, else HTTP 401 whose `WWW-Authenticate: Bearer` challenge says how to send one (no OAuth:
    no protected-resource metadata is served); each client sees only its own sessions.
    Without tokens, anyone who can connect is one shared client: only for loopback. `host` is what
    the app is bound to: on loopback, requests must name a loopback host (DNS-rebinding protection)
    or one of `allowed_hosts` ("name:port", "name:*"). The caller owns (and closes) the engine.
    """
    from . import __version__

    limits = limits or HttpLimits()
    auth: dict[str, Any] = {}
    if tokens:
        auth["token_verifier"] = _StaticTokens(tokens)
        # Static tokens, no OAuth: the SDK wants an issuer URL, used only with an authorization server
        # or `resource_server_url`, neither of which is set.
        auth["auth"] = AuthSettings(issuer_url="https://localhost", resource_server_url=None)
    server = _HttpReplServer(
        calls_per_client=limits.calls_per_client,
        name=name,
        version=__version__,
        instructions=_INSTRUCTIONS,
        log_level=log_level,
        **auth,
    )
    handlers = _ReplTools(engine, max_sessions_per_client=limits.sessions_per_client)
    _add_tools(server, engine, handlers, fork=fork)
    security = None
    if is_loopback(host) or allowed_hosts:
        from mcp.server.transport_security import TransportSecuritySettings

        loopback = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
        security = TransportSecuritySettings(
            allowed_hosts=[*loopback, *allowed_hosts],
            allowed_origins=[f"http://{h}" for h in loopback] + [f"https://{h}" for h in allowed_hosts],
        )
    app = server.streamable_http_app(
        streamable_http_path=path,
        max_request_body_size=limits.max_body_bytes,
        transport_security=security,
        host=host,
    )
    if tokens:
        app.add_middleware(_SayHowToSendAToken)
    return app


def serve_http(
    engine: ReplEngine,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    tokens: Mapping[str, str] | None = None,
    limits: HttpLimits | None = None,
    path: str = DEFAULT_PATH,
    allowed_hosts: tuple[str, ...] = (),
    log_level: LogLevel = "WARNING",
    fork: bool = False,
) -> None:
    """Serve `engine` over streamable HTTP until interrupted; port 0 picks a free port. The address is
    written to stderr once the server listens. Refuses to serve a non-loopback `host` without tokens."""
    if not tokens and not is_loopback(host):
        raise ValueError(f"serving on {host!r} (not loopback) needs bearer tokens")
    try:
        import uvicorn
    except ImportError as exc:  # pragma: no cover - uvicorn comes with the mcp extra
        raise MissingDependency(f"serving over HTTP needs uvicorn: {exc}") from exc
    app = http_app(
        engine,
        tokens=tokens,
        limits=limits,
        host=host,
        path=path,
        allowed_hosts=allowed_hosts,
        log_level=log_level,
        fork=fork,
    )
    with _listening(host, port) as sock:
        bound = sock.getsockname()[1]
        shown = f"[{host.strip('[]')}]" if ":" in host else host
        print(f"genpark-repl: MCP over HTTP at http://{shown}:{bound}{path}", file=sys.stderr, flush=True)
        config = uvicorn.Config(
            app,
            log_level=log_level.lower(),
            timeout_graceful_shutdown=5,
            server_header=False,
            http=_guarded_h11(limits or HttpLimits()),
        )
        anyio.run(_serve, uvicorn.Server(config), sock)


async def _serve(server: Any, sock: socket.socket) -> None:
    # At the open-file limit asyncio stops accepting for a second and reports the error through the
    # loop's exception handler; the default one logs through whatever handler the app installed (the
    # SDK's imports a module to format it, which fails for want of a descriptor, and that escaped the
    # loop: the server exited with every client's sessions). This one never raises.
    asyncio.get_running_loop().set_exception_handler(_report_loop_error)
    await server.serve([sock])


_loop_errors = {"last": 0.0}
_LOOP_ERROR_EVERY_S = 10.0  # a flood at the open-file limit fails every accept: one line per period


def _report_loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    now = loop.time()
    if now - _loop_errors["last"] < _LOOP_ERROR_EVERY_S:
        return
    _loop_errors["last"] = now
    with contextlib.suppress(Exception):
        exc = context.get("exception")
        detail = f": {exc}" if exc is not None else ""
        print(
            f"genpark-repl: {context.get('message', 'event loop error')}{detail}", file=sys.stderr, flush=True
        )


def _from(connections: Any, address: str) -> int:
    """How many of uvicorn's open connections come from `address`."""
    return sum(1 for c in connections if (getattr(c, "client", None) or ("",))[0] == address)


def _open_file_limit() -> int | None:
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return None
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else int(soft)


def _guarded_h11(limits: HttpLimits) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with the connection limits of `limits`.

    Security model: everything here happens before a token is read, so it holds against anyone who
    can connect. A connection past `max_connections` (capped at half the open-file limit, so the
    engine keeps descriptors for its sessions) or past `connections_per_peer` from its address is
    closed at once; a request whose headers have not all arrived `header_timeout_s` after the
    connection opened (or after the previous response) is closed, so a client that sends a request
    slowly cannot hold a connection. Idle keep-alive connections are closed by uvicorn.
    """
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    overall = limits.max_connections
    files = _open_file_limit()
    if files is not None:
        overall = min(overall or files, max(1, files // 2))
    per_peer = limits.connections_per_peer
    timeout = limits.header_timeout_s

    class GuardedH11(H11Protocol):
        refused = False
        _headers_due: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            peer = transport.get_extra_info("peername")
            address = peer[0] if isinstance(peer, tuple) else None
            open_ = self.connections
            if (overall is not None and len(open_) >= overall) or (
                per_peer is not None and address is not None and _from(open_, address) >= per_peer
            ):
                self.refused = True
                transport.abort()
                return
            super().connection_made(transport)
            self._headers_due = self.loop.call_later(timeout, self._too_slow)

        def connection_lost(self, exc: Exception | None) -> None:
            if self.refused:
                return
            if self._headers_due is not None:
                self._headers_due.cancel()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self.refused:
                return
            super().data_received(data)
            if self._headers_due is not None and self.conn.their_state is not h11.IDLE:
                self._headers_due.cancel()  # the request's headers are all in
                self._headers_due = None

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self._headers_due is None:
                self._headers_due = self.loop.call_later(timeout, self._too_slow)

        def _too_slow(self) -> None:
            self._headers_due = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return GuardedH11


@contextlib.contextmanager
def _listening(host: str, port: int) -> Iterator[socket.socket]:
    """A listening socket (bound before uvicorn starts, so port 0 can be reported)."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
        yield sock
    finally:
        sock.close()
