"""A shell call whose call timeout fires: it says so as a proper TOOL_TIMEOUT error with
details, and it stops its own command, never the one of the call it waited behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests._processes import survivors
from tests._waiting import poll_async
from workspace_tools import ErrorCode, ShellSession, invoke_tool, shell_tools

pytestmark = pytest.mark.anyio


@pytest.fixture
def session(tmp_path: Path, marker: str) -> Iterator[ShellSession]:
    shells = ShellSession(tmp_path)
    yield shells
    shells.close()
    assert survivors(marker) == []


def shell_tool(session: ShellSession) -> Any:
    return {t.name: t for t in shell_tools(session)}["shell"]


async def test_a_call_that_times_out_waiting_leaves_the_running_command_alone(
    session: ShellSession, tmp_path: Path
) -> None:
    tool = shell_tool(session)
    first: dict[str, Any] = {}
    # The first command holds the shell until the test lets it go.
    hold = "touch started; while [ ! -e release ]; do sleep 0.01; done; echo first done"

    async def run_first() -> None:
        first["result"] = await invoke_tool(tool, {"command": hold})

    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            group.start_soon(run_first)
            seen = await poll_async(lambda: (tmp_path / "started").exists(), bool)
            assert seen, "the first command never started"
            second = await invoke_tool(tool, {"command": "touch second-ran"}, timeout=1)
            (tmp_path / "release").touch()
        after = await invoke_tool(tool, {"command": "ls"})
    assert second.error_code == ErrorCode.TOOL_TIMEOUT
    assert second.error == (
        "Command timed out after the call's timeout of 1 s before it ran: the shell was busy "
        "with another call's command all that time. This command did not run; the shell and "
        "its state are as that command leaves them."
    )
    assert (second.details.command, second.details.timed_out, second.details.exit_code) == (
        "touch second-ran",
        True,
        None,
    )
    assert (second.details.stdout, second.details.stderr) == ("", "")
    result = first["result"]
    assert result.error is None, result.error
    assert result.content["stdout"] == "first done\n"
    # The abandoned call never ran its command, not even once the shell was free.
    assert after.content["stdout"] == "release\nstarted\n", after.model_text()
    assert not (tmp_path / "second-ran").exists()


async def test_the_backstop_error_holds_the_output_so_far(session: ShellSession) -> None:
    # A call timeout so short that the call's own timeout may fire before the command's
    # limit (derived from it) is reported by the shell: either way, a proper error.
    tool = shell_tool(session)
    with anyio.fail_after(60):
        result = await invoke_tool(tool, {"command": "echo begun; sleep 1000"}, timeout=0.5)
        after = await invoke_tool(tool, {"command": "echo next"})
    assert result.error_code == ErrorCode.TOOL_TIMEOUT
    assert result.error.startswith(
        "Command timed out after the call's timeout of 0.5 s; the shell and every process it "
        "started were killed. The next command starts a new shell at the workspace root."
    ), result.error
    assert result.details.command == "echo begun; sleep 1000"
    assert result.details.timed_out is True
    assert after.content["stdout"] == "next\n", after.model_text()
