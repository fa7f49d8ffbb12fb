"""OpenTelemetry: one span per execution, through `opentelemetry-api` only (extra `otel`).

    ReplEngine()                        # auto: traced once the application sets a tracer provider
    ReplEngine(tracing=False)           # never
    ReplEngine(tracing=True)            # as auto, but fail at once if the API is not installed
    ReplEngine(tracing=my_provider)     # this TracerProvider

Auto never imports OpenTelemetry: an application that traces has imported it already, and one that
does not pays one dictionary lookup per run. The SDK, exporters and sampling are the application's.

Spans follow the GenAI semantic conventions for tool execution (span `execute_tool run_python`,
kind INTERNAL, `gen_ai.operation.name`, `gen_ai.tool.*`, `error.type`) and add ours under
`genpark_repl.*`. They start in the caller's context, so they nest under whatever span is current
(a LangChain or LlamaIndex run traced through OpenTelemetry, a web request, ...). The code itself is
not recorded (it may hold data the user did not mean to export).
"""

from __future__ import annotations

import sys
from typing import Any

from ._exceptions import MissingDependency
from ._models import ExecutionResult

__all__ = ["TOOL_NAME", "Tracing", "finish_span", "finish_tool_span", "start_span", "start_tool_span"]

TOOL_NAME = "run_python"
_SPAN_NAME = f"execute_tool {TOOL_NAME}"
_MAX_FINDINGS = 20


class Tracing:
    """Resolves the tracer to use for a run, or None when spans would go nowhere."""

    __slots__ = ("_fixed", "_mode", "_provider", "_tracer")

    def __init__(self, mode: bool | Any | None) -> None:
        self._mode = mode
        self._fixed = mode is not None and mode is not True and mode is not False  # a provider object
        self._provider: Any = None
        self._tracer: Any = None
        if mode is True or self._fixed:
            try:
                from opentelemetry import trace  # noqa: F401
            except ImportError as exc:
                raise MissingDependency(
                    "tracing needs OpenTelemetry: pip install 'genpark-repl-tools[otel]'"
                ) from exc
            if self._fixed:
                provider: Any = mode
                self._tracer = provider.get_tracer(__name__, _version())

    def tracer(self) -> Any:
        if self._fixed:
            return self._tracer
        if self._mode is False:
            return None
        # Auto (and True): the global provider, looked up per run so one set later is picked up. Until
        # an application sets one, spans would be non-recording: make none at all.
        trace = sys.modules.get("opentelemetry.trace")
        if trace is None:
            return None
        provider = trace.get_tracer_provider()
        if provider is not self._provider:
            no_op = isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))
            self._tracer = None if no_op else provider.get_tracer(__name__, _version())
            self._provider = provider
        return self._tracer


def _version() -> str | None:
    # From the installed metadata, not the package: importing it here would be an import cycle.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("genpark-repl-tools")
    except PackageNotFoundError:
        return None


def start_span(
    tracer: Any, session: str, call_id: str | None, policy: str, boundary: str, code_chars: int
) -> Any:
    from opentelemetry.trace import SpanKind

    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": TOOL_NAME,
        "gen_ai.tool.type": "function",
        "genpark_repl.session": session,
        "genpark_repl.policy": policy,
        "genpark_repl.boundary": boundary,
        "genpark_repl.code_chars": code_chars,
    }
    if call_id is not None:
        attributes["gen_ai.tool.call.id"] = call_id
    return tracer.start_span(_SPAN_NAME, kind=SpanKind.INTERNAL, attributes=attributes)


def finish_span(span: Any, result: ExecutionResult | None, failure: BaseException | None = None) -> None:
    """Set the outcome's attributes and end the span."""
    from opentelemetry.trace import Status, StatusCode

    try:
        if result is None:
            if failure is not None:
                kind = type(failure).__name__
                span.set_attribute("error.type", kind)
                span.record_exception(failure)
                span.set_status(Status(StatusCode.ERROR, f"{kind}: {failure}"[:500]))
            return
        if not span.is_recording():
            return
        usage = result.usage
        attributes: dict[str, Any] = {
            "genpark_repl.status": result.status,
            "genpark_repl.execution_count": result.execution_count,
            "genpark_repl.duration_ms": result.duration_ms,
            "genpark_repl.wall_ms": usage.wall_ms,
            "genpark_repl.stdout_chars": len(result.stdout),
            "genpark_repl.stderr_chars": len(result.stderr),
            "genpark_repl.value_chars": len(result.value or ""),
            "genpark_repl.output_truncated": result.stdout_truncated
            or result.stderr_truncated
            or result.value_truncated,
            "genpark_repl.attachments": len(result.attachments),
            "genpark_repl.session_restarted": result.session_restarted,
        }
        if usage.cpu_ms is not None:
            attributes["genpark_repl.cpu_ms"] = usage.cpu_ms
        if usage.peak_memory_mb is not None:
            attributes["genpark_repl.peak_memory_mb"] = usage.peak_memory_mb
        if result.policy:
            attributes["genpark_repl.policy"] = result.policy
        error = result.error
        if result.status != "ok" and error is not None:
            attributes["error.type"] = error.type
            if error.refused_by is not None:
                attributes["genpark_repl.refused_by"] = error.refused_by
        if result.findings:
            shown = result.findings[:_MAX_FINDINGS]
            attributes["genpark_repl.findings.rules"] = [f.rule for f in shown]
            attributes["genpark_repl.findings"] = [
                f"line {f.line}: {f.message}" if f.line else f.message for f in shown
            ]
        span.set_attributes(attributes)
        if result.status != "ok":
            message = f"{error.type}: {error.message}" if error is not None else result.status
            span.set_status(Status(StatusCode.ERROR, message[:500]))
    finally:
        span.end()


def use_span(span: Any) -> Any:
    from opentelemetry import trace

    return trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False)


def start_tool_span(tracer: Any, tool: str) -> Any:
    """A host tool's call: a child of the current span (the run's, in the tool's thread)."""
    from opentelemetry.trace import SpanKind

    return tracer.start_span(
        f"execute_tool {tool}",
        kind=SpanKind.INTERNAL,
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.type": "function",
            "genpark_repl.tool.host": True,
        },
    )


def finish_tool_span(span: Any, outcome: str, message: str) -> None:
    """`outcome`: ok, error (the tool raised) or refused (its arguments, or the call limit)."""
    from opentelemetry.trace import Status, StatusCode

    try:
        span.set_attribute("genpark_repl.tool.outcome", outcome)
        if outcome != "ok":
            span.set_attribute("error.type", "ToolError")
            span.set_status(Status(StatusCode.ERROR, message[:500]))
    finally:
        span.end()
