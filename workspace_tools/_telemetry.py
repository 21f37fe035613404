"""OpenTelemetry spans for tool calls, when ``opentelemetry-api`` is installed.

Attribute names follow the OpenTelemetry GenAI semantic conventions
(https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/#execute-tool-span).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

try:
    from opentelemetry import trace as _otel_trace
except ImportError:  # pragma: no cover - depends on the environment
    _otel_trace = None


class _Span:
    def __init__(self, span: Any) -> None:
        self._span = span

    def fail(self, code: object) -> None:
        if self._span is not None:
            self._span.set_attribute("error.type", str(code))
            self._span.set_status(_otel_trace.Status(_otel_trace.StatusCode.ERROR))


@contextmanager
def tool_span(tool_name: str, call_id: str) -> Iterator[_Span]:
    """A span ``execute_tool {tool_name}`` around one call; a no-op without OpenTelemetry."""
    if _otel_trace is None:
        yield _Span(None)
        return
    tracer = _otel_trace.get_tracer("workspace_tools")
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool_name,
        "gen_ai.tool.call.id": call_id,
    }
    with tracer.start_as_current_span(
        f"execute_tool {tool_name}", kind=_otel_trace.SpanKind.INTERNAL, attributes=attributes
    ) as span:
        yield _Span(span)
