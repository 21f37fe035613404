"""The MCP server in-process on asyncio and trio: progress from worker threads and the loop."""

from __future__ import annotations

import pytest
from mcp.shared.memory import create_connected_server_and_client_session

from tests.adapters._custom_server import TOOLS
from workspace_tools.adapters.mcp import create_server

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
