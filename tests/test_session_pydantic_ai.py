"""A pydantic-ai agent whose tool calls run through a session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from session_tools import session_tools

from workspace_tools import ToolSession, Workspace, policy_from_flags

adapter = pytest.importorskip(
    "workspace_tools.adapters.pydantic_ai", reason="the pydantic-ai adapter is absent"
)
from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # pydantic-ai runs agents on asyncio only


def scripted(calls: list[tuple[str, dict[str, Any]]]) -> FunctionModel:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = sum(isinstance(m, ModelResponse) for m in messages)
        if turn < len(calls):
            name, args = calls[turn]
            return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"call_{turn}")])
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(respond)


async def test_agent_calls_run_through_the_session(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha\n")
    workspace = Workspace(tmp_path)
    session = ToolSession(
        session_tools(workspace),
        workspace=workspace,
        policy=policy_from_flags([("deny", "run_command")]),
    )
    calls = [
        ("read_file", {"path": "a.txt"}),
        ("read_file", {"path": "a.txt"}),
        ("run_command", {"command": "ls"}),
    ]
    agent = Agent(
        scripted(calls), toolsets=[adapter.workspace_toolset(session.tools, call=session.call)]
    )
    run = await agent.run("go")
    returned = [
        part.content
        for message in run.all_messages()
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]
    assert returned == [
        "1\talpha\n",
        "1\talpha\n",
        "Not run: policy rule '--deny run_command' denies this run_command call.",
    ]
    assert [(s.index, s.tool, s.cached, s.skip_reason) for s in session.steps] == [
        (0, "read_file", False, None),
        (1, "read_file", True, None),
        (2, "run_command", False, "policy"),
    ]
    assert [s.input for s in session.steps][2] == {"command": "ls"}
