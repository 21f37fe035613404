"""The MCP server in-process on asyncio and trio: progress from worker threads and the loop."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import types
from mcp.shared.memory import create_connected_server_and_client_session

from tests.adapters._custom_server import TOOLS
from workspace_tools import ErrorCode, Tool, ToolResult
from workspace_tools.adapters.mcp import create_server
from workspace_tools.session._pipeline import OnUpdate

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("tool_name", ["count_sync", "count_async"])
async def test_progress_is_relayed_in_order_on_each_backend(tool_name: str) -> None:
    seen: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, message))

    async with create_connected_server_and_client_session(create_server(TOOLS)) as session:
        result = await session.call_tool(tool_name, {"n": 50}, progress_callback=on_progress)
    assert seen == [(float(i), f"line {i}") for i in range(1, 51)]
    assert result.structuredContent == {"total": 50}


async def test_server_runs_calls_through_the_given_call_function() -> None:
    seen: list[tuple[str, dict[str, Any], str]] = []

    async def refuse(
        tool: Tool[Any], arguments: dict[str, Any], call_id: str, on_update: OnUpdate | None
    ) -> ToolResult:
        seen.append((tool.name, arguments, call_id))
        return ToolResult(
            call_id=call_id,
            name=tool.name,
            error="denied by policy",
            error_code=ErrorCode.PERMISSION_DENIED,
        )

    async with create_connected_server_and_client_session(
        create_server(TOOLS, call=refuse)
    ) as session:
        result = await session.call_tool("count_sync", {"n": 1})
    assert [(name, args) for name, args, _ in seen] == [("count_sync", {"n": 1})]
    assert seen[0][2].startswith("mcp-")
    assert result.isError is True
    assert result.content == [types.TextContent(type="text", text="denied by policy")]
    assert result.meta == {"dev.agent-workspace-tools/errorCode": "PERMISSION_DENIED"}
