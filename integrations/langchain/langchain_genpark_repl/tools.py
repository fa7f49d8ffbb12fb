"""LangChain tools over a genpark-repl-tools engine: run Python, list or inspect its variables, files.

    tools = GenparkReplToolkit(engine=ReplEngine(policy="standard")).get_tools()
    agent = create_agent(model, tools=tools, checkpointer=InMemorySaver())
    agent.invoke({"messages": [...]}, {"configurable": {"thread_id": "user-42"}})

One LangGraph thread (`configurable.thread_id`) is one engine session. What the tools say and do is
the core's tool layer (`genpark_repl_tools.tools`); each class here names one of its `ToolSpec`s and
`_EngineTool` maps LangChain's conventions onto it. Sessions, files, streaming and what a call returns:
integrations/langchain/README.md.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, ClassVar, Literal, NamedTuple, get_type_hints

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, BaseToolkit
from pydantic import ConfigDict, Field

from genpark_repl_tools import ReplEngine, tools
from genpark_repl_tools.tools import ToolReply, ToolSpec

__all__ = [
    "GenparkDownloadTool",
    "GenparkFilesTool",
    "GenparkForkTool",
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


class _Reply(NamedTuple):
    """(content, artifact) under response_format="content_and_artifact". A class, not a `tuple[...]`
    annotation: LangChain resolves `_run`'s type hints on every call, and a class resolves cheaply."""

    content: str | list[str | dict[str, Any]]
    artifact: dict[str, Any]


def thread_session(config: RunnableConfig) -> str | None:
    """The run's `configurable.thread_id` as a session id, or None outside a thread."""
    thread_id = (config.get("configurable") or {}).get("thread_id")
    return None if thread_id is None else str(thread_id)


class _EngineTool(BaseTool):
    """One tool of the core's tool layer (`_spec`): the engine, the thread-to-session mapping, one call
    into the core, the reply's translation. Subclasses only name their spec.

    Security model: the engine's (its policy and boundary); a tool adds no isolation of its own.
    Sessions are keyed by whatever the resolver returns, so whoever picks the thread id reaches that
    thread's variables: never let end users choose another user's thread id.
    """

    _spec: ClassVar[ToolSpec]
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
    forks: bool = Field(
        False,
        exclude=True,
        description="Take a `fork` argument naming a copy fork_session made of the thread's session.",
    )

    @property
    def spec(self) -> ToolSpec:
        """The spec this tool offers: its own, with the `fork` argument when forks are on."""
        return tools.forkable(self._spec) if self.forks else self._spec

    def model_post_init(self, context: Any, /) -> None:
        if self.description == self._spec.description:  # the engine's policy and time limit, if any
            self.description = self._spec.describe(self.engine)
        if self.args_schema is None:
            self.args_schema = self.spec.schema

    # `config` is injected by LangChain (found by its annotation); the rest are the spec's arguments
    # (positional only when a plain string is invoked).
    def _run(self, *args: str, config: RunnableConfig, **arguments: Any) -> _Reply:
        return self._reply(self._call(self.spec.call, args, config, arguments))

    async def _arun(self, *args: str, config: RunnableConfig, **arguments: Any) -> _Reply:
        return self._reply(await self._call(self.spec.acall, args, config, arguments))

    def _call(
        self, call: Callable[..., Any], args: tuple[str, ...], config: RunnableConfig, arguments: Any
    ) -> Any:
        """`call` (the spec's `call` or `acall`) for this run's session, arguments and options."""
        if args:  # a plain string invoked: the spec's arguments in order
            arguments.update(zip(self._spec.arguments, args, strict=False))
        session = self.session_resolver(config) or self.default_session
        return call(self.engine, session, arguments, self.files, **self._options(config))

    def _options(self, config: RunnableConfig) -> dict[str, Any]:
        return {}

    def _reply(self, reply: ToolReply) -> _Reply:
        if not (reply.images and self.image_blocks):
            return _Reply(reply.text, reply.data)
        images = [{"type": "image", "base64": a.data_base64, "mime_type": a.mime_type} for a in reply.images]
        return _Reply([{"type": "text", "text": reply.text}, *images], reply.data)

    # The tool layer's is_error becomes the ToolMessage's status. LangChain sets that status only when a
    # tool raises, which would drop the artifact, so the finished message is marked here instead.
    def run(self, *args: Any, **kwargs: Any) -> Any:
        return _mark_error(super().run(*args, **kwargs))

    async def arun(self, *args: Any, **kwargs: Any) -> Any:
        return _mark_error(await super().arun(*args, **kwargs))


def _mark_error(output: Any) -> Any:
    artifact = getattr(output, "artifact", None)  # a ToolMessage's, when invoked with a ToolCall
    if isinstance(artifact, dict) and tools.is_error(artifact):
        output.status = "error"
    return output


# Resolved once: LangChain reads `_run`'s signature and type hints on every call (to find the injected
# config); with this module's string annotations it would evaluate them each time.
for _method in (_EngineTool._run, _EngineTool._arun):
    _method.__annotations__ = get_type_hints(_method)
    _method.__signature__ = inspect.signature(_method)  # type: ignore[union-attr]


