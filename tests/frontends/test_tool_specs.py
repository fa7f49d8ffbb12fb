"""A `ToolSpec` is enough to call its tool: the generic entry point the adapters are built on."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_genpark_repl import GenparkReplTool

from genpark_repl_tools import ReplEngine, tools


@pytest.fixture
def engine() -> Any:
    with ReplEngine(boundary="inprocess", policy="standard") as repl:
        yield repl


def test_spec_call_is_the_tool_function(engine: ReplEngine) -> None:
    tools.RUN_PYTHON.call(engine, "s", {"code": "rows = [1, 2]"})
    assert tools.LIST_VARIABLES.call(engine, "s", {}).text == tools.list_variables(engine, "s").text
    reply = tools.INSPECT_VARIABLE.call(engine, "s", {"name": "rows"})
    assert reply.text == tools.inspect_variable(engine, "rows", "s").text


def test_spec_acall_is_the_async_tool_function(engine: ReplEngine) -> None:
    reply = asyncio.run(tools.RUN_PYTHON.acall(engine, "s", {"code": "6 * 7"}))
    assert reply.text == "OK\nOut: 42"


def test_spec_call_seeds_the_files_on_the_first_call_only(engine: ReplEngine) -> None:
    files = tools.SessionFiles({"data.txt": b"abc"})
    code = "import pathlib\np = pathlib.Path('data.txt')\ntext = p.read_text()\np.write_text('new')\ntext"

    def value(session: str) -> str:
        return str(tools.RUN_PYTHON.call(engine, session, {"code": code}, files).data["value"])

    assert value("s") == "'abc'"
    assert value("s") == "'new'"  # what the first call wrote: the files are not seeded again
    assert value("t") == "'abc'"  # each session gets its own copy


def test_a_model_cannot_pick_the_session_through_the_arguments(engine: ReplEngine) -> None:
    # The session comes from the frontend's conversation mapping, never from the model's arguments.
    engine.run("secret = 1", session="other")
    with pytest.raises(TypeError, match="run_python takes no argument session"):
        tools.RUN_PYTHON.call(engine, "mine", {"code": "secret", "session": "other"})
    with pytest.raises(TypeError, match="list_variables takes no argument engine, session"):
        tools.LIST_VARIABLES.call(engine, "mine", {"session": "other", "engine": None})
    # Through LangChain the schema drops what it does not declare: the thread's own session runs it.
    tool = GenparkReplTool(engine=engine)
    call = {"name": tool.name, "args": {"code": "secret", "session": "other"}, "id": "c", "type": "tool_call"}
    message = tool.invoke(call, {"configurable": {"thread_id": "mine"}})
    assert message.status == "error"
    assert "NameError" in message.content


def test_schema_is_the_arguments_with_their_descriptions() -> None:
    schema = tools.RUN_PYTHON.schema.model_json_schema()
    assert schema["required"] == ["code"]
    assert schema["properties"]["code"]["description"] == tools.RUN_PYTHON.arguments["code"]
    assert tools.LIST_VARIABLES.schema.model_json_schema()["properties"] == {}
    upload = tools.UPLOAD_FILE.schema.model_json_schema()
    assert upload["required"] == ["name", "content"]
    assert upload["properties"]["content_base64"]["type"] == "boolean"
    assert upload["properties"]["content_base64"]["default"] is False
    assert tools.RUN_PYTHON.schema is tools.RUN_PYTHON.schema  # built once
