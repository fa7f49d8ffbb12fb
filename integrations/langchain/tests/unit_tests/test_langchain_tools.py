"""GenparkReplTool, GenparkVariablesTool, GenparkInspectTool and the toolkit, called directly (no agent)."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_genpark_repl import (
    GenparkInspectTool,
    GenparkReplTool,
    GenparkReplToolkit,
    GenparkResetTool,
    GenparkVariablesTool,
    thread_session,
)

from genpark_repl_tools import (
    Attachment,
    BoundaryError,
    ExecutionRequest,
    ExecutionResult,
    MockBoundary,
    Policy,
    ReplEngine,
)

PNG_1X1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="


def thread(thread_id: object) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def as_call(tool: BaseTool, config: RunnableConfig | None = None, **args: Any) -> ToolMessage:
    message = tool.invoke({"name": tool.name, "args": args, "id": "call-1", "type": "tool_call"}, config)
    assert isinstance(message, ToolMessage)
    return message


def mock_engine(
    handler: Callable[[ExecutionRequest], ExecutionResult], policy: Policy | None = None
) -> ReplEngine:
    return ReplEngine(boundary=MockBoundary(handler, policy=policy))


# ---- schema and model-facing text ----------------------------------------------------------------


def test_model_sees_only_the_code_argument(engine: ReplEngine) -> None:
    schema = GenparkReplTool(engine=engine).tool_call_schema.model_json_schema()  # type: ignore[union-attr]
    assert schema["title"] == "run_python"
    assert list(schema["properties"]) == ["code"]  # the injected config never reaches the model
    assert schema["required"] == ["code"]


def test_description_says_what_persists_how_to_see_output_and_the_policy(engine: ReplEngine) -> None:
    tool = GenparkReplTool(engine=engine)
    text = tool.description
    assert "stay defined between calls" in text
    assert "printed output" in text
    assert "trailing expression" in text
    assert "Policy 'trusted': full Python." in text
    assert "30 s" in text  # the engine's own timeout, not a constant


def test_code_description_follows_a_restricted_policy_by_name_only() -> None:
    # Any restricted policy, known only by its name: model_copy skips the presets' own rules.
    policy = Policy.trusted().model_copy(update={"name": "lockdown", "restricted": True})
    tool = GenparkReplTool(
        engine=mock_engine(lambda r: ExecutionResult(status="ok", session=r.session), policy)
    )
    text = tool.description
    assert "Policy 'lockdown'" in text
    assert "Blocked" in text
    assert "full Python" not in text


def test_provider_tool_format_carries_the_same_contract(engine: ReplEngine) -> None:
    spec = convert_to_openai_tool(GenparkReplTool(engine=engine))["function"]
    assert spec["name"] == "run_python"
    assert list(spec["parameters"]["properties"]) == ["code"]
    assert spec["parameters"]["required"] == ["code"]
    assert "stay defined between calls" in spec["description"]
    assert spec["parameters"]["properties"]["code"]["description"].startswith("Python source to run")


def test_name_and_description_are_configurable(engine: ReplEngine) -> None:
    tool = GenparkReplTool(engine=engine, name="py", description="Run Python.")
    assert tool.name == "py"
    assert tool.tool_call_schema.model_json_schema()["title"] == "py"  # type: ignore[union-attr]
    assert as_call(tool, code="1 + 1").name == "py"


# ---- sessions ------------------------------------------------------------------------------------


def test_a_thread_keeps_its_variables_and_other_threads_cannot_see_them(engine: ReplEngine) -> None:
    tool = GenparkReplTool(engine=engine)
    as_call(tool, thread("alice"), code="secret = 41")
    assert as_call(tool, thread("alice"), code="secret + 1").artifact["value"] == "42"
    other = as_call(tool, thread("bob"), code="secret")
    assert other.artifact["status"] == "error"
    assert "NameError: name 'secret' is not defined" in other.content
    assert sorted(engine.sessions()) == ["alice", "bob"]


def test_without_a_thread_the_default_session_is_used(engine: ReplEngine) -> None:
    as_call(GenparkReplTool(engine=engine), code="a = 1")
    as_call(GenparkReplTool(engine=engine, default_session="shared"), code="b = 2")
    assert sorted(engine.sessions()) == ["default", "shared"]


@pytest.mark.parametrize("thread_id", [7, uuid.UUID(int=5)])
def test_non_string_thread_ids_become_session_ids(engine: ReplEngine, thread_id: object) -> None:
    assert as_call(GenparkReplTool(engine=engine), thread(thread_id), code="1").artifact["session"] == str(
        thread_id
    )


def test_a_custom_resolver_picks_the_session(engine: ReplEngine) -> None:
    def per_user(config: RunnableConfig) -> str | None:
        return (config.get("configurable") or {}).get("user_id")

    tool = GenparkReplTool(engine=engine, session_resolver=per_user)
    config: RunnableConfig = {"configurable": {"user_id": "u-1", "thread_id": "t-9"}}
    assert as_call(tool, config, code="1").artifact["session"] == "u-1"
    assert as_call(tool, thread("t-9"), code="1").artifact["session"] == "default"


def test_a_thread_id_the_core_rejects_is_a_configuration_error_not_an_observation(engine: ReplEngine) -> None:
    # The model cannot fix the app's thread ids, so this is raised to the developer, loudly.
    with pytest.raises(ValueError, match="session id must be"):
        GenparkReplTool(engine=engine).invoke({"code": "1"}, thread("t" * 300))


def test_thread_session_reads_configurable_thread_id() -> None:
    assert thread_session(thread("x")) == "x"
    assert thread_session({}) is None
    assert thread_session({"configurable": {}}) is None


def test_parallel_calls_from_many_threads_keep_their_output_apart(engine: ReplEngine) -> None:
    tool = GenparkReplTool(engine=engine)
    code = "import time\nfor i in range(20):\n    print(TAG, i)\n    time.sleep(0.001)\nlen(TAG)"
    for n in range(4):
        as_call(tool, thread(f"t{n}"), code=f"TAG = 'tag-{n}' + '{'x' * n}'")

    def run(n: int) -> ToolMessage:
        return as_call(tool, thread(f"t{n}"), code=code)

    with ThreadPoolExecutor(max_workers=4) as pool:
        messages = list(pool.map(run, range(4)))
    for n, message in enumerate(messages):
        tag = f"tag-{n}" + "x" * n
        assert message.artifact["stdout"] == "".join(f"{tag} {i}\n" for i in range(20))
        assert message.artifact["value"] == str(len(tag))


# ---- content, artifact, errors -------------------------------------------------------------------


def test_content_is_the_observation_and_the_artifact_is_plain_json(engine: ReplEngine) -> None:
    message = as_call(GenparkReplTool(engine=engine), code="print('hi')\nn = 3\nn * 2")
    result = engine.run("n", session="default")  # the same session, seen from the core
    assert result.value == "3"
    assert message.status == "success"
    assert message.content.startswith("OK\nstdout:\nhi\nOut: 6")
    assert json.loads(json.dumps(message.artifact)) == message.artifact
    assert ExecutionResult.model_validate(message.artifact).value == "6"


def test_an_error_in_the_code_is_an_observation_marked_as_an_error(engine: ReplEngine) -> None:
    message = as_call(GenparkReplTool(engine=engine), code="x = 1\ny = x / 0")
    assert message.status == "error"  # one rule in every frontend; the artifact is kept
    assert message.artifact["status"] == "error"
    assert message.content.startswith("Error: ZeroDivisionError: division by zero\nAt line 2:")


def test_images_become_content_blocks_after_the_text() -> None:
    def handler(request: ExecutionRequest) -> ExecutionResult:
        figure = Attachment(data_base64=PNG_1X1, width=1, height=1, description="a dot")
        return ExecutionResult(status="ok", session=request.session, attachments=[figure])

    tool = GenparkReplTool(engine=mock_engine(handler))
    message = as_call(tool, thread("t"), code="plot()")
    text, image = message.content
    assert isinstance(text, dict)
    assert text["type"] == "text"
    assert "Attached image/png 1x1: a dot" in text["text"]
    assert image == {"type": "image", "base64": PNG_1X1, "mime_type": "image/png"}
    assert message.artifact["attachments"][0]["data_base64"] == PNG_1X1


def test_image_blocks_can_be_turned_off_for_providers_that_refuse_them() -> None:
    def handler(request: ExecutionRequest) -> ExecutionResult:
        figure = Attachment(data_base64=PNG_1X1, description="a dot")
        return ExecutionResult(status="ok", session=request.session, attachments=[figure])

    message = as_call(GenparkReplTool(engine=mock_engine(handler), image_blocks=False), code="plot()")
    assert message.content == "OK\nAttached image/png: a dot"
    assert message.artifact["attachments"][0]["data_base64"] == PNG_1X1


def test_without_images_content_stays_a_string(engine: ReplEngine) -> None:
    assert isinstance(as_call(GenparkReplTool(engine=engine), code="1").content, str)


def test_an_engine_failure_becomes_an_error_message_not_an_exception() -> None:
    def handler(request: ExecutionRequest) -> ExecutionResult:
        raise BoundaryError("worker failed to start")

    message = as_call(GenparkReplTool(engine=mock_engine(handler)), code="1")
    assert message.status == "error"
    assert message.content == "Tool failure, not an error in your code: BoundaryError: worker failed to start"


def test_a_closed_engine_is_reported_and_plain_invoke_does_not_raise_either() -> None:
    engine = ReplEngine(policy="trusted")
    tool = GenparkReplTool(engine=engine)
    engine.close()
    assert as_call(tool, code="1").status == "error"
    assert tool.invoke({"code": "1"}).startswith("Tool failure, not an error in your code: EngineClosed")


async def test_async_invoke_runs_through_engine_arun(
    engine: ReplEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real_arun = engine.arun

    async def spy(code: str, session: str = "default", **kwargs: Any) -> ExecutionResult:
        calls.append(session)
        return await real_arun(code, session, **kwargs)

    monkeypatch.setattr(engine, "arun", spy)
    tool = GenparkReplTool(engine=engine)
    first = await tool.ainvoke(
        {"name": tool.name, "args": {"code": "v = 5"}, "id": "a", "type": "tool_call"}, thread("t")
    )
    second = await tool.ainvoke(
        {"name": tool.name, "args": {"code": "v * 2"}, "id": "b", "type": "tool_call"}, thread("t")
    )
    assert calls == ["t", "t"]
    assert first.artifact["status"] == "ok"
    assert second.artifact["value"] == "10"


async def test_async_engine_failure_is_handled_too() -> None:
    def handler(request: ExecutionRequest) -> ExecutionResult:
        raise BoundaryError("lost the worker")

    tool = GenparkReplTool(engine=mock_engine(handler))
    message = await tool.ainvoke({"name": tool.name, "args": {"code": "1"}, "id": "a", "type": "tool_call"})
    assert message.status == "error"
    assert "BoundaryError: lost the worker" in message.content


# ---- the variables tool and the toolkit ----------------------------------------------------------


def test_toolkit_tools_share_one_engine_and_session_mapping(engine: ReplEngine) -> None:
    repl, variables, inspect = GenparkReplToolkit(engine=engine).get_tools()
    assert isinstance(repl, GenparkReplTool)
    assert isinstance(variables, GenparkVariablesTool)
    assert isinstance(inspect, GenparkInspectTool)
    assert repl.engine is variables.engine is inspect.engine is engine
    names = [t.name for t in (repl, variables, inspect)]
    assert names == ["run_python", "list_variables", "inspect_variable"]
    as_call(repl, thread("t"), code="rows = [1, 2, 3]\ndef f(x):\n    return x")
    listing = as_call(variables, thread("t"))
    assert listing.content == "Variables (2):\nrows: list, len 3 = [1, 2, 3]\nf: def f(x)"
    assert [v["name"] for v in listing.artifact["variables"]] == ["rows", "f"]
    assert as_call(variables, thread("other")).content == "No variables defined yet."


def test_toolkit_passes_resolver_and_default_session_to_both_tools(engine: ReplEngine) -> None:
    def fixed(config: RunnableConfig) -> str | None:
        return None

    tools = GenparkReplToolkit(engine=engine, session_resolver=fixed, default_session="s").get_tools()
    for tool in tools:
        assert isinstance(tool, GenparkReplTool | GenparkVariablesTool | GenparkInspectTool)
        assert tool.session_resolver is fixed
        assert tool.default_session == "s"


def test_inspect_one_variable(engine: ReplEngine) -> None:
    engine.run("word = 'x' * 5000", session="t")
    message = as_call(GenparkInspectTool(engine=engine), thread("t"), name="word")
    header, body = message.content.split("\n", 1)
    assert header == "word: str, len 5000"
    assert body.endswith("[shortened; len 5,000]")
    assert len(body) < 2_200  # the engine's bounded repr, not 5000 characters
    assert message.artifact["variable"]["name"] == "word"
    assert message.artifact["variable"]["repr_truncated"] is True


def test_inspecting_an_unknown_name_tells_the_model_what_to_do(engine: ReplEngine) -> None:
    engine.run("a = 1", session="t")
    tool = GenparkInspectTool(engine=engine)
    for config, defined in ((thread("t"), "Defined: a."), (thread("never-ran"), "Nothing is defined yet.")):
        message = as_call(tool, config, name="missing")
        assert message.status == "error"
        assert message.content == f"Not defined: 'missing'. {defined}"


def test_reset_tool_is_opt_in_and_empties_the_thread(engine: ReplEngine) -> None:
    assert not any(isinstance(t, GenparkResetTool) for t in GenparkReplToolkit(engine=engine).get_tools())
    reset = GenparkReplToolkit(engine=engine, include_reset=True).get_tools()[-1]
    assert isinstance(reset, GenparkResetTool)
    engine.run("a = 1", session="t")
    assert as_call(reset, thread("t")).content == "Session reset: every variable is gone."
    assert engine.variables("t") == []


def test_a_long_listing_stays_within_the_observation_budget(engine: ReplEngine) -> None:
    engine.run("globals().update({f'v{i}': 'y' * 100 for i in range(2000)})", session="t")
    message = as_call(GenparkVariablesTool(engine=engine), thread("t"))
    assert len(message.content) <= engine.limits.max_observation_chars
    assert message.content.startswith("Variables (2000):\n")
    assert message.content.splitlines()[-1].endswith("more; inspect one by name.")
    assert len(message.artifact["variables"]) == 2000


def test_a_listing_keeps_one_line_per_variable(engine: ReplEngine) -> None:
    engine.run("class Table:\n    def __repr__(self):\n        return 'a b\\n1 2'\nt = Table()", session="t")
    message = as_call(GenparkVariablesTool(engine=engine), thread("t"))
    assert message.content.splitlines()[1:] == ["Table: class Table()", "t: Table = a b..."]


def test_variables_tool_reports_engine_failures() -> None:
    engine = ReplEngine(policy="trusted")
    tool = GenparkVariablesTool(engine=engine)
    engine.close()
    message = as_call(tool)
    assert message.status == "error"
    assert message.content.startswith("Tool failure, not an error in your code: EngineClosed")


def test_listing_is_safe_while_another_thread_runs_code(engine: ReplEngine) -> None:
    engine.run("n = 0", session="t")
    stop = threading.Event()

    def keep_running() -> None:
        while not stop.is_set():
            engine.run("n += 1", session="t")

    worker = threading.Thread(target=keep_running)
    worker.start()
    try:
        for _ in range(20):
            assert as_call(GenparkVariablesTool(engine=engine), thread("t")).content.startswith(
                "Variables (1):\nn: int"
            )
    finally:
        stop.set()
        worker.join(timeout=10)
    assert not worker.is_alive()


def test_outside_a_graph_run_no_stream_writer_is_looked_up(monkeypatch: pytest.MonkeyPatch) -> None:
    # Outside a LangGraph run, get_stream_writer() raises KeyError; the run's config already says so.
    from langchain_genpark_repl import tools as lc_tools

    if lc_tools._graph_run_key is None:
        pytest.skip("this LangGraph keeps its run elsewhere: only the call tells")

    def looked_up() -> None:
        raise AssertionError("get_stream_writer called outside a graph run")

    monkeypatch.setattr(lc_tools, "_get_stream_writer", looked_up)
    assert lc_tools._graph_writer({"configurable": {"thread_id": "t"}}) is None
    assert lc_tools._graph_writer({}) is None
    with pytest.raises(AssertionError, match="called outside"):  # inside one, it is asked
        lc_tools._graph_writer({"configurable": {lc_tools._graph_run_key: object()}})