class GenparkReplTool(_EngineTool):
    """Runs the model's Python code in the session of the current LangGraph thread.

    Security model: the engine's. The code runs under the engine's policy and boundary (`ReplEngine()`
    sandboxes each session in a worker process on Linux; `boundary="inprocess"` guards the host against
    accidents and casual misuse only, not against a determined attacker). Errors in the code and engine
    failures come back as observations with status "error", never as exceptions in the agent's loop.
    Content: the observation text (+ an image block per figure); artifact: the `ExecutionResult` as JSON.
    """

    _spec = tools.RUN_PYTHON
    name: str = _spec.name
    description: str = _spec.description

    def _options(self, config: RunnableConfig) -> dict[str, Any]:
        return {"on_event": _graph_writer(config)}


def _stream_writer_getter() -> tuple[Callable[[], Any] | None, str | None]:
    """LangGraph's `get_stream_writer`, and the key of the graph run in a run's `configurable` (None
    when this LangGraph version keeps it elsewhere: then only the call itself tells)."""
    try:
        from langgraph.config import get_stream_writer
    except ImportError:  # LangChain without LangGraph: nothing to stream to
        return None, None
    try:
        from langgraph._internal._constants import CONFIG_KEY_RUNTIME
    except ImportError:  # a private module: a release may move it
        return get_stream_writer, None
    return get_stream_writer, CONFIG_KEY_RUNTIME if isinstance(CONFIG_KEY_RUNTIME, str) else None


# Once: a failing import searches sys.path each time.
_get_stream_writer, _graph_run_key = _stream_writer_getter()


def _graph_writer(config: RunnableConfig) -> tools.OnEvent | None:
    """The LangGraph run's custom stream writer as an `on_event`, or None outside a graph run."""
    if _get_stream_writer is None:
        return None
    if _graph_run_key is not None and _graph_run_key not in (config.get("configurable") or {}):
        return None  # not inside a graph run: what get_stream_writer() would say by raising KeyError
    try:
        writer = _get_stream_writer()
    except (RuntimeError, KeyError):  # not inside a graph run
        return None
    call_id = (config.get("metadata") or {}).get("tool_call_id")
    return lambda event: writer({"genpark_repl": {**event.model_dump(mode="json"), "tool_call_id": call_id}})


class GenparkVariablesTool(_EngineTool):
    """Lists the variables of the current LangGraph thread's session. Security model: the engine's;
    describing a value runs its `__repr__` under the session's policy and a timeout."""

    _spec = tools.LIST_VARIABLES
    name: str = _spec.name
    description: str = _spec.description


class GenparkInspectTool(_EngineTool):
    """Describes one variable of the current LangGraph thread's session. Security model: the
    engine's, as for `GenparkVariablesTool`."""

    _spec = tools.INSPECT_VARIABLE
    name: str = _spec.name
    description: str = _spec.description


class GenparkResetTool(_EngineTool):
    """Empties the current LangGraph thread's session. Not in the toolkit unless asked for
    (`GenparkReplToolkit(include_reset=True)`). Security model: the engine's."""

    _spec = tools.RESET_SESSION
    name: str = _spec.name
    description: str = _spec.description


class GenparkFilesTool(_EngineTool):
    """Lists the files in the current LangGraph thread's session workspace (opt-in:
    `GenparkReplToolkit(include_files=True)`). Security model: the engine's; the host lists the
    directory without following links the code made."""

    _spec = tools.LIST_FILES
    name: str = _spec.name
    description: str = _spec.description


class GenparkDownloadTool(_EngineTool):
    """Reads one file of the current thread's session workspace for the model (its text when it is
    text); the bytes go into the artifact (`content_base64`) only with `include_bytes=True`.
    Security model: the engine's; names that leave the workspace or name links are refused."""

    _spec = tools.DOWNLOAD_FILE
    name: str = _spec.name
    description: str = _spec.description
    include_bytes: bool = Field(False, description="Put the file's bytes (base64) into the artifact.")

    def _options(self, config: RunnableConfig) -> dict[str, Any]:
        return {"include_bytes": self.include_bytes}


class GenparkForkTool(_EngineTool):
    """Copies the current thread's session (or one of its copies) into a new copy and returns its
    id, which the toolkit's other tools take as `fork` (opt-in: `GenparkReplToolkit(include_fork=True)`,
    which turns `forks` on for every tool). Copies are sessions under the thread's own, so a model
    reaches only its thread's copies. Security model: the engine's."""

    _spec = tools.FORK_SESSION
    name: str = _spec.name
    description: str = _spec.description
    forks: bool = True


class GenparkReplToolkit(BaseToolkit):
    """run_python, list_variables and inspect_variable (and reset_session with `include_reset`,
    fork_session with `include_fork`) over one engine and one thread-to-session mapping. Security
    model: the engine's; see `GenparkReplTool`.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    engine: ReplEngine
    session_resolver: SessionResolver = thread_session
    default_session: str = "default"
    include_reset: bool = False
    include_files: bool = False  # list_files and download_file for the model
    include_fork: bool = False  # fork_session, and a `fork` argument on every tool to work in a copy
    files: Any = None  # {name: bytes or host path} or [host paths]: each session's starting files

    def get_tools(self) -> list[BaseTool]:
        files = None if self.files is None else tools.SessionFiles(self.files)
        chosen = [GenparkReplTool, GenparkVariablesTool, GenparkInspectTool]
        chosen += [GenparkResetTool] if self.include_reset else []
        chosen += [GenparkFilesTool, GenparkDownloadTool] if self.include_files else []
        chosen += [GenparkForkTool] if self.include_fork else []
        shared = {
            "session_resolver": self.session_resolver,
            "default_session": self.default_session,
            "forks": self.include_fork,
        }
        return [cls(engine=self.engine, files=files, **shared) for cls in chosen]
