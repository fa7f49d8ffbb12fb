"""Shared fixtures for the langchain-genpark-repl tests.

Works from the repository root (`python -m pytest integrations/langchain/tests`) and from this
package's directory: nothing here depends on the working directory or on the root's pytest options.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from pydantic import Field

from genpark_repl_tools import ReplEngine


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_pycollect_makeitem(
    collector: pytest.Collector, name: str, obj: object
) -> Generator[None, Any, None]:
    """Hand every coroutine test here to pytest-asyncio, whatever the root's `asyncio_mode`.

    The standard suites' async tests are inherited unmarked, and marking them would count as
    overriding them. trylast makes this wrapper the innermost one, so pytest-asyncio's own wrapper
    sees the mark when it converts the item.
    """
    outcome = yield
    if not inspect.iscoroutinefunction(obj):
        return
    result = outcome.get_result()
    items = result if isinstance(result, list) else [result]
    for item in items:
        if isinstance(item, pytest.Function) and item.get_closest_marker("asyncio") is None:
            item.add_marker(pytest.mark.asyncio)


@pytest.fixture
def engine() -> Iterator[ReplEngine]:
    with ReplEngine(policy="trusted") as repl:
        yield repl


class ScriptedChatModel(GenericFakeChatModel):
    """A fake chat model whose next reply may depend on what it was just shown.

    `bind_tools` returns the model itself (the script already knows the tools) and streaming is off,
    which is what `create_agent` needs from a fake model.
    """

    disable_streaming: bool = True
    seen: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.seen.append(list(messages))
        return super()._generate(messages, *args, **kwargs)

    def last_tool_messages(self) -> list[ToolMessage]:
        """The tool results the model was shown in its latest call, in order."""
        trailing: list[ToolMessage] = []
        for message in reversed(self.seen[-1]):
            if not isinstance(message, ToolMessage):
                break
            trailing.append(message)
        return trailing[::-1]


Script = Callable[[ScriptedChatModel], Iterator[AIMessage]]


@pytest.fixture
def scripted_model() -> Callable[[Script], ScriptedChatModel]:
    """`scripted_model(script)`: the script is a generator function given the model, so each step can
    read `model.last_tool_messages()` before deciding what to say."""

    def make(script: Script) -> ScriptedChatModel:
        holder: list[ScriptedChatModel] = []

        def replies() -> Iterator[AIMessage]:
            # The generator's body starts on the first model call, after `holder` is filled.
            yield from script(holder[0])

        model = ScriptedChatModel(messages=replies())
        holder.append(model)
        return model

    return make
