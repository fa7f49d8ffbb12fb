"""The tool spec as a model and a program see it: names, descriptions, schemas, and real calls."""

from __future__ import annotations

import asyncio
import base64
import inspect
import json
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ImageBlock, TextBlock
from llama_index.core.llms import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool, ToolOutput
from llama_index.core.workflow import Context
from llama_index.tools.genpark_repl import STORE_KEY, GenparkReplToolSpec

from genpark_repl_tools import Attachment, ExecutionRequest, ExecutionResult, MockBoundary, ReplEngine

pytestmark = [
    # FunctionAgent's constructor walks its own members with inspect.getmembers, which reads pydantic's
    # deprecated attributes (`__fields__`, ...): pydantic warns, attributing it to inspect. Not ours.
    pytest.mark.filterwarnings("ignore::DeprecationWarning:inspect"),
]

TOOL_NAMES = ["run_python", "list_variables", "inspect_variable"]

# A valid 1x1 PNG.
PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="

# Reads, waits, writes: two calls that overlap in one namespace lose an increment.
RACY_INCREMENT = "n = counter\ntime.sleep(0.05)\ncounter = n + 1"


def tools_by_name(spec: GenparkReplToolSpec) -> dict[str, FunctionTool]:
    return {tool.metadata.get_name(): tool for tool in spec.to_tool_list()}


def new_context(spec: GenparkReplToolSpec) -> Context:
    return Context(FunctionAgent(tools=spec.to_tool_list(), llm=MockFunctionCallingLLM()))


def text_of(output: ToolOutput) -> str:
    return output.content


# ---- what the model sees ---------------------------------------------------------------------------


def test_tool_names_and_order(spec: GenparkReplToolSpec) -> None:
    assert [t.metadata.name for t in spec.to_tool_list()] == TOOL_NAMES


def test_descriptions_start_with_the_signature_the_model_calls(spec: GenparkReplToolSpec) -> None:
    tools = tools_by_name(spec)
    first_lines = {name: tool.metadata.description.splitlines()[0] for name, tool in tools.items()}
    assert first_lines == {
        "run_python": "run_python(code: str)",
        "list_variables": "list_variables()",
        "inspect_variable": "inspect_variable(name: str)",
    }
    run_description = tools["run_python"].metadata.description
    assert "persistent Python session" in run_description
    assert "stay defined between calls" in run_description
    for tool in tools.values():
        description = tool.metadata.description
        # The injected Context and the Python return type are plumbing, not prompt.
        assert "ctx" not in description
        assert "Context" not in description
        assert "ToolOutput" not in description
        # OpenAI-style tool definitions cap descriptions at 1024 characters.
        assert len(description) <= 1024
        assert tool.metadata.to_openai_tool()["function"]["description"] == description


def test_schemas_have_only_model_arguments(spec: GenparkReplToolSpec) -> None:
    schemas = {name: tool.metadata.get_parameters_dict() for name, tool in tools_by_name(spec).items()}
    assert schemas["run_python"]["required"] == ["code"]
    assert list(schemas["run_python"]["properties"]) == ["code"]
    assert schemas["run_python"]["properties"]["code"]["type"] == "string"
    assert schemas["run_python"]["properties"]["code"]["description"].startswith("Python source to run")
    assert schemas["list_variables"]["properties"] == {}
    assert schemas["inspect_variable"]["required"] == ["name"]
    assert list(schemas["inspect_variable"]["properties"]) == ["name"]
    assert "ctx" not in json.dumps(schemas)


def test_every_tool_is_sync_and_async_and_asks_for_the_context(spec: GenparkReplToolSpec) -> None:
    for tool in spec.to_tool_list():
        assert tool.requires_context
        assert tool.ctx_param_name == "ctx"
        assert not inspect.iscoroutinefunction(tool.real_fn)
        assert inspect.iscoroutinefunction(tool.async_fn)
        assert tool.async_fn.__name__ == "a" + tool.metadata.get_name()


# ---- real calls ------------------------------------------------------------------------------------


def test_sync_call_runs_code_and_returns_observation_and_telemetry(spec: GenparkReplToolSpec) -> None:
    ctx = new_context(spec)
    out = tools_by_name(spec)["run_python"].call(code="x = 6 * 7\nprint('hello')\nx", ctx=ctx)
    assert isinstance(out, ToolOutput)
    assert out.tool_name == "run_python"
    assert out.content == "OK\nstdout:\nhello\nOut: 42\nVariables: created x (int)"
    assert not out.is_error
    assert out.raw_input == {"args": (), "kwargs": {"code": "x = 6 * 7\nprint('hello')\nx"}}
    telemetry = out.raw_output
    assert json.loads(json.dumps(telemetry)) == telemetry  # plain JSON
    assert telemetry["status"] == "ok"
    assert telemetry["value"] == "42"
    assert telemetry["stdout"] == "hello\n"
    assert telemetry["session"] == asyncio.run(spec.session_id(ctx))


