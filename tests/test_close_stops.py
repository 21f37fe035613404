"""Closing what owns processes stops every command running through it, each whole tree:
``Sandbox.close`` (a command of ``Sandbox.run``), and the owners above it (a tool
session, a workspace's commands). The oracle is the host's process table: processes
whose command line carries a marker the test put in the command, awaited as events with
a margin. A detached, double-forked child (``setsid``) is among them: the supervisor's
subreaper sees it."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from sandbox import Sandbox, SandboxError
from tests._waiting import poll, wait_until, wait_until_async
from tests.remote._served import Served, serve
from workspace_tools import (
    ErrorCode,
    ShellSession,
    ToolSession,
    Workspace,
    invoke_tool,
    invoke_tool_sync,
    shell_tools,
    workspace_tools,
)
from workspace_tools.adapters.remote import RemoteWorkspace

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


async def _close_once_running(
    run: Callable[[], Awaitable[None]], close: Callable[[], None], marker: str, flag: Path
) -> None:
    """Start ``run`` (a marked command, :func:`_command`), ``close`` its owner once the
    command and its sleepers run, and check that none of them is left."""
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(run)
            await wait_until_async(flag.exists, bool, "the command to start")
            await anyio.to_thread.run_sync(_all_started, marker)
            await anyio.to_thread.run_sync(close)
    left = poll(lambda: _by_cmdline(marker), lambda found: not found, timeout=GONE)
    assert left == []


def _close_once_running_in_a_thread(
    run: Callable[[], None], close: Callable[[], None], marker: str, flag: Path
) -> None:
    """:func:`_close_once_running` for a blocking ``run``, in a thread of its own: ``close``
    is called again however the wait ends, and the thread must end within a minute."""
    thread = threading.Thread(target=run)
    thread.start()
    try:
        wait_until(flag.exists, bool, "the command to start", timeout=60)
        _all_started(marker)
        close()
        thread.join(60)
        assert not thread.is_alive()
    finally:
        close()
        thread.join(60)
    left = poll(lambda: _by_cmdline(marker), lambda found: not found, timeout=GONE)
    assert left == []


def _marker() -> str:
    return f"closemark{secrets.token_hex(8)}"


def _all_started(marker: str) -> list[tuple[int, str]]:
    return wait_until(
        lambda: _by_cmdline(marker), lambda found: len(found) >= 3, "the three sleepers"
    )


# A command after an earlier one runs on the supervisor the earlier one handed back.
EARLIER = pytest.mark.parametrize("earlier", [0, 1], ids=["first", "after_another"])


@EARLIER
async def test_sandbox_close_stops_a_running_command_tree_and_keeps_its_output(
    tmp_path: Path, earlier: int
) -> None:
    box = Sandbox(layers=False)
    marker, flag = _marker(), tmp_path / "started"
    outcome: list[BaseException] = []
    for _ in range(earlier):
        assert (await box.run(["true"])).exit_code == 0

    async def run() -> None:
        try:
            await box.run(["sh", "-c", _command(marker, flag)], timeout=3600)
        except BaseException as exc:  # the error is the assertion's subject
            outcome.append(exc)

    await _close_once_running(run, box.close, marker, flag)
    assert [(type(exc), str(exc)) for exc in outcome] == [
        (SandboxError, "the sandbox was closed while the command ran; it was stopped")
    ]
    error = outcome[0]
    assert isinstance(error, SandboxError)
    assert error.result is not None
    # Stopped while it ran, as on a timeout: no exit code of its own, the stop's signal.
    assert (error.result.exit_code, error.result.signal, error.result.timed_out) == (
        None,
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


def test_closing_a_shell_s_sandbox_stops_its_command_and_keeps_its_output(
    tmp_path: Path,
) -> None:
    """A persistent shell's command running when the shell's sandbox is closed: its tree is
    stopped and the model reads why, with what the command printed until then."""
    marker, flag = _marker(), tmp_path / "started"
    box = Sandbox(layers=False)
    shell = ShellSession(Workspace(tmp_path), sandbox=box)
    [shell_tool] = [t for t in shell_tools(shell) if t.name == "shell"]
    out: list[object] = []

    def run() -> None:
        out.append(invoke_tool_sync(shell_tool, {"command": _command(marker, flag)}))

    try:
        _close_once_running_in_a_thread(run, box.close, marker, flag)
    finally:
        shell.close()
    [result] = out
    seen = (result.error_code, result.error)  # type: ignore[attr-defined]
    assert seen == (
        ErrorCode.SANDBOX_ERROR,
        "The sandbox was closed while this command ran; the command and every process it "
        "started were stopped.\nstdout so far:\nbefore-close\n",
    ), seen


@pytest.mark.parametrize("sandboxed", [False, True], ids=["plain", "sandboxed"])
def test_closing_a_tool_session_stops_its_running_command(tmp_path: Path, sandboxed: bool) -> None:
    marker, flag = _marker(), tmp_path / "started"
    box = Sandbox(writable=[str(tmp_path)], best_effort=True) if sandboxed else None
    session = ToolSession(Workspace(tmp_path), sandbox=box)
    out: list[object] = []
    _close_once_running_in_a_thread(
        partial(_run_command_in, session, _command(marker, flag), out), session.close, marker, flag
    )
    [result] = out
    assert result.error_code == ErrorCode.SANDBOX_ERROR, result  # type: ignore[attr-defined]
    text = result.error  # type: ignore[attr-defined]
    # A sandboxed session's command runs in its copy of the sandbox, which its close stops.
    closed = "sandbox" if sandboxed else "workspace"
    assert text.startswith(
        f"The {closed} was closed while the command ran; it and every process it "
        "started were stopped.\nstdout so far:\nbefore-close"
    ), text


@EARLIER
async def test_closing_a_workspace_stops_its_running_command(tmp_path: Path, earlier: int) -> None:
    marker, flag = _marker(), tmp_path / "started"
    workspace = Workspace(tmp_path)
    [run_command] = [t for t in workspace_tools(workspace) if t.name == "run_command"]
    results: list[object] = []
    for _ in range(earlier):
        assert (await invoke_tool(run_command, {"command": "true"})).error is None

    async def run() -> None:
        results.append(
            await invoke_tool(run_command, {"command": _command(marker, flag), "timeout": 600})
        )

    await _close_once_running(run, workspace.close, marker, flag)
    [result] = results
    assert result.error_code == ErrorCode.SANDBOX_ERROR, result  # type: ignore[attr-defined]
    details = result.details  # type: ignore[attr-defined]
    assert (details.exit_code, details.timed_out, details.stdout) == (None, False, "before-close\n")


async def test_calls_waiting_when_a_session_closes_do_not_run(tmp_path: Path) -> None:
    """A session runs its calls one after another: those still waiting behind the
    running command when it closes end without running, rather than start their
    commands (each to its own timeout) in a session that was closed."""
    marker, flag = _marker(), tmp_path / "started"
    session = ToolSession(Workspace(tmp_path))
    results: dict[str, object] = {}

    async def run(name: str, arguments: dict[str, object]) -> None:
        results[name] = await session.call(name, arguments)

    async def running_then_waiting() -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(
                run, "run_command", {"command": _command(marker, flag), "timeout": 600}
            )
            await wait_until_async(flag.exists, bool, "the command to start")
            tasks.start_soon(run, "write_file", {"path": "later.txt", "content": "x"})
            await anyio.wait_all_tasks_blocked()

    await _close_once_running(running_then_waiting, session.close, marker, flag)
    stopped, waited = results["run_command"], results["write_file"]
    assert stopped.error_code == ErrorCode.SANDBOX_ERROR, stopped  # type: ignore[attr-defined]
    assert (waited.error_code, waited.error) == (  # type: ignore[attr-defined]
        ErrorCode.ABORTED,
        "The session was closed while this call waited for the call before it; it did not run.",
    )
    assert not (tmp_path / "later.txt").exists()
    assert [(s.tool, s.failed) for s in session.steps] == [
        ("run_command", True),
        ("write_file", True),
    ]


async def test_closing_one_of_two_sessions_over_the_same_tools_stops_only_its_commands(
    tmp_path: Path,
) -> None:
    """Two sessions share the tools (and so run_command's runner): closing one stops the
    commands it started, while the other's runs on to its own end."""
    marker, flag = _marker(), tmp_path / "started"
    other_started, go = tmp_path / "other-started", tmp_path / "go"
    workspace = Workspace(tmp_path)
    tools = workspace_tools(workspace)
    closing = ToolSession(tools, workspace=workspace)
    other = ToolSession(tools, workspace=workspace)
    waits = f"touch {other_started}; while [ ! -e {go} ]; do sleep 0.05; done; echo other-done"
    results: dict[str, object] = {}

    async def run(name: str, session: ToolSession, command: str) -> None:
        results[name] = await session.call("run_command", {"command": command, "timeout": 600})

    try:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(run, "other", other, waits)
                await wait_until_async(other_started.exists, bool, "the other command")
                await _close_once_running(
                    partial(run, "closing", closing, _command(marker, flag)),
                    closing.close,
                    marker,
                    flag,
                )
                go.touch()
    finally:
        workspace.close()
    stopped, ran_on = results["closing"], results["other"]
    assert stopped.error_code == ErrorCode.SANDBOX_ERROR, stopped  # type: ignore[attr-defined]
    assert (ran_on.error, ran_on.content) == (  # type: ignore[attr-defined]
        None,
        {"exit_code": 0, "stdout": "other-done\n", "stderr": ""},
    )


async def test_closing_the_workspace_stops_every_session_s_commands(tmp_path: Path) -> None:
    marker, flag = _marker(), tmp_path / "started"
    workspace = Workspace(tmp_path)
    tools = workspace_tools(workspace)
    sessions = [ToolSession(tools, workspace=workspace) for _ in range(2)]
    other_started = tmp_path / "other-started"
    waits = f"touch {other_started}; sleep 3600"
    results: list[object] = []

    async def run(session: ToolSession, command: str) -> None:
        results.append(await session.call("run_command", {"command": command, "timeout": 600}))

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(run, sessions[1], waits)
            await wait_until_async(other_started.exists, bool, "the other command")
            await _close_once_running(
                partial(run, sessions[0], _command(marker, flag)), workspace.close, marker, flag
            )
    codes = [result.error_code for result in results]  # type: ignore[attr-defined]
    assert codes == [ErrorCode.SANDBOX_ERROR, ErrorCode.SANDBOX_ERROR]


async def test_a_workspace_closed_again_stops_commands_run_since_its_last_close(
    tmp_path: Path,
) -> None:
    """Its close lets go of the runners it closed; one that runs a command again is its
    own again, and stopped by the next close."""
    marker, flag = _marker(), tmp_path / "started"
    workspace = Workspace(tmp_path)
    [run_command] = [t for t in workspace_tools(workspace) if t.name == "run_command"]
    first = await invoke_tool(run_command, {"command": "echo first"})
    workspace.close()
    results: list[object] = []

    async def run() -> None:
        results.append(
            await invoke_tool(run_command, {"command": _command(marker, flag), "timeout": 600})
        )

    await _close_once_running(run, workspace.close, marker, flag)
    assert first.content == {"exit_code": 0, "stdout": "first\n", "stderr": ""}
    [result] = results
    assert result.error_code == ErrorCode.SANDBOX_ERROR, result  # type: ignore[attr-defined]


def _rpc(process: subprocess.Popen[bytes], message: dict[str, object]) -> None:
    assert process.stdin is not None
    process.stdin.write(json.dumps(message).encode() + b"\n")
    process.stdin.flush()


def test_the_mcp_stdio_server_stops_running_commands_at_end_of_input(tmp_path: Path) -> None:
    marker, flag = _marker(), tmp_path / "started"
    server = subprocess.Popen(
        [sys.executable, "-m", "workspace_tools", "mcp", "--root", str(tmp_path), "--shell"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _rpc(
            server,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            },
        )
        _rpc(server, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        # Writing calls run one at a time here: the background process first (its call
        # answers at once), then the command.
        background = f"M={marker[:4]}''{marker[4:]}; exec sh -c 'sleep 3600; :' \"$M-d\""
        _rpc(
            server,
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "start_process", "arguments": {"command": background}},
            },
        )
        command = _command(marker, flag)
        _rpc(
            server,
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {"name": "run_command", "arguments": {"command": command}},
            },
        )
        wait_until(flag.exists, bool, "the command to start", timeout=60)
        wait_until(lambda: _by_cmdline(marker), lambda f: len(f) >= 4, "the four sleepers")
        assert server.stdin is not None
        server.stdin.close()
        assert server.wait(timeout=60) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    left = poll(lambda: _by_cmdline(marker), lambda found: not found, timeout=GONE)
    assert left == []


