"""LangChain tools over a genpark-repl-tools engine: run Python, list or inspect its variables, files.

    from genpark_repl_tools import ReplEngine
    from langchain_genpark_repl import GenparkReplToolkit

    tools = GenparkReplToolkit(engine=ReplEngine(policy="standard")).get_tools()
    agent = create_agent(model, tools=tools, checkpointer=InMemorySaver())
    agent.invoke({"messages": [...]}, {"configurable": {"thread_id": "user-42"}})

One LangGraph thread (`configurable.thread_id`) is one engine session: a thread keeps its variables
across turns, and two threads never share a namespace. Files: `GenparkReplToolkit(files={"data.csv":
path})` gives every thread's session its own copy on first use; each run's artifact lists the files it
wrote (`artifact["files"]`: names and sizes); their bytes come from `engine.download(thread_id, name)`,
and `include_files=True` adds list_files and download_file for the model.
What the tools say and do is the core's tool layer (`genpark_repl_tools.tools`); these classes only
map LangChain's conventions onto it.

Inside a LangGraph run, `run_python` writes its output to the graph's custom stream while the code
runs (`stream_mode="custom"`): one `{"genpark_repl": {...}}` item per event (`OutputEvent` /
`FigureEvent` as JSON, plus the tool call id). Outside a graph nothing is streamed.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any, Literal, NamedTuple, get_type_hints

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, BaseToolkit
from pydantic import BaseModel, ConfigDict, Field, create_model

from genpark_repl_tools import ReplEngine, tools
from genpark_repl_tools.tools import ToolReply

__all__ = [
    "GenparkDownloadTool",
    "GenparkFilesTool",
    "GenparkInspectTool",
    "GenparkReplTool",
    "GenparkReplToolkit",
    "GenparkResetTool",
    "GenparkVariablesTool",
    "SessionResolver",
    "thread_session",
]

SessionResolver = Callable[[RunnableConfig], str | None]
"""Maps a run's config to a session id; None means "use the tool's default session"."""

Content = str | list[str | dict[str, Any]]


class _Reply(NamedTuple):
    """What a tool returns under response_format="content_and_artifact": (content, artifact).

    A named class rather than a `tuple[...]` annotation: LangChain re-resolves `_run`'s type hints on
    every call to find the injected config, and a plain class name resolves cheaply.
    """

    content: Content
    artifact: dict[str, Any]


def thread_session(config: RunnableConfig) -> str | None:
    """The run's `configurable.thread_id` as a session id, or None outside a thread."""
    thread_id = (config.get("configurable") or {}).get("thread_id")
    return None if thread_id is None else str(thread_id)


class _EngineTool(BaseTool):
    """What every tool shares: the engine, the thread-to-session mapping, the reply's translation.

    Security model: the engine's (its policy and boundary); a tool adds no isolation of its own.
    Sessions are keyed by whatever the resolver returns, so whoever picks the thread id reaches that
    thread's variables: never let end users choose another user's thread id.
    """

    engine: ReplEngine = Field(description="The engine whose sessions this tool uses; share one per app.")
    session_resolver: SessionResolver = Field(default=thread_session, exclude=True)
    default_session: str = Field("default", description="Session used when the resolver returns None.")
    response_format: Literal["content", "content_and_artifact"] = "content_and_artifact"
    image_blocks: bool = Field(
        True,
        description="Send figures to the model as image blocks. Turn off for providers that refuse images "
        "in tool results; the text still names each figure and the artifact keeps them.",
    )

    files: tools.SessionFiles | None = Field(
        None, exclude=True, description="Files each session starts with (uploaded on its first use)."
    )

    def _session(self, config: RunnableConfig) -> str:
        session = self.session_resolver(config) or self.default_session
        if self.files is not None:
            self.files.seed(self.engine, session)
        return session

    def _reply(self, reply: ToolReply) -> _Reply:
        images: list[str | dict[str, Any]] = [
            {"type": "image", "base64": a.data_base64, "mime_type": a.mime_type}
            for a in reply.images
            if self.image_blocks
        ]
        content: Content = [{"type": "text", "text": reply.text}, *images] if images else reply.text
        return _Reply(content, reply.data)

    # The tool layer's is_error becomes the ToolMessage's status. LangChain sets that status only when a
    # tool raises, which would drop the artifact, so the finished message is marked here instead.
    def run(self, *args: Any, **kwargs: Any) -> Any:
        return _mark_error(super().run(*args, **kwargs))

    async def arun(self, *args: Any, **kwargs: Any) -> Any:
        return _mark_error(await super().arun(*args, **kwargs))


