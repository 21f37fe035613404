"""The MCP server's answers carry what a local call's result carries: an unknown tool is
an ``INVALID_ARGUMENTS`` error result (as in a session), with its code under ``_meta``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from mcp import types
from mcp.shared.memory import create_connected_server_and_client_session

from workspace_tools import ErrorCode, ToolSession, Workspace
from workspace_tools.adapters._jsonrpc import JsonRpcGate
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


def _gate_after_initialize() -> JsonRpcGate:
    gate = JsonRpcGate()
    init = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"},
    }
    line = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init})
    assert not isinstance(gate.incoming(line.encode()), dict)
    return gate


@pytest.mark.parametrize("token", [True, False])
def test_a_boolean_progress_token_is_invalid_params(token: bool) -> None:
    # MCP: a progress token is a string or an integer; a JSON boolean is neither, and
    # taken as 1 or 0 its notifications would name a token the client never sent.
    params = {"name": "read_file", "arguments": {}, "_meta": {"progressToken": token}}
    line = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params})
    answer = _gate_after_initialize().incoming(line.encode())
    assert answer == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {
            "code": -32602,
            "message": "Invalid params for tools/call: _meta.progressToken: "
            "must be a string or an integer",
        },
    }


@pytest.mark.parametrize("token", ["", "t", 0, -5, 2**40])
def test_string_and_integer_progress_tokens_pass(token: str | int) -> None:
    params = {"name": "read_file", "arguments": {}, "_meta": {"progressToken": token}}
    line = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params})
    passed = _gate_after_initialize().incoming(line.encode())
    assert isinstance(passed, types.JSONRPCMessage), passed


def test_a_cancellation_naming_true_does_not_cancel_request_1() -> None:
    gate = _gate_after_initialize()
    call = {"name": "read_file", "arguments": {"path": "a"}}
    line = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call})
    assert isinstance(gate.incoming(line.encode()), types.JSONRPCMessage)
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": True}}
    assert gate.incoming(json.dumps(cancel).encode()) is None
    answer = types.JSONRPCMessage(
        types.JSONRPCResponse(jsonrpc="2.0", id=1, result={"content": [], "isError": False})
    )
    sent = gate.outgoing(answer)
    assert sent is not None and json.loads(sent)["id"] == 1, sent
