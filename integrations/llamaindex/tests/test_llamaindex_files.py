"""Starting files through the async tools: each conversation's session gets its own copy, once."""

from __future__ import annotations

import asyncio

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.llms import MockFunctionCallingLLM
from llama_index.core.tools import ToolOutput
from llama_index.core.workflow import Context
from llama_index.tools.genpark_repl import GenparkReplToolSpec

from genpark_repl_tools import ReplEngine

pytestmark = [
    # FunctionAgent's constructor reads pydantic's deprecated attributes through inspect (see
    # test_llamaindex_tool_spec.py): pydantic warns, attributing it to inspect. Not ours.
    pytest.mark.filterwarnings("ignore::DeprecationWarning:inspect"),
]

CSV = b"city,temp\nOslo,4\n"
READ = "with open('data.csv') as f:\n    text = f.read()\ntext"


def test_async_calls_seed_each_conversation_once() -> None:
    with ReplEngine(policy="standard") as engine:
        spec = GenparkReplToolSpec(engine, files={"data.csv": CSV}, include_files=True)
        run = {t.metadata.name: t for t in spec.to_tool_list()}["run_python"]
        one, two = (
            Context(FunctionAgent(tools=spec.to_tool_list(), llm=MockFunctionCallingLLM())) for _ in "12"
        )

        async def main() -> list[ToolOutput]:
            first = await run.acall(code=READ, ctx=one)
            await run.acall(code="with open('data.csv', 'w') as f:\n    n = f.write('changed')", ctx=one)
            return [first, await run.acall(code=READ, ctx=one), await run.acall(code=READ, ctx=two)]

        first, again, other = asyncio.run(main())
        assert first.raw_output["value"] == repr(CSV.decode())
        assert again.raw_output["value"] == "'changed'"  # seeded on first use only, not again
        assert other.raw_output["value"] == repr(CSV.decode())  # the other conversation's own copy
        sessions = [asyncio.run(spec.session_id(ctx)) for ctx in (one, two)]
        assert [engine.download(s, "data.csv") for s in sessions] == [b"changed", CSV]
