"""A module that runs a sandboxed call of its own tool when it is imported (no
``if __name__ == "__main__":``): a sandbox's worker imports it to run that tool.
``AT_IMPORT`` is what the import-time call gave in the process that imported it."""

from __future__ import annotations

import anyio
from pydantic import BaseModel

from sandbox import Sandbox
from workspace_tools import ToolContext, invoke_tool, tool


class NoArgs(BaseModel):
    pass


def at_import(args: NoArgs, context: ToolContext) -> str:
    """What the import-time call gave in this process (a sandbox's worker, here)."""
    return AT_IMPORT


AT_IMPORT_TOOL = tool(
    name="at_import",
    description="The import-time call's outcome",
    parameters=NoArgs,
    execute=at_import,
)


async def _call_at_import() -> str:
    box = Sandbox()
    try:
        result = await invoke_tool(AT_IMPORT_TOOL, {}, sandbox=box)
    finally:
        box.close()
    if result.error is not None:
        return f"{result.error_code}: {result.error}"
    return str(result.content)


AT_IMPORT = ""
AT_IMPORT = anyio.run(_call_at_import)
