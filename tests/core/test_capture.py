"""Capture is per execution: no cross-talk under threads or asyncio, host streams untouched, bounded."""

from __future__ import annotations

import asyncio
import sys
import threading
import tracemalloc
import types

import pytest

from genpark_repl_tools import ExecutionResult, Limits, ReplEngine
from genpark_repl_tools._capture import BoundedText

SESSIONS = 32
PRINTING_CELL = """\
import time
for k in range(50):
    print('{tag}', k)
    if k % 10 == 0:
        time.sleep(0.001)
"""


def _expected(tag: str) -> str:
    return "".join(f"{tag} {k}\n" for k in range(50))


@pytest.fixture
def engine() -> ReplEngine:
    with ReplEngine(boundary="inprocess", policy="trusted", limits=Limits(timeout_s=20)) as e:
        yield e


def test_32_sessions_from_threads_have_zero_cross_talk(engine: ReplEngine) -> None:
    results: dict[str, ExecutionResult] = {}
    barrier = threading.Barrier(SESSIONS)

    def worker(i: int) -> None:
        tag = f"thread-{i}"
        barrier.wait()
        results[tag] = engine.run(PRINTING_CELL.format(tag=tag), session=tag)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(SESSIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == SESSIONS
    for tag, result in results.items():
        assert result.status == "ok", result.to_observation()
        assert result.stdout == _expected(tag)


def test_32_sessions_from_asyncio_have_zero_cross_talk(engine: ReplEngine) -> None:
    async def main() -> list[ExecutionResult]:
        tags = [f"task-{i}" for i in range(SESSIONS)]
        return await asyncio.gather(*(engine.arun(PRINTING_CELL.format(tag=t), session=t) for t in tags))

    results = asyncio.run(main())
    for i, result in enumerate(results):
        assert result.stdout == _expected(f"task-{i}")


def test_host_streams_are_restored_and_host_prints_are_not_captured(
    engine: ReplEngine, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cell and a host thread meet through a module both can import.
    sync = types.ModuleType("hostsync")
    sync.started, sync.release = threading.Event(), threading.Event()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "hostsync", sync)
    out_before, err_before = sys.stdout, sys.stderr

    def host_thread() -> None:
        sync.started.wait(5)  # type: ignore[attr-defined]
        print("from the host thread")
        sync.release.set()  # type: ignore[attr-defined]

    t = threading.Thread(target=host_thread)
    t.start()
    result = engine.run(
        "import hostsync, time\nprint('from the cell')\nhostsync.started.set()\n"
        "while not hostsync.release.is_set():\n    time.sleep(0.001)"
    )
    t.join(5)
    assert result.stdout == "from the cell\n"
    assert sys.stdout is out_before and sys.stderr is err_before
    assert "from the host thread" in capsys.readouterr().out


def test_code_that_replaces_sys_stdout_does_not_change_the_host(engine: ReplEngine) -> None:
    before = sys.stdout
    result = engine.run("import io, sys\nsys.stdout = io.StringIO()\nprint('lost')")
    assert result.status == "ok"
    assert sys.stdout is before
    assert engine.run("print('captured again')").stdout == "captured again\n"


def test_write_of_non_str_is_a_type_error_in_the_cell(engine: ReplEngine) -> None:
    result = engine.run("import sys\nsys.stdout.write(b'bytes')")
    assert result.error is not None and result.error.type == "TypeError"


def test_binary_buffer_writes_are_captured(engine: ReplEngine) -> None:
    result = engine.run("import sys\nsys.stdout.buffer.write('héllo'.encode())")
    assert result.stdout == "héllo"


def test_print_flood_keeps_memory_bounded() -> None:
    with ReplEngine(
        boundary="inprocess", policy="trusted", limits=Limits(timeout_s=30, max_output_chars=10_000)
    ) as engine:
        tracemalloc.start()
        try:
            result = engine.run("line = 'x' * 1000\nfor i in range(20_000):\n    print(line)")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    # 20 MB were printed; the capture holds a few multiples of the 10 kB limit.
    assert result.stdout_truncated
    assert peak < 2_000_000
    assert "characters omitted" in result.stdout


def test_bounded_text_keeps_head_and_tail() -> None:
    text = BoundedText(20)
    for i in range(1000):
        text.write(f"{i},")
    value = text.getvalue()
    assert text.truncated
    assert value.startswith("0,1,2,3,4,")
    assert value.endswith("998,999,")
    assert f"{text.total - 20:,} characters omitted" in value


def test_bounded_text_untruncated_is_exact() -> None:
    text = BoundedText(100)
    text.write("abc")
    text.write("")
    text.write("def")
    assert (text.getvalue(), text.truncated) == ("abcdef", False)


def test_stderr_is_captured_apart_from_stdout_and_the_host_stream_is_back(
    engine: ReplEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    before = sys.stderr
    result = engine.run("import sys\nsys.stderr.write('careful\\n')\nprint('fine')")
    assert (result.stdout, result.stderr) == ("fine\n", "careful\n")
    assert sys.stderr is before
    assert capsys.readouterr().err == ""  # nothing leaked to the host's stream


def test_an_execution_that_fails_to_start_leaves_no_routing_and_no_count_behind() -> None:
    from genpark_repl_tools import _capture
    from genpark_repl_tools._compile import compile_cell
    from genpark_repl_tools._runner import run_cell
    from genpark_repl_tools._session import Session
    from genpark_repl_tools.policy import Policy
    from genpark_repl_tools.policy._runtime import TrustedRuntime

    class Refusing(TrustedRuntime):
        def enter(self, session_builtins: dict[str, object] | None = None) -> object:
            raise RuntimeError("the guards could not be entered")

    runtime = Refusing(Policy.trusted())
    out_before, err_before = sys.stdout, sys.stderr
    with pytest.raises(RuntimeError, match="could not be entered"):
        run_cell(Session("s", runtime), compile_cell("x = 1", runtime), runtime, Limits(), "inprocess")
    assert sys.stdout is out_before and sys.stderr is err_before
    # The failed execution is not counted as still running: the next one runs alone (figures
    # nobody tagged are claimed only by an execution that ran alone).
    token, _, alone = _capture.enter_execution(_capture.Capture(100))
    _capture.exit_execution(token)
    assert alone


def test_a_run_cut_short_before_it_left_the_routing_leaves_the_host_its_streams(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Ctrl-C can land right after a run marked itself finished and before it left the routing (see
    run_cell): its capture no longer takes output, and the next run to start or end drops it."""
    from genpark_repl_tools import _capture

    class Cut(_capture.Capture):
        __slots__ = ("finished",)

    out_before, err_before = sys.stdout, sys.stderr
    cut = Cut(100)
    cut.finished = False
    _capture.enter_execution(cut)  # the token is lost with the interrupt: no exit_execution
    print("inside")
    cut.finished = True  # what run_cell's `finally` stores first
    print("host output after the cut")
    assert cut.stdout.getvalue() == "inside\n"
    assert capsys.readouterr().out == "host output after the cut\n"  # not into the dead capture
    token, _, alone = _capture.enter_execution(_capture.Capture(100))
    assert alone  # the cut run is no longer counted as running
    _capture.exit_execution(token)
    assert sys.stdout is out_before and sys.stderr is err_before  # the routers came off
    assert not _capture._live
