"""langgraph-codeact's agent runs its code through GenparkCodeExecutor, offline, with a scripted model.

The agent's tools are host tools: the code calls them in the session, they run here in the test's
process (their calls are recorded), and variables stay in the LangGraph thread's session.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import tool
from langchain_genpark_repl import GenparkCodeExecutor
from langgraph.checkpoint.memory import InMemorySaver

from genpark_repl_tools import ReplEngine

codeact = pytest.importorskip("langgraph_codeact", reason="langgraph-codeact is not installed")

PRICES: dict[str, float] = {"apple": 0.5, "pear": 0.75, "fig": 2.0}
STEPS = [
    # Step 1 calls the host tool in a loop and keeps the result in a variable.
    "prices = {item: lookup_price(item) for item in ['apple', 'pear', 'fig']}\nprint(len(prices), 'prices')",
    # Step 2 uses that variable: the session kept it.
    "total = sum(prices.values())\nprint(f'total {total}')",
]


def _code(source: str) -> AIMessage:
    return AIMessage(content=f"```python\n{source}\n```")


def _outputs(messages: list[BaseMessage]) -> list[str]:
    """What each step's code gave back: create_codeact returns it to the model as a user message."""
    return [str(m.content) for m in messages if m.type == "human"][1:]


@pytest.fixture(params=["inprocess", "subprocess"])
def engine(request: pytest.FixtureRequest) -> Iterator[ReplEngine]:
    with ReplEngine(policy="standard", boundary=request.param) as e:
        yield e


def _agent(executor_fn: Any, tools: list[Any], replies: list[AIMessage]) -> Any:
    model = FakeMessagesListChatModel(responses=replies)
    return codeact.create_codeact(model, tools, executor_fn).compile(checkpointer=InMemorySaver())


def _ask(agent: Any, thread: str, task: str, **state: Any) -> list[BaseMessage]:
    done = agent.invoke(
        {"messages": [{"role": "user", "content": task}], **state}, {"configurable": {"thread_id": thread}}
    )
    return list(done["messages"])


def test_two_steps_call_a_host_tool_and_keep_variables(engine: ReplEngine) -> None:
    calls: list[str] = []

    def lookup_price(item: str) -> float:
        """The price of one item, in euros."""
        calls.append(item)
        return PRICES[item]

    executor = GenparkCodeExecutor(engine)
    replies = [_code(STEPS[0]), _code(STEPS[1]), AIMessage(content="3.25 euros")]
    messages = _ask(_agent(executor.eval_fn, [lookup_price], replies), "alice", "What do they cost?")

    assert calls == ["apple", "pear", "fig"]  # the real function ran on the host, once per call
    first, second = _outputs(messages)
    assert "3 prices" in first
    assert "total 3.25" in second
    assert messages[-1].content == "3.25 euros"
    # The thread's id is the session; the graph state holds no copy of the variables.
    assert [v.name for v in engine.variables("alice")] == ["prices", "total"]


def test_each_thread_has_its_own_session(engine: ReplEngine) -> None:
    executor = GenparkCodeExecutor(engine)
    replies = [_code("secret = 42"), AIMessage(content="set"), _code("print(secret)"), AIMessage(content="?")]
    replies += [_code("print(secret)"), AIMessage(content="42")]
    agent = _agent(executor.eval_fn, [], replies)
    _ask(agent, "alice", "set it")
    (bob,) = _outputs(_ask(agent, "bob", "read it"))
    alice = _outputs(_ask(agent, "alice", "read it"))[-1]  # a later turn of alice's thread
    assert "NameError: name 'secret' is not defined" in bob
    assert alice == "OK\nstdout:\n42"


@pytest.mark.asyncio
async def test_async_eval_fn_with_a_langchain_tool_and_seeded_values(engine: ReplEngine) -> None:
    @tool
    def convert(amount: float, rate: float) -> float:
        """Converts an amount at a rate."""
        return round(amount * rate, 2)

    executor = GenparkCodeExecutor(engine)
    code = "try:\n    convert(1)\nexcept Exception as exc:\n    print('caught:', exc)\n"
    code += "print(convert(amount, rate))"
    agent = _agent(executor.aeval_fn, [convert], [_code(code), AIMessage(content="done")])
    state = {"context": {"amount": 10, "rate": 0.9}}  # plain values the caller puts into the graph state
    done = await agent.ainvoke(
        {"messages": [{"role": "user", "content": "convert"}], **state}, {"configurable": {"thread_id": "t"}}
    )
    (output,) = _outputs(done["messages"])
    assert "caught: convert" in output  # a missing argument is refused with the tool's name
    assert "9.0" in output
    assert done["context"] == state["context"]  # new_vars is empty: the values live in the session
    # Python 3.10's asyncio cannot hand LangGraph's config to an async node: the default session then.
    session = "t" if sys.version_info >= (3, 11) else executor.default_session
    assert {v.name for v in engine.variables(session)} >= {"amount", "rate"}


def test_outside_a_thread_the_executor_keeps_its_own_session(engine: ReplEngine) -> None:
    executor = GenparkCodeExecutor(engine, default_session="mine")
    executor.eval_fn("x = 2", {})
    output, new_vars = executor.eval_fn("x * 2", {})
    assert "Out: 4" in output
    assert new_vars == {}
    assert [v.name for v in engine.variables("mine")] == ["x"]


def test_a_langchain_tool_in_locals_is_called_with_its_arguments(engine: ReplEngine) -> None:
    @tool
    def scale(amount: float, factor: float) -> float:
        """Multiplies an amount by a factor."""
        return amount * factor

    executor = GenparkCodeExecutor(engine, default_session="mine")
    output, _ = executor.eval_fn("scale(amount=2, factor=1.5)", {"scale": scale})
    assert "Out: 3.0" in output


@pytest.mark.slow
def test_the_example_runs_offline() -> None:
    example = Path(__file__).resolve().parents[4] / "examples" / "code_mode_langgraph.py"
    done = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stderr
    # The tool ran once, on the host; step 2 used step 1's variable.
    assert done.stdout.count("[host] find_orders('open')") == 1
    assert "3 open orders" in done.stdout
    assert "big: [3, 4] open total: 325.5" in done.stdout
    assert done.stdout.endswith("session variables: open_orders, big\n")
