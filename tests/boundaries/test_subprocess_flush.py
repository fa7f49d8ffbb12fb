"""Output reaches the call that wrote it, whichever Python stream carried it.

Before replying, the worker flushes every stream that may hold text, except its own sys.stdout and
sys.stderr while they are write-through (they hold none). These tests write through each stream the
worker knows about, including its own ones made buffering by the code, without a newline or flush:
the text must be in that call's result, not the next one's.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from genpark_repl_tools import Limits, ReplEngine

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks a sandboxed zygote")


@pytest.fixture(scope="module")
def engine() -> Iterator[ReplEngine]:
    with ReplEngine(policy="trusted", boundary="subprocess", limits=Limits(timeout_s=10)) as engine:
        yield engine


@pytest.mark.parametrize(
    ("code", "stream"),
    [
        pytest.param("import sys\nsys.stdout.write('a')", "stdout", id="stdout"),
        pytest.param("import sys\nsys.stderr.write('a')", "stderr", id="stderr"),
        pytest.param("import sys\nsys.__stdout__.write('a')", "stdout", id="__stdout__"),
        pytest.param("import sys\nsys.__stderr__.write('a')", "stderr", id="__stderr__"),
        pytest.param(
            "import sys\nsys.__stdout__.reconfigure(write_through=False, line_buffering=False)\n"
            "sys.__stdout__.write('a')",
            "stdout",
            id="__stdout__-buffering",
        ),
        pytest.param(
            "import io, sys\n"
            "sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, 'w', closefd=False)))\n"
            "sys.stdout.write('a')",
            "stdout",
            id="replaced-stdout",
        ),
    ],
)
def test_text_without_a_flush_arrives_with_its_call(engine: ReplEngine, code: str, stream: str) -> None:
    session = f"flush-{stream}-{abs(hash(code))}"
    result = engine.run(code, session)
    assert result.status == "ok", result.error
    assert getattr(result, stream) == "a"
    assert engine.run("pass", session).stdout == ""


def test_the_worker_stream_made_buffering_by_the_code_is_flushed(engine: ReplEngine) -> None:
    # While a cell runs, sys.stdout routes its own writes to the call's capture and everything else
    # (attributes, a thread's writes) to the worker's own stream: the code can make that one buffer.
    session = "flush-own-buffering"
    setup = "import sys, threading\nsys.stdout.reconfigure(write_through=False, line_buffering=False)"
    assert engine.run(setup, session).status == "ok"
    code = "t = threading.Thread(target=sys.stdout.write, args=('a',))\nt.start()\nt.join()"
    assert engine.run(code, session).stdout == "a"
    assert engine.run("pass", session).stdout == ""
