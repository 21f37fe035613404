"""list_files: entries of a directory, optionally recursive, honouring ignore rules."""

from __future__ import annotations

from pydantic import BaseModel, Field

from .._output import ToolPresentation
from .._tool import Tool, ToolContext, tool
from ..workspace import Workspace


class ListFilesArgs(BaseModel):
    """List the entries of a directory."""

    path: str = Field(".", description="Directory, relative to the workspace root")
    recursive: bool = Field(False, description="Descend into subdirectories")
    include_ignored: bool = Field(False, description="Include entries ignore rules skip")
    limit: int | None = Field(None, ge=1, description="Maximum number of entries")


def build(workspace: Workspace) -> Tool[ListFilesArgs]:
    """The ``list_files`` tool over ``workspace``."""

    def execute(args: ListFilesArgs, context: ToolContext) -> object:
        raise NotImplementedError("list_files")

    return tool(
        name="list_files",
        description="List files and directories.",
        parameters=ListFilesArgs,
        execute=execute,
        presentation=lambda a: ToolPresentation(
            label="List files", icon="folder", detail=a.path or "."
        ),
        read_only=True,
    )
