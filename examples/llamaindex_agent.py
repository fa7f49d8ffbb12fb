"""A LlamaIndex FunctionAgent whose Python tool keeps one namespace per conversation.

Offline by default: a scripted mock model plays the agent, so this needs no key and no network.

    .venv/bin/python examples/llamaindex_agent.py

With a real model: install the provider's LlamaIndex package, set its key, and name the provider.

    pip install llama-index-llms-openai       # then: export OPENAI_API_KEY=...
    .venv/bin/python examples/llamaindex_agent.py --llm openai [--model gpt-4o-mini]

    pip install llama-index-llms-anthropic    # then: export ANTHROPIC_API_KEY=...
    .venv/bin/python examples/llamaindex_agent.py --llm anthropic [--model claude-sonnet-4-5]

What it shows: turns of one conversation share variables; an error comes back as an observation
the model fixes; a second conversation is isolated; a conversation saved with `ctx.to_dict()` and
restored with `Context.from_dict` finds its variables again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
import warnings
from collections.abc import Sequence
from typing import Any

from llama_index.core.agent.workflow import FunctionAgent, ToolCall, ToolCallResult
from llama_index.core.base.llms.types import ToolCallBlock
from llama_index.core.llms import LLM, ChatMessage, MessageRole, MockFunctionCallingLLM
from llama_index.core.workflow import Context
from llama_index.tools.genpark_repl import GenparkReplToolSpec

from genpark_repl_tools import Limits, ReplEngine

SYSTEM_PROMPT = (
    "You are a careful data assistant. Use the run_python tool for every calculation; variables you "
    "define stay available in later turns of this conversation. Answer in one or two sentences."
)

PRICES = "This week's prices: 12.5, 14.0, 13.25, 15.5, 14.75. Store them as `prices`; what is the mean?"
BEST_DAY = "Which day (1-based) had the highest price?"
CHANGES = "How much did the price change from each day to the next, in percent?"
OTHER = "What are the prices?"
AGAIN = "Remind me: what was the mean?"


def python(code: str) -> tuple[str, dict[str, Any]]:
    return ("run_python", {"code": code})


CHANGE = "round(100 * (prices[i + 1] / prices[i] - 1), 1)"

# What the offline stand-in for a model does for each user message: one list of tool calls per step
# (it sees each step's results before the next), then it answers with what the last tool said.
SCRIPT: dict[str, list[list[tuple[str, dict[str, Any]]]]] = {
    PRICES: [
        [python("import statistics\nprices = [12.5, 14.0, 13.25, 15.5, 14.75]\nstatistics.mean(prices)")]
    ],
    BEST_DAY: [[python("prices.index(max(prices)) + 1")]],
    CHANGES: [
        # The first try runs off the end of the list; the error comes back as an observation to fix.
        [python(f"changes = [{CHANGE} for i in range(len(prices))]")],
        [python(f"changes = [{CHANGE} for i in range(len(prices) - 1)]\nchanges")],
    ],
    OTHER: [[python("prices")]],
    AGAIN: [[python("statistics.mean(prices)")]],
}


class ScriptedModel:
    """Plays the model offline: the tool calls in SCRIPT, step by step, then the last tool's text."""

    def __call__(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        turn: list[ChatMessage] = []
        for message in reversed(messages):
            if message.role == MessageRole.USER:
                break
            turn.append(message)
        user = next(m for m in reversed(messages) if m.role == MessageRole.USER)
        steps = SCRIPT[user.content or ""]
        done = sum(1 for m in turn if m.role == MessageRole.ASSISTANT)
        if done < len(steps):
            return ChatMessage(
                role=MessageRole.ASSISTANT,
                blocks=[
                    ToolCallBlock(
                        tool_call_id=f"call-{uuid.uuid4().hex[:8]}", tool_name=name, tool_kwargs=kwargs
                    )
                    for name, kwargs in steps[done]
                ],
            )
        last_tool = next(m for m in turn if m.role == MessageRole.TOOL)
        return ChatMessage(role=MessageRole.ASSISTANT, content=f"Python says: {last_tool.content}")


def make_llm(provider: str, model: str | None) -> LLM:
    if provider == "mock":
        return MockFunctionCallingLLM(response_generator=ScriptedModel())
    try:
        if provider == "openai":
            from llama_index.llms.openai import OpenAI

            return OpenAI(model=model or "gpt-4o-mini")
        from llama_index.llms.anthropic import Anthropic

        return Anthropic(model=model or "claude-sonnet-4-5")
    except ImportError as exc:
        raise SystemExit(
            f"--llm {provider} needs its package: pip install llama-index-llms-{provider}"
        ) from exc


async def ask(agent: FunctionAgent, ctx: Context, question: str, label: str) -> None:
    print(f"\n[{label}] user: {question}")
    handler = agent.run(question, ctx=ctx)
    async for event in handler.stream_events():
        if isinstance(event, ToolCallResult):
            print(f"  <- {event.tool_output.content}".replace("\n", "\n     "))
        elif isinstance(event, ToolCall):
            args = ", ".join(f"{k}={v!r}" for k, v in event.tool_kwargs.items())
            print(f"  -> {event.tool_name}({args})")
    answer = str(await handler).replace("\n", "\n    ")
    print(f"[{label}] agent: {answer}")


async def main(provider: str, model: str | None) -> None:
    # LlamaIndex snapshots the workflow state between runs and skips (with a warning) the agent's chat
    # memory object, which it rebuilds; the session id these tools keep there is a plain string.
    warnings.filterwarnings("ignore", message="Skipping serialization of known unserializable key")
    with ReplEngine(limits=Limits(timeout_s=10)) as engine:
        spec = GenparkReplToolSpec(engine=engine)
        agent = FunctionAgent(
            tools=spec.to_tool_list(), llm=make_llm(provider, model), system_prompt=SYSTEM_PROMPT
        )

        alice = Context(agent)
        await ask(agent, alice, PRICES, "alice")
        await ask(agent, alice, BEST_DAY, "alice")  # `prices` from the turn before is still there
        await ask(agent, alice, CHANGES, "alice")  # an error, read and fixed

        bob = Context(agent)
        await ask(agent, bob, OTHER, "bob")  # another conversation, another namespace

        # Save alice's conversation as JSON (a database row, a file) and restore it later. The context
        # holds only the session id; the variables stay in the engine for as long as it runs.
        saved = json.dumps(alice.to_dict())
        restored = Context.from_dict(agent, json.loads(saved))
        await ask(agent, restored, AGAIN, "alice, restored")

        # A finished conversation's namespace is freed with engine.close(session).
        print(
            f"\nsessions: {len(engine.sessions())}; closing bob's: {engine.close(await spec.session_id(bob))}"
        )
        print(f"sessions: {len(engine.sessions())}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--llm", choices=["mock", "openai", "anthropic"], default="mock")
    parser.add_argument("--model", default=None, help="the provider's model name")
    options = parser.parse_args()
    asyncio.run(main(options.llm, options.model))
