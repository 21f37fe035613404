"""A custom tool in a module that imports only what a tool module needs (``tool``), for
the sandbox tests that look at what a call's process imported."""

from __future__ import annotations

import sys

from pydantic import BaseModel

from workspace_tools import ToolContext, tool


class NoArgs(BaseModel):
    pass


def imported_parts(args: NoArgs, context: ToolContext) -> str:
    """The package's modules this process has imported, one name a line."""
    return "\n".join(sorted(name for name in sys.modules if name.startswith("workspace_tools")))


IMPORTED_PARTS = tool(
    name="imported_parts",
    description="The package's modules the call's process imported",
    parameters=NoArgs,
    execute=imported_parts,
)
