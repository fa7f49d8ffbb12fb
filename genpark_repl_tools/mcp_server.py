"""The engine as an MCP server: run Python, list and inspect variables, reset a session.

    genpark-repl mcp --policy trusted --timeout 10        # stdio, for any MCP client

    from genpark_repl_tools import ReplEngine
    from genpark_repl_tools.mcp_server import create_server
    create_server(ReplEngine()).run("stdio")

The protocol is stateless (mcp >= 2), so a conversation's state needs an explicit handle: every tool takes
an optional `session_id` and every result returns it. `run_python` without one starts a new session.
Needs the `mcp` extra: `pip install 'genpark-repl-tools[mcp]'`.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from . import tools
from ._engine import ReplEngine
from ._exceptions import MissingDependency
from ._models import ExecutionResult, VariableInfo
from .tools import ToolReply


def _missing_sdk_message(error: ImportError) -> str:
    from importlib.metadata import PackageNotFoundError, version

    install = "install genpark-repl-tools[mcp]: pip install 'genpark-repl-tools[mcp]'"
    try:
        found = version("mcp")
    except PackageNotFoundError:
        return f"the MCP server needs the MCP SDK; {install}"
    if int(found.split(".")[0]) < 2:
        return f"the MCP server needs mcp>=2.3 (MCPServer), found mcp {found}; {install}"
    return f"the MCP SDK (mcp {found}) could not be imported: {error}; {install}"


try:
    import anyio.to_thread
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.context import Context
    from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
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
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test without the SDK
    raise MissingDependency(_missing_sdk_message(exc)) from exc

__all__ = [
    "ImageInfo",
    "InspectOutput",
    "LogLevel",
    "ResetOutput",
    "RunOutput",
    "VariablesOutput",
    "create_server",
    "result_to_mcp",
    "serve_stdio",
]

SERVER_NAME = "genpark-repl"

_ISSUED_KEPT = 100_000  # remembered session ids; the oldest are forgotten first

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]

_INSTRUCTIONS = (
    "Runs Python in persistent sessions. Call run_python without session_id to start a session; "
    "pass the session_id from its result to later calls to keep using its variables."
)

# What MCP adds to the core's tool descriptions: the protocol is stateless, so sessions are handles.
_RUN_HANDLE = " Pass the session_id from a result to keep its variables; omit it to start a new session."
_RESET_HANDLE = " The session_id stays valid for run_python."

# Shown to the model in the input schemas: the argument contract is part of the API.
_CODE = Field(description=tools.RUN_PYTHON.arguments["code"])
_NEW_OR_OLD_SESSION = Field(
    description="session_id from an earlier result, to keep its variables. Omit to start a new session."
)
_SESSION = Field(description="session_id returned by run_python.")
_NAME = Field(description=tools.INSPECT_VARIABLE.arguments["name"])


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
    else:
        output = ResetOutput(session_id=reply.session, reset=True)
    return CallToolResult(
        content=content, structured_content=output.model_dump(mode="json"), is_error=reply.is_error
    )


# ---- the tools ---------------------------------------------------------------------------------


class _ReplTools:
    """The four tools of the core's tool layer, bound to one engine, with explicit session handles.

    Security model: the engine's policy and boundary (see `ReplEngine`); this layer adds no isolation,
    and a client can reach every session whose id it knows.
    """

    def __init__(self, engine: ReplEngine) -> None:
        self._engine = engine
        # Ids this server handed out. A boundary may close a session on its own (the subprocess
        # boundary closes idle ones); its id stays usable for run_python, which starts it again.
        # Touched only on the event loop, so no lock.
        self._issued: OrderedDict[str, None] = OrderedDict()

    async def run_python(
        self,
        code: Annotated[str, _CODE],
        session_id: Annotated[str | None, _NEW_OR_OLD_SESSION] = None,
    ) -> Annotated[CallToolResult, RunOutput]:
        new_session = session_id is None
        if session_id is None:
            session_id = f"s-{secrets.token_hex(6)}"
            live = True
        else:
            live = await self._require_session(session_id, running=True)
        reply = await tools.arun_python(self._engine, code, session_id)
        if reply.result is not None:
            self._issue(session_id)
            if not live and not reply.result.session_restarted:
                # The boundary forgot the session without saying so; the model must not expect old
                # variables.
                restarted = reply.result.model_copy(update={"session_restarted": True})
                reply = tools.run_reply(restarted, session_id, self._engine.limits.max_observation_chars)
        return _to_mcp(reply, new_session=new_session)

    async def list_variables(
        self, session_id: Annotated[str, _SESSION]
    ) -> Annotated[CallToolResult, VariablesOutput]:
        await self._require_session(session_id)
        return _to_mcp(await tools.alist_variables(self._engine, session_id))

    async def inspect_variable(
        self, name: Annotated[str, _NAME], session_id: Annotated[str, _SESSION]
    ) -> Annotated[CallToolResult, InspectOutput]:
        await self._require_session(session_id)
        return _to_mcp(await tools.ainspect_variable(self._engine, name, session_id))

    async def reset_session(
        self, session_id: Annotated[str, _SESSION]
    ) -> Annotated[CallToolResult, ResetOutput]:
        await self._require_session(session_id)
        return _to_mcp(await tools.areset_session(self._engine, session_id))

    def _issue(self, session_id: str) -> None:
        self._issued[session_id] = None
        self._issued.move_to_end(session_id)
        while len(self._issued) > _ISSUED_KEPT:
            self._issued.popitem(last=False)

    async def _require_session(self, session_id: str, *, running: bool = False) -> bool:
        """True if the session is live; False if it was closed but `running` may start it again."""
        if session_id in await anyio.to_thread.run_sync(self._engine.sessions):
            return True
        if session_id in self._issued:
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


class _ReplServer(MCPServer[Any]):
    """MCPServer with argument errors a model can act on. Security model: that of its tools (`_ReplTools`).

    An unknown tool is a protocol error (JSON-RPC -32602, per the MCP spec); wrong, missing or unknown
    arguments come back as a tool error (`is_error`) saying which argument and what is expected, so the
    model can correct the call. The SDK's own messages carry pydantic's internals and ignore unknown keys.
    """

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
    engine: ReplEngine, *, name: str = SERVER_NAME, log_level: LogLevel = "WARNING"
) -> MCPServer[Any]:
    """An MCP server whose tools run code in `engine`'s sessions. The caller owns (and closes) the engine."""
    from . import __version__

    handlers = _ReplTools(engine)
    server = _ReplServer(
        name=name,
        version=__version__,
        instructions=_INSTRUCTIONS,
        log_level=log_level,
    )
    for spec, handler, extra in (
        (tools.RUN_PYTHON, handlers.run_python, _RUN_HANDLE),
        (tools.LIST_VARIABLES, handlers.list_variables, ""),
        (tools.INSPECT_VARIABLE, handlers.inspect_variable, ""),
        (tools.RESET_SESSION, handlers.reset_session, _RESET_HANDLE),
    ):
        server.add_tool(
            handler,
            name=spec.name,
            title=spec.title,
            description=spec.describe(engine) + extra,
            annotations=ToolAnnotations(
                title=spec.title,
                read_only_hint=spec.read_only,
                destructive_hint=spec is tools.RESET_SESSION,
                idempotent_hint=spec is not tools.RUN_PYTHON,
            ),
        )
    return server


def serve_stdio(engine: ReplEngine, *, log_level: LogLevel = "WARNING") -> None:
    """Serve `engine` over stdin/stdout until the client disconnects.

    Only the protocol writes to the original stdout. For the server's lifetime file descriptor 1
    points at stderr, so what code writes below `sys.stdout` (`os.write(1, ...)`, C `printf`, child
    processes; in-process, nothing captures those) lands in the client's log, never in the JSON-RPC
    channel, whatever `sys.stdout` is.
    """
    from ._capture import reserved_stdout

    server = create_server(engine, log_level=log_level)
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