def test_async_call_shares_the_session_with_sync_calls_on_one_context(spec: GenparkReplToolSpec) -> None:
    tools = tools_by_name(spec)
    ctx = new_context(spec)
    tools["run_python"].call(code="x = 41", ctx=ctx)

    async def main() -> ToolOutput:
        return await tools["run_python"].acall(code="x + 1", ctx=ctx)

    out = asyncio.run(main())
    assert out.content == "OK\nOut: 42"
    assert out.raw_output["execution_count"] == 2


def test_sync_call_from_inside_a_running_loop(spec: GenparkReplToolSpec) -> None:
    tool = tools_by_name(spec)["run_python"]
    ctx = new_context(spec)

    async def main() -> ToolOutput:
        return tool.call(code="'from a loop'", ctx=ctx)

    assert asyncio.run(main()).content == "OK\nOut: 'from a loop'"


def test_user_code_errors_are_observations_not_exceptions(spec: GenparkReplToolSpec) -> None:
    ctx = new_context(spec)
    tool = tools_by_name(spec)["run_python"]
    out = tool.call(code="total = 10\nratio = total / 0", ctx=ctx)
    assert out.is_error
    assert out.content.startswith("Error: ZeroDivisionError: division by zero\nAt line 2:")
    assert out.raw_output["status"] == "error"
    assert out.raw_output["error"]["type"] == "ZeroDivisionError"
    assert out.exception is None
    # A syntax error too; and the session survives both.
    syntax = tool.call(code="def broken(:\n    pass", ctx=ctx)
    assert syntax.is_error
    assert syntax.raw_output["error"]["type"] == "SyntaxError"
    assert tool.call(code="total", ctx=ctx).content == "OK\nOut: 10"


def test_contexts_are_separate_sessions(spec: GenparkReplToolSpec, engine: ReplEngine) -> None:
    tool = tools_by_name(spec)["run_python"]
    a, b = new_context(spec), new_context(spec)
    tool.call(code="secret = 'a'", ctx=a)
    out = tool.call(code="secret", ctx=b)
    assert out.is_error
    assert "NameError" in out.content
    assert len(engine.sessions()) == 2


def test_session_id_is_a_string_in_the_store_and_survives_serialization(spec: GenparkReplToolSpec) -> None:
    ctx = new_context(spec)
    tools_by_name(spec)["run_python"].call(code="kept = [1, 2, 3]", ctx=ctx)

    async def stored(context: Context) -> Any:
        return await context.store.get(STORE_KEY)

    session = asyncio.run(stored(ctx))
    assert isinstance(session, str)
    assert session == asyncio.run(spec.session_id(ctx))
    data = json.loads(json.dumps(ctx.to_dict()))
    restored = Context.from_dict(FunctionAgent(tools=spec.to_tool_list(), llm=MockFunctionCallingLLM()), data)
    assert asyncio.run(stored(restored)) == session
    out = tools_by_name(spec)["run_python"].call(code="sum(kept)", ctx=restored)
    assert out.content == "OK\nOut: 6"


def test_pinned_session_wins_over_the_context(engine: ReplEngine) -> None:
    spec = GenparkReplToolSpec(engine=engine, session="analysis")
    tool = tools_by_name(spec)["run_python"]
    tool.call(code="y = 5", ctx=new_context(spec))
    # Another context, same pinned session; and no context at all works too.
    assert tool.call(code="y * 2", ctx=new_context(spec)).content == "OK\nOut: 10"
    assert tool.call(code="y * 3").content == "OK\nOut: 15"
    assert engine.sessions() == ["analysis"]


def test_no_context_and_no_pinned_session_is_misuse(spec: GenparkReplToolSpec) -> None:
    with pytest.raises(ValueError, match="pass the workflow Context"):
        spec.run_python("1", None)  # type: ignore[arg-type]


# ---- variables -------------------------------------------------------------------------------------


