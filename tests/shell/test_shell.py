"""The persistent shell: state carries over, nothing the command prints ends it early,
timeouts and restarts leave a working shell, and nothing outlives the session."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from sandbox import Sandbox
from tests._processes import marked_processes, survivors
from tests._waiting import wait_until
from workspace_tools import ErrorCode, ShellSession, ToolSession, invoke_tool, shell_tools
from workspace_tools.shell import PersistentShell, make_area, remove_area
from workspace_tools.tools import workspace_tools

pytestmark = pytest.mark.anyio


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "sub").mkdir()
    return tmp_path


@pytest.fixture
def session(root: Path, marker: str) -> Iterator[ShellSession]:
    shells = ShellSession(root)
    yield shells
    shells.close()
    assert survivors(marker) == []


def tools(session: ShellSession) -> dict[str, Any]:
    return {t.name: t for t in shell_tools(session)}


async def shell(session: ShellSession, **arguments: Any) -> Any:
    with anyio.fail_after(60):  # a broken timeout fails the test instead of hanging it
        return await invoke_tool(tools(session)["shell"], arguments)


async def test_cwd_exports_and_functions_persist(session: ShellSession, root: Path) -> None:
    first = await shell(session, command="cd sub && export GREETING=hi && f() { echo fn; }")
    assert first.content == {
        "exit_code": 0,
        "stdout": "",
        "stderr": "",
        "notes": [],
    }, first.model_text()
    second = await shell(session, command="pwd; echo $GREETING; f")
    assert second.content["stdout"] == f"{root}/sub\nhi\nfn\n", second.model_text()
    assert second.details.cwd == "sub"


async def test_streams_and_exit_code_are_the_commands(session: ShellSession) -> None:
    result = await shell(session, command="printf out; printf err >&2; (exit 3)")
    assert (result.content["stdout"], result.content["stderr"], result.content["exit_code"]) == (
        "out",
        "err",
        3,
    ), result.model_text()


async def test_a_trailer_printed_by_the_command_does_not_end_it(session: ShellSession) -> None:
    # The shape of the real trailer with a made-up nonce, then more output and another status.
    fake = "0123456789abcdef0123456789abcdef"
    command = (
        f"printf '\\036%s\\036%d\\000%s\\036%s\\036' {fake} 0 / {fake}; "
        f"printf '\\036{fake}\\036' >&2; echo after; echo late >&2; (exit 5)"
    )
    result = await shell(session, command=command)
    assert result.content["exit_code"] == 5, result.model_text()
    assert result.content["stdout"] == f"\x1e{fake}\x1e0\x00/\x1e{fake}\x1eafter\n"
    assert result.content["stderr"] == f"\x1e{fake}\x1elate\n"
    assert result.details.left_root is False


async def test_stdin_is_empty(session: ShellSession) -> None:
    result = await shell(session, command="cat; read line; echo read=$?")
    assert result.content["stdout"] == "read=1\n", result.model_text()


async def test_background_job_dies_with_the_session(root: Path, marker: str) -> None:
    shells = ShellSession(root)
    result = await shell(shells, command="sleep 1000 & (setsid sleep 1001 &); echo started")
    assert result.content["stdout"] == "started\n"
    wait_until(lambda: len(marked_processes(marker)), lambda n: n >= 3, "shell and sleeps")
    shells.close()
    assert survivors(marker) == []
    assert shells.output_area is not None and not shells.output_area.exists()


async def test_timeout_kills_the_tree_and_the_next_command_gets_a_new_shell(
    session: ShellSession, marker: str, root: Path
) -> None:
    await shell(session, command="export KEPT=yes; cd sub")
    result = await shell(session, command="echo partial; sleep 1000 & sleep 1000", timeout=1)
    assert result.error_code == ErrorCode.TOOL_TIMEOUT
    assert result.error.startswith(
        "Command timed out after 1 s; the shell and every process it started were killed. "
        "The next command starts a new shell at the workspace root."
    ), result.error
    assert result.details.stdout == "partial\n"
    assert survivors(marker) == []
    after = await shell(session, command="echo ${KEPT:-unset}; pwd")
    assert after.content["stdout"] == f"unset\n{root}\n", after.model_text()


async def test_restart_replaces_the_shell(session: ShellSession, marker: str) -> None:
    await shell(session, command="export KEPT=yes; sleep 1000 &")
    wait_until(lambda: len(marked_processes(marker)), lambda n: n >= 2, "shell and sleep")
    restarted = await shell(session, restart=True)
    assert restarted.content["notes"] == ["The shell was restarted."]
    assert restarted.details.restarted is True
    assert survivors(marker) == []
    after = await shell(session, command="echo ${KEPT:-unset}")
    assert after.content["stdout"] == "unset\n"
    both = await shell(session, command="echo ok", restart=True)
    assert both.content["stdout"] == "ok\n"
    assert both.content["notes"] == ["The shell was restarted before this command."]


async def test_restart_or_command_is_required(session: ShellSession) -> None:
    result = await shell(session)
    assert result.error_code == ErrorCode.INVALID_ARGUMENTS
    assert result.error == "command is required unless restart is true"


async def test_nul_in_the_command_is_refused(session: ShellSession) -> None:
    result = await shell(session, command="echo a\x00b")
    assert result.error_code == ErrorCode.INVALID_ARGUMENTS
    assert "contains a NUL character" in result.error


async def test_leaving_the_root_is_reported_and_undone(session: ShellSession, root: Path) -> None:
    result = await shell(session, command="cd / && echo moved")
    assert result.content["stdout"] == "moved\n"
    assert result.details.left_root is True and result.details.cwd == "/"
    assert result.content["notes"] == [
        "The command left the shell in /, outside the workspace; the shell was moved back "
        "to the workspace root."
    ]
    after = await shell(session, command="pwd")
    assert after.content["stdout"] == f"{root}\n"
    assert after.details.left_root is False


async def test_exit_ends_the_shell_and_the_next_command_starts_one(
    session: ShellSession, root: Path
) -> None:
    await shell(session, command="cd sub")
    result = await shell(session, command="echo bye; exit 7")
    assert result.content["exit_code"] == 7
    assert result.content["stdout"] == "bye\n"
    assert result.details.shell_exited is True
    assert result.content["notes"] == [
        "The shell exited with code 7; the next command starts a new shell at the workspace root."
    ]
    after = await shell(session, command="pwd")
    assert after.content["stdout"] == f"{root}\n"


async def test_long_output_is_kept_whole_in_a_file_read_file_pages(
    session: ShellSession, root: Path
) -> None:
    expected = subprocess.run(["seq", "1", "100000"], capture_output=True, check=True).stdout
    result = await shell(session, command="seq 1 100000; echo done >&2")
    assert result.details.truncated is True
    assert result.details.stdout_bytes == len(expected)
    assert result.details.stdout_lines == 100000
    path = result.details.stdout_file
    assert path is not None and result.details.stderr_file is None
    assert result.content["notes"] == [
        f"The whole stdout (100,000 lines, {len(expected):,} bytes) is in {path}; page "
        "through it with read_file."
    ]
    assert (root / path).read_bytes() == expected
    assert result.content["stdout"].startswith("1\n2\n3\n")
    assert result.content["stdout"].endswith("99999\n100000\n")
    reader = next(t for t in workspace_tools(root) if t.name == "read_file")
    page = await invoke_tool(reader, {"path": path, "offset": 50000, "limit": 2})
    assert "50000" in page.model_text() and "50001" in page.model_text(), page.model_text()
    # Discovery never lists the output area, and git never sees it.
    lister = next(t for t in workspace_tools(root) if t.name == "list_files")
    listing = await invoke_tool(lister, {"path": "."})
    assert ".shell-output" not in listing.model_text(), listing.model_text()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    status = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=all"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert ".shell-output" not in status.stdout, status.stdout


async def test_progress_arrives_while_the_command_runs(session: ShellSession, root: Path) -> None:
    updates: list[Any] = []
    flag = root / "go"
    command = f"echo first; while [ ! -e {flag} ]; do sleep 0.01; done; echo second"

    async def release() -> None:
        await anyio.to_thread.run_sync(
            lambda: wait_until(lambda: list(updates), bool, "a progress update")
        )
        flag.touch()

    async with anyio.create_task_group() as group:
        group.start_soon(release)
        with anyio.fail_after(60):
            result = await invoke_tool(
                tools(session)["shell"], {"command": command}, on_update=updates.append
            )
    assert result.content["stdout"] == "first\nsecond\n"
    assert updates[0].content.startswith("first\n"), updates


async def test_in_a_sandbox_writes_stay_in_the_root_and_no_progress(
    root: Path, marker: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outside = tmp_path_factory.mktemp("outside")
    box = Sandbox(writable=[], best_effort=True, env_allowlist=("PATH", "WT_TEST_MARKER"))
    if "write_confinement" not in box.confined_to(str(root)).capabilities:
        box.close()
        pytest.skip("no layer here confines writes")
    updates: list[Any] = []
    try:
        with ShellSession(root, sandbox=box) as shells:
            result = await invoke_tool(
                tools(shells)["shell"],
                {"command": f"touch inside; touch {outside}/escaped; echo $?"},
                on_update=updates.append,
            )
            assert result.content["stdout"] == "1\n", result.model_text()
            assert (root / "inside").exists() and not (outside / "escaped").exists()
            assert updates == []
            await shell(shells, command="sleep 1000 &")
            wait_until(lambda: len(marked_processes(marker)), bool, "the sandboxed sleep")
        assert survivors(marker) == []
    finally:
        box.close()


async def test_a_tool_session_owns_the_shell_and_closes_it(root: Path, marker: str) -> None:
    session = ToolSession(root, shell=True)
    names = [t.name for t in session.tools]
    assert names[-6:] == [
        "shell",
        "start_process",
        "read_process_output",
        "write_process_stdin",
        "stop_process",
        "list_processes",
    ]
    result = await session.call("shell", {"command": "sleep 1000 & echo started"})
    assert result.content["stdout"] == "started\n"
    started = await session.call("start_process", {"command": "sleep 1002"})
    assert started.content["state"] == "running"
    wait_until(lambda: len(marked_processes(marker)), lambda n: n >= 3, "shell and sleeps")
    assert [step.tool for step in session.steps] == ["shell", "start_process"]
    session.close()
    assert survivors(marker) == []


_PARENT = """
import sys, anyio
from workspace_tools import ShellSession, invoke_tool, shell_tools
shells = ShellSession(sys.argv[1])
tools = {t.name: t for t in shell_tools(shells)}
async def main():
    await invoke_tool(tools["shell"], {"command": "sleep 1000 & (setsid sleep 1001 &)"})
    await invoke_tool(tools["start_process"], {"command": "sleep 1002 & sleep 1003"})
