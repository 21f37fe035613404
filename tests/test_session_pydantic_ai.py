"""A pydantic-ai agent whose tool calls run through a session."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_ai import Agent
from session_tools import session_tools

from tests.adapters._scripted import scripted, tool_returns
from workspace_tools import ToolSession, Workspace
from workspace_tools.adapters.pydantic_ai import workspace_toolset
from workspace_tools.cli._policy import policy_from_flags

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # pydantic-ai runs agents on asyncio only


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
    agent = Agent(scripted(calls), toolsets=[workspace_toolset(session.tools, call=session.call)])
    run = await agent.run("go")
    assert [part.content for part in tool_returns(run.all_messages())] == [
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