def test_list_variables(spec: GenparkReplToolSpec) -> None:
    tools = tools_by_name(spec)
    ctx = new_context(spec)
    empty = tools["list_variables"].call(ctx=ctx)
    assert empty.content == "No variables defined yet."
    assert empty.raw_output == {"variables": []}
    tools["run_python"].call(
        code="import math\nrows = list(range(1000))\nname = 'x' * 500\n"
        "def area(r):\n    return math.pi * r * r",
        ctx=ctx,
    )
    out = tools["list_variables"].call(ctx=ctx)
    lines = out.content.splitlines()
    assert lines[0] == "Variables (3):"
    # Definition order; modules hidden; each preview one line of at most 60 characters (the core's listing).
    assert lines[1:] == [
        "rows: list, len 1000 = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 1...",
        "name: str, len 500 = '" + "x" * 59 + "...",
        "area: def area(r)",
    ]
    assert [v["name"] for v in out.raw_output["variables"]] == ["rows", "name", "area"]
    assert json.loads(json.dumps(out.raw_output)) == out.raw_output


def test_list_variables_stays_within_the_observation_budget(spec: GenparkReplToolSpec) -> None:
    tools = tools_by_name(spec)
    ctx = new_context(spec)
    tools["run_python"].call(code="for i in range(2000):\n    globals()[f'v{i:04}'] = i", ctx=ctx)
    out = tools["list_variables"].call(ctx=ctx)
    assert len(out.content) <= spec.engine.limits.max_observation_chars
    assert out.content.splitlines()[-1].startswith("... and ")
    assert len(out.raw_output["variables"]) == 2001  # i and v0000..v1999: telemetry is complete


def test_inspect_variable(spec: GenparkReplToolSpec) -> None:
    tools = tools_by_name(spec)
    ctx = new_context(spec)
    tools["run_python"].call(code="prices = [12.5, 14.0, 13.25]", ctx=ctx)
    out = tools["inspect_variable"].call(name="prices", ctx=ctx)
    assert out.content == "prices: list, len 3\n[12.5, 14.0, 13.25]"
    assert not out.is_error
    assert out.raw_output["variable"]["type"] == "list"
    assert out.raw_output["variable"]["len"] == 3


def test_inspect_unknown_name_lists_what_exists(spec: GenparkReplToolSpec) -> None:
    tools = tools_by_name(spec)
    ctx = new_context(spec)
    before = tools["inspect_variable"].call(name="df", ctx=ctx)
    assert before.is_error
    assert before.content == "Not defined: 'df'. Nothing is defined yet."
    tools["run_python"].call(code="a = 1\nb = 2", ctx=ctx)
    after = tools["inspect_variable"].call(name="df", ctx=ctx)
    assert after.is_error
    assert after.content == "Not defined: 'df'. Defined: a, b."
    tools["run_python"].call(code="for i in range(100):\n    globals()[f'v{i:02}'] = i", ctx=ctx)
    many = tools["inspect_variable"].call(name="df", ctx=ctx)
    names = ", ".join(["a", "b", "i", *(f"v{i:02}" for i in range(27))])
    assert many.content == f"Not defined: 'df'. Defined: {names} and 73 more."


def test_async_variable_tools(spec: GenparkReplToolSpec) -> None:
    tools = tools_by_name(spec)
    ctx = new_context(spec)

    async def main() -> tuple[ToolOutput, ToolOutput]:
        await tools["run_python"].acall(code="z = {'k': 1}", ctx=ctx)
        listed = await tools["list_variables"].acall(ctx=ctx)
        inspected = await tools["inspect_variable"].acall(name="z", ctx=ctx)
        return listed, inspected

    listed, inspected = asyncio.run(main())
    assert listed.content.splitlines()[1] == "z: dict, len 1 = {'k': 1}"
    assert inspected.content == "z: dict, len 1\n{'k': 1}"


# ---- images ----------------------------------------------------------------------------------------


def test_image_attachments_become_image_blocks() -> None:
    def handler(request: ExecutionRequest) -> ExecutionResult:
        return ExecutionResult(
            status="ok",
            session=request.session,
            attachments=[Attachment(data_base64=PNG_B64, width=1, height=1, description="a dot")],
        )

    boundary = MockBoundary(handler)
    spec = GenparkReplToolSpec(engine=ReplEngine(boundary=boundary), session="plots")
    out = tools_by_name(spec)["run_python"].call(code="plt.plot([1, 2])")
    assert [type(b) for b in out.blocks] == [TextBlock, ImageBlock]
    text, image = out.blocks
    assert isinstance(text, TextBlock)
    assert isinstance(image, ImageBlock)
    assert "Attached image/png 1x1: a dot" in text.text
    assert out.content == text.text  # the text part alone, for anything that reads only text
    assert image.image == PNG_B64.encode("ascii")
    assert image.image_mimetype == "image/png"
    assert out.raw_output["attachments"][0]["data_base64"] == PNG_B64
    assert [r.code for r in boundary.requests("plots")] == ["plt.plot([1, 2])"]


# ---- concurrency -----------------------------------------------------------------------------------


