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

from ._engine import ReplEngine
from ._exceptions import MissingDependency, ReplError
from ._models import ExecutionResult, VariableInfo
from ._observation import variable_label


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

# Shown to the model in the input schemas: the argument contract is part of the API.
_CODE = Field(description="Python code. A trailing expression's value is shown, as in a REPL.")
_NEW_OR_OLD_SESSION = Field(
    description="session_id from an earlier result, to keep its variables. Omit to start a new session."
)
_SESSION = Field(description="session_id returned by run_python.")
_NAME = Field(description="Variable name, e.g. 'df'.")


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
    variable: VariableInfo


class ResetOutput(_Output):
    session_id: str
    reset: bool = Field(description="True: every variable of the session is gone.")


# ---- rendering ---------------------------------------------------------------------------------


def result_to_mcp(
    result: ExecutionResult, session_id: str, *, new_session: bool = False, max_chars: int | None = None
) -> CallToolResult:
    """One run as an MCP tool result: the observation as text, images as image blocks, telemetry as data.

    Code that failed is still a successful tool call (`is_error` False): its error is in the observation
    and in `result.status`. `is_error` is kept for calls the server could not serve (bad arguments).
    """
    text = result.to_observation(max_chars=max_chars)
    if new_session:
        text += f'\nSession: {session_id} (new; pass session_id="{session_id}" to keep these variables)'
    else:
        text += f"\nSession: {session_id}"
    content: list[ContentBlock] = [TextContent(type="text", text=text)]
    images: list[ImageInfo] = []
    for attachment in result.attachments:
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
    # The bytes travel once, as image blocks; the telemetry describes them instead of repeating them.
    telemetry = result.model_copy(update={"attachments": []})
    output = RunOutput(session_id=session_id, new_session=new_session, result=telemetry, images=images)
    return CallToolResult(content=content, structured_content=output.model_dump(mode="json"))


def _variable_line(info: VariableInfo) -> str:
    return f"{info.name} ({variable_label(info)}) = {info.repr}"


def _inspect_text(info: VariableInfo) -> str:
    lines = [_variable_line(info)]
    if info.summary:
        lines.append(info.summary)
    if info.repr_truncated:
        lines.append("(repr truncated; inspect parts of it with run_python)")
    return "\n".join(lines)


def _text(text: str) -> list[ContentBlock]:
    return [TextContent(type="text", text=text)]


# ---- the tools ---------------------------------------------------------------------------------


class _ReplTools:
    """The four tools, bound to one engine. Security model: the engine's policy and boundary (see
    `ReplEngine`); this layer adds no isolation, and a client can reach every session whose id it knows.

    Engine calls may block, so each runs on a worker thread and the event loop keeps serving.
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
        limit = self._engine.limits.max_code_chars
        if len(code) > limit:
            raise ToolError(
                f"code has {len(code):,} characters; the limit is {limit:,}. "
                "Send smaller pieces; keep data in variables or files, not in the code."
            )
        new_session = session_id is None
        if session_id is None:
            session_id = f"s-{secrets.token_hex(6)}"
            live = True
        else:
            live = await self._require_session(session_id, running=True)
        try:
            result = await self._engine.arun(code, session_id)
        except ReplError as exc:  # capacity, a failed boundary, a closed engine: tell the caller why
            raise ToolError(str(exc)) from exc
        self._issue(session_id)
        if not live and not result.session_restarted:
            # The boundary forgot the session without saying so; the model must not expect old variables.
            result = result.model_copy(update={"session_restarted": True})
        return result_to_mcp(
            result, session_id, new_session=new_session, max_chars=self._engine.limits.max_observation_chars
        )

    async def list_variables(
        self, session_id: Annotated[str, _SESSION]
    ) -> Annotated[CallToolResult, VariablesOutput]:
        await self._require_session(session_id)
        variables = await self._call(self._engine.variables, session_id)
        text = "\n".join(_variable_line(v) for v in variables) if variables else "No variables."
        output = VariablesOutput(session_id=session_id, variables=variables)
        return CallToolResult(content=_text(text), structured_content=output.model_dump(mode="json"))

    async def inspect_variable(
        self, name: Annotated[str, _NAME], session_id: Annotated[str, _SESSION]
    ) -> Annotated[CallToolResult, InspectOutput]:
        await self._require_session(session_id)
        info = await self._call(self._engine.inspect, name, session_id)
        output = InspectOutput(session_id=session_id, variable=info)
        return CallToolResult(
            content=_text(_inspect_text(info)), structured_content=output.model_dump(mode="json")
        )

    async def reset_session(
        self, session_id: Annotated[str, _SESSION]
    ) -> Annotated[CallToolResult, ResetOutput]:
        await self._require_session(session_id)
        await self._call(self._engine.reset, session_id)
        output = ResetOutput(session_id=session_id, reset=True)
        text = f"Session {session_id} reset: every variable is gone; the session_id stays valid."
        return CallToolResult(content=_text(text), structured_content=output.model_dump(mode="json"))

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

    async def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return await anyio.to_thread.run_sync(fn, *args)
        except ReplError as exc:  # SessionNotFound, VariableNotFound, ...: the message says what to do
            raise ToolError(str(exc)) from exc


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

    tools = _ReplTools(engine)
    server = _ReplServer(
        name=name,
        version=__version__,
        instructions=_INSTRUCTIONS,
        log_level=log_level,
    )
    policy, boundary, timeout = engine.policy.name, engine.boundary.name, engine.limits.timeout_s
    server.add_tool(
        tools.run_python,
        name="run_python",
        title="Run Python",
        description=(
            "Run Python code in a persistent session and get its output, the value of a trailing "
            "expression, errors with line numbers, and figures as images. Variables, functions and imports "
            "persist between calls with the same session_id; omit session_id to start a new session. "
            f"Policy '{policy}', {boundary} boundary, {timeout:g} s per call."
        ),
        annotations=ToolAnnotations(
            title="Run Python", read_only_hint=False, destructive_hint=False, idempotent_hint=False
        ),
    )
    server.add_tool(
        tools.list_variables,
        name="list_variables",
        title="List variables",
        description="List a session's variables: name, type, shape or length, and a short repr.",
        annotations=ToolAnnotations(title="List variables", read_only_hint=True, idempotent_hint=True),
    )
    server.add_tool(
        tools.inspect_variable,
        name="inspect_variable",
        title="Inspect a variable",
        description="Describe one variable of a session: type, shape, dtype, length and a bounded repr.",
        annotations=ToolAnnotations(title="Inspect a variable", read_only_hint=True, idempotent_hint=True),
    )
    server.add_tool(
        tools.reset_session,
        name="reset_session",
        title="Reset a session",
        description="Delete every variable of a session; the session_id stays valid for run_python.",
        annotations=ToolAnnotations(
            title="Reset a session", read_only_hint=False, destructive_hint=True, idempotent_hint=True
        ),
    )
    return server


def serve_stdio(engine: ReplEngine, *, log_level: LogLevel = "WARNING") -> None:
    """Serve `engine` over stdin/stdout until the client disconnects."""
    create_server(engine, log_level=log_level).run("stdio")