anyio.run(main)
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_killing_the_parent_kills_every_process_of_its_session(
    root: Path, marker: str
) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        assert parent.stdout is not None
        assert parent.stdout.readline() == b"ready\n"
        # The shell, its two sleeps, the process's shell and its two sleeps.
        wait_until(lambda: len(marked_processes(marker)), lambda n: n >= 7, "the session's tree")
    finally:
        parent.kill()
        parent.wait()
    assert survivors(marker) == []


@pytest.mark.parametrize(
    ("command", "stdout", "stderr_part", "exit_code"),
    [
        # Output ending in a byte that starts the trailer's marker is output all the same.
        ("printf 'a\\036'", "a\x1e", "", 0),
        ("printf '\\036\\036\\036'; printf '\\036' >&2", "\x1e\x1e\x1e", "\x1e", 0),
        # A here-document inside the command, quotes and a backslash-newline.
        ("cat <<'EOF'\nline 'one'\n$HOME\nEOF", "line 'one'\n$HOME\n", "", 0),
        ('echo "two" \\\n  words', "two words\n", "", 0),
        # A syntax error is the command's error; the shell goes on.
        ('echo "unterminated', "", "unexpected EOF", 2),
        ("if then fi", "", "syntax error", 2),
        # Bytes that are not UTF-8 come back replaced, not lost.
        ("printf 'caf\\351\\n'", "caf\ufffd\n", "", 0),
    ],
)
async def test_command_kinds(
    session: ShellSession, command: str, stdout: str, stderr_part: str, exit_code: int
) -> None:
    result = await shell(session, command=command)
    assert result.content["stdout"] == stdout, result.model_text()
    assert stderr_part in result.content["stderr"], result.model_text()
    assert result.content["exit_code"] == exit_code, result.model_text()
    after = await shell(session, command="echo alive")
    assert after.content["stdout"] == "alive\n"


