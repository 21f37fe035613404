from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

from workspace_tools import (
    ErrorCode,
    ToolCallEndEvent,
    ToolCallStartEvent,
    ToolContext,
    ToolError,
    ToolHistoryEntry,
    ToolPresentation,
    ToolResultEvent,
    ToolUpdate,
    ToolUpdateEvent,
    invoke_tool_sync,
    parse_tool_event,
    tool,
    tool_output,
)


class Args(BaseModel):
    path: str


def _tool(fail: bool = False):
    def execute(args: Args, context: ToolContext):
        if fail:
            raise ToolError(f"not found: {args.path}", ErrorCode.NOT_FOUND)
        return tool_output({"path": args.path}, details={"size": 3})

    return tool(
        name="peek",
        description="",
        parameters=Args,
        execute=execute,
        presentation=lambda a: ToolPresentation(label="Peek", icon="eye", detail=a.path),
    )


def test_events_are_camel_case_json() -> None:
    assert json.loads(ToolCallStartEvent(tool_call_id="c", tool_name="peek").to_json()) == {
        "type": "tool-call-start",
        "toolCallId": "c",
        "toolName": "peek",
    }
    assert json.loads(ToolCallEndEvent(tool_call_id="c", arguments={"path": "a"}).to_json()) == {
        "type": "tool-call-end",
        "toolCallId": "c",
        "arguments": {"path": "a"},
    }
    update = ToolUpdate(call_id="c", name="peek", content="50%")
    assert json.loads(ToolUpdateEvent.from_update(update).to_json()) == {
        "type": "tool-update",
        "toolCallId": "c",
        "content": "50%",
    }


def test_result_event_success_and_error() -> None:
    ok = invoke_tool_sync(_tool(), {"path": "a.txt"}, call_id="c1")
    assert json.loads(ToolResultEvent.from_result(ok).to_json()) == {
        "type": "tool-result",
        "toolCallId": "c1",
        "result": '{"path":"a.txt"}',
        "details": {"size": 3},
        "presentation": {"label": "Peek", "icon": "eye", "detail": "a.txt"},
    }
    ko = invoke_tool_sync(_tool(fail=True), {"path": "b"}, call_id="c2")
    assert json.loads(ToolResultEvent.from_result(ko).to_json()) == {
        "type": "tool-result",
        "toolCallId": "c2",
        "result": "not found: b",
        "presentation": {"label": "Peek", "icon": "eye", "detail": "b"},
        "error": "not found: b",
        "errorCode": "NOT_FOUND",
    }


@pytest.mark.parametrize(
    "event",
    [
        ToolCallStartEvent(tool_call_id="c", tool_name="t"),
        ToolCallEndEvent(tool_call_id="c", arguments={"a": 1}),
        ToolUpdateEvent(tool_call_id="c", arguments={"a": 2}),
        ToolResultEvent(tool_call_id="c", result="x", error="x", error_code=ErrorCode.NO_MATCH),
    ],
)
def test_events_parse_back(event) -> None:
    assert parse_tool_event(event.to_json()) == event


def test_event_json_schemas_use_camel_case() -> None:
    schema = ToolResultEvent.model_json_schema(by_alias=True)
    assert set(schema["properties"]) == {
        "type",
        "toolCallId",
        "result",
        "details",
        "presentation",
        "error",
        "errorCode",
    }


def test_history_entry_keeps_metadata_apart_and_round_trips() -> None:
    result = invoke_tool_sync(_tool(), {"path": "a.txt"}, call_id="c1")
    entry = ToolHistoryEntry.from_result(result)
    again = ToolHistoryEntry.model_validate_json(entry.model_dump_json())
    assert again == entry
    assert again.metadata.details == {"size": 3}
    assert again.metadata.presentation == ToolPresentation(label="Peek", icon="eye", detail="a.txt")
    message = again.model_message()
    assert message == {
        "call_id": "c1",
        "tool_name": "peek",
        "content": '{"path":"a.txt"}',
        "is_error": False,
    }
    assert "size" not in json.dumps(message)
