"""A command that fails the way a protection of its sandbox makes commands fail (the network
off, the cap on processes) gets a note naming that protection, from run_command and the
shell tool; nothing is said where the protection is not what failed."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from sandbox import Sandbox
from sandbox.layers import NETWORK_OFF, PROCESS_CAP
from workspace_tools import ErrorCode, ShellSession, invoke_tool, shell_tools
from workspace_tools.tools import workspace_tools

pytestmark = pytest.mark.anyio

OFFLINE = (
    "The network is off in this command's sandbox (Sandbox(network=False)): host names do "
    "not resolve and connections fail, so nothing here can download or reach a server"
)
#: Looks a name up; prints the resolver's error (glibc's words) and fails when it cannot.
LOOKUP = (
    "python3 -c \"import socket, sys\ntry: socket.getaddrinfo('example.com', 80)\n"
    'except OSError as e: sys.exit(str(e))"'
)
RESOLVER_ERRORS = {
    "[Errno -3] Temporary failure in name resolution\n",
    "[Errno -2] Name or service not known\n",
}


def capped(cap: int, how: str = "a command that starts more cannot fork past that") -> str:
    return (
        f"This command's sandbox allows {cap} processes and threads at once "
        f"(Sandbox(max_processes={cap})): {how}; run fewer at once (make -j2, fewer workers)"
    )


#: dash gives up at the first failed fork (bash retries for half a minute): past the cap
#: of 6 exactly one fork is refused; the sleeps it started are stopped when it ends.
FORK_PAST_SIX = "dash -c 'for i in 1 2 3 4 5 6 7 8 9; do sleep 30 & done; wait'"
#: What the note says of that one refused fork where the kernel counts refusals: a cgroup
#: (``pids.events``) does, RLIMIT_NPROC in a user namespace does not.
ONE_REFUSED = "1 attempt to start another was refused"


def run_command(root: Path, sandbox: Sandbox | None):
    return next(t for t in workspace_tools(root, sandbox=sandbox) if t.name == "run_command")


def _enforcing(protection: str, **options: object) -> Sandbox:
    box = Sandbox(**options)  # type: ignore[arg-type]
    if protection not in box.capabilities:
        box.close()
        pytest.skip(f"{protection} is not enforced for commands here: {box.capabilities}")
    return box


async def test_a_failed_lookup_in_a_box_with_the_network_off_says_so(tmp_path: Path) -> None:
    box = _enforcing(NETWORK_OFF)
    try:
        result = await invoke_tool(run_command(tmp_path, box), {"command": LOOKUP})
    finally:
        box.close()
    assert (result.error, result.content["exit_code"]) == (None, 1), result
    assert result.content["stderr"] in RESOLVER_ERRORS, result.content
    assert result.content["note"] == OFFLINE


@pytest.mark.parametrize(
    ("command", "sandboxed"),
    [
        ("echo 'curl: (6) Could not resolve host: example.com'", True),  # exit 0
        (f"{LOOKUP}", False),  # no sandbox: the host's network failed, if any
    ],
    ids=["succeeded", "no-sandbox"],
)
async def test_no_note_where_the_sandbox_is_not_what_failed(
    tmp_path: Path, command: str, sandboxed: bool
) -> None:
    box = _enforcing(NETWORK_OFF) if sandboxed else None
    try:
        result = await invoke_tool(run_command(tmp_path, box), {"command": command})
    finally:
        if box is not None:
            box.close()
    assert result.error is None, result
    assert "note" not in result.content, result.content


async def test_no_note_when_the_network_is_on(tmp_path: Path) -> None:
    # The lookup fails or not as the host's network goes; the sandbox never says it is off.
    box = Sandbox(network=True)
    try:
        result = await invoke_tool(
            run_command(tmp_path, box), {"command": "curl -sS http://example.invalid; exit 6"}
        )
    finally:
        box.close()
    assert result.error is None, result
    assert "note" not in result.content, result.content


async def test_a_timeout_in_a_box_with_the_network_off_says_so_before_the_output(
    tmp_path: Path,
) -> None:
    box = _enforcing(NETWORK_OFF)
    command = "echo 'curl: (6) Could not resolve host: example.com' >&2; sleep 300"
    try:
        with anyio.fail_after(60):
            result = await invoke_tool(
                run_command(tmp_path, box), {"command": command, "timeout": 1}
            )
    finally:
        box.close()
    assert (result.error_code, result.error) == (
        ErrorCode.TOOL_TIMEOUT,
        "Command timed out after 1 s; it and every process it started were killed.\n"
        f"{OFFLINE}.\nstderr so far:\ncurl: (6) Could not resolve host: example.com\n",
    )


def _counted(box: Sandbox) -> bool:
    return box.capabilities[PROCESS_CAP].startswith("cgroup")


@pytest.mark.skipif(sys.platform != "linux", reason="the process cap needs Linux cgroups")
async def test_a_fork_past_the_process_cap_says_so(tmp_path: Path) -> None:
    box = _enforcing(PROCESS_CAP, max_processes=6)
    try:
        with anyio.fail_after(60):
            result = await invoke_tool(run_command(tmp_path, box), {"command": FORK_PAST_SIX})
    finally:
        box.close()
    assert (result.error, result.content["exit_code"]) == (None, 2), result
    assert result.content["stderr"] == "dash: 0: Cannot fork\n"
    stopped, _, ours = result.content["note"].partition(". ")
    assert stopped.endswith(
        "were still running when the command ended and were stopped; "
        "start long-running servers or watchers with start_process where "
        "it is offered"
    ), stopped
    assert ours == (capped(6, ONE_REFUSED) if _counted(box) else capped(6)), box.capabilities


def _counting_cap() -> Sandbox:
    box = _enforcing(PROCESS_CAP, max_processes=6)
    if not _counted(box):
        box.close()
        pytest.skip(
            f"the process cap here is {box.capabilities[PROCESS_CAP]}, which keeps no count "
            "of the forks it refused (a cgroup's pids.events does)"
        )
    return box


@pytest.mark.skipif(sys.platform != "linux", reason="the process cap needs Linux cgroups")
async def test_a_refused_fork_is_told_when_the_output_hides_it_and_the_command_succeeds(
    tmp_path: Path,
) -> None:
    # Without the kernel's count the model would read exit 0 and nothing else: the fork
    # error went to /dev/null.
    box = _counting_cap()
    command = f"{FORK_PAST_SIX} 2>/dev/null; echo done"
    try:
        with anyio.fail_after(60):
            result = await invoke_tool(run_command(tmp_path, box), {"command": command})
    finally:
        box.close()
    assert result.error is None, result
    content = result.content
    assert (content["exit_code"], content["stdout"], content["stderr"]) == (0, "done\n", "")
    assert content["note"].endswith(f". {capped(6, ONE_REFUSED)}"), content["note"]


@pytest.mark.skipif(sys.platform != "linux", reason="the process cap needs Linux cgroups")
async def test_a_command_that_timed_out_after_a_refused_fork_says_so(tmp_path: Path) -> None:
    box = _counting_cap()
    command = f"{FORK_PAST_SIX} 2>/dev/null; echo waiting; sleep 300"
    try:
        with anyio.fail_after(60):
            result = await invoke_tool(
                run_command(tmp_path, box), {"command": command, "timeout": 2}
            )
    finally:
        box.close()
    assert (result.error_code, result.error) == (
        ErrorCode.TOOL_TIMEOUT,
        "Command timed out after 2 s; it and every process it started were killed.\n"
        f"{capped(6, ONE_REFUSED)}.\nstdout so far:\nwaiting\n",
    )


@pytest.mark.skipif(sys.platform != "linux", reason="the process cap needs Linux cgroups")
async def test_no_note_when_the_cap_refused_nothing(tmp_path: Path) -> None:
    box = _counting_cap()
    command = "for i in 1 2 3; do sleep 0.01 & done 2>/dev/null; wait; exit 3"
    try:
        with anyio.fail_after(60):
            result = await invoke_tool(run_command(tmp_path, box), {"command": command})
    finally:
        box.close()
    assert (result.error, result.content["exit_code"]) == (None, 3), result
    assert "note" not in result.content, result.content


async def test_the_shell_tool_says_so_too(tmp_path: Path) -> None:
    box = _enforcing(NETWORK_OFF)
    try:
        with ShellSession(tmp_path, sandbox=box) as shells:
            [shell] = [t for t in shell_tools(shells) if t.name == "shell"]
            result = await invoke_tool(shell, {"command": LOOKUP}, sandbox=box)
    finally:
        box.close()
    assert (result.error, result.content["exit_code"]) == (None, 1), result
    assert result.content["notes"] == [f"{OFFLINE}."]


@pytest.mark.skipif(sys.platform != "linux", reason="the process cap needs Linux cgroups")
async def test_the_shell_tool_tells_each_command_the_forks_the_cap_refused_it(
    tmp_path: Path,
) -> None:
    # The shell lives across commands in one cgroup: each command is told the refusals
    # made while it ran, not those of the commands before it.
    box = _counting_cap()
    try:
        with ShellSession(tmp_path, sandbox=box) as shells:
            [shell] = [t for t in shell_tools(shells) if t.name == "shell"]
            with anyio.fail_after(60):
                capped_run = await invoke_tool(
                    shell, {"command": f"{FORK_PAST_SIX} 2>/dev/null; echo done"}, sandbox=box
                )
                next_run = await invoke_tool(shell, {"command": "echo next"}, sandbox=box)
    finally:
        box.close()
    assert capped_run.error is None, capped_run
    content = capped_run.content
    assert (content["exit_code"], content["stdout"], content["stderr"]) == (0, "done\n", "")
    assert content["notes"] == [f"{capped(6, ONE_REFUSED)}."], content
    assert next_run.error is None, next_run
    assert (next_run.content["stdout"], next_run.content["notes"]) == ("next\n", []), next_run
