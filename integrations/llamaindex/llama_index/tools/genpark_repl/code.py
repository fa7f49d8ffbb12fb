"""GenparkCodeExecutor: the `code_execute_fn` of LlamaIndex's CodeActAgent, over an engine session."""

# No `from __future__ import annotations`: FunctionTool finds the injected Context by the parameter's
# annotation object (inspect.signature), so `execute`'s annotations must be real classes, not strings.

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from llama_index.core.tools import BaseTool, FunctionTool
from llama_index.core.workflow import Context
from llama_index.tools.genpark_repl.base import _conversation, _stream_to

from genpark_repl_tools import ReplEngine
from genpark_repl_tools import tools as tool_layer

__all__ = ["GenparkCodeExecutor"]


class GenparkCodeExecutor:
    """Runs the code of LlamaIndex's `CodeActAgent` in a genpark-repl-tools session; its tools are host tools.

        executor = GenparkCodeExecutor(engine, tools=[search, add])
        agent = CodeActAgent(code_execute_fn=executor.execute, tools=[search, add], llm=llm)

    Security model: the engine's (its boundary and policy); the executor adds no isolation. The tools
    are host tools: the agent's code calls each by its function's name (the name CodeActAgent's prompt
    shows), the real function runs on the host with the host's rights, and only copies of plain data
    cross (see docs/code_mode.md). Offer only tools the model may use; keep untrusted code on a
    sandboxed boundary (the default of `ReplEngine()` on Linux), not `boundary="inprocess"`.

    Sessions: LlamaIndex hands `execute` the workflow `Context`, so each conversation has its own
    session, its id kept in `ctx.store` under the key `GenparkReplToolSpec` uses (a `run_python` tool
    in the same agent shares it). Called without a Context, `execute` uses `session=` or one session
    of this executor's own.
    """

    def __init__(
        self,
        engine: ReplEngine,
        tools: Sequence[FunctionTool | Callable[..., Any]] = (),
        *,
        session: str | None = None,
    ) -> None:
        """`tools`: the FunctionTools and plain functions (sync or async) given to the agent."""
        self.engine = engine
        self.session = session if session is not None else f"codeact-{uuid.uuid4().hex}"
        self.tools = dict(_host_tool(tool) for tool in tools)

    async def execute(self, code: str, ctx: Context = None) -> str:  # type: ignore[assignment]
        """Run `code` in this conversation's Python session; return what it printed and its value."""
        session = self.session if ctx is None else await _conversation(ctx)
        # Every time: it only updates the engine's table, and a session closed meanwhile lost its tools.
        self.engine.set_tools(session, self.tools or None)
        on_event = None if ctx is None else _stream_to(ctx)
        return (await tool_layer.arun_python(self.engine, code, session, on_event)).text


def _host_tool(tool: FunctionTool | Callable[..., Any]) -> tuple[str, Callable[..., Any]]:
    """(name, function) as CodeActAgent presents the tool to the model: its function's name."""
    if isinstance(tool, FunctionTool):
        if tool.requires_context:
            raise ValueError(f"tool {tool.metadata.name!r} needs a Context; host tools take plain data only")
        function = tool.real_fn
    elif isinstance(tool, BaseTool):
        raise TypeError(f"tool {tool.metadata.name!r}: CodeActAgent takes only FunctionTools and functions")
    else:
        function = tool
    return function.__name__, function