def _mark_error(output: Any) -> Any:
    if (
        isinstance(output, ToolMessage)
        and isinstance(output.artifact, dict)
        and tools.is_error(output.artifact)
    ):
        output.status = "error"
    return output


class GenparkReplTool(_EngineTool):
    """Runs the model's Python code in the session of the current LangGraph thread.

    Security model: the engine's. The code runs under the engine's policy and boundary; the default
    in-process boundary guards the host against accidents and casual misuse, not against a determined
    attacker (use `ReplEngine(boundary="subprocess")` for untrusted code). Errors in the code and engine
    failures come back as observations with status "error", never as exceptions in the agent's loop.

    Content is the observation text, followed by one image block per image the run attached; the
    artifact is the full `ExecutionResult` as plain JSON.
    """

    name: str = tools.RUN_PYTHON.name
    description: str = tools.RUN_PYTHON.description

    def model_post_init(self, context: Any, /) -> None:
        if self.description == tools.RUN_PYTHON.description:
            self.description = tools.RUN_PYTHON.describe(self.engine)
        if self.args_schema is None:
            self.args_schema = _schema("RunPythonInput", "code", tools.RUN_PYTHON.arguments["code"])

    def _run(self, code: str, config: RunnableConfig) -> _Reply:
        on_event = _graph_writer(config)
        return self._reply(tools.run_python(self.engine, code, self._session(config), on_event))

    async def _arun(self, code: str, config: RunnableConfig) -> _Reply:
        on_event = _graph_writer(config)
        return self._reply(await tools.arun_python(self.engine, code, self._session(config), on_event))


def _graph_writer(config: RunnableConfig) -> tools.OnEvent | None:
    """The LangGraph run's custom stream writer as an `on_event`, or None outside a graph run."""
    try:
        from langgraph.config import get_stream_writer

        writer = get_stream_writer()
    except (ImportError, RuntimeError, KeyError):  # no langgraph, or not inside a graph run
        return None
    call_id = (config.get("metadata") or {}).get("tool_call_id")

    def write(event: Any) -> None:
        writer({"genpark_repl": {**event.model_dump(mode="json"), "tool_call_id": call_id}})

    return write


class _NoArguments(BaseModel):
    """The model passes nothing; the session comes from the run's config."""


class GenparkVariablesTool(_EngineTool):
    """Lists the variables of the current LangGraph thread's session. Security model: the engine's;
    describing a value runs its `__repr__` under the session's policy and a timeout."""

    name: str = tools.LIST_VARIABLES.name
    description: str = tools.LIST_VARIABLES.description
    args_schema: type[BaseModel] = _NoArguments

    def _run(self, config: RunnableConfig) -> _Reply:
        return self._reply(tools.list_variables(self.engine, self._session(config)))

    async def _arun(self, config: RunnableConfig) -> _Reply:
        return self._reply(await tools.alist_variables(self.engine, self._session(config)))


class GenparkInspectTool(_EngineTool):
    """Describes one variable of the current LangGraph thread's session. Security model: the
    engine's, as for `GenparkVariablesTool`."""

    name: str = tools.INSPECT_VARIABLE.name
    description: str = tools.INSPECT_VARIABLE.description
    args_schema: type[BaseModel] | None = None

    def model_post_init(self, context: Any, /) -> None:
        if self.args_schema is None:
            self.args_schema = _schema(
                "InspectVariableInput", "name", tools.INSPECT_VARIABLE.arguments["name"]
            )

    def _run(self, name: str, config: RunnableConfig) -> _Reply:
        return self._reply(tools.inspect_variable(self.engine, name, self._session(config)))

    async def _arun(self, name: str, config: RunnableConfig) -> _Reply:
        return self._reply(await tools.ainspect_variable(self.engine, name, self._session(config)))


