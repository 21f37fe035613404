"""The MCP server's answers carry what a local call's result carries: an unknown tool is
an ``INVALID_ARGUMENTS`` error result (as in a session), with its code under ``_meta``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
from mcp import types
from mcp.shared.memory import create_connected_server_and_client_session

from workspace_tools import ErrorCode, ToolSession, Workspace
from workspace_tools.adapters.mcp import META_PREFIX, create_server
from workspace_tools.tools import workspace_tools

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_unknown_tool_has_the_error_code_a_session_gives(tmp_path: Path) -> None:
    tools = workspace_tools(Workspace(tmp_path))
    local = await ToolSession(tools, workspace=Workspace(tmp_path)).call("zz", {})
    assert local.error_code is ErrorCode.INVALID_ARGUMENTS
    async with create_connected_server_and_client_session(create_server(tools)) as session:
        result = await session.call_tool("zz", {})
    known = ", ".join(t.name for t in tools)
    assert result.isError is True
    assert result.content == [
        types.TextContent(type="text", text=f"Unknown tool 'zz'; available: {known}")
    ]
    assert result.structuredContent is None
    assert result.meta == {META_PREFIX + "errorCode": "INVALID_ARGUMENTS"}


CALLS: list[tuple[str, Any]] = [
    ("read_file", {"path": "a.txt"}),
    ("read_file", {"path": "missing"}),
    ("read_file", None),
    ("read_file", {"path": "a.txt", "unknown": 1}),
    ("write_file", {"path": "b.txt", "content": "x\n"}),
    ("write_file", {"path": "../out", "content": "x"}),
    ("edit_file", {"path": "a.txt", "old_text": "hello", "new_text": "bye"}),
    ("edit_file", {"path": "a.txt", "old_text": "absent", "new_text": "x"}),
    ("run_command", {"command": "printf hi"}),
    ("run_command", {"command": "exit 3"}),
    ("apply_patch", {"patch": "not a patch"}),
    ("grep", {"pattern": "("}),
]


async def test_every_result_is_valid_against_the_tool_output_schema(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"hello\n")
    tools = workspace_tools(Workspace(tmp_path))
    seen = []
    async with create_connected_server_and_client_session(create_server(tools)) as session:
        schemas = {t.name: t.outputSchema for t in (await session.list_tools()).tools}
        for name, arguments in CALLS:
            result = await session.call_tool(name, arguments)
            code = (result.meta or {}).get(META_PREFIX + "errorCode")
            seen.append((name, result.isError, code))
            if result.isError:
                # MCP: an error result is text; structured content is for results only.
                assert result.structuredContent is None, (name, result)
            elif schemas[name] is not None:
                assert result.structuredContent is not None, (name, result)
                jsonschema.validate(result.structuredContent, schemas[name])
    assert seen == [
        ("read_file", False, None),
        ("read_file", True, "NOT_FOUND"),
        ("read_file", True, "INVALID_ARGUMENTS"),
        ("read_file", True, "INVALID_ARGUMENTS"),
        ("write_file", False, None),
        ("write_file", True, "OUTSIDE_WORKSPACE"),
        ("edit_file", False, None),
        ("edit_file", True, "NO_MATCH"),
        ("run_command", False, None),
        ("run_command", False, None),
        ("apply_patch", True, "INVALID_ARGUMENTS"),
        ("grep", True, "INVALID_ARGUMENTS"),
    ]
