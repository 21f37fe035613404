"""Closing what owns processes stops every command running through it, each whole tree:
``Sandbox.close`` (a command of ``Sandbox.run``), and the owners above it (a tool
session, a workspace's commands). The oracle is the host's process table: processes
whose command line carries a marker the test put in the command, awaited as events with
a margin. A detached, double-forked child (``setsid``) is among them: the supervisor's
subreaper sees it."""

from __future__ import annotations

import os
import secrets
import threading
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from sandbox import Sandbox, SandboxError
from tests._waiting import poll, wait_until, wait_until_async
from workspace_tools import ErrorCode, ToolSession, Workspace, invoke_tool, workspace_tools

pytestmark = pytest.mark.anyio

#: Seconds a stopped tree may take to leave the process table on a loaded host.
GONE = 15.0


def _by_cmdline(marker: str) -> list[tuple[int, str]]:
    """Live processes (not zombies) whose command line holds ``marker``: (pid, cmdline)."""
    found = []
    needle = marker.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                line = f.read()
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in line and state != b"Z":
            found.append((int(entry), line.replace(b"\0", b" ").decode(errors="replace")))
    return sorted(found)


def _command(marker: str, flag: Path) -> str:
    """A command that prints, starts a sleeper in its tree and a detached double-forked
    one (setsid, then a background subshell), marks itself started and sleeps; each
    sleeper is a shell whose command line carries ``marker`` (the command text itself
    does not: it is split by quotes there)."""
    split = f"{marker[:4]}''{marker[4:]}"
    return (
        f"export M={split}; echo before-close; "
        "sh -c 'sleep 3600; :' \"$M-a\" & "
        'setsid sh -c \'(sh -c "sleep 3600; :" "$M-b" &) ; exit 0\'; '
        f"touch {flag}; exec sh -c 'sleep 3600; :' \"$M-c\""
    )


def _marker() -> str:
    return f"closemark{secrets.token_hex(8)}"


def _all_started(marker: str) -> list[tuple[int, str]]:
    return wait_until(
        lambda: _by_cmdline(marker), lambda found: len(found) >= 3, "the three sleepers"
    )


async def test_sandbox_close_stops_a_running_command_tree_and_keeps_its_output(
    tmp_path: Path,
) -> None:
    box = Sandbox(layers=False)
    marker, flag = _marker(), tmp_path / "started"
    outcome: list[BaseException] = []

    async def run() -> None:
        try:
            await box.run(["sh", "-c", _command(marker, flag)], timeout=3600)
        except BaseException as exc:  # the error is the assertion's subject
            outcome.append(exc)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(run)
            await wait_until_async(flag.exists, bool, "the command to start")
            await anyio.to_thread.run_sync(_all_started, marker)
            await anyio.to_thread.run_sync(box.close)
    left = poll(lambda: _by_cmdline(marker), lambda found: not found, timeout=GONE)
    assert left == []
    assert [(type(exc), str(exc)) for exc in outcome] == [
        (SandboxError, "the sandbox was closed while the command ran; it was stopped")
    ]
    error = outcome[0]
    assert isinstance(error, SandboxError)
    assert error.result is not None
    assert (error.result.exit_code, error.result.signal, error.result.timed_out) == (
        143,
        "SIGTERM",
        False,
    )
    assert error.result.stdout.complete == b"before-close\n"
    # A later command starts the spawn server again.
    again = await box.run(["sh", "-c", "echo again"], timeout=60)
    assert (again.exit_code, again.stdout.complete) == (0, b"again\n")
    box.close()


def _run_command_in(session: ToolSession, command: str, out: list[object]) -> None:
    out.append(session.call_sync("run_command", {"command": command, "timeout": 600}))


@pytest.mark.parametrize("sandboxed", [False, True], ids=["plain", "sandboxed"])
def test_closing_a_tool_session_stops_its_running_command(tmp_path: Path, sandboxed: bool) -> None:
    marker, flag = _marker(), tmp_path / "started"
    box = Sandbox(writable=[str(tmp_path)], best_effort=True) if sandboxed else None
    session = ToolSession(Workspace(tmp_path), sandbox=box)
    out: list[object] = []
    thread = threading.Thread(target=_run_command_in, args=(session, _command(marker, flag), out))
    thread.start()
    try:
        wait_until(flag.exists, bool, "the command to start", timeout=60)
        _all_started(marker)
        session.close()
        thread.join(60)
        assert not thread.is_alive()
    finally:
        session.close()
        thread.join(60)
    left = poll(lambda: _by_cmdline(marker), lambda found: not found, timeout=GONE)
    assert left == []
    [result] = out
    assert result.error_code == ErrorCode.SANDBOX_ERROR, result  # type: ignore[attr-defined]
    text = result.error  # type: ignore[attr-defined]
    assert "closed while the" in text, text
    if not sandboxed:
        assert text.startswith(
            "The sandbox was closed while the command ran; it and every process it "
            "started were stopped.\nstdout so far:\nbefore-close"
        ), text


async def test_closing_a_workspace_stops_its_running_command(tmp_path: Path) -> None:
    marker, flag = _marker(), tmp_path / "started"
    workspace = Workspace(tmp_path)
    [run_command] = [t for t in workspace_tools(workspace) if t.name == "run_command"]
    results: list[object] = []

    async def run() -> None:
        results.append(
            await invoke_tool(run_command, {"command": _command(marker, flag), "timeout": 600})
        )

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(run)
            await wait_until_async(flag.exists, bool, "the command to start")
            await anyio.to_thread.run_sync(_all_started, marker)
            await anyio.to_thread.run_sync(workspace.close)
    left = poll(lambda: _by_cmdline(marker), lambda found: not found, timeout=GONE)
    assert left == []
    [result] = results
    assert result.error_code == ErrorCode.SANDBOX_ERROR, result  # type: ignore[attr-defined]