class GenparkResetTool(_EngineTool):
    """Empties the current LangGraph thread's session. Not in the toolkit unless asked for
    (`GenparkReplToolkit(include_reset=True)`). Security model: the engine's."""

    name: str = tools.RESET_SESSION.name
    description: str = tools.RESET_SESSION.description
    args_schema: type[BaseModel] = _NoArguments

    def _run(self, config: RunnableConfig) -> _Reply:
        return self._reply(tools.reset_session(self.engine, self._session(config)))

    async def _arun(self, config: RunnableConfig) -> _Reply:
        return self._reply(await tools.areset_session(self.engine, self._session(config)))


class GenparkFilesTool(_EngineTool):
    """Lists the files in the current LangGraph thread's session workspace (opt-in:
    `GenparkReplToolkit(include_files=True)`). Security model: the engine's; the host lists the
    directory without following links the code made."""

    name: str = tools.LIST_FILES.name
    description: str = tools.LIST_FILES.description
    args_schema: type[BaseModel] = _NoArguments

    def _run(self, config: RunnableConfig) -> _Reply:
        return self._reply(tools.list_files(self.engine, self._session(config)))

    async def _arun(self, config: RunnableConfig) -> _Reply:
        return self._reply(await tools.alist_files(self.engine, self._session(config)))


class GenparkDownloadTool(_EngineTool):
    """Reads one file of the current thread's session workspace for the model (its text when it is
    text); the bytes go into the artifact (`content_base64`) only with `include_bytes=True`.
    Security model: the engine's; names that leave the workspace or name links are refused."""

    name: str = tools.DOWNLOAD_FILE.name
    description: str = tools.DOWNLOAD_FILE.description
    args_schema: type[BaseModel] | None = None
    include_bytes: bool = Field(False, description="Put the file's bytes (base64) into the artifact.")

    def model_post_init(self, context: Any, /) -> None:
        if self.args_schema is None:
            self.args_schema = _schema("DownloadFileInput", "name", tools.DOWNLOAD_FILE.arguments["name"])

    def _run(self, name: str, config: RunnableConfig) -> _Reply:
        session = self._session(config)
        return self._reply(tools.download_file(self.engine, name, session, include_bytes=self.include_bytes))

    async def _arun(self, name: str, config: RunnableConfig) -> _Reply:
        session = self._session(config)
        reply = await tools.adownload_file(self.engine, name, session, include_bytes=self.include_bytes)
        return self._reply(reply)


def _resolve_hints(*classes: type[BaseTool]) -> None:
    """Store `_run`/`_arun`'s type hints resolved. LangChain reads them on every call (to find the
    injected config), and with this module's string annotations it would evaluate them each time:
    about as much as the rest of a call costs."""
    for cls in classes:
        for name in ("_run", "_arun"):
            function = cls.__dict__[name]
            function.__annotations__ = get_type_hints(function)


_resolve_hints(
    GenparkReplTool,
    GenparkVariablesTool,
    GenparkInspectTool,
    GenparkResetTool,
    GenparkFilesTool,
    GenparkDownloadTool,
)


@lru_cache(maxsize=64)
def _schema(model: str, argument: str, description: str) -> type[BaseModel]:
    fields: dict[str, Any] = {argument: (str, Field(description=description))}
    schema: type[BaseModel] = create_model(model, **fields)
    return schema


class GenparkReplToolkit(BaseToolkit):
    """run_python, list_variables and inspect_variable (and reset_session with `include_reset`) over
    one engine and one thread-to-session mapping. Security model: the engine's; see `GenparkReplTool`.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    engine: ReplEngine
    session_resolver: SessionResolver = thread_session
    default_session: str = "default"
    include_reset: bool = False
    include_files: bool = False  # list_files and download_file for the model
    files: Any = None  # {name: bytes or host path} or [host paths]: each session's starting files

    def get_tools(self) -> list[BaseTool]:
        shared: dict[str, Any] = {
            "engine": self.engine,
            "session_resolver": self.session_resolver,
            "default_session": self.default_session,
            "files": None if self.files is None else tools.SessionFiles(self.files),
        }
        found: list[BaseTool] = [
            GenparkReplTool(**shared),
            GenparkVariablesTool(**shared),
            GenparkInspectTool(**shared),
        ]
        if self.include_reset:
            found.append(GenparkResetTool(**shared))
        if self.include_files:
            found += [GenparkFilesTool(**shared), GenparkDownloadTool(**shared)]
        return found
