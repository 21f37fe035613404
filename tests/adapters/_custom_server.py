"""An MCP server of small custom tools, run as a subprocess by test_mcp.py.

Usage: python tests/adapters/_custom_server.py
"""

from __future__ import annotations

import os
import time
from typing import Any

import anyio
from pydantic import BaseModel

from workspace_tools import (
    ErrorCode,
    ToolContext,
    ToolError,
    ToolPresentation,
    image_part,
    tool,
    tool_content,
    tool_output,
)
from workspace_tools.adapters.mcp import create_server, serve_stdio

# The smallest valid PNG: one transparent pixel.
PIXEL_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d49444154789c6360000002000185d1f8c80000000049454e44ae426082"
)


class CountArgs(BaseModel):
    n: int


class CountOut(BaseModel):
    total: int


class WaitArgs(BaseModel):
    path: str


class NoArgs(BaseModel):
    pass


def count_sync(args: CountArgs, context: ToolContext) -> Any:
    for i in range(1, args.n + 1):
        context.update(content=f"line {i}", details={"i": i})
    return tool_output({"total": args.n}, details={"n": args.n})


async def count_async(args: CountArgs, context: ToolContext) -> Any:
    for i in range(1, args.n + 1):
        context.update(
            content=f"line {i}", presentation=ToolPresentation(label="Count", detail=str(i))
        )
        await anyio.sleep(0)
    return {"total": args.n}


def wait_for_file(args: WaitArgs, context: ToolContext) -> str:
    # The client creates the file when it receives this update: the call can only finish
    # if progress reaches the client while the call is still running.
    context.update(content="waiting")
    deadline = time.monotonic() + 60  # far past what a loaded host needs
    while not os.path.exists(args.path):
        if time.monotonic() > deadline:
            raise ToolError("the progress notification never arrived", ErrorCode.TOOL_TIMEOUT)
        time.sleep(0.01)
    return "seen"


def fail(args: NoArgs, context: ToolContext) -> Any:
    raise ToolError("no such thing", ErrorCode.NOT_FOUND, details={"looked_in": "shelf"})


def picture(args: NoArgs, context: ToolContext) -> Any:
    return tool_content("A pixel:", image_part(PIXEL_PNG, "image/png"))


def wrong_shape(args: NoArgs, context: ToolContext) -> Any:
    return {"total": "many"}


TOOLS = [
    tool(
        name="count_sync",
        description="Count to n in a worker thread.",
        parameters=CountArgs,
        execute=count_sync,
        output_schema=CountOut,
        presentation=lambda a: ToolPresentation(label="Count", icon="hash", detail=str(a.n)),
        read_only=True,
    ),
    tool(
        name="count_async",
        description="Count to n on the event loop.",
        parameters=CountArgs,
        execute=count_async,
        output_schema=CountOut,
    ),
    tool(
        name="wait_for_file",
        description="Wait until a file exists.",
        parameters=WaitArgs,
        execute=wait_for_file,
    ),
    tool(name="fail", description="Always fails.", parameters=NoArgs, execute=fail),
    tool(name="picture", description="An image.", parameters=NoArgs, execute=picture),
    tool(
        name="wrong_shape",
        description="Content its schema denies.",
        parameters=NoArgs,
        execute=wrong_shape,
        output_schema=CountOut,
    ),
]

if __name__ == "__main__":
    anyio.run(serve_stdio, create_server(TOOLS))
