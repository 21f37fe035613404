"""The providers' shell adapters given what a hostile or broken client sends: an item that
is no object, one without its id, a timeout in milliseconds past any float. Each gets the
provider's own failed result shape, never an exception in place of it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from workspace_tools import Tool, Workspace
from workspace_tools.adapters.anthropic_bash import call_anthropic_bash
from workspace_tools.adapters.openai_shell import call_openai_shell
from workspace_tools.tools import ShellSession, shell_tools

pytestmark = pytest.mark.anyio

HUGE = 10**400  # JSON's integers have no bound; no float holds this one


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[Tool[Any]]:
    with ShellSession(Workspace(tmp_path)) as session:
        yield next(t for t in shell_tools(session) if t.name == "shell")


@pytest.mark.parametrize(
    ("tool_use", "said", "use_id"),
    [
        ("echo hi", "The bash tool_use is a string, not an object with id and input", ""),
        (None, "The bash tool_use is null, not an object with id and input", ""),
        ({"input": {"command": "echo hi"}}, "The bash tool_use has no id", ""),
    ],
)
async def test_a_malformed_bash_tool_use_is_an_error_result(
    shell: Tool[Any], tool_use: Any, said: str, use_id: str
) -> None:
    with anyio.fail_after(60):
        block = await call_anthropic_bash(tool_use, shell)
    assert block == {
        "type": "tool_result",
        "tool_use_id": use_id,
        "content": said,
        "is_error": True,
    }


async def test_a_bash_timeout_past_any_float_is_no_limit(shell: Tool[Any]) -> None:
    tool_use = {"id": "t1", "input": {"command": "echo hi", "timeout_ms": HUGE}}
    with anyio.fail_after(60):
        block = await call_anthropic_bash(tool_use, shell)
    assert block == {"type": "tool_result", "tool_use_id": "t1", "content": "hi"}


@pytest.mark.parametrize(
    ("item", "said", "call_id"),
    [
        ("echo hi", "The shell_call is a string, not an object with call_id and action", ""),
        ({"action": {"commands": ["echo hi"]}}, "The shell_call has no call_id", ""),
    ],
)
async def test_a_malformed_shell_call_is_a_failed_output(
    shell: Tool[Any], item: Any, said: str, call_id: str
) -> None:
    with anyio.fail_after(60):
        answer = await call_openai_shell(item, shell)
    assert answer == {
        "type": "shell_call_output",
        "call_id": call_id,
        "output": [{"stdout": "", "stderr": said, "outcome": {"type": "exit", "exit_code": 126}}],
    }


async def test_a_shell_call_timeout_past_any_float_is_no_limit(shell: Tool[Any]) -> None:
    item = {"call_id": "c1", "action": {"commands": ["echo hi"], "timeout_ms": HUGE}}
    with anyio.fail_after(60):
        answer = await call_openai_shell(item, shell)
    assert answer == {
        "type": "shell_call_output",
        "call_id": "c1",
        "output": [{"stdout": "hi\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
    }


@pytest.mark.parametrize(
    ("item", "said"),
    [
        (["ls"], "The local_shell_call is an array, not an object with call_id and action"),
        ({"action": {"type": "exec", "command": ["ls"]}}, "The local_shell_call has no call_id"),
    ],
)
async def test_a_malformed_local_shell_call_is_an_output(
    tmp_path: Path, item: Any, said: str
) -> None:
    from workspace_tools import workspace_tools
    from workspace_tools.adapters.openai_shell import call_local_shell

    run_command = next(t for t in workspace_tools(tmp_path) if t.name == "run_command")
    with anyio.fail_after(60):
        answer = await call_local_shell(item, run_command, tmp_path)
    payload = {"output": said, "metadata": {"exit_code": 126, "duration_seconds": 0.0}}
    assert answer == {
        "type": "local_shell_call_output",
        "id": "",
        "output": json.dumps(payload),
        "status": "completed",
    }


async def test_a_local_shell_timeout_past_any_float_is_no_limit(tmp_path: Path) -> None:
    from workspace_tools import workspace_tools
    from workspace_tools.adapters.openai_shell import call_local_shell

    run_command = next(t for t in workspace_tools(tmp_path) if t.name == "run_command")
    item = {
        "call_id": "c1",
        "action": {"type": "exec", "command": ["echo", "hi"], "timeout_ms": HUGE},
    }
    with anyio.fail_after(60):
        answer = await call_local_shell(item, run_command, tmp_path)
    output = json.loads(answer["output"])
    assert (answer["id"], output["output"], output["metadata"]["exit_code"]) == ("c1", "hi\n", 0)
