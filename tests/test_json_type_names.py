"""Every message about a value of the wrong shape names JSON's types (object, array,
string, number, boolean, null), which the model wrote, never Python's (dict, list, str,
NoneType): the arguments' validation, the adapters' items, the MCP JSON-RPC layer."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from workspace_tools import ErrorCode, invoke_tool_sync, tool
from workspace_tools._errors import json_error_message, json_kind, json_kind_phrase


class Inner(BaseModel):
    name: str


class Shapes(BaseModel):
    items: list[str] = []
    pair: tuple[int, int] = (0, 0)
    tags: set[str] = set()
    inner: Inner | None = None
    table: dict[str, int] = {}
    nothing: None = None


def _run(args: Shapes, context: Any) -> str:
    return "ran"


SHAPES = tool(name="shapes", description="takes shapes", parameters=Shapes, execute=_run)


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({"items": "a"}, "- items: Input should be an array, not a string"),
        ({"items": {"a": 1}}, "- items: Input should be an array, not an object"),
        ({"pair": 3}, "- pair: Input should be an array, not a number"),
        ({"tags": True}, "- tags: Input should be an array, not a boolean"),
        ({"inner": [1]}, "- inner: Input should be an object, not an array"),
        ({"table": "x"}, "- table: Input should be an object, not a string"),
        ({"nothing": 0}, "- nothing: Input should be null, not a number"),
        ({"nothing": {}}, "- nothing: Input should be null, not an object"),
    ],
)
def test_an_argument_of_the_wrong_json_type_is_named_in_json_words(
    arguments: dict[str, Any], said: str
) -> None:
    result = invoke_tool_sync(SHAPES, arguments)
    assert (result.error_code, result.error) == (
        ErrorCode.INVALID_ARGUMENTS,
        f"Invalid arguments for shapes:\n{said}",
    )


@pytest.mark.parametrize(
    ("value", "kind", "phrase"),
    [
        (None, "null", "null"),
        (True, "boolean", "a boolean"),
        (3, "number", "a number"),
        (2.5, "number", "a number"),
        ("x", "string", "a string"),
        ([1], "array", "an array"),
        ((1,), "array", "an array"),
        ({"a": 1}, "object", "an object"),
    ],
)
def test_json_kind_names_each_json_type(value: object, kind: str, phrase: str) -> None:
    assert (json_kind(value), json_kind_phrase(value)) == (kind, phrase)


def test_a_validation_message_without_a_python_type_is_kept() -> None:
    error = {"type": "missing", "msg": "Field required", "input": {}}
    assert json_error_message(error) == "Field required"