async def test_a_large_command_reaches_the_shell_whole(session: ShellSession, root: Path) -> None:
    body = "".join(f"row {i} {'x' * 40}\n" for i in range(5000))  # about 240 kB
    result = await shell(session, command=f"cat > big.txt <<'EOF'\n{body}EOF\nwc -l < big.txt")
    assert result.content["stdout"] == "5000\n", result.model_text()
    assert (root / "big.txt").read_text() == body


async def test_output_of_a_job_left_running_goes_to_the_next_command(
    session: ShellSession, root: Path
) -> None:
    flag = root / "go"
    first = await shell(
        session, command=f"(while [ ! -e {flag} ]; do sleep 0.01; done; echo late) & echo now"
    )
    assert first.content["stdout"] == "now\n"
    flag.touch()
    wait_until(lambda: session.shell._between["stdout"], lambda held: held == b"late\n", "the job")
    second = await shell(session, command="echo next")
    assert second.content["stdout"] == "late\nnext\n"


async def test_a_closed_session_refuses_calls(root: Path) -> None:
    shells = ShellSession(root)
    shells.close()
    result = await shell(shells, command="true")
    assert result.error_code == ErrorCode.ABORTED
    assert result.error == "The shell session is closed; its shell and processes are gone"


async def test_the_calls_timeout_stops_the_command_first(
    session: ShellSession, marker: str, root: Path
) -> None:
    with anyio.fail_after(60):
        result = await invoke_tool(
            tools(session)["shell"], {"command": "echo begun; sleep 1000"}, timeout=3
        )
    assert result.error_code == ErrorCode.TOOL_TIMEOUT
    assert result.error.startswith(
        "Command timed out after the call's timeout of 3 s; the shell and every process it "
        "started were killed."
    ), result.error
    assert result.details.stdout == "begun\n"
    assert survivors(marker) == []
    after = await shell(session, command="pwd")
    assert after.content["stdout"] == f"{root}\n"


@pytest.mark.skipif(
    os.path.realpath("/bin/sh").endswith("bash"), reason="/bin/sh is bash here: no other shell"
)
def test_a_posix_sh_serves_when_there_is_no_bash(root: Path, marker: str) -> None:
    area = make_area(root)
    box = Sandbox(layers=False, network=True, env_allowlist=("PATH", "WT_TEST_MARKER"))
    shell_ = PersistentShell(
        box, "/bin/sh", root, area, box.child_env, memory_bytes=1000, file_bytes=10_000
    )
    try:
        runs = [
            shell_.run(command, 30)
            for command in ("cd sub; export X=1; f() { echo fn; }", "echo $X; f; pwd", "exit 4")
        ]
        assert runs[1].stdout.captured.complete == f"1\nfn\n{root}/sub\n".encode()
        assert (runs[2].exit_code, runs[2].shell_exited) == (4, True)
    finally:
        shell_.close()
        remove_area(area)
        box.close()
    assert survivors(marker) == []
