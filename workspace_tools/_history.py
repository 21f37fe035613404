"""Transcript entries for finished calls: what the model read, apart from app metadata."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from workspace_tools._errors import ErrorCode
from workspace_tools._output import ToolPresentation
from workspace_tools._result import ToolResult


class ToolCallMetadata(BaseModel):
    """What the application keeps of a call and never sends to a model."""

    details: Any = None
    presentation: ToolPresentation | None = None
    error_code: ErrorCode | None = None
    duration_ms: float = 0.0


class ToolHistoryEntry(BaseModel):
    """One finished call in a transcript. Round-trips through JSON.

    ``model_text`` is exactly what the model read; ``metadata`` holds details and presentation.
    """

    call_id: str
    tool_name: str
    arguments: Any = None
    model_text: str
    is_error: bool = False
    metadata: ToolCallMetadata = Field(default_factory=ToolCallMetadata)

    @classmethod
    def from_result(cls, result: ToolResult) -> ToolHistoryEntry:
        """The entry for a finished :class:`ToolResult`."""
        arguments = result.arguments
        if isinstance(arguments, BaseModel):
            arguments = arguments.model_dump(mode="json")
        return cls(
            call_id=result.call_id,
            tool_name=result.name,
            arguments=arguments,
            model_text=result.model_text(),
            is_error=result.is_error,
            metadata=ToolCallMetadata(
                details=result.details,
                presentation=result.presentation,
                error_code=result.error_code,
                duration_ms=result.duration_ms,
            ),
        )

    def model_message(self) -> dict[str, Any]:
        """What an adapter sends back to a model: call id, tool name, text, error flag.

        The metadata is never part of it.
        """
        return {
            "call_id": self.call_id,
            "tool_name": self.tool_name,
            "content": self.model_text,
            "is_error": self.is_error,
        }
