"""Bad output through GenparkReplTool: the ToolMessage's content and artifact are well-formed, whatever
the code printed, returned or named (the artifact survives a strict UTF-8 JSON encoding)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from langchain_core.messages import ToolMessage
from langchain_genpark_repl import GenparkReplTool, GenparkVariablesTool

from genpark_repl_tools import ExecutionResult, Limits, ReplEngine
from genpark_repl_tools.testing.bad_output import (
    BAD_OUTPUT_TIMEOUT_S,
    BAD_OUTPUTS,
    BadOutput,
    assert_bad_output,
    assert_bad_text,
    kind_of,
)


@pytest.fixture(params=BAD_OUTPUTS, ids=kind_of)
def case(request: pytest.FixtureRequest) -> BadOutput:
    bad: BadOutput = request.param
    return bad


@pytest.fixture
def engine(case: BadOutput) -> Iterator[ReplEngine]:
    # The endless __repr__ is stopped sooner: waiting out the generous limit proves nothing more.
    timeout_s = 1.0 if case.status == "timeout" else BAD_OUTPUT_TIMEOUT_S
    with ReplEngine(policy="trusted", limits=Limits(timeout_s=timeout_s)) as repl:
        yield repl


def call(tool: GenparkReplTool | GenparkVariablesTool, **args: str) -> ToolMessage:
    message = tool.invoke({"name": tool.name, "args": args, "id": "call-1", "type": "tool_call"})
    assert isinstance(message, ToolMessage)
    return message


def text_of(message: ToolMessage) -> str:
    if isinstance(message.content, str):
        return message.content
    return "".join(b["text"] for b in message.content if isinstance(b, dict) and b.get("type") == "text")


def test_every_bad_output_gives_a_well_formed_message(engine: ReplEngine, case: BadOutput) -> None:
    message = call(GenparkReplTool(engine=engine), code=case.code)
    # What a UTF-8 transport does with the artifact (ensure_ascii would hide a lone surrogate).
    wire = json.dumps(message.artifact, ensure_ascii=False).encode("utf-8")
    result = ExecutionResult.model_validate(json.loads(wire))
    assert_bad_output(result, case)
    assert_bad_text(text_of(message), case)
    assert message.status == ("success" if case.status == "ok" else "error")
    # The conversation's session keeps serving, and its listing is well-formed too.
    assert "Out: 42" in text_of(call(GenparkReplTool(engine=engine), code="6 * 7"))
    listing = call(GenparkVariablesTool(engine=engine))
    json.dumps(listing.artifact, ensure_ascii=False).encode("utf-8")
    text_of(listing).encode("utf-8")
