"""One OpenTelemetry span per execution, with GenAI tool-execution attributes, nested in the caller's."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from genpark_repl_tools import Limits, ReplEngine


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


@pytest.fixture
def engine(provider: TracerProvider) -> Iterator[ReplEngine]:
    with ReplEngine(boundary="inprocess", tracing=provider) as engine:
        yield engine


def _only_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    spans = exporter.get_finished_spans()
    assert len(spans) == 1, [s.name for s in spans]
    return spans[0]


def test_one_span_per_run_with_genai_and_own_attributes(
    engine: ReplEngine, exporter: InMemorySpanExporter
) -> None:
    result = engine.run("print('hi')\n6 * 7", session="s1", call_id="call_abc")
    span = _only_span(exporter)
    assert span.name == "execute_tool run_python"
    assert span.kind is SpanKind.INTERNAL
    attrs = dict(span.attributes or {})
    assert attrs["gen_ai.operation.name"] == "execute_tool"
    assert attrs["gen_ai.tool.name"] == "run_python"
    assert attrs["gen_ai.tool.type"] == "function"
    assert attrs["gen_ai.tool.call.id"] == "call_abc"
    assert attrs["genpark_repl.session"] == "s1"
    assert attrs["genpark_repl.policy"] == "standard"
    assert attrs["genpark_repl.boundary"] == "inprocess"
    assert attrs["genpark_repl.status"] == "ok"
    assert attrs["genpark_repl.execution_count"] == 1
    assert attrs["genpark_repl.stdout_chars"] == 3
    assert attrs["genpark_repl.value_chars"] == 2
    assert attrs["genpark_repl.duration_ms"] == result.duration_ms
    assert attrs["genpark_repl.cpu_ms"] == result.usage.cpu_ms
    assert attrs["genpark_repl.wall_ms"] == result.usage.wall_ms
    assert "error.type" not in attrs
    assert span.status.status_code is StatusCode.UNSET
    engine.run("x = 1", session="s1")
    assert len(exporter.get_finished_spans()) == 2


def test_blocked_run_carries_its_findings(engine: ReplEngine, exporter: InMemorySpanExporter) -> None:
    result = engine.run("import os\nimport subprocess")
    assert result.status == "blocked"
    span = _only_span(exporter)
    attrs = dict(span.attributes or {})
    assert attrs["genpark_repl.status"] == "blocked"
    assert attrs["error.type"] == "PolicyViolation"
    assert list(attrs["genpark_repl.findings.rules"]) == [f.rule for f in result.findings]  # type: ignore[arg-type]
    assert len(result.findings) == 2
    assert "os" in attrs["genpark_repl.findings"][0]  # type: ignore[index]
    assert span.status.status_code is StatusCode.ERROR


def test_runtime_refusal_names_the_layer(engine: ReplEngine, exporter: InMemorySpanExporter) -> None:
    engine.run("getattr(1, '_' + '_class__')")
    attrs = dict(_only_span(exporter).attributes or {})
    assert attrs["error.type"] == "PolicyViolation"
    assert attrs["genpark_repl.refused_by"] == "guard"


def test_span_nests_under_the_current_span(
    engine: ReplEngine, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    with provider.get_tracer("agent").start_as_current_span("agent step") as parent:
        engine.run("x = 1")
    spans = {s.name: s for s in exporter.get_finished_spans()}
    child = spans["execute_tool run_python"]
    assert child.parent is not None
    assert child.parent.span_id == parent.get_span_context().span_id
    assert child.context.trace_id == parent.get_span_context().trace_id


def test_async_run_nests_under_the_awaiting_task_span(
    engine: ReplEngine, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    async def agent() -> int:
        with provider.get_tracer("agent").start_as_current_span("agent step") as parent:
            await engine.arun("x = 1", call_id="call_async")
            return parent.get_span_context().span_id

    parent_id = asyncio.run(agent())
    spans = {s.name: s for s in exporter.get_finished_spans()}
    child = spans["execute_tool run_python"]
    assert child.parent is not None and child.parent.span_id == parent_id
    assert dict(child.attributes or {})["gen_ai.tool.call.id"] == "call_async"


def test_a_budget_refusal_makes_no_span(provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    with ReplEngine(boundary="inprocess", tracing=provider, limits=Limits(max_session_calls=1)) as engine:
        engine.run("x = 1")
        assert engine.run("x = 2").error.type == "BudgetExceeded"  # type: ignore[union-attr]
    assert len(exporter.get_finished_spans()) == 1


def test_tracing_false_makes_no_span(provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    with ReplEngine(boundary="inprocess", tracing=False) as engine:
        engine.run("x = 1")
    assert exporter.get_finished_spans() == ()


@pytest.mark.slow
def test_subprocess_span_reports_peak_memory(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    with ReplEngine(boundary="subprocess", tracing=provider) as engine:
        result = engine.run("x = 1")
    attrs = dict(_only_span(exporter).attributes or {})
    assert attrs["genpark_repl.boundary"] == "subprocess"
    assert result.usage.peak_memory_mb is not None
    assert attrs["genpark_repl.peak_memory_mb"] == result.usage.peak_memory_mb


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60, check=False
    )


def test_the_core_does_not_import_opentelemetry_unless_the_application_did() -> None:
    proc = _python(
        """
        import sys
        import genpark_repl_tools
        from genpark_repl_tools import ReplEngine
        with ReplEngine() as engine:
            assert engine.run("1").status == "ok"
        loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
        print("loaded:", loaded)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "loaded: []"


def test_auto_mode_follows_the_global_provider_once_set() -> None:
    proc = _python(
        """
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from genpark_repl_tools import ReplEngine

        exporter = InMemorySpanExporter()
        with ReplEngine() as engine:
            engine.run("x = 1")  # the API is imported but no provider is set: nothing to record
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            trace.set_tracer_provider(provider)
            engine.run("x = 2")
        print([s.name for s in exporter.get_finished_spans()])
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['execute_tool run_python']"


def test_tracing_true_without_the_api_is_an_actionable_error() -> None:
    proc = _python(
        """
        import sys
        sys.modules["opentelemetry"] = None  # as if the extra were not installed
        from genpark_repl_tools import MissingDependency, ReplEngine
        try:
            ReplEngine(tracing=True)
        except MissingDependency as exc:
            print(exc)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert "genpark-repl-tools[otel]" in proc.stdout
