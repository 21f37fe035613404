"""The providers' shell tools over ours: Anthropic bash_20250124, OpenAI shell and
local_shell, each checked against the SDK's own types."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anthropic.types import ToolBash20250124Param, ToolResultBlockParam, ToolUseBlock
from openai.types.responses import (
    FunctionShellToolParam,
    ResponseFunctionShellToolCall,
)
from openai.types.responses.response_input_item_param import (
    LocalShellCallOutput,
    ShellCallOutput,
)
from openai.types.responses.response_output_item import LocalShellCall
from openai.types.responses.tool_param import LocalShell

from tests._processes import survivors
from tests.adapters._sdk import sdk_valid
from workspace_tools import ShellSession, Tool, ToolSession, shell_tools, workspace_tools
from workspace_tools.adapters.anthropic_bash import anthropic_bash_tool, call_anthropic_bash
from workspace_tools.adapters.openai_shell import (
    call_local_shell,
    call_openai_shell,
    openai_local_shell_tool,
    openai_shell_tool,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def shells(tmp_path: Path, marker: str) -> Iterator[ShellSession]:
    (tmp_path / "sub").mkdir()
    session = ShellSession(tmp_path)
    yield session
    session.close()
    assert survivors(marker) == []


def shell_tool(session: ShellSession) -> Any:
    return shell_tools(session)[0]


async def bash(session: ShellSession, tool_input: dict[str, Any], id_: str = "toolu_1") -> Any:
    with anyio.fail_after(60):
        block = await call_anthropic_bash(
            {"type": "tool_use", "id": id_, "name": "bash", "input": tool_input},
            shell_tool(session),
        )
    assert sdk_valid(ToolResultBlockParam, block), block
    return block


def test_the_tool_definitions_are_the_sdks() -> None:
    assert anthropic_bash_tool() == {"type": "bash_20250124", "name": "bash"}
    assert sdk_valid(ToolBash20250124Param, anthropic_bash_tool())
    assert sdk_valid(FunctionShellToolParam, openai_shell_tool())
    assert sdk_valid(LocalShell, openai_local_shell_tool())


async def test_bash_keeps_state_and_answers_in_its_shape(
    shells: ShellSession, tmp_path: Path
) -> None:
    assert await bash(shells, {"command": "cd sub; export X=1"}) == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": "(no output)",
    }
    block = await bash(shells, {"command": "pwd; echo $X; echo warn >&2; false"})
    assert block == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": f"{tmp_path}/sub\n1\nwarn\n[exit code: 1]",
    }


async def test_bash_restart_timeout_and_exit(tmp_path: Path, marker: str) -> None:
    # bash_20250124 has no timeout field: the workspace's command_timeout applies.
    with ShellSession(tmp_path, command_timeout=1) as shells:
        await _restart_timeout_and_exit(shells)
    assert survivors(marker) == []


async def _restart_timeout_and_exit(shells: ShellSession) -> None:
    assert await bash(shells, {"restart": True}) == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": "tool has been restarted.",
    }
    # A ToolUseBlock from the SDK works as well as its dict.
    with anyio.fail_after(60):
        timed_out = await call_anthropic_bash(
            ToolUseBlock(
                type="tool_use",
                id="toolu_2",
                name="bash",
                input={"command": "echo so-far; sleep 1000"},
            ),
            next(t for t in shell_tools(shells) if t.name == "shell"),
        )
    assert timed_out["is_error"] is True
    assert timed_out["tool_use_id"] == "toolu_2"
    assert timed_out["content"] == (
        "Command timed out after 1 s; the shell and every process it started were killed. "
        "The next command starts a new shell at the workspace root.\n"
        "stdout so far:\nso-far\n"
    )
    exited = await bash(shells, {"command": "exit 3"})
    assert exited["is_error"] is True
    assert exited["content"].startswith("bash has exited with returncode 3\n"), exited


async def test_bash_through_a_session_records_a_step(tmp_path: Path, marker: str) -> None:
    with ToolSession(tmp_path, shell=True) as session:
        shell = next(t for t in session.tools if t.name == "shell")
        block = await call_anthropic_bash(
            {"id": "toolu_9", "input": {"command": "echo hi"}}, shell, call=session.call
        )
        assert block["content"] == "hi"
        assert [(s.tool, s.input) for s in session.steps] == [
            ("shell", {"command": "echo hi", "restart": False, "timeout": None})
        ]
    assert survivors(marker) == []


async def test_openai_shell_one_outcome_per_command(shells: ShellSession, tmp_path: Path) -> None:
    item = ResponseFunctionShellToolCall.model_validate(
        {
            "type": "shell_call",
            "id": "sh_1",
            "call_id": "call_1",
            "status": "completed",
            "action": {
                "commands": ["cd sub && echo in", "pwd; echo e >&2; exit 2", "echo new shell"],
                "timeout_ms": 20_000,
                "max_output_length": None,
            },
        }
    )
    with anyio.fail_after(60):
        answer = await call_openai_shell(item, shell_tool(shells))
    assert sdk_valid(ShellCallOutput, answer), answer
    assert answer == {
        "type": "shell_call_output",
        "call_id": "call_1",
        "output": [
            {"stdout": "in\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}},
            {
                "stdout": f"{tmp_path}/sub\n",
                "stderr": "e\n\n[workspace-tools] The shell exited with code 2; the next "
                "command starts a new shell at the workspace root.",
                "outcome": {"type": "exit", "exit_code": 2},
            },
            {"stdout": "new shell\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}},
        ],
    }


async def test_openai_shell_timeout_and_max_output_length(shells: ShellSession) -> None:
    item = {
        "type": "shell_call",
        "call_id": "call_2",
        "action": {
            "commands": ["echo so-far; sleep 1000", "seq 1 5000; seq 1 3000 >&2", "echo 'a\x00'"],
            "timeout_ms": 1500,
            "max_output_length": 400,
        },
    }
    with anyio.fail_after(60):
        answer = await call_openai_shell(item, shell_tool(shells))
    assert sdk_valid(ShellCallOutput, answer), answer
    assert answer["max_output_length"] == 400
    timed_out, long, refused = answer["output"]
    assert timed_out == {"stdout": "so-far\n", "stderr": "", "outcome": {"type": "timeout"}}
    assert long["outcome"] == {"type": "exit", "exit_code": 0}
    assert len(long["stdout"]) + len(long["stderr"]) == 400
    assert long["stdout"].startswith("1\n2\n") and long["stdout"].endswith("4999\n5000\n")
    assert "characters left out" in long["stdout"]
    assert refused["outcome"] == {"type": "exit", "exit_code": 126}
    assert "NUL character" in refused["stderr"]


@pytest.mark.parametrize("limit", [400, 1000])
async def test_openai_shell_keeps_the_note_naming_the_whole_output(
    shells: ShellSession, limit: int
) -> None:
    item = {
        "type": "shell_call",
        "call_id": "call_5",
        "action": {"commands": ["seq 1 300000; echo oops >&2"], "max_output_length": limit},
    }
    with anyio.fail_after(60):
        answer = await call_openai_shell(item, shell_tool(shells))
    assert sdk_valid(ShellCallOutput, answer), answer
    (long,) = answer["output"]
    stdout, stderr = long["stdout"], long["stderr"]
    assert len(stdout) + len(stderr) == limit, (len(stdout), len(stderr))
    assert re.fullmatch(
        r"oops\n\n\[workspace-tools\] The whole stdout \(300,000 lines, 1,988,895 bytes\) is "
        r"in \.shell-output[^ ]*/shell-\d+\.stdout; page through it with read_file\.",
        stderr,
    ), stderr
    assert stdout.startswith("1\n2\n") and stdout.endswith("\n300000\n"), stdout
    assert "characters left out" in stdout, stdout


async def test_local_shell_runs_argv_with_env_and_working_directory(
    tmp_path: Path,
) -> None:
    (tmp_path / "sub").mkdir()
    run_command = next(t for t in workspace_tools(tmp_path) if t.name == "run_command")
    item = LocalShellCall.model_validate(
        {
            "type": "local_shell_call",
            "id": "lsh_1",
            "call_id": "call_3",
            "status": "completed",
            "action": {
                "type": "exec",
                "command": ["sh", "-c", 'echo "$GREETING $1"; pwd', "sh", "it's"],
                "env": {"GREETING": "hello"},
                "working_directory": str(tmp_path / "sub"),
                "timeout_ms": 20_000,
            },
        }
    )
    with anyio.fail_after(60):
        answer = await call_local_shell(item, run_command, tmp_path)
    assert sdk_valid(LocalShellCallOutput, answer), answer
    assert (answer["type"], answer["id"], answer["status"]) == (
        "local_shell_call_output",
        "call_3",
        "completed",
    )
    payload = json.loads(answer["output"])
    assert payload["output"] == f"hello it's\n{tmp_path}/sub\n"
    assert payload["metadata"]["exit_code"] == 0


async def test_local_shell_output_ends_with_the_note_on_stopped_processes(
    tmp_path: Path,
) -> None:
    run_command = next(t for t in workspace_tools(tmp_path) if t.name == "run_command")
    # The command waits until its job runs sleep, so the name in the note is "sleep".
    script = 'sleep 1000 & until [ "$(cat /proc/$!/comm)" = sleep ]; do :; done; echo up'
    item = LocalShellCall.model_validate(
        {
            "type": "local_shell_call",
            "id": "lsh_2",
            "call_id": "call_4",
            "status": "completed",
            "action": {"type": "exec", "command": ["sh", "-c", script], "env": {}},
        }
    )
    with anyio.fail_after(60):
        answer = await call_local_shell(item, run_command, tmp_path)
    payload = json.loads(answer["output"])
    assert payload["output"] == (
        "up\n[workspace-tools] 1 background process (sleep) was still running when the "
        "command ended and was stopped; start long-running servers or watchers with "
        "start_process where it is offered\n"
    )
    assert payload["metadata"]["exit_code"] == 0


async def test_local_shell_timeout_outside_directory_and_user(tmp_path: Path) -> None:
    run_command = next(t for t in workspace_tools(tmp_path) if t.name == "run_command")

    async def local(action: dict[str, Any], tool: Tool[Any] = run_command) -> dict[str, Any]:
        item = {"type": "local_shell_call", "call_id": "c", "action": {"type": "exec", **action}}
        with anyio.fail_after(60):
            answer = await call_local_shell(item, tool, tmp_path)
        assert sdk_valid(LocalShellCallOutput, answer), answer
        return json.loads(answer["output"])  # type: ignore[no-any-return]

    timed_out = await local({"command": ["sh", "-c", "echo x; sleep 1000"], "timeout_ms": 1000})
    assert timed_out["metadata"]["exit_code"] == 124
    assert timed_out["output"] == "command timed out after 1000 milliseconds\nx\n"
    # Without timeout_ms the workspace's command_timeout applies, and is the one named
    # (it said "after 0 milliseconds").
    short = next(
        t for t in workspace_tools(tmp_path, command_timeout=1.5) if t.name == "run_command"
    )
    default = await local({"command": ["sh", "-c", "echo y; sleep 1000"]}, short)
    assert (default["metadata"]["exit_code"], default["output"]) == (
        124,
        "command timed out after 1500 milliseconds\ny\n",
    )
    outside = await local({"command": ["true"], "env": {}, "working_directory": "/"})
    assert outside["metadata"]["exit_code"] == 126
    assert "outside" in outside["output"].lower(), outside
    other = await local({"command": ["true"], "env": {}, "user": "nobody-such-user"})
    assert other["metadata"]["exit_code"] == 126
    assert other["output"].startswith("running as user 'nobody-such-user' is not supported")


async def test_bash_timeout_ms_and_unknown_keys(shells: ShellSession) -> None:
    timed_out = await bash(shells, {"command": "sleep 1000", "timeout_ms": 1000})
    assert timed_out["is_error"] is True
    assert timed_out["content"].startswith("Command timed out after 1 s;"), timed_out
    unknown = await bash(shells, {"command": "true", "cwd": "sub"})
    assert unknown["is_error"] is True
    assert "cwd" in unknown["content"], unknown


@pytest.mark.parametrize(
    ("action", "refusal"),
    [
        ({"commands": "echo hi"}, "- commands: Input should be an array, not a string"),
        ({"commands": []}, "- commands: List should have at least 1 item after validation"),
        ({"commands": [1]}, "- commands.0: Input should be a valid string"),
        ({"commands": ["true"], "timeout_ms": -5}, "- timeout_ms: Input should be greater than 0"),
        ({"commands": ["true"], "max_output_length": "many"}, "- max_output_length: Input"),
    ],
)
async def test_openai_shell_malformed_action_runs_nothing(
    shells: ShellSession, action: dict[str, Any], refusal: str
) -> None:
    # A string is not a list of commands: run character by character it would run 'e',
    # 'c', 'h', ... as commands. Nothing of a malformed item runs.
    item = {"type": "shell_call", "call_id": "c", "action": action}
    with anyio.fail_after(60):
        answer = await call_openai_shell(item, shell_tool(shells))
    assert sdk_valid(ShellCallOutput, answer), answer
    [output] = answer["output"]
    assert (output["stdout"], output["outcome"]) == ("", {"type": "exit", "exit_code": 126})
    assert output["stderr"].startswith(f"Invalid arguments for shell_call:\n{refusal}"), output


@pytest.mark.parametrize(
    ("action", "refusal"),
    [
        ({"command": "touch ran"}, "- command: Input should be an array, not a string"),
        ({"command": []}, "- command: List should have at least 1 item after validation"),
        ({"command": ["touch", "ran"], "env": {"A": 1}}, "- env.A: Input should be a valid string"),
        ({"command": ["touch", "ran"], "timeout_ms": "soon"}, "- timeout_ms: Input should be"),
    ],
)
async def test_local_shell_malformed_action_runs_nothing(
    tmp_path: Path, action: dict[str, Any], refusal: str
) -> None:
    run_command = {t.name: t for t in workspace_tools(tmp_path)}["run_command"]
    item = {"type": "local_shell_call", "call_id": "c", "action": {"type": "exec", **action}}
    with anyio.fail_after(60):
        answer = await call_local_shell(item, run_command, tmp_path)
    assert sdk_valid(LocalShellCallOutput, answer), answer
    payload = json.loads(answer["output"])
    assert payload["metadata"]["exit_code"] == 126, payload
    assert payload["output"].startswith(f"Invalid arguments for local_shell_call:\n{refusal}")
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize(
    ("tool_input", "refusal"),
    [
        (
            "touch ran",
            "The bash tool_use's input is a string, not an object with command or restart",
        ),
        (
            ["touch", "ran"],
            "The bash tool_use's input is an array, not an object with command or restart",
        ),
        (
            '{"command": "touch ran"}',
            "The bash tool_use's input is a string, not an object with command or restart",
        ),
    ],
)
async def test_bash_input_that_is_no_object_is_refused(
    shells: ShellSession, tmp_path: Path, tool_input: Any, refusal: str
) -> None:
    block = {"type": "tool_use", "id": "toolu_9", "name": "bash", "input": tool_input}
    with anyio.fail_after(60):
        answer = await call_anthropic_bash(block, shell_tool(shells))
    assert sdk_valid(ToolResultBlockParam, answer), answer
    assert answer == {
        "type": "tool_result",
        "tool_use_id": "toolu_9",
        "content": refusal,
        "is_error": True,
    }
    assert not (tmp_path / "ran").exists()
