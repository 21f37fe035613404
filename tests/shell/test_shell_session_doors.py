"""The shell tools are normal calls of a session: policy and steps apply, over MCP and
pydantic-ai too."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.shared.memory import create_connected_server_and_client_session

from sandbox import Sandbox
from tests._processes import survivors
from workspace_tools import (
    ArgumentCondition,
    ErrorCode,
    Policy,
    PolicyRule,
    ShellSession,
    ToolResult,
    ToolSession,
    invoke_tool,
    shell_tools,
)
from workspace_tools.adapters.mcp import create_server
from workspace_tools.session import CheckpointedCalls, Checkpoints

pytestmark = pytest.mark.anyio


async def test_over_mcp_with_a_policy(tmp_path: Path, marker: str) -> None:
    policy = Policy(
        rules=(PolicyRule(name="no-servers", decision="deny", tools=("start_process",)),)
    )
    with ToolSession(tmp_path, shell=True, policy=policy) as session:
        server = create_server(session.tools, call=session.call)
        async with create_connected_server_and_client_session(server) as client:
            listed = {t.name for t in (await client.list_tools()).tools}
            assert {"shell", "start_process", "list_processes"} <= listed
            first = await client.call_tool("shell", {"command": "export V=7"})
            second = await client.call_tool("shell", {"command": "echo $V"})
            denied = await client.call_tool("start_process", {"command": "sleep 1000"})
        assert first.isError is False
        assert json.loads(second.content[0].text) == {
            "exit_code": 0,
            "stdout": "7\n",
            "stderr": "",
            "notes": [],
        }
        assert denied.isError is True
        assert denied.content[0].text == (
            "Not run: policy rule 'no-servers' denies this start_process call."
        )
        assert [(s.tool, s.skipped) for s in session.steps] == [
            ("shell", False),
            ("shell", False),
            ("start_process", True),
        ]
    assert survivors(marker) == []


async def test_shell_in_a_session_with_a_call_sandbox_runs_in_process(
    tmp_path: Path, marker: str
) -> None:
    box = Sandbox(layers=False)
    try:
        with ToolSession(tmp_path, shell=True, sandbox=box) as session:
            await session.call("shell", {"command": "export V=8"})
            result = await session.call("shell", {"command": "echo $V"})
            assert result.content["stdout"] == "8\n", result.model_text()
            started = await session.call("start_process", {"command": "sleep 1000"})
            listed = await session.call("list_processes", {})
            assert [p["id"] for p in listed.content["processes"]] == [started.content["id"]]
    finally:
        box.close()
    assert survivors(marker) == []


async def test_shell_tools_called_with_their_session_s_sandbox_run_in_process(
    tmp_path: Path, marker: str
) -> None:
    box = Sandbox(layers=False)
    try:
        with ShellSession(tmp_path, sandbox=box) as shells:
            tools = {t.name: t for t in shell_tools(shells)}
            await invoke_tool(tools["shell"], {"command": "export V=9"}, sandbox=box)
            result = await invoke_tool(tools["shell"], {"command": "echo $V"}, sandbox=box)
            assert result.content["stdout"] == "9\n", result.model_text()
            started = await invoke_tool(
                tools["start_process"], {"command": "sleep 1000"}, sandbox=box
            )
            listed = await invoke_tool(tools["list_processes"], {}, sandbox=box)
            assert [p["id"] for p in listed.content["processes"]] == [started.content["id"]]
    finally:
        box.close()
    assert survivors(marker) == []


@pytest.mark.parametrize("made_with", ["another", "none"])
async def test_shell_tools_called_with_another_sandbox_say_which_to_give(
    tmp_path: Path, made_with: str
) -> None:
    box, other = Sandbox(layers=False), Sandbox(layers=False)
    try:
        with ShellSession(tmp_path, sandbox=other if made_with == "another" else None) as shells:
            [shell] = [t for t in shell_tools(shells) if t.name == "shell"]
            result = await invoke_tool(shell, {"command": "echo hi"}, sandbox=box)
    finally:
        box.close()
        other.close()
    assert (result.error_code, result.error) == (
        ErrorCode.SANDBOX_ERROR,
        "The shell tools run their commands in their shell session's sandbox, and this "
        "call's sandbox is another: make the ShellSession with it "
        "(ShellSession(root, sandbox=box))",
    )


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_over_pydantic_ai(tmp_path: Path, marker: str) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from workspace_tools.adapters.pydantic_ai import workspace_toolset

    calls = iter(
        [
            ToolCallPart("shell", {"command": "cd / ; echo moved"}, "c1"),
            ToolCallPart("shell", {"command": "pwd"}, "c2"),
        ]
    )

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        part = next(calls, None)
        return ModelResponse(parts=[part if part is not None else TextPart("done")])

    with ToolSession(tmp_path, shell=True) as session:
        agent: Any = Agent(
            FunctionModel(model), toolsets=[workspace_toolset(session.tools, call=session.call)]
        )
        await agent.run("go")
        texts = [s.result for s in session.steps]
    assert json.loads(texts[0])["notes"] == [
        "The command left the shell in /, outside the workspace; the shell was moved back to "
        "the workspace root."
    ]
    assert json.loads(texts[1])["stdout"] == f"{tmp_path}\n"
    assert survivors(marker) == []


async def test_a_session_takes_a_shell_session_or_needs_a_workspace(
    tmp_path: Path, marker: str
) -> None:
    with pytest.raises(TypeError, match="shell=True needs the session's workspace"):
        ToolSession([], shell=True)
    shells = ShellSession(tmp_path, max_processes=1)
    with ToolSession(tmp_path, shell=shells) as session:
        assert session.shell is shells
        await session.call("start_process", {"command": "sleep 1000"})
        refused = await session.call("start_process", {"command": "sleep 1000"})
        assert refused.error is not None and "the most this session allows" in refused.error
    assert shells.closed is True
    assert survivors(marker) == []


Call = Callable[[str, dict[str, Any]], Awaitable[ToolResult]]

#: What a command that a restart ended reads.
RESTARTED_WHILE_RUNNING = (
    "The shell was restarted while this command ran; the command and every process it "
    "started were killed. The next command starts a new shell at the workspace root."
    "\nstdout so far:\nbegun\n"
)


async def _restart_while_running(root: Path, call: Call) -> dict[str, ToolResult]:
    """A long command, then a restart sent while it runs; their results."""
    outcomes: dict[str, ToolResult] = {}

    async def long() -> None:
        command = "echo begun; touch started; sleep 600"
        outcomes["long"] = await call("shell", {"command": command, "timeout": 600})

    # The command's own timeout is far away: were the restart to wait behind it, the
    # test's guard would fail first.
    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            group.start_soon(long)
            while not (root / "started").exists():
                await anyio.sleep(0.01)
            outcomes["restart"] = await call("shell", {"command": "echo fresh", "restart": True})
    return outcomes


@pytest.mark.parametrize("through", ["session", "checkpointed calls"])
async def test_a_restart_ends_the_command_it_would_wait_behind(
    tmp_path: Path, marker: str, through: str
) -> None:
    # A session runs its calls one after another, and an MCP server's checkpoints run its
    # writing calls so: a restart still ends the hung command at once, then runs in turn.
    with ToolSession(tmp_path, shell=True) as session:
        if through == "session":
            outcomes = await _restart_while_running(tmp_path, session.call)
        else:
            tools = {t.name: t for t in session.tools}
            checkpoints = Checkpoints(session.workspace)
            calls = CheckpointedCalls(checkpoints)
            try:
                outcomes = await _restart_while_running(
                    tmp_path, lambda name, args: calls(tools[name], args, name, None)
                )
            finally:
                checkpoints.close()
        after = await session.call("shell", {"command": "pwd"})
    ended, restarted = outcomes["long"], outcomes["restart"]
    assert (ended.error_code, ended.error) == (ErrorCode.ABORTED, RESTARTED_WHILE_RUNNING)
    assert restarted.content == {
        "exit_code": 0,
        "stdout": "fresh\n",
        "stderr": "",
        "notes": ["The shell was restarted before this command."],
    }, restarted.model_text()
    assert after.content["stdout"] == f"{tmp_path}\n"
    assert survivors(marker) == []


async def test_a_restart_the_policy_denies_leaves_the_command_running(
    tmp_path: Path, marker: str
) -> None:
    policy = Policy(
        rules=(
            PolicyRule(
                name="no-restart",
                decision="deny",
                tools=("shell",),
                when=(ArgumentCondition(argument="command", pattern="fresh"),),
            ),
        )
    )
    with ToolSession(tmp_path, shell=True, policy=policy) as session:
        outcomes: dict[str, ToolResult] = {}

        async def long() -> None:
            command = "echo begun; touch started; while [ ! -e go ]; do sleep 0.01; done"
            outcomes["long"] = await session.call("shell", {"command": command})

        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                group.start_soon(long)
                while not (tmp_path / "started").exists():
                    await anyio.sleep(0.01)
                restart = {"command": "echo fresh", "restart": True}
                group.start_soon(session.call, "shell", restart)
                # The denied call waits in line; once it does, the command goes on.
                await anyio.wait_all_tasks_blocked()
                (tmp_path / "go").touch()
    assert outcomes["long"].content == {
        "exit_code": 0,
        "stdout": "begun\n",
        "stderr": "",
        "notes": [],
    }, outcomes["long"].model_text()
    assert [(s.tool, s.skipped) for s in session.steps] == [("shell", False), ("shell", True)]
    assert survivors(marker) == []
