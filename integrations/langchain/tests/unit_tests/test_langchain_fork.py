"""fork_session in the LangChain toolkit: opt-in, and its copies reachable only through `fork`."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langchain_genpark_repl import GenparkForkTool, GenparkReplToolkit

from genpark_repl_tools import ReplEngine


def thread(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def call(tools: dict[str, BaseTool], name: str, config: RunnableConfig, **args: Any) -> ToolMessage:
    message = tools[name].invoke({"name": name, "args": args, "id": "call-1", "type": "tool_call"}, config)
    assert isinstance(message, ToolMessage)
    return message


def test_the_fork_tool_is_off_by_default(engine: ReplEngine) -> None:
    tools = GenparkReplToolkit(engine=engine).get_tools()
    assert "fork_session" not in [t.name for t in tools]
    for tool in tools:  # and no tool takes a fork argument
        assert "fork" not in tool.tool_call_schema.model_json_schema()["properties"]  # type: ignore[union-attr]


def test_a_copy_goes_its_own_way_and_only_the_threads_copies_are_reached(engine: ReplEngine) -> None:
    tools = {t.name: t for t in GenparkReplToolkit(engine=engine, include_fork=True).get_tools()}
    assert isinstance(tools["fork_session"], GenparkForkTool)
    for tool in tools.values():
        assert "fork" in tool.tool_call_schema.model_json_schema()["properties"]  # type: ignore[union-attr]
    call(tools, "run_python", thread("a"), code="x = 1")
    forked = call(tools, "fork_session", thread("a"))
    fork = forked.artifact["fork"]
    assert f'fork="{fork}"' in forked.content and forked.status == "success"
    assert call(tools, "run_python", thread("a"), code="x = 2; x", fork=fork).artifact["value"] == "2"
    assert call(tools, "run_python", thread("a"), code="x").artifact["value"] == "1"
    assert "x: int = 2" in call(tools, "list_variables", thread("a"), fork=fork).content
    # Another thread cannot reach the copy by its id, and a made-up id starts no empty session.
    refused = call(tools, "run_python", thread("b"), code="x", fork=fork)
    assert refused.status == "error" and refused.artifact["failure"] == "UnknownFork"
    sessions = engine.sessions()
    refused = call(tools, "run_python", thread("a"), code="x", fork="fork-000000000000")
    assert refused.status == "error" and "No copy" in refused.content
    assert engine.sessions() == sessions
    # A copy of the copy is the thread's too, reached the same way.
    again = call(tools, "fork_session", thread("a"), fork=fork).artifact["fork"]
    assert call(tools, "run_python", thread("a"), code="x", fork=again).artifact["value"] == "2"
