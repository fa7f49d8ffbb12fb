"""Code mode with LlamaIndex: a CodeActAgent whose code runs in a genpark-repl-tools session.

Offline: a scripted stand-in plays the model, so this needs no key and no network.

    .venv/bin/python examples/code_mode_llamaindex.py [--boundary inprocess]

The agent's tool (`find_orders`) is a host tool: the model's code calls it in the sandboxed session,
the real function runs here on the host, and only plain data crosses. The code loops over the
results, keeps them in a variable for the next step, and prints only what matters. Each conversation
(workflow `Context`) has its own session. With a real model, pass any LlamaIndex LLM as `llm=`.
"""

from __future__ import annotations

import argparse
import asyncio
import warnings
from collections.abc import Sequence
from typing import Any

from llama_index.core.agent.workflow import CodeActAgent
from llama_index.core.llms import ChatMessage, MessageRole, MockFunctionCallingLLM
from llama_index.core.workflow import Context
from llama_index.tools.genpark_repl import STORE_KEY, GenparkCodeExecutor

from genpark_repl_tools import ReplEngine

ORDERS = [
    {"id": 1, "customer": "ada", "total": 120.0, "status": "shipped"},
    {"id": 2, "customer": "bob", "total": 35.5, "status": "open"},
    {"id": 3, "customer": "ada", "total": 80.0, "status": "open"},
    {"id": 4, "customer": "cy", "total": 210.0, "status": "open"},
]


def find_orders(status: str) -> list[dict[str, Any]]:
    """The shop's orders with a given status ("open" or "shipped")."""
    print(f"  [host] find_orders({status!r})")
    return [order for order in ORDERS if order["status"] == status]


STEPS = [
    # Step 1: one tool call, the result kept in a variable; only a summary is printed.
    "open_orders = find_orders('open')\nprint(len(open_orders), 'open orders')",
    # Step 2: the variable from step 1 is still there.
    "big = [o['id'] for o in open_orders if o['total'] > 50]\n"
    "print('big:', big, 'open total:', sum(o['total'] for o in open_orders))",
]
RESULT = "Result of executing the code given:"  # how CodeActAgent hands the model the code's output


def scripted_model(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
    """Plays the model: the code of the next step in <execute> tags, then an answer from the output."""
    results = []
    for message in messages:
        if message.role == MessageRole.USER:
            text = message.content or ""
            results = [*results, text] if text.startswith(RESULT) else []
    if len(results) < len(STEPS):
        return ChatMessage(
            role=MessageRole.ASSISTANT, content=f"<execute>\n{STEPS[len(results)]}\n</execute>"
        )
    printed = results[-1].split("stdout:")[-1].split("Variables:")[0].strip()  # what the code printed
    return ChatMessage(role=MessageRole.ASSISTANT, content=f"From the orders: {printed}")


async def main(boundary: str) -> None:
    # The workflow snapshots its state between runs and skips (with a warning) the agent's chat memory.
    warnings.filterwarnings("ignore", message="Skipping serialization of known unserializable key")
    with ReplEngine(boundary=boundary) as engine:
        executor = GenparkCodeExecutor(engine, tools=[find_orders])
        agent = CodeActAgent(
            code_execute_fn=executor.execute,
            tools=[find_orders],  # the same tools: the agent describes them to the model
            llm=MockFunctionCallingLLM(response_generator=scripted_model),
        )
        ctx = Context(agent)
        answer = await agent.run("Which open orders are over 50, and what are they worth?", ctx=ctx)
        print(f"answer: {answer}")
        session = await ctx.store.get(STORE_KEY)
        print(f"session variables: {', '.join(v.name for v in engine.variables(session))}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--boundary", default="subprocess", choices=["subprocess", "inprocess"])
    asyncio.run(main(parser.parse_args().boundary))
