"""An offline pydantic-ai model that makes scripted tool calls, and what the tools returned."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel


def scripted(calls: Sequence[tuple[str, dict[str, Any]]]) -> FunctionModel:
    """A model that makes ``calls`` one per turn (ids ``call_0``, ...), then answers ``done``."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = sum(isinstance(m, ModelResponse) for m in messages)
        if turn < len(calls):
            name, args = calls[turn]
            return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"call_{turn}")])
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(respond)


def tool_returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    """The tool returns the agent sent back to the model, in order."""
    return [
        part
        for m in messages
        if isinstance(m, ModelRequest)
        for part in m.parts
        if isinstance(part, ToolReturnPart)
    ]
