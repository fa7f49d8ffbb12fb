"""Offline agent loops: a FunctionAgent driven by MockFunctionCallingLLM calls the tools for real."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent, ToolCallResult
from llama_index.core.base.llms.types import ImageBlock
from llama_index.core.llms import MessageRole
from llama_index.core.workflow import Context
from llama_index.tools.genpark_repl import GenparkReplStreamEvent, GenparkReplToolSpec

from genpark_repl_tools import Attachment, ExecutionRequest, ExecutionResult, MockBoundary, ReplEngine

pytestmark = [
    # FunctionAgent's constructor walks its own members with inspect.getmembers, which reads pydantic's
    # deprecated attributes (`__fields__`, ...): pydantic warns, attributing it to inspect. Not ours.
    pytest.mark.filterwarnings("ignore::DeprecationWarning:inspect"),
    # The workflow snapshots its state between runs and on Context.to_dict(); it skips the agent's chat
    # memory (rebuilt on the next run) and warns that it did. Our session id is a plain string and kept.
    pytest.mark.filterwarnings("ignore:Skipping serialization of known unserializable key"),
]

MakeAgent = Callable[..., tuple[FunctionAgent, Any]]

SEP = "\n---\n"
PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="

SCRIPT = {
    "remember": [("run_python", {"code": "x = 41"})],
    "recall": [("run_python", {"code": "x + 1"})],
    "what exists": [("list_variables", {}), ("inspect_variable", {"name": "x"})],
    "setup": [("run_python", {"code": "import time\ncounter = 0"})],
    # Four calls in one turn, each a read-sleep-write on the same variable: overlapping runs would
    # lose increments.
    "parallel": [
        ("run_python", {"code": f"print('call {i}')\nn = counter\ntime.sleep(0.05)\ncounter = n + 1\n{i}"})
        for i in range(4)
    ],
    "count": [("run_python", {"code": "counter"})],
}


async def run(agent: FunctionAgent, message: str, ctx: Context) -> tuple[str, list[ToolCallResult]]:
    handler = agent.run(message, ctx=ctx)
    results = [ev async for ev in handler.stream_events() if isinstance(ev, ToolCallResult)]
    return str(await handler), results


def test_two_runs_on_one_context_keep_a_variable(spec: GenparkReplToolSpec, make_agent: MakeAgent) -> None:
    agent, _ = make_agent(spec, SCRIPT)

    async def main() -> tuple[str, str]:
        ctx = Context(agent)
        first, _ = await run(agent, "remember", ctx)
        second, _ = await run(agent, "recall", ctx)
        return first, second

    first, second = asyncio.run(main())
    assert first == "OK (no output; end the code with an expression or print() to see a value)\n" + (
        "Variables: created x (int)"
    )
    assert second == "OK\nOut: 42"


def test_another_context_is_isolated(
    spec: GenparkReplToolSpec, make_agent: MakeAgent, engine: ReplEngine
) -> None:
    agent, _ = make_agent(spec, SCRIPT)

    async def main() -> str:
        await run(agent, "remember", Context(agent))
        answer, _ = await run(agent, "recall", Context(agent))
        return answer

    answer = asyncio.run(main())
    assert answer.startswith("Error: NameError: name 'x' is not defined")
    assert len(engine.sessions()) == 2


def test_serialized_and_restored_context_keeps_its_session(
    spec: GenparkReplToolSpec, make_agent: MakeAgent, engine: ReplEngine
) -> None:
    agent, _ = make_agent(spec, SCRIPT)

    async def first_process() -> dict[str, Any]:
        ctx = Context(agent)
        await run(agent, "remember", ctx)
        return ctx.to_dict()

    saved = json.dumps(asyncio.run(first_process()))

    # A new agent (as after a restart of the web worker) on the same engine, from the saved JSON.
    restored_agent, _ = make_agent(spec, SCRIPT)

    async def second_process() -> str:
        ctx = Context.from_dict(restored_agent, json.loads(saved))
        answer, _ = await run(restored_agent, "recall", ctx)
        return answer

    assert asyncio.run(second_process()) == "OK\nOut: 42"
    assert len(engine.sessions()) == 1


def test_variable_tools_in_an_agent_loop(spec: GenparkReplToolSpec, make_agent: MakeAgent) -> None:
    agent, _ = make_agent(spec, SCRIPT)

    async def main() -> str:
        ctx = Context(agent)
        await run(agent, "remember", ctx)
        answer, _ = await run(agent, "what exists", ctx)
        return answer

    listed, inspected = asyncio.run(main()).split(SEP)
    assert listed == "Variables (1):\nx: int = 41"
    assert inspected == "x: int\n41"


def test_parallel_tool_calls_are_correct_unmixed_and_serialized(
    spec: GenparkReplToolSpec, make_agent: MakeAgent
) -> None:
    agent, _ = make_agent(spec, SCRIPT)

    async def main() -> tuple[list[ToolCallResult], str]:
        ctx = Context(agent)
        await run(agent, "setup", ctx)
        _, results = await run(agent, "parallel", ctx)
        count, _ = await run(agent, "count", ctx)
        return results, count

    results, count = asyncio.run(main())
    failures = [r.tool_output.content for r in results if r.tool_output.exception is not None]
    assert failures == []
    by_value = {r.tool_output.raw_output["value"]: r.tool_output for r in results}
    assert sorted(by_value) == ["0", "1", "2", "3"]
    for value, output in by_value.items():
        # Which call ran first (and so created `n`) is up to the scheduler; the rest is exact.
        assert output.content.startswith(f"OK\nstdout:\ncall {value}\nOut: {value}\nVariables: ")
        assert "counter" in [v["name"] for v in output.raw_output["changes"]["rebound"]]
    assert len({r.tool_output.raw_output["session"] for r in results}) == 1
    assert count == "OK\nOut: 4"


def test_parallel_tool_calls_really_run_in_parallel(make_agent: MakeAgent) -> None:
    # Each request waits until all four are in flight at once: calls made one after another would
    # break the barrier (its timeout bounds the test). This is what makes the serialization test above
    # meaningful.
    barrier = threading.Barrier(4, timeout=10)
    threads: set[int] = set()

    def handler(request: ExecutionRequest) -> ExecutionResult:
        threads.add(threading.get_ident())
        barrier.wait()
        return ExecutionResult(status="ok", session=request.session, value=repr(request.code))

    spec = GenparkReplToolSpec(engine=ReplEngine(boundary=MockBoundary(handler)))
    calls = [("run_python", {"code": f"{i}"}) for i in range(4)]
    agent, _ = make_agent(spec, {"go": calls})

    async def main() -> list[ToolCallResult]:
        _, results = await run(agent, "go", Context(agent))
        return results

    results = asyncio.run(main())
    assert sorted(r.tool_output.content for r in results) == [f"OK\nOut: '{i}'" for i in range(4)]
    assert len(threads) == 4
    assert threading.get_ident() not in threads


def test_parallel_conversations_stay_apart(spec: GenparkReplToolSpec, make_agent: MakeAgent) -> None:
    script = {
        f"conversation {c}": [
            (
                "run_python",
                {"code": f"import time\nfor _ in range(3):\n    print('c{c}-{i}')\n    time.sleep(0.01)"},
            )
            for i in range(4)
        ]
        for c in range(2)
    }
    agent, _ = make_agent(spec, script)

    async def main() -> list[tuple[str, list[ToolCallResult]]]:
        return list(
            await asyncio.gather(*(run(agent, f"conversation {c}", Context(agent)) for c in range(2)))
        )

    for c, (_, results) in enumerate(asyncio.run(main())):
        stdouts = sorted(r.tool_output.raw_output["stdout"] for r in results)
        assert stdouts == [f"c{c}-{i}\n" * 3 for i in range(4)]
        assert len({r.tool_output.raw_output["session"] for r in results}) == 1


def test_images_reach_the_model_as_image_blocks(make_agent: MakeAgent) -> None:
    def handler(request: ExecutionRequest) -> ExecutionResult:
        return ExecutionResult(
            status="ok",
            session=request.session,
            attachments=[Attachment(data_base64=PNG_B64, width=1, height=1, description="a dot")],
        )

    spec = GenparkReplToolSpec(engine=ReplEngine(boundary=MockBoundary(handler)))
    agent, model = make_agent(spec, {"plot": [("run_python", {"code": "plt.plot([1, 2])"})]})

    async def main() -> list[ToolCallResult]:
        _, results = await run(agent, "plot", Context(agent))
        return results

    (result,) = asyncio.run(main())
    assert result.tool_output.raw_output["attachments"][0]["width"] == 1
    # The model's next request carries the tool's answer with the picture in it.
    tool_message = model.requests[-1][-1]
    assert tool_message.role == MessageRole.TOOL
    images = [b for b in tool_message.blocks if isinstance(b, ImageBlock)]
    assert len(images) == 1
    assert images[0].image == PNG_B64.encode("ascii")
    assert images[0].image_mimetype == "image/png"
    assert "Attached image/png 1x1: a dot" in (tool_message.content or "")


def test_output_streams_as_workflow_events_while_the_code_runs(
    spec: GenparkReplToolSpec, make_agent: MakeAgent
) -> None:
    code = "import time\nfor i in range(3):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.05)\n"
    agent, _ = make_agent(spec, {"ticks": [("run_python", {"code": code})]})

    async def main() -> list[Any]:
        handler = agent.run("ticks", ctx=Context(agent))
        events = [ev async for ev in handler.stream_events()]
        await handler
        return events

    events = asyncio.run(main())
    streamed = [i for i, ev in enumerate(events) if isinstance(ev, GenparkReplStreamEvent)]
    text = "".join(events[i].text for i in streamed if events[i].kind == "output")
    assert text == "tick 0\ntick 1\ntick 2\n"
    assert {events[i].stream for i in streamed} == {"stdout"}
    # All of it before the tool's result event, which carries the same text.
    result_at = next(i for i, ev in enumerate(events) if isinstance(ev, ToolCallResult))
    assert streamed and max(streamed) < result_at
    assert events[result_at].tool_output.raw_output["stdout"] == text
