"""Offline agent loops: `create_agent` + a scripted fake model + `InMemorySaver`, with the real engine."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolCall, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_genpark_repl import GenparkReplToolkit
from langgraph.checkpoint.memory import InMemorySaver

from genpark_repl_tools import (
    Attachment,
    CapacityError,
    ExecutionRequest,
    ExecutionResult,
    MockBoundary,
    ReplEngine,
)

# The model's scripted replies: a generator given the model, so a step can read what it was shown.
Script = Callable[[Any], Iterator[AIMessage]]
MakeModel = Callable[[Script], Any]


def run_code(call_id: str, code: str) -> ToolCall:
    return ToolCall(name="run_python", args={"code": code}, id=call_id, type="tool_call")


def ask(*tool_calls: ToolCall) -> AIMessage:
    return AIMessage(content="", tool_calls=list(tool_calls))


def thread(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def user(text: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(text)]}


def tool_results(state: dict[str, Any]) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in state["messages"] if isinstance(m, ToolMessage)}


def make_agent(model: Any, engine: ReplEngine) -> Any:
    return create_agent(
        model, tools=GenparkReplToolkit(engine=engine).get_tools(), checkpointer=InMemorySaver()
    )


def test_a_thread_keeps_its_variables_across_turns_and_another_thread_cannot_see_them(
    scripted_model: MakeModel, engine: ReplEngine
) -> None:
    def script(model: Any) -> Iterator[AIMessage]:
        yield ask(run_code("c1", "total = 6 * 7"))  # alice, turn 1
        yield AIMessage("Stored.")
        yield ask(run_code("c2", "total + 1"))  # alice, turn 2
        yield AIMessage("43.")
        yield ask(run_code("c3", "total"))  # bob
        yield AIMessage("Bob has no total.")

    agent = make_agent(scripted_model(script), engine)
    agent.invoke(user("remember 6*7"), thread("alice"))
    alice = agent.invoke(user("add one"), thread("alice"))
    bob = agent.invoke(user("what is total?"), thread("bob"))

    assert tool_results(alice)["c2"].content == "OK\nOut: 43"
    assert tool_results(alice)["c2"].artifact["session"] == "alice"
    assert "c1" in tool_results(alice)  # the first turn is in the checkpointed history
    bob_result = tool_results(bob)["c3"]
    assert bob_result.content.startswith("Error: NameError: name 'total' is not defined")
    assert bob_result.artifact["session"] == "bob"
    assert "c1" not in tool_results(bob)
    # The checkpointer stored the artifact (msgpack): it comes back as the same plain data.
    saved = tool_results(agent.get_state(thread("alice")).values)["c2"]
    assert saved.artifact == tool_results(alice)["c2"].artifact


def test_a_name_error_is_an_observation_the_model_recovers_from(
    scripted_model: MakeModel, engine: ReplEngine
) -> None:
    def script(model: Any) -> Iterator[AIMessage]:
        yield ask(run_code("c1", "print(round(price * rate, 2))"))
        (observation,) = model.last_tool_messages()
        # The hint or, where the name looks like a typo of another, the suggestion: either tells the
        # model what to do (which one depends on the Python version's name suggestions).
        if "NameError: name 'price' is not defined" in observation.content and (
            "define it first" in observation.content or "Did you mean" in observation.content
        ):
            yield ask(run_code("c2", "price, rate = 19.99, 1.2\nprint(round(price * rate, 2))"))
        else:  # the observation did not say what was wrong: the scripted model gives up
            yield AIMessage("I cannot tell what went wrong.")
        yield AIMessage("It is 23.99.")

    state = make_agent(scripted_model(script), engine).invoke(user("price with tax?"), thread("t"))
    results = tool_results(state)
    # An error in the code is an observation the run goes on from, marked as an error (one rule in every
    # frontend: is_error when the code did not run cleanly).
    assert results["c1"].status == "error"
    assert results["c1"].artifact["status"] == "error"
    assert results["c1"].artifact["error"]["line"] == 1
    assert results["c2"].content == "OK\nstdout:\n23.99\nVariables: created price (float), rate (float)"
    assert state["messages"][-1].content == "It is 23.99."


def test_three_parallel_calls_in_one_turn_give_three_unmixed_results(
    scripted_model: MakeModel, engine: ReplEngine
) -> None:
    code = "for i in range(50):\n    print('{tag}', i)\n{value}"

    def script(model: Any) -> Iterator[AIMessage]:
        yield ask(*(run_code(f"c{n}", code.format(tag=f"T{n}", value=f"{n} * 111")) for n in range(3)))
        yield AIMessage("Done.")

    state = make_agent(scripted_model(script), engine).invoke(user("three at once"), thread("t"))
    results = tool_results(state)
    assert sorted(results) == ["c0", "c1", "c2"]
    for n in range(3):
        artifact = results[f"c{n}"].artifact
        assert artifact["stdout"] == "".join(f"T{n} {i}\n" for i in range(50))
        assert artifact["value"] == str(n * 111)
    # One thread is one session: the three calls ran there one after another.
    assert sorted(results[f"c{n}"].artifact["execution_count"] for n in range(3)) == [1, 2, 3]


async def test_async_agent_runs_keep_threads_apart(
    scripted_model: MakeModel, engine: ReplEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions: list[str] = []
    real_arun, real_astream = engine.arun, engine.astream

    async def spy(code: str, session: str = "default", **kwargs: Any) -> ExecutionResult:
        sessions.append(session)
        return await real_arun(code, session, **kwargs)

    async def stream_spy(code: str, session: str = "default", **kwargs: Any) -> Any:
        sessions.append(session)  # inside a graph the tool streams its output (the async stream)
        async for event in real_astream(code, session, **kwargs):
            yield event

    monkeypatch.setattr(engine, "arun", spy)
    monkeypatch.setattr(engine, "astream", stream_spy)

    def script(model: Any) -> Iterator[AIMessage]:
        yield ask(run_code("c1", "items = ['a', 'b']"))
        yield AIMessage("Stored.")
        yield ask(run_code("c2", "items.append('c')\nitems"))
        yield AIMessage("Three items.")
        yield ask(run_code("c3", "items"))
        yield AIMessage("None here.")

    agent = make_agent(scripted_model(script), engine)
    await agent.ainvoke(user("store"), thread("a"))
    first = await agent.ainvoke(user("append"), thread("a"))
    second = await agent.ainvoke(user("show"), thread("b"))
    assert tool_results(first)["c2"].content == "OK\nOut: ['a', 'b', 'c']"
    assert tool_results(second)["c3"].content.startswith("Error: NameError: name 'items' is not defined")
    assert sessions == ["a", "a", "b"]  # every call went through the engine's async API


def test_figures_reach_the_model_as_image_blocks_and_survive_the_checkpointer(
    scripted_model: MakeModel,
) -> None:
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="

    def handler(request: ExecutionRequest) -> ExecutionResult:
        figure = Attachment(data_base64=png, width=1, height=1, description="Figure 1")
        return ExecutionResult(status="ok", session=request.session, stdout="plotted\n", attachments=[figure])

    def script(model: Any) -> Iterator[AIMessage]:
        yield ask(run_code("c1", "plt.plot([1, 2])"))
        (observation,) = model.last_tool_messages()
        kinds = [block["type"] for block in observation.content]
        yield AIMessage(f"I saw {kinds}.")

    agent = make_agent(scripted_model(script), ReplEngine(boundary=MockBoundary(handler)))
    state = agent.invoke(user("plot"), thread("t"))
    assert state["messages"][-1].content == "I saw ['text', 'image']."
    saved = tool_results(agent.get_state(thread("t")).values)["c1"]
    assert saved.content[1] == {"type": "image", "base64": png, "mime_type": "image/png"}
    assert saved.artifact["attachments"][0]["description"] == "Figure 1"


def test_an_engine_failure_does_not_end_the_agent_run(scripted_model: MakeModel) -> None:
    def handler(request: ExecutionRequest) -> ExecutionResult:
        raise CapacityError("too many live sessions (limit 100)")

    def script(model: Any) -> Iterator[AIMessage]:
        yield ask(run_code("c1", "1 + 1"))
        (observation,) = model.last_tool_messages()
        yield AIMessage(f"The tool said: {observation.content}")

    state = make_agent(scripted_model(script), ReplEngine(boundary=MockBoundary(handler))).invoke(
        user("add"), thread("t")
    )
    assert tool_results(state)["c1"].status == "error"
    assert state["messages"][-1].content == (
        "The tool said: Tool failure, not an error in your code: "
        "CapacityError: too many live sessions (limit 100)"
    )


def test_malformed_arguments_from_the_model_do_not_end_the_run(
    scripted_model: MakeModel, engine: ReplEngine
) -> None:
    def script(model: Any) -> Iterator[AIMessage]:
        yield ask(ToolCall(name="run_python", args={"source": "1"}, id="c1", type="tool_call"))
        yield ask(run_code("c2", "1 + 1"))
        yield AIMessage("2.")

    state = make_agent(scripted_model(script), engine).invoke(user("add"), thread("t"))
    results = tool_results(state)
    assert results["c1"].status == "error"
    assert "code" in results["c1"].content  # the validation error names the missing field
    assert results["c2"].content == "OK\nOut: 2"


def test_output_streams_to_the_graph_custom_stream_while_the_code_runs(
    scripted_model: MakeModel, engine: ReplEngine
) -> None:
    code = "import time\nfor i in range(3):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.05)\n"

    def script(model: Any) -> Iterator[AIMessage]:
        yield ask(run_code("s1", code))
        yield AIMessage("Done.")

    agent = make_agent(scripted_model(script), engine)
    seen: list[tuple[str, Any]] = []
    for mode, chunk in agent.stream(user("count"), thread("streamer"), stream_mode=["custom", "updates"]):
        seen.append((mode, chunk))
    custom = [chunk["genpark_repl"] for mode, chunk in seen if mode == "custom"]
    assert "".join(c["text"] for c in custom if c["kind"] == "output") == "tick 0\ntick 1\ntick 2\n"
    assert {c["stream"] for c in custom} == {"stdout"}
    # Every chunk comes before the tool's message (the "tools" update), not with it.
    tools_update = next(i for i, (mode, chunk) in enumerate(seen) if mode == "updates" and "tools" in chunk)
    assert all(i < tools_update for i, (mode, _) in enumerate(seen) if mode == "custom")
    message = seen[tools_update][1]["tools"]["messages"][0]
    assert message.artifact["stdout"] == "tick 0\ntick 1\ntick 2\n"


def test_outside_a_graph_nothing_is_streamed_and_the_reply_is_the_same(engine: ReplEngine) -> None:
    (tool, *_) = GenparkReplToolkit(engine=engine).get_tools()
    message = tool.invoke(run_code("x1", "print('plain')"), thread("solo"))
    assert message.artifact["stdout"] == "plain\n"
