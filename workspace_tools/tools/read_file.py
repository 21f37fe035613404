"""read_file: numbered lines of a text file, or an image."""

from __future__ import annotations

from pydantic import BaseModel, Field

from .._output import ToolPresentation
from .._tool import Tool, ToolContext, tool
from ..workspace import Workspace


class ReadFileArgs(BaseModel):
    """Read a text file as numbered lines (or an image as image content)."""

    path: str = Field(description="File path, relative to the workspace root")
    offset: int = Field(1, ge=1, description="1-based line number to start at")
    limit: int | None = Field(None, ge=1, description="Maximum number of lines to read")


def build(workspace: Workspace) -> Tool[ReadFileArgs]:
    """The ``read_file`` tool over ``workspace``."""

    def execute(args: ReadFileArgs, context: ToolContext) -> object:
        raise NotImplementedError("read_file")

    return tool(
        name="read_file",
        description="Read a text file with line numbers.",
        parameters=ReadFileArgs,
        execute=execute,
        presentation=lambda a: ToolPresentation(label="Read file", icon="file-text", detail=a.path),
        read_only=True,
    )
