"""The LangChain adapter's cost: GenparkReplTool.invoke over a bare engine.run, and LangChain's own share.

A separate module because it imports LangChain at the top: the no-op tool's annotations must resolve
in module globals, as GenparkReplTool's do. LangChain reads `_run`'s signature and type hints on every
call (to find the injected `config` parameter); GenparkReplTool stores both computed, and so does the no-op
tool, so that "LangChain's own cost" is the least a tool of this shape pays, not a cost we avoid.

Security model: none; it runs `x = 1` through the engine under its default policy.
"""

from __future__ import annotations

import inspect
from typing import Any, Literal, get_type_hints

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langchain_genpark_repl import GenparkReplTool
from pydantic import BaseModel, Field, create_model

from genpark_repl_tools import Limits, ReplEngine

__all__ = ["NoopTool", "PlainTool", "make_calls"]


# Made with real types, as GenparkReplTool's schema is: a class body here would keep its annotations
# as strings (this module's `from __future__ import annotations`), which LangChain resolves again on
# every call, and the no-op and plain tools would pay for that where ours does not.
_CodeArgs = create_model("_CodeArgs", code=(str, Field(description="Python code.")))


class NoopTool(BaseTool):
    """LangChain's own cost for a tool shaped like ours: config injected, content and artifact, no work."""

    name: str = "noop"
    description: str = "Returns at once."
    args_schema: type[BaseModel] = _CodeArgs
    response_format: Literal["content", "content_and_artifact"] = "content_and_artifact"

    def _run(self, code: str, config: RunnableConfig) -> tuple[str, dict[str, Any]]:
        return "", {}


class PlainTool(NoopTool):
    """The least a user would write instead of ours: LangChain's machinery around `engine.run`, with
    nothing rendered, no artifact and a fixed session. GenparkReplTool minus this is what it adds."""

    name: str = "plain"
    engine: Any = None

    def _run(self, code: str, config: RunnableConfig) -> tuple[str, dict[str, Any]]:
        self.engine.run(code, "bench")
        return "", {}


# As GenparkReplTool does: their hints resolved and their signatures computed once.
for _tool in (NoopTool, PlainTool):
    _tool._run.__annotations__ = get_type_hints(_tool._run)
    _tool._run.__signature__ = inspect.signature(_tool._run)  # type: ignore[attr-defined]


def make_calls(timeout_s: float) -> tuple[ReplEngine, dict[str, Any], str | None]:
    """The engine and four zero-argument calls: core (engine.run), tool (our invoke), noop (LangChain's
    machinery alone), plain (LangChain's machinery around engine.run)."""
    engine = ReplEngine(boundary="inprocess", limits=Limits(timeout_s=timeout_s))  # the layer alone
    tool = GenparkReplTool(engine=engine)
    noop = NoopTool()
    config: Any = {"configurable": {"thread_id": "bench"}}
    tool_call = {"type": "tool_call", "id": "call-1", "name": tool.name, "args": {"code": "x = 1"}}
    noop_call = {"type": "tool_call", "id": "call-2", "name": noop.name, "args": {"code": "x = 1"}}
    message = tool.invoke(tool_call, config)
    failure = None
    if message.artifact.get("status") != "ok" or "x" not in {v.name for v in engine.variables("bench")}:
        failure = f"tool call fails: {message.content!r:.200}"
    noop.invoke(noop_call, config)
    plain = PlainTool(engine=engine)
    plain_call = {**noop_call, "id": "call-3", "name": plain.name}
    plain.invoke(plain_call, config)
    calls = {
        "core": lambda: engine.run("x = 1", "bench"),
        "tool": lambda: tool.invoke(tool_call, config),
        "noop": lambda: noop.invoke(noop_call, config),
        "plain": lambda: plain.invoke(plain_call, config),
    }
    return engine, calls, failure
