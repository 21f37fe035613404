"""edit_file: replace literal text in a file."""

from __future__ import annotations

from pydantic import BaseModel, Field

from .._output import ToolPresentation
from .._tool import Tool, ToolContext, tool
from ..workspace import Workspace


class EditFileArgs(BaseModel):
    """Replace literal text in a file."""

    path: str = Field(description="File path, relative to the workspace root")
    old_text: str = Field(description="Exact text to replace; must match once unless replace_all")
    new_text: str = Field(description="Replacement text, written literally")
    replace_all: bool = Field(False, description="Replace every occurrence")


def build(workspace: Workspace) -> Tool[EditFileArgs]:
    """The ``edit_file`` tool over ``workspace``."""

    def execute(args: EditFileArgs, context: ToolContext) -> object:
        raise NotImplementedError("edit_file")

    return tool(
        name="edit_file",
        description="Replace literal text in a file.",
        parameters=EditFileArgs,
        execute=execute,
        presentation=lambda a: ToolPresentation(label="Edit file", icon="file-pen", detail=a.path),
    )
