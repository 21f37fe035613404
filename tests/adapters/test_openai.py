"""OpenAI function-calling schemas and tool-result messages, checked against the SDK's types."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import openai
import pytest
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionToolMessageParam
from openai.types.responses import FunctionToolParam
from openai.types.responses.response_input_param import FunctionCallOutput
from pydantic import BaseModel, Field

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
from workspace_tools.adapters.openai import (
    openai_chat_message,
    openai_chat_tool,
    openai_responses_output,
    openai_responses_tool,
    strict_json_schema,
)


class Point(BaseModel):
    x: int
    y: int = 0


class Shape(BaseModel):
    """Nested models, references with descriptions, unions and literals."""

    kind: Literal["line", "polygon"] = "line"
    start: Point = Field(description="where it begins")
    points: list[Point] = Field(default_factory=list)
    label: str | None = None
    anchor: Point | None = Field(None, description="optional anchor")


SHAPE = tool(name="draw", description="Draw a shape.", parameters=Shape, execute=lambda a, c: "")


def all_tools(root: Path) -> list[Tool]:
    return [*workspace_tools(root), *TOOLS, SHAPE]


def test_strict_schemas_equal_the_sdk_helper_for_every_tool(tmp_path: Path) -> None:
    for item in all_tools(tmp_path):
        oracle = openai.pydantic_function_tool(item.parameters, name=item.name)
        assert strict_json_schema(item.input_schema()) == oracle["function"]["parameters"]


def test_chat_tool_definitions_are_sdk_function_tools(tmp_path: Path) -> None:
    for item in all_tools(tmp_path):
        for strict in (True, False):
            definition = openai_chat_tool(item, strict=strict)
            assert sdk_valid(ChatCompletionFunctionToolParam, definition)
            assert definition["function"]["strict"] is strict
        assert openai_chat_tool(item, strict=False)["function"] == {
            "name": item.name,
            "description": item.description,
            "parameters": item.input_schema(),
            "strict": False,
        }


def test_responses_tool_definitions_are_sdk_function_tools(tmp_path: Path) -> None:
    for item in all_tools(tmp_path):
        definition = openai_responses_tool(item)
        assert sdk_valid(FunctionToolParam, definition)
        assert definition == {
            "type": "function",
            "name": item.name,
            "description": item.description,
            "parameters": openai_chat_tool(item)["function"]["parameters"],
            "strict": True,
        }


def test_strict_mode_requires_every_property_and_forbids_extras() -> None:
    schema = strict_json_schema(Shape.model_json_schema())
    assert schema["required"] == ["kind", "start", "points", "label", "anchor"]
    assert schema["additionalProperties"] is False
    assert schema["$defs"]["Point"] == {
        "properties": {
            "x": {"title": "X", "type": "integer"},
            "y": {"default": 0, "title": "Y", "type": "integer"},
        },
        "required": ["x", "y"],
        "title": "Point",
        "type": "object",
        "additionalProperties": False,
    }
    # A $ref with a sibling description is inlined: strict mode takes bare references only.
    assert schema["properties"]["start"]["description"] == "where it begins"
    assert "$ref" not in schema["properties"]["start"]


def _echo(text: str) -> Tool:
    class Args(BaseModel):
        pass

    return tool(name="echo", description="Echo.", parameters=Args, execute=lambda a, c: text)


def _failing() -> Tool:
    class Args(BaseModel):
        pass

    def execute(args: Args, context: object) -> str:
        raise ToolError("no such file: a.txt", ErrorCode.NOT_FOUND)

    return tool(name="fail", description="Fail.", parameters=Args, execute=execute)


def _picture() -> Tool:
    class Args(BaseModel):
        pass

    def execute(args: Args, context: object) -> object:
        return tool_content("A pixel:", image_part(PIXEL_PNG, "image/png"))

    return tool(name="picture", description="Picture.", parameters=Args, execute=execute)


PIXEL_B64 = base64.b64encode(PIXEL_PNG).decode()


@pytest.mark.parametrize(
    ("make", "chat_content", "responses_output"),
    [
        (lambda: _echo("hello"), "hello", "hello"),
        (_failing, "Error: no such file: a.txt", "Error: no such file: a.txt"),
        (
            _picture,
            f"A pixel:\n[image/png, {len(PIXEL_PNG)} B]",
            [
                {"type": "input_text", "text": "A pixel:"},
                {"type": "input_image", "image_url": f"data:image/png;base64,{PIXEL_B64}"},
            ],
        ),
    ],
)
def test_results_become_sdk_messages(
    make: Callable[[], Tool], chat_content: str, responses_output: object
) -> None:
    result = invoke_tool_sync(make(), {}, call_id="call_1")
    chat = openai_chat_message(result)
    assert chat == {"role": "tool", "tool_call_id": "call_1", "content": chat_content}
    assert sdk_valid(ChatCompletionToolMessageParam, chat)
    output = openai_responses_output(result)
    assert output == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": responses_output,
    }
    assert sdk_valid(FunctionCallOutput, output)


def test_result_messages_never_carry_details_or_presentation() -> None:
    result = invoke_tool_sync(TOOLS[0], {"n": 2}, call_id="call_2")
    assert result.details == {"n": 2}
    assert openai_chat_message(result)["content"] == '{"total":2}'
    assert openai_responses_output(result)["output"] == '{"total":2}'


@pytest.mark.parametrize("make", [lambda: _echo("hello"), _failing])
def test_messages_rebuilt_from_a_json_transcript_equal_the_live_ones(
    make: Callable[[], Tool],
) -> None:
    result = invoke_tool_sync(make(), {}, call_id="call_3")
    entry = ToolHistoryEntry.model_validate_json(
        ToolHistoryEntry.from_result(result).model_dump_json()
    )
    assert openai_chat_message(entry) == openai_chat_message(result)
    assert openai_responses_output(entry) == openai_responses_output(result)


def test_strict_calls_with_every_argument_spelled_out_validate(tmp_path: Path) -> None:
    # Strict mode makes the model send every property: defaults explicitly, null where the
    # field allows it. Such a call must be accepted by the tool's own argument model.
    for item in workspace_tools(tmp_path):
        schema = strict_json_schema(item.input_schema())
        arguments = {
            name: prop.get("default", "x" if prop.get("type") == "string" else None)
            for name, prop in schema["properties"].items()
        }
        assert set(arguments) == set(schema["required"])
        item.parameters.model_validate(arguments)
