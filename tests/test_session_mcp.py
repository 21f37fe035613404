"""The MCP server running its calls through a session: policy, elicitation, cache, record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import types
from mcp.shared.memory import create_connected_server_and_client_session
from session_tools import session_tools

from workspace_tools import ToolSession, Workspace
from workspace_tools.adapters.mcp import META_PREFIX, create_server, elicitation_confirm
from workspace_tools.cli._policy import policy_from_flags

pytestmark = pytest.mark.anyio


def serve(session: ToolSession) -> Any:
    server = create_server(session.tools, call=session.call)
    session.confirm = elicitation_confirm(server)
    return server


async def test_mcp_calls_run_through_the_session(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha\n")
    workspace = Workspace(tmp_path)
    session = ToolSession(
        session_tools(workspace),
        workspace=workspace,
        policy=policy_from_flags([("deny", "run_command"), ("ask", "write_file")]),
    )
    replies = iter([{"approve": False, "reason": "no"}, {"approve": True}])

    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content=next(replies))

    async with create_connected_server_and_client_session(
        serve(session), elicitation_callback=on_elicit
    ) as client:
        texts = []
        for name, arguments in [
            ("read_file", {"path": "a.txt"}),
            ("read_file", {"path": "a.txt"}),
            ("run_command", {"command": "ls"}),
            ("write_file", {"path": "b.txt", "content": "b"}),
            ("write_file", {"path": "b.txt", "content": "b"}),
        ]:
            result = await client.call_tool(name, arguments)
            texts.append((result.isError, result.content[0].text))
    assert texts == [
        (False, "1\talpha\n"),
        (False, "1\talpha\n"),
        (True, "Not run: policy rule '--deny run_command' denies this run_command call."),
        (True, "Not run: the user declined this write_file call: no"),
        (False, '{"path":"b.txt","created":true}'),
    ]
    assert [row.state for row in session.summary()] == [
        "ran",
        "cached",
        "denied",
        "declined",
        "ran",
    ]
    assert (tmp_path / "b.txt").read_text() == "b"


async def test_a_refused_call_carries_the_tools_presentation(tmp_path: Path) -> None:
    # A client draws skipped steps too: denied, declined, unconfirmable and missing
    # arguments all carry the step's presentation beside their details and code.
    workspace = Workspace(tmp_path)
    session = ToolSession(
        session_tools(workspace),
        workspace=workspace,
        policy=policy_from_flags([("deny", "run_command"), ("ask", "write_file")]),
    )

    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"approve": False})

    ns = META_PREFIX
    async with create_connected_server_and_client_session(
        serve(session), elicitation_callback=on_elicit
    ) as client:
        metas = [
            (await client.call_tool(name, arguments)).meta
            for name, arguments in [
                ("run_command", {"command": "rm -r x"}),
                ("write_file", {"path": "b.txt", "content": "b"}),
                ("write_file", {"content": "b"}),
            ]
        ]
    assert metas == [
        {
            ns + "details": {
                "skipped": True,
                "skip_reason": "policy",
                "denied_by": "--deny run_command",
            },
            ns + "presentation": {"label": "Run command", "icon": "terminal", "detail": "rm -r x"},
            ns + "errorCode": "PERMISSION_DENIED",
        },
        {
            ns + "details": {
                "skipped": True,
                "skip_reason": "confirmation",
                "denied_by": "--ask write_file",
            },
            ns + "presentation": {"label": "Write file", "icon": "file-plus", "detail": "b.txt"},
            ns + "errorCode": "PERMISSION_DENIED",
        },
        {
            ns + "details": {"skipped": True, "skip_reason": "missing", "denied_by": None},
            ns + "presentation": {"label": "Write file", "icon": "file-plus"},
            ns + "errorCode": "INVALID_ARGUMENTS",
        },
    ]
