"""grep: search file contents with a Python regular expression."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from .._output import ToolPresentation
from .._tool import Tool, ToolContext, tool
from ..workspace import Workspace


class GrepArgs(BaseModel):
    """Search file contents with a regular expression."""

    pattern: str = Field(description="Python regular expression")
    path: str = Field(".", description="File or directory to search")
    glob: str | None = Field(None, description="Only files matching this glob, e.g. '*.py'")
    ignore_case: bool = Field(False, description="Case-insensitive match")
    output_mode: Literal["content", "files_with_matches", "count"] = Field(
        "content", description="Matching lines, file paths, or counts per file"
    )
    context: int = Field(0, ge=0, description="Lines of context around each match")
    multiline: bool = Field(False, description="Let the pattern span lines ('.' matches newline)")
    include_ignored: bool = Field(False, description="Include files ignore rules skip")
    limit: int | None = Field(None, ge=1, description="Maximum number of results")


def build(workspace: Workspace) -> Tool[GrepArgs]:
    """The ``grep`` tool over ``workspace``."""

    def execute(args: GrepArgs, context: ToolContext) -> object:
        raise NotImplementedError("grep")

    return tool(
        name="grep",
        description="Search file contents with a regular expression.",
        parameters=GrepArgs,
        execute=execute,
        presentation=lambda a: ToolPresentation(
            label="Search files", icon="text-search", detail=a.pattern
        ),
        read_only=True,
    )
