"""write_file: create or overwrite a text file, atomically, keeping encoding and newlines."""

from __future__ import annotations

from pydantic import BaseModel, Field

from .._output import ToolPresentation
from .._tool import Tool, ToolContext, tool
from ..workspace import Workspace


class WriteFileArgs(BaseModel):
    """Create or overwrite a text file."""

    path: str = Field(description="File path, relative to the workspace root")
    content: str = Field(description="The whole new content of the file")


def build(workspace: Workspace) -> Tool[WriteFileArgs]:
    """The ``write_file`` tool over ``workspace``."""

    def execute(args: WriteFileArgs, context: ToolContext) -> object:
        raise NotImplementedError("write_file")

    return tool(
        name="write_file",
        description="Create or overwrite a text file.",
        parameters=WriteFileArgs,
        execute=execute,
        presentation=lambda a: ToolPresentation(
            label="Write file", icon="file-plus", detail=a.path
        ),
    )
