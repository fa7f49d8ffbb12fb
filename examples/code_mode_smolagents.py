"""Code mode with smolagents: a CodeAgent whose code runs in a genpark-repl-tools session.

Offline: a scripted stand-in plays the model, so this needs no key and no network.

    .venv/bin/python examples/code_mode_smolagents.py [--boundary inprocess]

The agent's tool (`find_orders`) is a host tool: the model's code calls it in the sandboxed session,
the real function runs here on the host, and only plain data crosses. The code loops over the
results, keeps them in a variable for the next step, and hands back only what matters with
`final_answer`. With a real model, pass any smolagents `Model` (InferenceClientModel, LiteLLMModel,
...) instead of `ScriptedModel`.
"""

from __future__ import annotations

import argparse
from typing import Any

from smolagents import ChatMessage, CodeAgent, Model, tool

from genpark_repl_tools import ReplEngine
from genpark_repl_tools.smolagents import GenparkExecutor

ORDERS = [
    {"id": 1, "customer": "ada", "total": 120.0, "status": "shipped"},
    {"id": 2, "customer": "bob", "total": 35.5, "status": "open"},
    {"id": 3, "customer": "ada", "total": 80.0, "status": "open"},
    {"id": 4, "customer": "cy", "total": 210.0, "status": "open"},
]


@tool
def find_orders(status: str) -> list[dict[str, Any]]:
    """The shop's orders with a given status.

    Args:
        status: "open" or "shipped".
    """
    print(f"  [host] find_orders({status!r})")
    return [order for order in ORDERS if order["status"] == status]


STEPS = [
    # Step 1: one tool call, the result kept in a variable; only a summary is printed.
    "open_orders = find_orders('open')\nprint(len(open_orders), 'open orders')",
    # Step 2: the variable from step 1 is still there.
    "big = [o['id'] for o in open_orders if o['total'] > 50]\n"
    "final_answer({'big_open_orders': big, 'open_total': sum(o['total'] for o in open_orders)})",
]


class ScriptedModel(Model):
    """Plays the model: the code of each step, in order, in smolagents' <code> blocks."""

    def __init__(self) -> None:
        super().__init__(model_id="scripted")
        self.steps = list(STEPS)

    def generate(
        self, messages: list[Any], stop_sequences: list[str] | None = None, **kwargs: Any
    ) -> ChatMessage:
        return ChatMessage(
            role="assistant", content=f"Thought: next step.\n<code>\n{self.steps.pop(0)}\n</code>"
        )


def main(boundary: str) -> None:
    with ReplEngine(boundary=boundary) as engine:
        executor = GenparkExecutor(engine)
        agent = CodeAgent(tools=[find_orders], model=ScriptedModel(), executor=executor, verbosity_level=0)
        answer = agent.run("Which open orders are over 50, and what are the open orders worth?")
        print(f"answer: {answer}")
        for step in agent.memory.steps[1:]:
            observations = getattr(step, "observations", None)
            if observations:
                print(f"step {step.step_number} observed: {observations.strip()!r}")
        names = ", ".join(v.name for v in engine.variables(executor.session))
        print(f"session variables: {names}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--boundary", default="subprocess", choices=["subprocess", "inprocess"])
    main(parser.parse_args().boundary)
