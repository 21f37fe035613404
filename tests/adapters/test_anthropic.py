"""Anthropic tool definitions and tool_result blocks, checked against the SDK's types."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path

import pytest
from anthropic.types import ToolParam, ToolResultBlockParam
from anthropic.types.tool_result_block_param import Content
from pydantic import BaseModel

from tests.adapters._custom_server import PIXEL_PNG, TOOLS
from tests.adapters._sdk import sdk_valid
from workspace_tools import (
    ErrorCode,
    Tool,
    ToolError,
    ToolHistoryEntry,
    image_part,
    invoke_tool_sync,
    tool,
    tool_content,
    workspace_tools,
)
from workspace_tools.adapters.anthropic import anthropic_tool, anthropic_tool_result


class NoArgs(BaseModel):
    pass


def _returning(value: object) -> Tool:
    return tool(name="t", description="T.", parameters=NoArgs, execute=lambda a, c: value)


def _failing(args: NoArgs, context: object) -> object:
    raise ToolError("no such file: a.txt", ErrorCode.NOT_FOUND)


def valid_tool_result(block: dict) -> bool:
    content = block["content"]
    if isinstance(content, str):
        return sdk_valid(ToolResultBlockParam, block)
    # pydantic-core panics consuming this lazily validated Iterable of a large union, so the
    # envelope and the blocks are checked apart, the blocks as a list of the same union.
    return sdk_valid(ToolResultBlockParam, {**block, "content": ""}) and sdk_valid(
        list[Content], content
    )


PIXEL_B64 = base64.b64encode(PIXEL_PNG).decode()


def test_tool_definitions_are_sdk_tool_params(tmp_path: Path) -> None:
    for item in [*workspace_tools(tmp_path), *TOOLS]:
        definition = anthropic_tool(item)
        assert definition == {
            "name": item.name,
            "description": item.description,
            "input_schema": item.input_schema(),
        }
        assert sdk_valid(ToolParam, definition)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (
            lambda: _returning({"a": 1}),
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"a":1}'},
        ),
        (
            lambda: tool(name="f", description="F.", parameters=NoArgs, execute=_failing),
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": "no such file: a.txt",
                "is_error": True,
            },
        ),
        (
            lambda: _returning(tool_content("A pixel:", "", image_part(PIXEL_PNG, "image/png"))),
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": [
                    {"type": "text", "text": "A pixel:"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PIXEL_B64},
                    },
                ],
            },
        ),
    ],
)
def test_results_become_sdk_tool_result_blocks(make: object, expected: dict) -> None:
    result = invoke_tool_sync(make(), {}, call_id="toolu_1")  # type: ignore[operator]
    block = anthropic_tool_result(result)
    assert block == expected
    assert valid_tool_result(block)


def test_tool_result_never_carries_details_or_presentation() -> None:
    result = invoke_tool_sync(TOOLS[0], {"n": 2}, call_id="toolu_2")
    assert result.details == {"n": 2}
    assert anthropic_tool_result(result) == {
        "type": "tool_result",
        "tool_use_id": "toolu_2",
        "content": '{"total":2}',
    }


@pytest.mark.parametrize(
    "make",
    [
        lambda: _returning({"a": 1}),
        lambda: tool(name="f", description="F.", parameters=NoArgs, execute=_failing),
    ],
)
def test_blocks_rebuilt_from_a_json_transcript_equal_the_live_ones(
    make: Callable[[], Tool],
) -> None:
    result = invoke_tool_sync(make(), {}, call_id="toolu_3")
    entry = ToolHistoryEntry.model_validate_json(
        ToolHistoryEntry.from_result(result).model_dump_json()
    )
    assert anthropic_tool_result(entry) == anthropic_tool_result(result)
