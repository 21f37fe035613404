"""Wire events for a stream of tool calls: camelCase JSON, one pydantic model per event type."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic.alias_generators import to_camel

from workspace_tools._errors import ErrorCode
from workspace_tools._output import ToolPresentation
from workspace_tools._result import ToolResult, ToolUpdate


class _Event(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    def to_json(self) -> str:
        """Compact camelCase JSON; absent optional fields are left out."""
        return self.model_dump_json(by_alias=True, exclude_none=True)


class ToolCallStartEvent(_Event):
    """A model began a tool call (its arguments may still be streaming)."""

    type: Literal["tool-call-start"] = "tool-call-start"
    tool_call_id: str
    tool_name: str


class ToolCallEndEvent(_Event):
    """The call's arguments are complete."""

    type: Literal["tool-call-end"] = "tool-call-end"
    tool_call_id: str
    arguments: Any


class ToolUpdateEvent(_Event):
    """Progress of a running call, between its ``tool-call-end`` and its ``tool-result``.

    With ``arguments`` set, the call runs with these arguments instead of the streamed ones
    (a policy changed them).
    """

    type: Literal["tool-update"] = "tool-update"
    tool_call_id: str
    content: Any = None
    details: Any = None
    presentation: ToolPresentation | None = None
    arguments: Any = None

    @classmethod
    def from_update(cls, update: ToolUpdate) -> ToolUpdateEvent:
        """The ``tool-update`` event of a :class:`ToolUpdate`."""
        return cls(
            tool_call_id=update.call_id,
            content=update.content,
            details=update.details,
            presentation=update.presentation,
        )


class ToolResultEvent(_Event):
    """The call finished. ``result`` is the model text; ``error``/``errorCode`` on failure."""

    type: Literal["tool-result"] = "tool-result"
    tool_call_id: str
    result: Any
    details: Any = None
    presentation: ToolPresentation | None = None
    error: str | None = None
    error_code: ErrorCode | None = None

    @classmethod
    def from_result(cls, result: ToolResult) -> ToolResultEvent:
        """The ``tool-result`` event of a :class:`ToolResult`; ``result`` is its model text."""
        return cls(
            tool_call_id=result.call_id,
            result=result.model_text(),
            details=result.details,
            presentation=result.presentation,
            error=result.error,
            error_code=result.error_code,
        )


ToolEvent = Annotated[
    ToolCallStartEvent | ToolCallEndEvent | ToolUpdateEvent | ToolResultEvent,
    Field(discriminator="type"),
]
tool_event_adapter: TypeAdapter[ToolEvent] = TypeAdapter(ToolEvent)


def parse_tool_event(data: str | bytes) -> ToolEvent:
    """Parse one JSON event line into its model.

    Raises:
        pydantic.ValidationError: the JSON is not a known event.
    """
    return tool_event_adapter.validate_json(data)
