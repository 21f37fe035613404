from __future__ import annotations

import base64

import pytest
from pydantic import BaseModel, Field

from workspace_tools import (
    ToolContent,
    file_part,
    image_part,
    is_tool_output,
    tool,
    tool_content,
    tool_output,
)
from workspace_tools._output import ImagePart, TextPart
from workspace_tools._result import content_text

PNG_1PX = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
)


class Args(BaseModel):
    """Arguments of a sample tool."""

    path: str = Field(description="a path")


class Out(BaseModel):
    ok: bool


def test_schemas_come_from_models() -> None:
    t = tool(
        name="t", description="d", parameters=Args, execute=lambda a, c: None, output_schema=Out
    )
    assert t.input_schema() == {
        "description": "Arguments of a sample tool.",
        "properties": {"path": {"description": "a path", "title": "Path", "type": "string"}},
        "required": ["path"],
        "title": "Args",
        "type": "object",
    }
    assert t.output_json_schema() == {
        "properties": {"ok": {"title": "Ok", "type": "boolean"}},
        "required": ["ok"],
        "title": "Out",
        "type": "object",
    }


@pytest.mark.parametrize("name", ["", "has space", "x" * 65, "dots.no"])
def test_bad_tool_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="tool name must match"):
        tool(name=name, description="", parameters=Args, execute=lambda a, c: None)


def test_parameters_must_be_a_model() -> None:
    with pytest.raises(ValueError, match="parameters must be a pydantic model class"):
        tool(name="t", description="", parameters=dict, execute=lambda a, c: None)  # type: ignore[arg-type]


def test_tool_content_parts_and_description() -> None:
    content = tool_content("A chart:", image_part(PNG_1PX, "image/png"))
    assert content.parts[0] == TextPart(text="A chart:")
    assert isinstance(content.parts[1], ImagePart)
    assert content.parts[1].to_bytes() == PNG_1PX
    assert content_text(content) == "A chart:\n[image/png, 68 B]"


def test_image_from_base64_text_and_bad_type() -> None:
    part = image_part(base64.b64encode(PNG_1PX).decode(), "image/png")
    assert part.to_bytes() == PNG_1PX
    with pytest.raises(ValueError) as refused:
        image_part(PNG_1PX, "image/svg+xml")
    assert (
        "image media type must be one of image/gif, image/jpeg, image/png, image/webp, "
        "not 'image/svg+xml'; send it as file_part(data, 'image/svg+xml') instead"
    ) in str(refused.value), str(refused.value)
    svg = tool_content(file_part(b"<svg/>", "image/svg+xml"))
    assert content_text(svg) == "[image/svg+xml, 6 B]"
    with pytest.raises(ValueError, match="neither bytes nor valid base64"):
        image_part("not base64!!", "image/png")


def test_tool_content_round_trips_json() -> None:
    content = tool_content("x", image_part(PNG_1PX, "image/png"))
    assert ToolContent.model_validate_json(content.model_dump_json()) == content


def test_is_tool_output() -> None:
    assert is_tool_output(tool_output("x"))
    assert not is_tool_output({"content": "x"})
