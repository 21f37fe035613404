"""OpenTelemetry spans for tool calls, when ``opentelemetry-api`` is installed.

Attribute names follow the OpenTelemetry GenAI semantic conventions
(https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/#execute-tool-span).
"""

from __future__ import annotations

import os
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

#: The variable that names a tracer provider for the API to load on first use, as
#: ``os.environ`` keeps it encoded (CPython; ``None`` elsewhere).
_PROVIDER_VARIABLE = "OTEL_PYTHON_TRACER_PROVIDER"
_PROVIDER_KEY = (
    os.environ.encodekey(_PROVIDER_VARIABLE) if hasattr(os.environ, "encodekey") else None
)


def _provider_unset() -> bool:
    """Whether the API has no tracer provider and the environment names none: what
    ``get_tracer_provider`` finds before it returns its proxy, but without its look-up of
    the variable in ``os.environ``, which raises and catches a ``KeyError`` (a few
    microseconds on every call). Where the API or the environment is not as expected,
    False: the API is asked."""
    if getattr(_otel_trace, "_TRACER_PROVIDER", False) is not None:
        return False
    raw = getattr(os.environ, "_data", None)  # the encoded variables (CPython)
    return isinstance(raw, dict) and _PROVIDER_KEY is not None and _PROVIDER_KEY not in raw


def tool_span(tool_name: str, call_id: str) -> AbstractContextManager[_Span]:
    """A span ``execute_tool {tool_name}`` around one call; a no-op without OpenTelemetry."""
    if (
        _otel_trace is None
        or _provider_unset()
        or isinstance(
            _otel_trace.get_tracer_provider(),
            (_otel_trace.ProxyTracerProvider, _otel_trace.NoOpTracerProvider),
        )
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
