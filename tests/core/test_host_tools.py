"""Host tools called from session code: the same program gives the same result on every boundary.

Each test runs once per boundary (in-process, subprocess) under the `standard` policy, so the
session's own code is guarded while the tools it calls run with the host's rights.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from genpark_repl_tools import ExecutionResult, Limits, ReplEngine, ResultEvent, ToolError
from genpark_repl_tools._events import AuditEvent
from genpark_repl_tools._host_tools import MAX_DEPTH, pack, unpack

BOUNDARIES = ["inprocess"]
if sys.platform.startswith("linux"):
    BOUNDARIES.append("subprocess")

# What the host saw of the arguments of the last call of `record`, by session.
SEEN: dict[str, Any] = {}


class Query(BaseModel):
    text: str
    limit: int = 2


class Hit(BaseModel):
    title: str
    score: float


HOST_LIST = ["host", "data"]
PLAIN = "None, bool, int, float, str, bytes, list, tuple, dict with str keys"
USAGE = "search(q: str, limit: int = 10)"


def search(q: str, limit: int = 10) -> list[str]:
    """Search the catalogue."""
    return [f"{q}-{i}" for i in range(limit)]


def record(key: str, value: Any) -> str:
    SEEN[key] = value
    if isinstance(value, list):
        value.append("added by the host")  # must not reach the session's list
    return type(value).__name__


def host_list() -> list[str]:
    return HOST_LIST


def boom() -> None:
    raise RuntimeError("no network today")


async def fetch(url: str) -> dict[str, Any]:
    await asyncio.sleep(0.01)
    return {"url": url, "status": 200}


def find(query: Query) -> list[Hit]:
    return [Hit(title=f"{query.text} {i}", score=1.0 / (i + 1)) for i in range(query.limit)]


def deep() -> Any:
    value: Any = 1
    for _ in range(MAX_DEPTH + 1):
        value = [value]
    return value


TOOLS: dict[str, Callable[..., Any]] = {
    "search": search,
    "record": record,
    "host_list": host_list,
    "boom": boom,
    "fetch": fetch,
    "find": find,
}


@pytest.fixture(scope="module", params=BOUNDARIES)
def engine(request: pytest.FixtureRequest) -> Iterator[ReplEngine]:
    with ReplEngine(policy="standard", boundary=request.param, tools=TOOLS) as engine:
        yield engine


@pytest.fixture
def session(request: pytest.FixtureRequest, engine: ReplEngine) -> Iterator[str]:
    name = request.node.name
    yield name
    engine.close(name)


def _ok(result: ExecutionResult) -> ExecutionResult:
    assert result.status == "ok", (result.error, result.stdout, result.stderr)
    return result


def test_a_tool_returns_its_result_to_session_code(engine: ReplEngine, session: str) -> None:
    result = _ok(engine.run('hits = search("cats", limit=3)\nhits', session))
    assert result.value == "['cats-0', 'cats-1', 'cats-2']"
    assert result.usage.tool_calls == 1
    assert result.usage.tool_ms > 0


def test_arguments_and_results_cross_as_copies(engine: ReplEngine, session: str) -> None:
    code = (
        "mine = ['session']\n"
        f"kind = record({session!r}, mine)\n"
        "got = host_list()\n"
        "got.append('changed in the session')\n"
        "(kind, mine, host_list())"
    )
    result = _ok(engine.run(code, session))
    # The host appended to its copy, the session to its copy: neither saw the other's change.
    assert result.value == "('list', ['session'], ['host', 'data'])"
    assert HOST_LIST == ["host", "data"]
    if engine.boundary.name == "inprocess":
        assert SEEN[session] == ["session", "added by the host"]


def test_a_session_subclass_reaches_the_host_as_its_plain_value(engine: ReplEngine, session: str) -> None:
    code = (
        "class Sly(str):\n"
        "    def __str__(self):\n"
        "        raise RuntimeError('host code ran a session method')\n"
        "    def upper(self):\n"
        "        raise RuntimeError('host code ran a session method')\n"
        "class Pairs(dict):\n"
        "    def items(self):\n"
        "        raise RuntimeError('host code ran a session method')\n"
        f"record({session!r}, Pairs(k=Sly('text'), n=[Sly('x')]))"
    )
    result = _ok(engine.run(code, session))
    assert result.value == "'dict'"
    if engine.boundary.name == "inprocess":
        seen = SEEN[session]
        assert type(seen) is dict and seen == {"k": "text", "n": ["x"]}
        assert type(seen["k"]) is str and type(seen["n"][0]) is str


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("search(object())", f"search: argument 1 is of type object; tools take plain data ({PLAIN})"),
        ("search('a', limit=[1, {2}])", "search: argument 'limit'[1] is of type set; tools take plain data"),
        ("search('a', limit='many')", "search: argument 'limit': Input should be a valid integer, unable to "
         f"parse string as an integer; it accepts {USAGE} -> list[str]"),
        ("search('a', size=3)", f"search: got an unexpected keyword argument 'size'; it accepts {USAGE}"),
        ("search()", "search: missing a required argument: 'q'; it accepts search(q: str, limit: int = 10)"),
        ("find({'limit': 1})", "find: argument 'query'['text']: Field required; it accepts find(query: "),
        ("record('k', {1: 'not a str key'})", "record: argument 2: a dict key is a int; keys must be str"),
    ],
)  # fmt: skip
def test_refused_arguments_say_what_the_tool_accepts(
    engine: ReplEngine, session: str, call: str, message: str
) -> None:
    result = _ok(
        engine.run(f"try:\n    {call}\nexcept ToolError as exc:\n    said = str(exc)\nsaid", session)
    )
    assert result.value is not None
    assert result.value[1:-1].startswith(message)


def test_a_tool_exception_arrives_as_a_tool_error_without_host_traceback(
    engine: ReplEngine, session: str
) -> None:
    caught = _ok(engine.run("try:\n    boom()\nexcept ToolError as exc:\n    said = str(exc)\nsaid", session))
    assert caught.value == "'boom: no network today'"
    uncaught = engine.run("x = 1\nboom()", session)
    assert uncaught.status == "error" and uncaught.error is not None
    assert uncaught.error.type == "ToolError"
    assert uncaught.error.message == "boom: no network today"
    assert uncaught.error.line == 2
    assert "RuntimeError" not in uncaught.error.traceback and "_host_tools" not in uncaught.error.traceback


def test_an_async_tool_is_called_from_sync_code(engine: ReplEngine, session: str) -> None:
    result = _ok(engine.run("fetch('https://example.org')", session))
    assert result.value == "{'url': 'https://example.org', 'status': 200}"


def test_an_async_tool_runs_on_the_loop_of_an_arun_caller(engine: ReplEngine, session: str) -> None:
    async def main() -> ExecutionResult:
        return await engine.arun("fetch('u')['status']", session)

    assert _ok(asyncio.run(main())).value == "200"


def test_pydantic_arguments_are_validated_and_results_become_plain_data(
    engine: ReplEngine, session: str
) -> None:
    # '2' is converted by pydantic into the model's int; the Hit models come back as dicts.
    result = _ok(engine.run("find({'text': 'owl', 'limit': '2'})", session))
    assert result.value == "[{'title': 'owl 0', 'score': 1.0}, {'title': 'owl 1', 'score': 0.5}]"


def test_results_beyond_the_bounds_are_refused(engine: ReplEngine, session: str) -> None:
    engine.set_tools(session, {"deep": deep, "opaque": threading.Lock})
    result = _ok(engine.run(
        "said = []\nfor f in (deep, opaque):\n    try:\n        f()\n    except ToolError as exc:\n"
        "        said.append(str(exc))\nsaid", session
    ))  # fmt: skip
    assert (
        f"deep: its result cannot cross into the session: the value{'[0]' * MAX_DEPTH}: nested more than"
        in (result.value or "")
    )
    assert "opaque: its result cannot cross into the session: the value is of type lock" in (
        result.value or ""
    )


def test_a_slow_tool_counts_against_the_deadline(engine: ReplEngine, session: str) -> None:
    release = threading.Event()
    engine.set_tools(session, {"slow": lambda: release.wait(10)})
    started = time.monotonic()
    try:
        result = engine.run("before = 1\nslow()\nafter = 1", session, timeout_s=0.5)
    finally:
        release.set()  # the tool's host thread ends now; its late reply is dropped
    assert result.status in ("timeout", "crashed"), result.error  # crashed: a worker killed at its deadline
    assert result.error is not None and result.error.type == "Timeout"
    assert time.monotonic() - started < 5
    after = _ok(engine.run("(before, 'after' in dir())", session))
    assert after.value == "(1, False)"


def test_max_tool_calls_limits_one_run(session: str) -> None:
    for boundary in BOUNDARIES:
        with ReplEngine(
            policy="standard", boundary=boundary, tools={"search": search}, limits=Limits(max_tool_calls=2)
        ) as engine:
            code = "got = []\ntry:\n    for i in range(5):\n        got.append(search('q', limit=1))\n" \
                   "except ToolError as exc:\n    said = str(exc)\n(len(got), said)"  # fmt: skip
            result = _ok(engine.run(code, session))
            assert result.value == (
                "(2, 'search: this run made 2 tool calls, the limit (Limits.max_tool_calls); "
                "do the rest in a later run')"
            )
            assert result.usage.tool_calls == 2
            assert _ok(engine.run("search('q', limit=1)", session)).usage.tool_calls == 1  # per run
            assert engine.usage(session).tool_calls == 3  # the session's total


def test_each_call_is_in_the_audit_trail(session: str) -> None:
    for boundary in BOUNDARIES:
        events: list[AuditEvent] = []
        with ReplEngine(policy="standard", boundary=boundary, tools=TOOLS, on_event=events.append) as engine:
            _ok(engine.run("search('a', limit=1)\ntry:\n    boom()\nexcept ToolError:\n    pass", session,
                           call_id="call-7"))  # fmt: skip
        calls = [e for e in events if e.kind == "tool_call"]
        assert [(e.tool, e.tool_outcome, e.message) for e in calls] == [
            ("search", "ok", ""),
            ("boom", "error", "boom: no network today"),
        ]
        assert all(e.call_id == "call-7" and e.session == session and e.boundary == boundary for e in calls)
        assert all(e.duration_ms is not None and e.duration_ms >= 0 for e in calls)


def test_each_call_has_a_span_under_the_run_span(session: str) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode

    for boundary in BOUNDARIES:
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        with ReplEngine(policy="standard", boundary=boundary, tools=TOOLS, tracing=provider) as engine:
            _ok(engine.run("search('a', limit=1)\ntry:\n    boom()\nexcept ToolError:\n    pass", session))
        provider.shutdown()
        spans = {s.name: s for s in exporter.get_finished_spans()}
        run = spans["execute_tool run_python"]
        ok, failed = spans["execute_tool search"], spans["execute_tool boom"]
        for span in (ok, failed):
            assert span.parent is not None and span.parent.span_id == run.context.span_id
            assert span.context.trace_id == run.context.trace_id
            assert span.attributes is not None and span.attributes["gen_ai.operation.name"] == "execute_tool"
        assert ok.attributes is not None and ok.attributes["gen_ai.tool.name"] == "search"
        assert failed.status.status_code is StatusCode.ERROR
        assert failed.status.description == "boom: no network today"


def test_a_session_tool_is_not_reachable_from_another_session(engine: ReplEngine, session: str) -> None:
    other = f"{session}-other"
    engine.set_tools(session, {"secret": lambda: "only mine"})
    try:
        assert _ok(engine.run("secret()", session)).value == "'only mine'"
        refused = engine.run("secret()", other)
        assert refused.status == "error" and refused.error is not None and refused.error.type == "NameError"
        engine.set_tools(session, None)  # taken away: gone from the next run on
        gone = engine.run("secret()", session)
        assert gone.status == "error" and gone.error is not None and gone.error.type == "NameError"
        assert _ok(engine.run("search('a', limit=1)", session)).value == "['a-0']"  # the engine's stay
    finally:
        engine.close(other)


def test_a_session_tool_wins_over_the_engine_tool_of_the_same_name(engine: ReplEngine, session: str) -> None:
    engine.set_tools(session, {"search": lambda q, limit=1: ["own"]})
    assert _ok(engine.run("search('a')", session)).value == "['own']"


@pytest.mark.parametrize(
    "code",
    [
        "search.__globals__",
        "search.__closure__",
        "getattr(search, '__closure__')",
        "getattr(search, '__wr' + 'apped__')",
        "type(search).__dict__",
        "vars(search)",
        "ToolError.shared = 'seen by every session'",
        "setattr(ToolError, 'shared', 1)",
    ],
)
def test_the_stub_leads_to_no_host_object(engine: ReplEngine, session: str, code: str) -> None:
    result = engine.run(code, session)
    assert result.status in ("blocked", "error"), result.value


def test_the_stub_is_a_plain_function(engine: ReplEngine, session: str) -> None:
    assert _ok(engine.run("type(search)", session)).value == "<class 'function'>"
    assert _ok(engine.run("callable(search)", session)).value == "True"


def test_a_tool_runs_with_the_hosts_rights_outside_the_policy(
    engine: ReplEngine, session: str, tmp_path: Path
) -> None:
    secret = tmp_path / "host-only.txt"
    secret.write_text("host data")
    engine.set_tools(session, {"read_host_file": secret.read_text})
    assert _ok(engine.run("read_host_file()", session)).value == "'host data'"
    direct = engine.run(f"open({str(secret)!r}).read()", session)
    assert direct.status in ("blocked", "error")


def test_a_stub_kept_past_its_run_cannot_reach_the_host_later(engine: ReplEngine, session: str) -> None:
    # A stub kept in a variable and called while the session's variables are described (a __repr__)
    # is outside any run: refused.
    code = (
        "class Late:\n"
        "    def __repr__(self):\n"
        "        try:\n"
        "            return repr(search('x', limit=1))\n"
        "        except ToolError as exc:\n"
        "            return str(exc)\n"
        "late = Late()"
    )
    _ok(engine.run(code, session))
    described = engine.inspect("late", session)
    assert "only while the session's code runs" in described.repr


@pytest.mark.parametrize(
    ("tools", "error"),
    [
        ({"_hidden": search}, ValueError),
        ({"class": search}, ValueError),
        ({"two words": search}, ValueError),
        ({"ToolError": search}, ValueError),
        ({"search": "not callable"}, TypeError),
        ({1: search}, TypeError),
        ([search], TypeError),
    ],
)
def test_tool_names_and_values_are_checked(tools: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        ReplEngine(tools=tools)
    with ReplEngine() as engine, pytest.raises(error):
        engine.set_tools("s", tools)


def test_the_packed_form_round_trips_plain_data_and_refuses_the_rest() -> None:
    value = [
        None,
        True,
        False,
        0,
        -(2**70),
        1.5,
        float("inf"),
        "é\ud800",
        b"\x00\xff",
        (1, [2]),
        {"k": {"n": ()}},
    ]
    assert unpack(pack(value)) == value
    assert type(unpack(pack((1, 2)))) is tuple
    for bad in (b"", b"Z", b"l\x00\x00\x00\x05N", pack([1]) + b"N", b"d\x00\x00\x00\x01iAAAAAAAAN"):
        with pytest.raises(ValueError, match="malformed tool data"):
            unpack(bad)
    with pytest.raises(ValueError, match="is of type set"):
        pack({"a": [{1}]})


def test_tool_error_is_exported() -> None:
    assert issubclass(ToolError, Exception)


def test_the_host_refuses_malformed_calls_as_a_hostile_worker_could_send_them() -> None:
    from genpark_repl_tools._host_tools import MAX_DATA_BYTES, ToolRun, check_tools

    run = ToolRun(check_tools({"search": search}), max_calls=None)
    run.begin(5.0)
    long_name = "x" * 10_000
    for payload, said in [
        (b"garbage", b"Etool call refused: malformed tool data"),
        (pack(["search", ("a",), {}]), b"Etool call refused: malformed tool call"),
        (pack(("search", "a", {})), b"Etool call refused: malformed tool call"),
        (b"l\xff\xff\xff\xff", b"Etool call refused: malformed tool data: a count past the end"),
        (
            b"s" + (MAX_DATA_BYTES + 100).to_bytes(4, "big") + b"x" * (MAX_DATA_BYTES + 100),
            b"Etool call refused",
        ),
        (pack((long_name, (), {})), b"E" + b"x" * 80 + b": no such tool in this session"),
    ]:
        assert run.serve(payload).startswith(said)
    assert run.calls == 0
    assert run.serve(pack(("search", ("a",), {"limit": 1}))) == b"R" + pack(["a-0"])
    assert [(tool[:10], outcome) for tool, outcome, _, _ in run.records][-1] == ("search", "ok")


def test_an_interrupt_stops_a_run_waiting_for_a_tool(engine: ReplEngine, session: str) -> None:
    entered, release = threading.Event(), threading.Event()

    def stuck() -> None:
        entered.set()
        release.wait(10)

    engine.set_tools(session, {"stuck": stuck})
    done: list[ExecutionResult] = []
    runner = threading.Thread(target=lambda: done.append(engine.run("kept = 1\nstuck()", session)))
    runner.start()
    try:
        assert entered.wait(10)
        assert engine.interrupt(session)
        runner.join(10)
    finally:
        release.set()
        runner.join(10)
    assert done and done[0].status in ("cancelled", "crashed"), done
    assert _ok(engine.run("kept", session)).value == "1"


def test_a_streamed_run_calls_tools_too(engine: ReplEngine, session: str) -> None:
    events = list(engine.stream("print(search('a', limit=2))", session))
    text = "".join(getattr(e, "text", "") for e in events)
    assert "['a-0', 'a-1']" in text
    final = events[-1]
    assert isinstance(final, ResultEvent)
    assert final.result.usage.tool_calls == 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_process_forked_after_tool_calls_can_still_call_tools() -> None:
    with ReplEngine(policy="standard", boundary="inprocess", tools={"search": search}) as engine:
        assert _ok(engine.run("search('a', limit=1)")).value == "['a-0']"  # the pool has a thread now
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12+: a fork with threads running
            pid = os.fork()
        if pid == 0:  # the child: its call must not wait for the parent's threads
            code = 1
            try:
                result = engine.run("search('b', limit=1)", timeout_s=5)
                code = 0 if result.value == "['b-0']" else 2
            finally:
                os._exit(code)
        deadline = time.monotonic() + 20  # a child whose call waits for no thread would wait forever
        while (ended := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        if ended[0] == 0:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child's tool call did not return")
        assert os.waitstatus_to_exitcode(ended[1]) == 0
