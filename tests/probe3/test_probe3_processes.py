"""write_process_stdin against a process that does not take its input: one that closed its
stdin, one that exited, one that never reads while its pipe fills; and commands and ids a
model may send (NUL bytes, a 100 KB id)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests._processes import survivors
from workspace_tools import ErrorCode, ShellSession, invoke_tool, shell_tools, workspace_tools

pytestmark = pytest.mark.anyio


@pytest.fixture
def session(tmp_path: Path, marker: str) -> Iterator[ShellSession]:
    shells = ShellSession(tmp_path)
    yield shells
    shells.close()
    assert survivors(marker) == []


async def call(session: ShellSession, name: str, timeout: float | None = None, **args: Any) -> Any:
    tool = next(t for t in shell_tools(session) if t.name == name)
    with anyio.fail_after(120):
        return await invoke_tool(tool, args, timeout=timeout)


async def output_until(session: ShellSession, id_: str, text: str) -> str:
    seen = ""
    with anyio.move_on_after(60):
        while text not in seen:
            seen += (await call(session, "read_process_output", id=id_, wait=5)).content["output"]
    assert text in seen, seen
    return seen


async def test_a_write_after_the_process_closed_its_stdin_is_a_clear_error(
    session: ShellSession,
) -> None:
    await call(session, "start_process", command="exec 0<&-; echo closed; sleep 60")
    await output_until(session, "p1", "closed")
    result = await call(session, "write_process_stdin", id="p1", input="hello\n")
    assert result.error_code == ErrorCode.TOOL_ERROR, result
    assert result.error == (
        "Process p1 closed its stdin (it reads no more input); nothing more was written. "
        "Read its output with read_process_output"
    )
    again = await call(session, "write_process_stdin", id="p1", input="x")
    assert again.error_code == ErrorCode.TOOL_ERROR
    assert session.processes.get("p1").state == "running"


async def test_a_child_that_still_holds_stdin_gets_the_write(session: ShellSession) -> None:
    # The shell lets go of its stdin, but cat (started before, given it) still reads it.
    await call(session, "start_process", command="cat <&0 & exec 0<&-; echo ready; wait")
    await output_until(session, "p1", "ready")
    result = await call(session, "write_process_stdin", id="p1", input="through\n")
    assert result.content == {"id": "p1", "written_bytes": 8, "stdin_open": True}, result
    assert "through" in await output_until(session, "p1", "through")


async def test_a_write_to_a_process_that_exited_is_a_clear_error(session: ShellSession) -> None:
    await call(session, "start_process", command="echo bye")
    assert session.processes.get("p1").process.wait(60)
    result = await call(session, "write_process_stdin", id="p1", input="late\n")
    assert (result.error_code, result.error) == (
        ErrorCode.TOOL_ERROR,
        "Process p1 is exited; its stdin takes no more input",
    )


async def test_a_full_pipe_ends_the_write_at_the_calls_timeout(session: ShellSession) -> None:
    await call(session, "start_process", command="echo started; sleep 60")
    await output_until(session, "p1", "started")
    # The process runs (seen above) and the write fills its pipe at once: the call's 1 s is
    # then pure waiting for the deadline.
    result = await call(session, "write_process_stdin", timeout=1, id="p1", input="x" * 1_000_000)
    assert result.error_code == ErrorCode.TOOL_TIMEOUT, result
    # The process is still there to be stopped, and a later call is served.
    listed = await call(session, "list_processes")
    assert [p["state"] for p in listed.content["processes"]] == ["running"], listed
    stopped = await call(session, "stop_process", id="p1")
    assert stopped.error is None, stopped


async def test_a_100kb_process_id_is_clipped_in_the_error(session: ShellSession) -> None:
    result = await call(session, "write_process_stdin", id="q" * 100_000, input="x")
    assert result.error_code == ErrorCode.NOT_FOUND
    assert result.error == (
        f"No background process '{'q' * 200}…' (100,000 characters); "
        "the session's processes are: none"
    )


@pytest.mark.parametrize("name", ["run_command", "start_process"])
async def test_a_command_with_a_nul_byte_is_invalid_arguments(
    session: ShellSession, tmp_path: Path, name: str
) -> None:
    tools = {t.name: t for t in [*workspace_tools(tmp_path), *shell_tools(session)]}
    result = await invoke_tool(tools[name], {"command": "echo a\0b"})
    assert result.error_code == ErrorCode.INVALID_ARGUMENTS, result
    assert "NUL" in (result.error or ""), result.error
