"""Confirmation: the prompt, the per-call callback, and answering an ask by MCP elicitation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import types
from mcp.server.fastmcp import Context, FastMCP
from mcp.shared.memory import create_connected_server_and_client_session
from session_tools import session_tools

from workspace_tools import (
    Confirmation,
    ConfirmationRequest,
    ToolPresentation,
    ToolSession,
    Workspace,
)
from workspace_tools.adapters.mcp import ConfirmationForm, confirmation_from_elicitation
from workspace_tools.cli._policy import policy_from_flags

pytestmark = pytest.mark.anyio


def request(presentation: ToolPresentation | None) -> ConfirmationRequest:
    return ConfirmationRequest(
        call_id="c1",
        tool="run_command",
        arguments={"command": "make"},
        presentation=presentation,
        read_only=False,
        rule="--ask run_command",
    )


@pytest.mark.parametrize(
    ("presentation", "prompt"),
    [
        (
            ToolPresentation(label="Run command", icon="terminal", detail="make"),
            "Run command: make\nAllow this run_command call? (policy rule '--ask run_command')",
        ),
        (
            ToolPresentation(label="Run command"),
            "Run command\nAllow this run_command call? (policy rule '--ask run_command')",
        ),
        (
            None,
            "run_command {'command': 'make'}\n"
            "Allow this run_command call? (policy rule '--ask run_command')",
        ),
    ],
)
def test_prompt_shows_the_call_as_a_step_list_does(
    presentation: ToolPresentation | None, prompt: str
) -> None:
    assert request(presentation).prompt() == prompt


@pytest.mark.parametrize(
    ("action", "content", "expected"),
    [
        ("accept", {"approve": True}, Confirmation(approved=True)),
        ("accept", {"approve": True, "reason": ""}, Confirmation(approved=True)),
        (
            "accept",
            {"approve": False, "reason": "use the test target"},
            Confirmation(approved=False, reason="use the test target"),
        ),
        (
            "accept",
            None,
            Confirmation(approved=False, reason="the confirmation came back empty"),
        ),
        ("decline", None, Confirmation(approved=False, reason="the user declined")),
        (
            "cancel",
            None,
            Confirmation(approved=False, reason="the user dismissed the confirmation"),
        ),
    ],
)
def test_confirmation_from_elicitation(
    action: str, content: dict[str, Any] | None, expected: Confirmation
) -> None:
    assert confirmation_from_elicitation(action, content) == expected


def test_confirmation_form_is_flat_and_primitive() -> None:
    schema = ConfirmationForm.model_json_schema()
    assert {name: field["type"] for name, field in schema["properties"].items()} == {
        "approve": "boolean",
        "reason": "string",
    }
    assert schema["required"] == ["approve"]


async def test_call_confirm_overrides_the_session_callback(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path)
    session = ToolSession(
        session_tools(workspace),
        workspace=workspace,
        policy=policy_from_flags([("ask", "write_file")]),
        confirm=lambda r: True,
    )
    result = await session.call(
        "write_file",
        {"path": "a.txt", "content": "x"},
        confirm=lambda r: Confirmation(approved=False, reason="per call"),
    )
    assert result.model_text() == "Not run: the user declined this write_file call: per call"
    assert not (tmp_path / "a.txt").exists()


DECLINED = "Not run: the user declined this write_file call"


# An MCP server answering the session's asks by elicitation, as the lead wires it.


def mcp_server(session: ToolSession) -> FastMCP:
    server = FastMCP("session-test")

    @server.tool()
    async def write_file(path: str, content: str, ctx: Context) -> str:
        async def confirm(request: ConfirmationRequest) -> Confirmation:
            wanted = types.ClientCapabilities(elicitation=types.ElicitationCapability())
            if not ctx.session.check_client_capability(wanted):
                return Confirmation(approved=False, reason="the MCP client cannot ask the user")
            answer = await ctx.session.elicit_form(
                request.prompt(),
                ConfirmationForm.model_json_schema(),
                related_request_id=ctx.request_id,
            )
            return confirmation_from_elicitation(answer.action, answer.content)

        result = await session.call(
            "write_file", {"path": path, "content": content}, confirm=confirm
        )
        return result.model_text()

    return server


@pytest.mark.parametrize(
    ("reply", "text", "written"),
    [
        ({"approve": True}, '{"path":"a.txt","created":true}', True),
        (
            {"approve": False, "reason": "not there"},
            f"{DECLINED}: not there",
            False,
        ),
        (None, f"{DECLINED}: the MCP client cannot ask the user", False),
    ],
)  # fmt: skip
async def test_mcp_elicitation_answers_an_ask(
    tmp_path: Path, reply: dict[str, Any] | None, text: str, written: bool
) -> None:

    workspace = Workspace(tmp_path)
    session = ToolSession(
        session_tools(workspace),
        workspace=workspace,
        policy=policy_from_flags([("ask", "write_file")]),
    )
    prompts: list[str] = []

    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        prompts.append(params.message)
        return types.ElicitResult(action="accept", content=reply)

    async with create_connected_server_and_client_session(
        mcp_server(session), elicitation_callback=on_elicit if reply is not None else None
    ) as client:
        result = await client.call_tool("write_file", {"path": "a.txt", "content": "x"})
    assert [part.text for part in result.content] == [text]
    assert (tmp_path / "a.txt").exists() is written
    expected_prompts = (
        ["Write file: a.txt\nAllow this write_file call? (policy rule '--ask write_file')"]
        if reply is not None
        else []
    )
    assert prompts == expected_prompts
