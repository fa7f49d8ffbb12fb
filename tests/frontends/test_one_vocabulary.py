"""Every frontend says the same words for the same call: they all render the core's tool layer.

LangChain, LlamaIndex, MCP and the CLI each run the same calls on a fresh engine; the text a model (or
a person at the REPL) reads must be the core's `ToolReply.text`, word for word. MCP adds one line, the
session handle its stateless protocol needs; nothing else differs.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import anyio
from langchain_core.messages import ToolMessage
from langchain_genpark_repl import GenparkReplToolkit
from llama_index.tools.genpark_repl import GenparkReplToolSpec
from mcp import Client
from mcp_types import TextContent

from genpark_repl_tools import (
    BoundaryError,
    ExecutionRequest,
    ExecutionResult,
    MockBoundary,
    ReplEngine,
    tools,
)
from genpark_repl_tools.cli import repl
from genpark_repl_tools.mcp_server import create_server

SESSION = "repl"  # the CLI REPL's session; the others are told to use it
# (tool, argument): each call once, in this order, on a fresh engine. One line each, so the CLI REPL
# runs each as one cell too.
CALLS: list[tuple[str, str | None]] = [
    ("run_python", "x = 6 * 7"),
    ("run_python", "print('hi'); x"),
    ("run_python", "rows = [1, 2, 3]; 1 / 0"),
    ("list_variables", None),
    ("inspect_variable", "rows"),
    ("inspect_variable", "nope"),
    ("run_python", "import socket"),
]
CLI_LINE = {"run_python": "{}", "list_variables": ":vars", "inspect_variable": ":inspect {}"}


def new_engine() -> ReplEngine:
    return ReplEngine(boundary="inprocess", policy="standard")


def failing_engine() -> ReplEngine:
    def handler(request: ExecutionRequest) -> ExecutionResult:
        raise BoundaryError("the worker could not start")

    return ReplEngine(boundary=MockBoundary(handler))


def core_texts(engine: ReplEngine, calls: list[tuple[str, str | None]]) -> list[str]:
    out = []
    for tool, arg in calls:
        if tool == "run_python":
            reply = tools.run_python(engine, arg or "", SESSION)
        elif tool == "list_variables":
            reply = tools.list_variables(engine, SESSION)
        else:
            reply = tools.inspect_variable(engine, arg or "", SESSION)
        out.append(reply.text)
    return out


def langchain_texts(engine: ReplEngine, calls: list[tuple[str, str | None]]) -> list[str]:
    by_name = {t.name: t for t in GenparkReplToolkit(engine=engine).get_tools()}
    config: Any = {"configurable": {"thread_id": SESSION}}
    out = []
    for i, (tool, arg) in enumerate(calls):
        args = {} if arg is None else {"code" if tool == "run_python" else "name": arg}
        call = {"name": tool, "args": args, "id": f"c{i}", "type": "tool_call"}
        message = by_name[tool].invoke(call, config)
        assert isinstance(message, ToolMessage)
        assert isinstance(message.content, str)
        out.append(message.content)
    return out


def llamaindex_texts(engine: ReplEngine, calls: list[tuple[str, str | None]]) -> list[str]:
    by_name = {t.metadata.name: t for t in GenparkReplToolSpec(engine, session=SESSION).to_tool_list()}
    out = []
    for tool, arg in calls:
        kwargs = {} if arg is None else {"code" if tool == "run_python" else "name": arg}
        out.append(by_name[tool].call(**kwargs).content)
    return out


def mcp_texts(engine: ReplEngine, calls: list[tuple[str, str | None]]) -> list[str]:
    out: list[str] = []

    async def main() -> None:
        with anyio.fail_after(30):
            async with Client(create_server(engine)) as client:
                session_id: str | None = None
                for tool, arg in calls:
                    args: dict[str, Any] = {} if session_id is None else {"session_id": session_id}
                    if arg is not None:
                        args["code" if tool == "run_python" else "name"] = arg
                    result = await client.call_tool(tool, args)
                    first = result.content[0]
                    assert isinstance(first, TextContent)
                    text = first.text
                    if tool == "run_python" and result.structured_content:
                        session_id = result.structured_content["session_id"]
                        # The one addition: the handle the stateless protocol needs.
                        text, _, handle = text.rpartition("\nSession: ")
                        assert handle.startswith(session_id)
                    out.append(text)

    anyio.run(main)
    return out


def cli_transcript(engine: ReplEngine, calls: list[tuple[str, str | None]]) -> str:
    lines = "".join(
        CLI_LINE[tool].format(arg) + ("\n\n" if tool == "run_python" else "\n") for tool, arg in calls
    )
    stdout = io.StringIO()
    repl(engine, stdin=io.StringIO(lines), stdout=stdout)
    return stdout.getvalue()


def test_same_calls_same_words_in_every_frontend() -> None:
    expected = core_texts(new_engine(), CALLS)
    assert expected[1] == "OK\nstdout:\nhi\nOut: 42"
    assert expected[2].startswith("Error: ZeroDivisionError")
    assert expected[5] == "Not defined: 'nope'. Defined: x, rows."
    assert expected[6].startswith("Blocked by policy 'standard'")
    frontends: dict[str, Callable[[ReplEngine, list[tuple[str, str | None]]], list[str]]] = {
        "langchain": langchain_texts,
        "llamaindex": llamaindex_texts,
        "mcp": mcp_texts,
    }
    for name, texts in frontends.items():
        engine = new_engine()
        try:
            assert texts(engine, CALLS) == expected, name
        finally:
            engine.close()
    # The CLI REPL prints each reply as it comes.
    assert cli_transcript(new_engine(), CALLS) == "".join(text + "\n" for text in expected)


def test_an_engine_failure_reads_the_same_everywhere() -> None:
    calls: list[tuple[str, str | None]] = [("run_python", "1")]
    (expected,) = core_texts(failing_engine(), calls)
    assert expected == "Tool failure, not an error in your code: BoundaryError: the worker could not start"
    assert langchain_texts(failing_engine(), calls) == [expected]
    assert llamaindex_texts(failing_engine(), calls) == [expected]
    assert mcp_texts(failing_engine(), calls) == [expected]
    assert cli_transcript(failing_engine(), calls) == expected + "\n"
