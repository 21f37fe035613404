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


#: Modules a call's process needs only for some calls: the event loop (an async call),
#: cloudpickle (a call by value), the workspace room (a call that carries a workspace).
OCCASIONAL = ("anyio", "asyncio", "cloudpickle", "ssl", "workspace_tools.workspace")


def occasional_imported(args: NoArgs, context: ToolContext) -> str:
    """Which of :data:`OCCASIONAL` this process has imported, one name a line."""
    return "\n".join(name for name in OCCASIONAL if name in sys.modules)


async def occasional_imported_async(args: NoArgs, context: ToolContext) -> str:
    """:func:`occasional_imported`, from an async tool."""
    return occasional_imported(args, context)


OCCASIONAL_IMPORTED = tool(
    name="occasional_imported",
    description="Which modules needed only by some calls the call's process imported",
    parameters=NoArgs,
    execute=occasional_imported,
)
OCCASIONAL_IMPORTED_ASYNC = tool(
    name="occasional_imported_async",
    description="Which modules needed only by some calls the call's process imported",
    parameters=NoArgs,
    execute=occasional_imported_async,
)
