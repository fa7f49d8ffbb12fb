"""Code mode with LangGraph: a langgraph-codeact agent whose code runs in a genpark-repl-tools session.

Offline: a scripted stand-in plays the model, so this needs no key and no network.

    pip install --no-deps langgraph-codeact   # its release pins langgraph<0.4, yet runs on 1.x
    .venv/bin/python examples/code_mode_langgraph.py [--boundary inprocess]

The agent's tool (`find_orders`) is a host tool: the model's code calls it in the sandboxed session,
the real function runs here on the host, and only plain data crosses. The code loops over the
results, keeps them in a variable for the next step, and prints only what matters. Each LangGraph
thread (`configurable.thread_id`) has its own session. With a real model, pass any LangChain chat
model to `create_codeact`.
"""

from __future__ import annotations

import argparse
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage
from langchain_genpark_repl import GenparkCodeExecutor
from langgraph.checkpoint.memory import InMemorySaver
from langgraph_codeact import create_codeact

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


def main(boundary: str) -> None:
    # The scripted model: the code of each step in a fenced block, then the answer.
    replies = [AIMessage(content=f"```python\n{code}\n```") for code in STEPS]
    replies.append(AIMessage(content="Orders 3 and 4 are open and over 50; the open orders are worth 325.5."))
    model = FakeMessagesListChatModel(responses=replies)
    with ReplEngine(boundary=boundary) as engine:
        executor = GenparkCodeExecutor(engine)
        agent = create_codeact(model, [find_orders], executor.eval_fn).compile(checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "user-42"}}  # the thread is the session
        task = {"role": "user", "content": "Which open orders are over 50, and what are they worth?"}
        for update in agent.stream({"messages": [task]}, config, stream_mode="updates"):
            for node, change in update.items():
                if node == "sandbox":
                    output = change["messages"][-1]["content"].replace("\n", "\n     ")
                    print(f"  <- {output}")
        print(f"answer: {agent.get_state(config).values['messages'][-1].content}")
        print(f"session variables: {', '.join(v.name for v in engine.variables('user-42'))}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--boundary", default="subprocess", choices=["subprocess", "inprocess"])
    main(parser.parse_args().boundary)
