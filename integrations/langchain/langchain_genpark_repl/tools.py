"""LangChain tools over a genpark-repl-tools engine: run Python, list or inspect its variables.

    from genpark_repl_tools import ReplEngine
    from langchain_genpark_repl import GenparkReplToolkit

    tools = GenparkReplToolkit(engine=ReplEngine(policy="standard")).get_tools()
    agent = create_agent(model, tools=tools, checkpointer=InMemorySaver())
    agent.invoke({"messages": [...]}, {"configurable": {"thread_id": "user-42"}})

One LangGraph thread (`configurable.thread_id`) is one engine session: a thread keeps its variables
across turns, and two threads never share a namespace. Everything else (policy, limits, isolation,
rendering) is the engine's; these classes only map LangChain's calling conventions onto it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import Any, Literal, NamedTuple

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, BaseToolkit, ToolException
from pydantic import BaseModel, ConfigDict, Field, create_model

from genpark_repl_tools import (
    ExecutionResult,
    ReplEngine,
    ReplError,
    SessionNotFound,
    VariableNotFound,
    render_variables,
)

__all__ = [
    "GenparkReplTool",
    "GenparkReplToolkit",
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
    """What both tools share: the engine, the thread-to-session mapping and error handling.

    Security model: the engine's (its policy and boundary); a tool adds no isolation of its own.
    Sessions are keyed by whatever the resolver returns, so whoever picks the thread id reaches that
    thread's variables: never let end users choose another user's thread id.
    """

    engine: ReplEngine = Field(description="The engine whose sessions this tool uses; share one per app.")
    session_resolver: SessionResolver = Field(default=thread_session, exclude=True)
    default_session: str = Field("default", description="Session used when the resolver returns None.")
    response_format: Literal["content", "content_and_artifact"] = "content_and_artifact"
    # Engine failures arrive as ToolException; handled, they become an error ToolMessage instead of
    # ending the agent's run.
    handle_tool_error: bool = True

    def _session(self, config: RunnableConfig) -> str:
        return self.session_resolver(config) or self.default_session


@contextlib.contextmanager
def _engine_failures() -> Iterator[None]:
    """Turn the engine's own failures (closed, at capacity, worker lost) into ToolException."""
    try:
        yield
    except ReplError as exc:
        raise ToolException(f"Tool failure, not an error in your code: {type(exc).__name__}: {exc}") from exc


class GenparkReplTool(_EngineTool):
    """Runs the model's Python code in the session of the current LangGraph thread.

    Security model: the engine's. The code runs under the engine's policy and boundary; the default
    in-process boundary guards the host against accidents and casual misuse, not against a determined
    attacker (use `ReplEngine(boundary="subprocess")` for untrusted code). Errors in the code come back
    as observations; only engine failures raise, as a handled `ToolException`.

    Content is the engine's observation text, followed by one image block per image the run attached;
    the artifact is the full `ExecutionResult` as plain JSON.
    """

    name: str = "python_repl"
    description: str = (
        "Run Python code in this conversation's persistent Python session. "
        "Returns the printed output, the value of a trailing expression, and any error."
    )
    image_blocks: bool = Field(
        True,
        description="Send figures to the model as image blocks. Turn off for providers that refuse images "
        "in tool results; the text still names each figure and the artifact keeps them.",
    )

    def model_post_init(self, context: Any, /) -> None:
        if self.args_schema is None:
            self.args_schema = _code_schema(_describe_code_field(self.engine))

    def _run(self, code: str, config: RunnableConfig) -> _Reply:
        with _engine_failures():
            result = self.engine.run(code, self._session(config))
        return self._render(result)

    async def _arun(self, code: str, config: RunnableConfig) -> _Reply:
        with _engine_failures():
            result = await self.engine.arun(code, self._session(config))
        return self._render(result)

    def _render(self, result: ExecutionResult) -> _Reply:
        text = result.to_observation(max_chars=self.engine.limits.max_observation_chars)
        images: list[str | dict[str, Any]] = [
            {"type": "image", "base64": a.data_base64, "mime_type": a.mime_type}
            for a in result.attachments
            if a.kind == "image" and self.image_blocks
        ]
        content: Content = [{"type": "text", "text": text}, *images] if images else text
        return _Reply(content, result.model_dump(mode="json"))


def _describe_code_field(engine: ReplEngine) -> str:
    """The `code` argument's description, for the model: persistence, output, limits, policy."""
    policy = engine.policy
    if policy.restricted:
        rules = (
            f"Policy '{policy.name}': code it does not allow is refused before anything runs; the reply "
            "starts with 'Blocked' and says what was refused and what is allowed instead."
        )
    else:
        rules = f"Policy '{policy.name}': full Python."
    return (
        "Python code to run. Variables, functions and imports persist between calls in this conversation. "
        "To see a result, print() it or end the code with an expression: its value is shown, as in a REPL. "
        f"One call may run for at most {engine.limits.timeout_s:g} s. {rules}"
    )


@lru_cache(maxsize=64)
def _code_schema(description: str) -> type[BaseModel]:
    # One schema class per distinct description: tools over engines with the same policy share it.
    return create_model("PythonReplInput", code=(str, Field(description=description)))


class _VariablesInput(BaseModel):
    name: str | None = Field(
        None, description="The variable to describe in detail. Omit it to list every variable."
    )


class GenparkVariablesTool(_EngineTool):
    """Lists the variables of the current LangGraph thread's session, or describes one of them.

    Security model: the engine's. Describing a value calls its `__repr__`/`__len__`, which is the
    session's own code: the engine runs it under the same policy and a timeout.

    Content is a short text; the artifact is the `VariableInfo` data as plain JSON.
    """

    name: str = "python_variables"
    description: str = (
        "List the variables defined in this conversation's Python session, or describe one variable "
        "by name: its type, shape or length, and its value (shortened when large)."
    )
    args_schema: type[BaseModel] = _VariablesInput

    def _run(self, config: RunnableConfig, name: str | None = None) -> _Reply:
        session = self._session(config)
        if name is None:
            return self._list(session)
        with _engine_failures():
            try:
                info = self.engine.inspect(name, session)
            except (VariableNotFound, SessionNotFound) as exc:
                raise ToolException(
                    f"{name!r} is not defined in this session. Call {self.name} without a name to list "
                    "the variables that are."
                ) from exc
        return _Reply(info.to_observation(), info.model_dump(mode="json"))

    def _list(self, session: str) -> _Reply:
        with _engine_failures():
            try:
                infos = self.engine.variables(session)
            except SessionNotFound:
                infos = []  # nothing has run in this thread yet: an empty session, not a failure
        text = render_variables(infos, self.engine.limits.max_observation_chars)
        return _Reply(text, {"variables": [info.model_dump(mode="json") for info in infos]})


class GenparkReplToolkit(BaseToolkit):
    """Both tools over one engine and one thread-to-session mapping.

    Security model: the engine's; see `GenparkReplTool`.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    engine: ReplEngine
    session_resolver: SessionResolver = thread_session
    default_session: str = "default"

    def get_tools(self) -> list[BaseTool]:
        shared: dict[str, Any] = {
            "engine": self.engine,
            "session_resolver": self.session_resolver,
            "default_session": self.default_session,
        }
        return [GenparkReplTool(**shared), GenparkVariablesTool(**shared)]