def _remote_run(remote: RemoteWorkspace, command: str, out: list[object]) -> None:
    [run_command] = [t for t in remote.tools if t.name == "run_command"]
    out.append(invoke_tool_sync(run_command, {"command": command, "timeout": 600}))


def _running_remotely(
    served: Served, marker: str, flag: Path
) -> tuple[RemoteWorkspace, threading.Thread]:
    """A RemoteWorkspace of ``served`` whose run_command runs the marked command in a
    thread, once the command and what it started are seen running."""
    remote = RemoteWorkspace(served.url, served.token, retries=0)
    out: list[object] = []
    thread = threading.Thread(
        target=_remote_run, args=(remote, _command(marker, flag), out), daemon=True
    )
    thread.start()
    wait_until(flag.exists, bool, "the command to start", timeout=60)
    _all_started(marker)
    return remote, thread


def test_serve_stops_running_commands_on_sigterm(tmp_path: Path) -> None:
    marker, flag = _marker(), tmp_path / "started"
    with serve(tmp_path, token_line=True) as served:
        remote, thread = _running_remotely(served, marker, flag)
        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(timeout=60) == 0
        thread.join(60)
        remote.close()
    left = poll(lambda: _by_cmdline(marker), lambda found: not found, timeout=GONE)
    assert left == []


def test_closing_a_remote_workspace_stops_its_running_command(tmp_path: Path) -> None:
    marker, flag = _marker(), tmp_path / "started"
    with serve(tmp_path, token_line=True) as served:
        remote, thread = _running_remotely(served, marker, flag)
        remote.close()
        thread.join(60)
        assert not thread.is_alive()
        # The server goes on; what the closed session's call ran does not.
        left = poll(lambda: _by_cmdline(marker), lambda found: not found, timeout=GONE)
        assert left == []
        assert served.process.poll() is None
