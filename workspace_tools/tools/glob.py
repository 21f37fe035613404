"""glob: file paths matching a glob pattern, honouring ignore rules."""

from __future__ import annotations

from pydantic import BaseModel, Field

from .._output import ToolPresentation
from .._tool import Tool, ToolContext, tool
from ..workspace import Workspace


class GlobArgs(BaseModel):
    """Find files by glob pattern."""

    pattern: str = Field(description="Glob pattern, e.g. '**/*.py' or 'src/{a,b}/*.ts'")
    path: str = Field(".", description="Directory to search from")
    include_ignored: bool = Field(False, description="Include files ignore rules skip")
    limit: int | None = Field(None, ge=1, description="Maximum number of paths")


def build(workspace: Workspace) -> Tool[GlobArgs]:
    """The ``glob`` tool over ``workspace``."""

    def execute(args: GlobArgs, context: ToolContext) -> object:
        raise NotImplementedError("glob")

    return tool(
        name="glob",
        description="Find files by glob pattern.",
        parameters=GlobArgs,
        execute=execute,
        presentation=lambda a: ToolPresentation(
            label="Find files", icon="search", detail=a.pattern
        ),
        read_only=True,
    )
