"""fork_session in the LlamaIndex tool spec: opt-in, and its copies reachable only through `fork`."""

from __future__ import annotations

import asyncio

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.llms import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import Context
from llama_index.tools.genpark_repl import GenparkReplToolSpec

from genpark_repl_tools import ReplEngine


def tools_by_name(spec: GenparkReplToolSpec) -> dict[str, FunctionTool]:
    return {tool.metadata.get_name(): tool for tool in spec.to_tool_list()}


def properties(tool: FunctionTool) -> dict[str, object]:
    return tool.metadata.get_parameters_dict()["properties"]  # type: ignore[no-any-return]


def test_the_fork_tool_is_off_by_default(engine: ReplEngine) -> None:
    tools = tools_by_name(GenparkReplToolSpec(engine=engine, include_files=True))
    assert "fork_session" not in tools
    assert all("fork" not in properties(tool) for tool in tools.values())


def test_a_copy_goes_its_own_way_and_only_the_sessions_copies_are_reached(engine: ReplEngine) -> None:
    spec = GenparkReplToolSpec(engine=engine, session="a", include_fork=True, include_files=True)
    tools = tools_by_name(spec)
    assert list(tools) == [
        "run_python", "list_variables", "inspect_variable", "list_files", "download_file", "fork_session"
    ]  # fmt: skip
    for tool in tools.values():
        assert "fork" in properties(tool) and "fork" in tool.metadata.description
        assert "fork" not in tool.metadata.get_parameters_dict().get("required", [])
    tools["run_python"].call(code="x = 1")
    forked = tools["fork_session"].call()
    fork = forked.raw_output["fork"]
    assert f'fork="{fork}"' in forked.content and not forked.is_error
    assert tools["run_python"].call(code="x = 2; x", fork=fork).raw_output["value"] == "2"
    assert tools["run_python"].call(code="x").raw_output["value"] == "1"
    assert "x: int = 2" in tools["list_variables"].call(fork=fork).content
    # Another session's tools cannot reach the copy by its id; a made-up id starts no empty session.
    other = tools_by_name(GenparkReplToolSpec(engine=engine, session="b", include_fork=True))
    refused = other["run_python"].call(code="x", fork=fork)
    assert refused.is_error and refused.raw_output["failure"] == "UnknownFork"
    sessions = engine.sessions()
    assert tools["inspect_variable"].call(name="x", fork="fork-000000000000").is_error
    assert engine.sessions() == sessions


# FunctionAgent's constructor reads pydantic's deprecated attributes through inspect (as in the other tests).
@pytest.mark.filterwarnings("ignore::DeprecationWarning:inspect")
def test_an_agent_works_in_a_copy_of_its_conversation(engine: ReplEngine) -> None:
    spec = GenparkReplToolSpec(engine=engine, include_fork=True)
    tools = tools_by_name(spec)
    ctx = Context(FunctionAgent(tools=spec.to_tool_list(), llm=MockFunctionCallingLLM()))

    async def scenario() -> tuple[str, str]:
        await tools["run_python"].acall(code="x = 1", ctx=ctx)
        fork = (await tools["fork_session"].acall(ctx=ctx)).raw_output["fork"]
        await tools["run_python"].acall(code="x = 2", ctx=ctx, fork=fork)
        here = await tools["run_python"].acall(code="x", ctx=ctx)
        there = await tools["run_python"].acall(code="x", ctx=ctx, fork=fork)
        return here.raw_output["value"], there.raw_output["value"]

    assert asyncio.run(scenario()) == ("1", "2")
