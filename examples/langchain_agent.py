"""A LangChain agent that answers with Python: each conversation thread has its own persistent session.

Offline by default: a scripted stand-in model makes the tool calls, so this runs without network,
keys or provider packages:

    .venv/bin/python examples/langchain_agent.py

With a real model: set a provider key and install its LangChain package, and that model is used:

    OPENAI_API_KEY=...     pip install langchain-openai     -> openai:gpt-4.1-mini
    ANTHROPIC_API_KEY=...  pip install langchain-anthropic  -> anthropic:claude-sonnet-4-5
    --model provider:name  any model string `init_chat_model` accepts; --offline forces the script

Needs the integration and the agent runtime: `pip install -e integrations/langchain langchain langgraph`.
What it shows: a variable made in turn 1 is used in turn 2 of the same thread; another thread cannot
see it; the variables tool lists what a thread holds.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolCall, ToolMessage
from langchain_genpark_repl import GenparkReplToolkit
from langgraph.checkpoint.memory import InMemorySaver

from genpark_repl_tools import Limits, ReplEngine

SYSTEM_PROMPT = (
    "You are a data analyst. Use the run_python tool for every calculation and answer from its output. "
    "Variables persist between calls in this conversation, so reuse them instead of retyping data."
)
QUESTIONS = [
    ("analyst-1", "Monthly sales were Jan 1200, Feb 1350, Mar 1710, Apr 1580. Mean, and best month?"),
    ("analyst-1", "What was the growth from the first to the last month, in percent?"),
    ("analyst-1", "Which variables do you have in your Python session?"),
    ("analyst-2", "Which month had the best sales?"),
]
PROVIDERS = [  # (environment variable, package, default model)
    ("OPENAI_API_KEY", "langchain_openai", "openai:gpt-4.1-mini"),
    ("ANTHROPIC_API_KEY", "langchain_anthropic", "anthropic:claude-sonnet-4-5"),
]


class ScriptedModel(GenericFakeChatModel):
    """Stands in for a chat model: replies from a script that may quote the last tool result.

    In a scripted reply `{out}` becomes the result's `Out:` value, `{first}` its first line and
    `{observation}` all of it.
    """

    disable_streaming: bool = True

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:
        return self  # the script already knows the tools

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        result = super()._generate(messages, *args, **kwargs)
        reply = result.generations[0].message
        last = messages[-1]
        if isinstance(reply.content, str) and isinstance(last, ToolMessage):
            text = last.text
            out = next((line[5:] for line in text.splitlines() if line.startswith("Out: ")), "")
            first = text.split("\n", 1)[0]
            reply.content = reply.content.format(out=out, first=first, observation=text)
        return result


def _code(call_id: str, code: str, tool: str = "run_python") -> AIMessage:
    args = {"code": code} if tool == "run_python" else {}
    return AIMessage(content="", tool_calls=[ToolCall(name=tool, args=args, id=call_id, type="tool_call")])


def scripted_replies() -> Iterator[AIMessage | str]:
    yield _code(
        "call-1",
        "sales = {'Jan': 1200, 'Feb': 1350, 'Mar': 1710, 'Apr': 1580}\n"
        "print('mean:', sum(sales.values()) / len(sales))\n"
        "max(sales, key=sales.get)",
    )
    yield "The best month was {out}; the mean is in the output above."
    yield _code("call-2", "months = list(sales)\nround(100 * (sales[months[-1]] / sales[months[0]] - 1), 1)")
    yield "Sales grew {out} % from the first to the last month."
    yield _code("call-3", "", tool="list_variables")
    yield "{observation}"
    yield _code("call-4", "max(sales, key=sales.get)")  # the other thread: no `sales` there
    yield "This conversation has no sales data yet ({first}). Please share the numbers."


def choose_model(requested: str | None, offline: bool) -> tuple[BaseChatModel, str]:
    """The requested model, else the first provider with a key and its package, else the script."""
    if offline:
        return ScriptedModel(messages=scripted_replies()), "scripted (--offline)"
    from langchain.chat_models import init_chat_model

    if requested:
        return init_chat_model(requested), requested
    missing = []
    for key, package, model in PROVIDERS:
        if os.environ.get(key):
            if importlib.util.find_spec(package) is not None:
                return init_chat_model(model), model
            missing.append(f"{key} is set but {package} is not installed")
    note = f"; {', '.join(missing)}" if missing else ""
    return ScriptedModel(messages=scripted_replies()), f"scripted (offline{note})"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model", help="a model string for init_chat_model, e.g. openai:gpt-4.1-mini")
    parser.add_argument("--offline", action="store_true", help="use the scripted model even if a key is set")
    args = parser.parse_args(argv)

    try:
        model, label = choose_model(args.model, args.offline)
    except ImportError as exc:  # --model names a provider whose package is missing
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"model: {label}")
    with ReplEngine(limits=Limits(timeout_s=10)) as engine:
        agent = create_agent(
            model,
            tools=GenparkReplToolkit(engine=engine).get_tools(),
            system_prompt=SYSTEM_PROMPT,
            checkpointer=InMemorySaver(),
        )
        for thread_id, question in QUESTIONS:
            print(f"\n[{thread_id}] user: {question}")
            state = agent.invoke(
                {"messages": [{"role": "user", "content": question}]},
                {"configurable": {"thread_id": thread_id}},
            )
            for message in _this_turn(state["messages"]):
                _show(message)
    return 0


def _this_turn(messages: list[BaseMessage]) -> list[BaseMessage]:
    last_user = max(i for i, m in enumerate(messages) if m.type == "human")
    return messages[last_user + 1 :]


def _show(message: BaseMessage) -> None:
    if isinstance(message, AIMessage):
        for call in message.tool_calls:
            code = call["args"].get("code")
            shown = ("\n" + _indent(code)) if code else (f" {call['args']}" if call["args"] else "")
            print(f"  -> {call['name']}:{shown}")
        if message.text:
            print(f"  assistant:\n{_indent(message.text)}")
    elif isinstance(message, ToolMessage):
        text = message.text
        print(f"  <- {message.name} ({message.status}):\n{_indent(text)}")


def _indent(text: str) -> str:
    return "\n".join("       " + line for line in text.splitlines())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
