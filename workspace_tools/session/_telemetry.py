"""OpenTelemetry spans for tool calls, when ``opentelemetry-api`` is installed.

Attribute names follow the OpenTelemetry GenAI semantic conventions
(https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/#execute-tool-span).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
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


_NO_SPAN = nullcontext(_Span(None))


def tool_span(tool_name: str, call_id: str) -> AbstractContextManager[_Span]:
    """A span ``execute_tool {tool_name}`` around one call; a no-op without OpenTelemetry."""
    if _otel_trace is None or isinstance(
        _otel_trace.get_tracer_provider(),
        (_otel_trace.ProxyTracerProvider, _otel_trace.NoOpTracerProvider),
    ):
        # No provider configured (the API's default) or a no-op one: every span would be
        # dropped, and making one costs more than a short tool call.
        return _NO_SPAN
    return _otel_span(tool_name, call_id)


@contextmanager
def _otel_span(tool_name: str, call_id: str) -> Iterator[_Span]:
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
