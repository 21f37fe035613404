"""What every adapter shares: the model's view of a result and a tool's label."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, RootModel

from tests.adapters._custom_server import PIXEL_PNG
from workspace_tools import (
    ToolPresentation,
    file_part,
    image_part,
    invoke_tool_sync,
    tool,
    tool_content,
)
from workspace_tools.adapters._common import model_parts, tool_presentation
from workspace_tools.adapters.mcp import mcp_tool


class Args(BaseModel):
    path: str
    verbose: bool = False


def _tool(presentation: Any = None, output_schema: Any = None, value: Any = "") -> Any:
    return tool(
        name="t",
        description="T.",
        parameters=Args,
        execute=lambda a, c: value,
        presentation=presentation,
        output_schema=output_schema,
    )


def _explode(args: Args) -> ToolPresentation:
    raise RuntimeError("no label without a path")


@pytest.mark.parametrize(
    ("presentation", "static"),
    [
        (None, None),
        (
            ToolPresentation(label="Fixed", icon="x", detail="d"),
            ToolPresentation(label="Fixed", icon="x"),
        ),
        (
            lambda a: ToolPresentation(label="Open", icon="file", detail=a.path),
            ToolPresentation(label="Open", icon="file"),
        ),
        (lambda a: ToolPresentation(label="Open", detail=a.path.upper()), None),
        (_explode, None),
    ],
)
def test_tool_presentation_keeps_label_and_icon(
    presentation: Any, static: ToolPresentation | None
) -> None:
    assert tool_presentation(_tool(presentation)) == static


def test_model_parts_keep_images_and_describe_files() -> None:
    content = tool_content(
        "Here:",
        image_part(PIXEL_PNG, "image/png"),
        file_part(b"x" * 2048, "application/pdf", "a.pdf"),
    )
    result = invoke_tool_sync(_tool(value=content), {"path": "p"})
    assert model_parts(result) == [
        "Here:",
        image_part(PIXEL_PNG, "image/png"),
        "[a.pdf: application/pdf, 2.0 KB]",
    ]


def test_model_parts_cut_media_text_to_the_limit() -> None:
    media = _tool(value=tool_content("x" * 100))
    [text] = model_parts(invoke_tool_sync(media, {"path": "p"}, max_result_length=60))
    assert text == "x" * 18 + "\n[truncated: showing 18 of 100 characters]"


class Listing(RootModel[list[str]]):
    pass


class Summary(BaseModel):
    count: int


@pytest.mark.parametrize(("schema", "declared"), [(Summary, True), (Listing, False)])
def test_mcp_output_schema_only_for_object_content(schema: Any, declared: bool) -> None:
    definition = mcp_tool(_tool(output_schema=schema))
    expected = schema.model_json_schema() if declared else None
    assert definition.outputSchema == expected
