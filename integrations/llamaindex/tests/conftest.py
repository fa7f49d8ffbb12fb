"""Fixtures for the LlamaIndex adapter: a real engine, and a FunctionAgent driven by a scripted mock LLM."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ToolCallBlock
from llama_index.core.llms import ChatMessage, MessageRole, MockFunctionCallingLLM
from llama_index.tools.genpark_repl import GenparkReplToolSpec

from genpark_repl_tools import ReplEngine

# A script maps a user message to the tool calls the "model" makes for it, all in one turn.
Script = dict[str, list[tuple[str, dict[str, Any]]]]


class ScriptedModel:
    """What MockFunctionCallingLLM asks for a reply: tool calls for a user turn, then the tools' texts.

    After the tools answer, the reply is their contents joined with a separator, so a test reads what
    the tools told the model straight from `str(await agent.run(...))`. Every request is recorded.
    """

    SEPARATOR = "\n---\n"

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[list[ChatMessage]] = []

    def __call__(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        self.requests.append(list(messages))
        last = messages[-1]
        if last.role == MessageRole.TOOL:
            answers: list[str] = []
            for message in reversed(messages):
                if message.role == MessageRole.USER:
                    break
                if message.role == MessageRole.TOOL:
                    answers.append(message.content or "")
            return ChatMessage(role=MessageRole.ASSISTANT, content=self.SEPARATOR.join(reversed(answers)))
        calls = self.script[last.content or ""]
        blocks = [
            ToolCallBlock(tool_call_id=f"call-{uuid.uuid4().hex[:8]}", tool_name=name, tool_kwargs=kwargs)
            for name, kwargs in calls
        ]
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=blocks)


@pytest.fixture
def engine() -> Iterator[ReplEngine]:
    with ReplEngine(policy="trusted") as e:
        yield e


@pytest.fixture
def spec(engine: ReplEngine) -> GenparkReplToolSpec:
    return GenparkReplToolSpec(engine=engine)


@pytest.fixture
def make_agent() -> Callable[..., tuple[FunctionAgent, ScriptedModel]]:
    def make(spec: GenparkReplToolSpec, script: Script) -> tuple[FunctionAgent, ScriptedModel]:
        model = ScriptedModel(script)
        agent = FunctionAgent(
            tools=spec.to_tool_list(),
            llm=MockFunctionCallingLLM(response_generator=model),
            timeout=60,
        )
        return agent, model

    return make
