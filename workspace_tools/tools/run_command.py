"""run_command: a shell command in the workspace, with streamed output and a hard timeout."""

from __future__ import annotations

from pydantic import BaseModel, Field

from .._output import ToolPresentation
from .._tool import Tool, ToolContext, tool
from ..workspace import Workspace


class RunCommandArgs(BaseModel):
    """Run a shell command in the workspace."""

    command: str = Field(description="Shell command, run with bash -c")
    cwd: str = Field(".", description="Working directory, relative to the workspace root")
    timeout: float | None = Field(None, gt=0, description="Seconds before the command is killed")


def build(workspace: Workspace) -> Tool[RunCommandArgs]:
    """The ``run_command`` tool over ``workspace``."""

    async def execute(args: RunCommandArgs, context: ToolContext) -> object:
        raise NotImplementedError("run_command")

    return tool(
        name="run_command",
        description="Run a shell command in the workspace.",
        parameters=RunCommandArgs,
        execute=execute,
        presentation=lambda a: ToolPresentation(
            label="Run command", icon="terminal", detail=a.command
        ),
    )
