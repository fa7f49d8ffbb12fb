"""LlamaIndex's CodeActAgent runs its code through GenparkCodeExecutor, offline, with a scripted model.

The agent's tools are host tools: the code calls them in the session, they run here in the test's
process (their calls are recorded), and variables stay in the conversation's session between steps.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from llama_index.core.agent.workflow import CodeActAgent
from llama_index.core.llms import ChatMessage, MessageRole, MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import Context
from llama_index.tools.genpark_repl import STORE_KEY, GenparkCodeExecutor

from genpark_repl_tools import ReplEngine

pytestmark = [
    # CodeActAgent's constructor walks its own members with inspect.getmembers, which reads pydantic's
    # deprecated attributes: pydantic warns, attributing it to inspect. Not ours.
    pytest.mark.filterwarnings("ignore::DeprecationWarning:inspect"),
    # The workflow snapshots its state between runs; it skips the agent's chat memory (rebuilt on the
    # next run) and warns that it did. The session id kept there is a plain string.
    pytest.mark.filterwarnings("ignore:Skipping serialization of known unserializable key"),
]

RESULT = "Result of executing the code given:"  # how CodeActAgent hands the model the code's output


class ScriptedCoder:
    """Plays the model: for a task, the code of each step in <execute> tags, then the last output."""

    def __init__(self, script: dict[str, list[str]]) -> None:
        self.script = script
        self.outputs: list[str] = []  # what each step's code gave back, as the model read it

    def __call__(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        task, results = "", []
        for message in messages:
            content = message.content or ""
            if message.role == MessageRole.USER and content.startswith(RESULT):
                results.append(content.removeprefix(RESULT).strip())
            elif message.role == MessageRole.USER:
                task, results = content, []
        steps = self.script[task]
        if results:
            self.outputs.append(results[-1])
        if len(results) < len(steps):
            return ChatMessage(
                role=MessageRole.ASSISTANT, content=f"<execute>\n{steps[len(results)]}\n</execute>"
            )
        return ChatMessage(role=MessageRole.ASSISTANT, content=f"Answer: {results[-1] if results else ''}")


@pytest.fixture(params=["inprocess", "subprocess"])
def engine(request: pytest.FixtureRequest) -> Iterator[ReplEngine]:
    with ReplEngine(policy="standard", boundary=request.param) as e:
        yield e


PRICES: dict[str, float] = {"apple": 0.5, "pear": 0.75, "fig": 2.0}
TASK = "What do an apple, a pear and a fig cost together?"
STEPS = [
    # Step 1 calls the host tool in a loop and keeps the result in a variable.
    "prices = {item: lookup_price(item) for item in ['apple', 'pear', 'fig']}\nprint(len(prices), 'prices')",
    # Step 2 uses that variable: the session kept it.
    "total = sum(prices.values())\nprint(f'total {total}')",
]


def _agent(
    executor: GenparkCodeExecutor, tools: list[Any], script: dict[str, list[str]]
) -> tuple[CodeActAgent, ScriptedCoder]:
    coder = ScriptedCoder(script)
    agent = CodeActAgent(
        code_execute_fn=executor.execute,
        tools=list(tools),  # CodeActAgent appends its own `execute` tool to the list it is given
        llm=MockFunctionCallingLLM(response_generator=coder),
    )
    return agent, coder


@pytest.mark.asyncio
async def test_two_steps_call_a_host_tool_and_keep_variables(engine: ReplEngine) -> None:
    calls: list[str] = []

    def lookup_price(item: str) -> float:
        """The price of one item, in euros."""
        calls.append(item)
        return PRICES[item]

    executor = GenparkCodeExecutor(engine, tools=[lookup_price])
    agent, coder = _agent(executor, [lookup_price], {TASK: STEPS})
    ctx = Context(agent)
    answer = str(await agent.run(TASK, ctx=ctx))

    assert calls == ["apple", "pear", "fig"]  # the real function ran on the host, once per call
    assert "3 prices" in coder.outputs[0]
    assert "total 3.25" in coder.outputs[1]
    assert "total 3.25" in answer
    session = await ctx.store.get(STORE_KEY)
    assert [v.name for v in engine.variables(session)] == ["prices", "total"]


@pytest.mark.asyncio
async def test_each_conversation_has_its_own_session(engine: ReplEngine) -> None:
    executor = GenparkCodeExecutor(engine)
    script = {"set": ["secret = 42\nprint('set')"], "read": ["print(secret)"]}
    agent, coder = _agent(executor, [], script)
    first, second = Context(agent), Context(agent)
    await agent.run("set", ctx=first)
    await agent.run("read", ctx=second)  # another conversation: no `secret` there
    await agent.run("read", ctx=first)  # the same conversation, a later turn: still there
    assert "NameError: name 'secret' is not defined" in coder.outputs[1]
    assert coder.outputs[2] == "OK\nstdout:\n42"
    assert await first.store.get(STORE_KEY) != await second.store.get(STORE_KEY)


@pytest.mark.asyncio
async def test_a_function_tool_and_an_async_tool_and_a_tool_error(engine: ReplEngine) -> None:
    async def fetch_rate(currency: str) -> float:
        """The exchange rate of `currency` to euros."""
        if currency != "USD":
            raise KeyError(f"no rate for {currency}")
        return 0.9

    def convert(amount: float, rate: float) -> float:
        return round(amount * rate, 2)

    tools = [FunctionTool.from_defaults(convert, name="to_euros"), fetch_rate]
    executor = GenparkCodeExecutor(engine, tools=tools)
    code = (
        "try:\n    fetch_rate('XYZ')\nexcept ToolError as exc:\n    print('caught:', exc)\n"
        "print(convert(10, fetch_rate('USD')))"
    )
    agent, coder = _agent(executor, tools, {"convert": [code]})
    await agent.run("convert", ctx=Context(agent))
    # A FunctionTool is offered under its function's name, as CodeActAgent's prompt shows it.
    assert "caught: fetch_rate: " in coder.outputs[0]
    assert "no rate for XYZ" in coder.outputs[0]
    assert "9.0" in coder.outputs[0]


@pytest.mark.asyncio
async def test_without_a_context_the_executor_keeps_its_own_session(engine: ReplEngine) -> None:
    executor = GenparkCodeExecutor(engine, session="pinned")
    await executor.execute("x = 2")
    assert "Out: 4" in await executor.execute("x * 2")
    assert [v.name for v in engine.variables("pinned")] == ["x"]


def test_a_tool_that_needs_a_context_is_refused() -> None:
    def needs(ctx: Context) -> str:
        return "x"

    needs.__annotations__["ctx"] = Context  # FunctionTool looks for the class, not this module's string

    with ReplEngine(boundary="inprocess") as engine, pytest.raises(ValueError, match="needs a Context"):
        GenparkCodeExecutor(engine, tools=[FunctionTool.from_defaults(needs)])