def test_parallel_threads_on_one_session_are_serialized(engine: ReplEngine) -> None:
    spec = GenparkReplToolSpec(engine=engine, session="shared")
    tool = tools_by_name(spec)["run_python"]
    tool.call(code="import time\ncounter = 0")
    with ThreadPoolExecutor(max_workers=4) as pool:
        outs = list(pool.map(lambda i: tool.call(code=f"print('call {i}')\n{RACY_INCREMENT}"), range(4)))
    assert [o.raw_output["stdout"] for o in outs] == [f"call {i}\n" for i in range(4)]
    assert tool.call(code="counter").content == "OK\nOut: 4"


def test_parallel_threads_on_separate_contexts_are_unmixed(spec: GenparkReplToolSpec) -> None:
    tool = tools_by_name(spec)["run_python"]
    contexts = [new_context(spec) for _ in range(4)]
    start = threading.Barrier(4)

    def call(i: int) -> ToolOutput:
        start.wait(timeout=10)
        loop = f"for _ in range(5):\n    print('conversation {i}')\n    time.sleep(0.01)"
        code = f"import time\n{loop}\nmine = {i}"
        return tool.call(code=code, ctx=contexts[i])

    with ThreadPoolExecutor(max_workers=4) as pool:
        outs = list(pool.map(call, range(4)))
    for i, out in enumerate(outs):
        assert out.raw_output["stdout"] == f"conversation {i}\n" * 5
    sessions = {out.raw_output["session"] for out in outs}
    assert len(sessions) == 4
    check: Callable[[int], str] = lambda i: tool.call(code="mine", ctx=contexts[i]).content  # noqa: E731
    assert [check(i) for i in range(4)] == [f"OK\nOut: {i}" for i in range(4)]


def test_parallel_first_calls_on_a_fresh_context_share_one_session(
    spec: GenparkReplToolSpec, engine: ReplEngine
) -> None:
    tool = tools_by_name(spec)["run_python"]
    ctx = new_context(spec)

    async def main() -> list[ToolOutput]:
        return list(await asyncio.gather(*(tool.acall(code=f"v{i} = {i}", ctx=ctx) for i in range(4))))

    outs = asyncio.run(main())
    assert len({o.raw_output["session"] for o in outs}) == 1
    assert engine.sessions() == [outs[0].raw_output["session"]]
    assert tool.call(code="v0 + v1 + v2 + v3", ctx=ctx).content == "OK\nOut: 6"


@pytest.mark.slow
def test_a_real_matplotlib_figure_becomes_an_image_block(engine: ReplEngine) -> None:
    pytest.importorskip("matplotlib")
    spec = GenparkReplToolSpec(engine=engine, session="plots")
    code = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('trend')\nplt.show()"
    out = tools_by_name(spec)["run_python"].call(code=code)
    assert not out.is_error, out.content
    images = [b for b in out.blocks if isinstance(b, ImageBlock)]
    assert len(images) == 1
    assert images[0].image_mimetype == "image/png"
    assert isinstance(images[0].image, bytes)
    assert base64.b64decode(images[0].image).startswith(b"\x89PNG\r\n\x1a\n")
    assert "Attached image/png" in out.content


# ---- packaging -------------------------------------------------------------------------------------


def test_namespace_package_leaves_llama_index_core_importable() -> None:
    root = Path(__file__).resolve().parents[1]
    # Our distribution ships only the leaf package: an __init__.py above it would shadow llama_index.core.
    assert not (root / "llama_index" / "__init__.py").exists()
    assert not (root / "llama_index" / "tools" / "__init__.py").exists()
    assert (root / "llama_index" / "tools" / "genpark_repl" / "py.typed").exists()
    # Import ours first, in a fresh interpreter, then the core: both must resolve.
    script = (
        "import llama_index.tools.genpark_repl as ours, llama_index.core as core, llama_index\n"
        "from llama_index.core.tools import FunctionTool\n"
        "print(ours.__file__); print(core.__file__); print(llama_index.__file__)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    ours, core, top = proc.stdout.splitlines()
    assert Path(ours).parent == root / "llama_index" / "tools" / "genpark_repl"
    assert Path(core).parts[-3:] == ("llama_index", "core", "__init__.py")
    assert top == "None"  # llama_index stays a namespace package


def test_public_names() -> None:
    import llama_index.tools.genpark_repl as module

    assert module.__all__ == [
        "STORE_KEY",
        "GenparkCodeExecutor",
        "GenparkReplStreamEvent",
        "GenparkReplToolSpec",
    ]
    assert module.GenparkReplToolSpec is GenparkReplToolSpec
    assert STORE_KEY == "genpark_repl_session"
