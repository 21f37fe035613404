"""Adversarial checks of the persistent shell: a command that redirects or closes the
shell's own stdout or stderr for good (``exec >file``, ``exec 2>/dev/null``, ``exec >&-``)
ends when it ends, in the same shell, and the next command's output is captured again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from tests._processes import survivors
from workspace_tools import ErrorCode, ShellSession, ToolResult, invoke_tool, shell_tools
from workspace_tools.shell import OutputLog, StreamCapture

pytestmark = pytest.mark.anyio

#: Seconds a command may take: far above what any of these needs, far below the 60 s the
#: test waits, so a command that hides its trailer shows up as a timeout, not a hang.
TIMEOUT = 20


@pytest.fixture
def session(tmp_path: Path, marker: str) -> Iterator[ShellSession]:
    shells = ShellSession(tmp_path)
    yield shells
    shells.close()
    assert survivors(marker) == []


async def shell(session: ShellSession, command: str) -> ToolResult:
    tool = {t.name: t for t in shell_tools(session)}["shell"]
    with anyio.fail_after(60):
        return await invoke_tool(tool, {"command": command, "timeout": TIMEOUT})


async def content(session: ShellSession, command: str) -> dict[str, Any]:
    result = await shell(session, command)
    assert result.error is None, (command, result.error)
    assert isinstance(result.content, dict)
    return result.content


@pytest.mark.parametrize(
    ("command", "stdout", "stderr"),
    [
        ("exec 2>/dev/null; echo y; ls /no-such-dir-here", "y\n", ""),
        ("exec >/dev/null; echo hidden; echo shown >&2", "", "shown\n"),
        ("exec >kept.txt; echo to-file", "", ""),
        ("exec 2>&-; echo z", "z\n", ""),
        ("exec 1>&2; echo moved", "", "moved\n"),
        ("exec >/dev/null 2>&1; echo gone; echo gone >&2", "", ""),
    ],
)
async def test_a_command_that_redirects_the_shells_streams_ends_in_the_same_shell(
    session: ShellSession, tmp_path: Path, command: str, stdout: str, stderr: str
) -> None:
    before = await content(session, "echo $$")
    redirected = await content(session, command)
    assert redirected == {
        "exit_code": redirected["exit_code"],
        "stdout": stdout,
        "stderr": stderr,
        "notes": [],
    }
    after = await content(session, "echo $$; echo err >&2")
    assert after == {
        "exit_code": 0,
        "stdout": before["stdout"],
        "stderr": "err\n",
        "notes": [],
    }
    if "kept.txt" in command:
        assert (tmp_path / "kept.txt").read_bytes() == b"to-file\n"


async def test_a_command_that_closes_stdout_gets_bashs_own_error(session: ShellSession) -> None:
    closed = await content(session, "exec >&-; echo x")
    assert closed["stdout"] == ""
    assert closed["exit_code"] == 1
    assert closed["stderr"].endswith("echo: write error: Bad file descriptor\n"), closed
    assert await content(session, "echo still") == {
        "exit_code": 0,
        "stdout": "still\n",
        "stderr": "",
        "notes": [],
    }


async def test_a_command_using_the_saved_descriptors_cannot_lose_them(
    session: ShellSession, tmp_path: Path
) -> None:
    used = await content(session, "exec 61>mine.txt 62>&-; echo x >&61; exec >&-; echo gone")
    assert used["stdout"] == ""
    assert (tmp_path / "mine.txt").read_bytes() == b"x\n"
    assert await content(session, "echo back; echo err >&2") == {
        "exit_code": 0,
        "stdout": "back\n",
        "stderr": "err\n",
        "notes": [],
    }


async def call(session: ShellSession, name: str, **arguments: Any) -> ToolResult:
    tool = {t.name: t for t in shell_tools(session)}[name]
    with anyio.fail_after(60):
        return await invoke_tool(tool, arguments)


@pytest.mark.parametrize("remove", ["rm -rf .shell-output.*", "git init -q . && git clean -fdxq"])
async def test_the_output_area_removed_by_a_command_comes_back(
    session: ShellSession, tmp_path: Path, remove: str
) -> None:
    # `git clean -fdx` removes ignored files too: the area is gone under the session's feet.
    long = "head -c 300000 /dev/zero | tr '\\0' a; echo"
    removed = await call(session, "shell", command=f"{remove}; {long}", timeout=TIMEOUT)
    assert removed.error is None, removed.error
    assert removed.details.stdout_bytes == 300_001
    area = session.output_area
    assert area is not None
    assert removed.details.stdout_file is not None, removed.details
    assert (tmp_path / removed.details.stdout_file).read_bytes() == b"a" * 300_000 + b"\n"
    assert (area / ".gitignore").read_bytes() == b"*\n"

    await call(session, "shell", command="rm -rf .shell-output.*", timeout=TIMEOUT)
    after = await call(session, "shell", command="echo fine", restart=True, timeout=TIMEOUT)
    assert after.error is None, after.error
    assert after.content["stdout"] == "fine\n"

    await call(session, "shell", command="rm -rf .shell-output.*", timeout=TIMEOUT)
    started = await call(session, "start_process", command="read line; echo got $line")
    assert started.error is None, started.error
    written = await call(session, "write_process_stdin", id="p1", input="it\n")
    assert written.error is None, written.error
    read = await call(session, "read_process_output", id="p1", wait=30)
    assert read.error is None, read.error
    assert read.content["output"] == "got it\n"


async def test_output_where_no_file_can_take_it_is_still_counted(session: ShellSession) -> None:
    # Something else now sits where the area was: the whole-output file cannot be made, the
    # command's output is still counted and kept head and tail.
    taken = 'a=$(echo .shell-output.*); rm -rf "$a"; touch "$a"'
    result = await call(session, "shell", command=f"{taken}; seq 1 100000", timeout=TIMEOUT)
    assert result.error is None, result.error
    assert result.details.stdout_bytes == len("".join(f"{n}\n" for n in range(1, 100_001)))
    assert result.details.stdout_lines == 100_000
    assert result.details.stdout_file is None
    assert result.content["stdout"].startswith("1\n2\n3\n")
    assert result.content["stdout"].endswith("99999\n100000\n")


def test_a_full_disk_stops_the_file_not_the_count() -> None:
    # /dev/full refuses every write with ENOSPC, as a full disk does.
    capture = StreamCapture(16, Path("/dev/full"), 1 << 20)
    capture.feed(b"x" * 100)
    capture.feed(b"y\n" * 50)
    view = capture.close()
    assert (view.captured.total_bytes, view.lines, view.file, view.file_bytes) == (200, 50, None, 0)

    log = OutputLog(Path("/dev/full"), 1 << 20, 64)
    log.feed(b"line\n" * 10)
    log.end()
    assert log.totals() == (50, 10, 50)
    assert log.file_bytes == 0


async def test_tracing_shows_the_commands_lines_and_none_of_the_shells_own(
    session: ShellSession,
) -> None:
    traced = await content(session, "set -x; echo a")
    assert traced == {"exit_code": 0, "stdout": "a\n", "stderr": "++ echo a\n", "notes": []}
    # xtrace stays on for the next command, as in a terminal, and shows only its lines.
    again = await content(session, "echo b; (exit 3)")
    assert again == {
        "exit_code": 3,
        "stdout": "b\n",
        "stderr": "++ echo b\n++ exit 3\n",
        "notes": [],
    }
    off = await content(session, "set +x; echo c")
    assert off == {"exit_code": 0, "stdout": "c\n", "stderr": "++ set +x\n", "notes": []}
    assert await content(session, "echo d") == {
        "exit_code": 0,
        "stdout": "d\n",
        "stderr": "",
        "notes": [],
    }


async def test_verbose_mode_never_prints_the_shells_own_lines(session: ShellSession) -> None:
    await content(session, "set -v")
    for command in ("echo e", "cd sub 2>/dev/null; echo f", "set +v; echo g"):
        shown = await content(session, command)
        assert "__wt" not in shown["stderr"] and "printf" not in shown["stderr"], shown
        assert "\x1e" not in shown["stdout"] + shown["stderr"], shown
    assert await content(session, "echo h") == {
        "exit_code": 0,
        "stdout": "h\n",
        "stderr": "",
        "notes": [],
    }


async def test_a_restart_while_a_command_runs_ends_it_at_once(
    session: ShellSession, tmp_path: Path
) -> None:
    # The command's own timeout is far away: were the restart to wait for it, the test's
    # guard (60 s) would fail first.
    outcomes: dict[str, ToolResult] = {}

    async def long() -> None:
        outcomes["long"] = await call(
            session, "shell", command="echo begun; touch started; sleep 600", timeout=600
        )

    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            group.start_soon(long)
            while not (tmp_path / "started").exists():
                await anyio.sleep(0.01)
            outcomes["restart"] = await call(session, "shell", restart=True)
    assert outcomes["restart"].error is None, outcomes["restart"].error
    assert outcomes["restart"].content["notes"] == ["The shell was restarted."]
    ended = outcomes["long"]
    assert ended.error_code is ErrorCode.ABORTED, (ended.error_code, ended.error)
    assert ended.error == (
        "The shell was restarted while this command ran; the command and every process "
        "it started were killed. The next command starts a new shell at the workspace "
        "root.\nstdout so far:\nbegun\n"
    )
    after = await content(session, "echo after")
    assert after["stdout"] == "after\n"


async def test_closing_the_session_while_a_command_runs_ends_it_at_once(
    tmp_path: Path, marker: str
) -> None:
    shells = ShellSession(tmp_path)
    outcomes: dict[str, ToolResult] = {}

    async def long() -> None:
        outcomes["long"] = await call(
            shells, "shell", command="echo begun; touch started; sleep 600", timeout=600
        )

    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            group.start_soon(long)
            while not (tmp_path / "started").exists():
                await anyio.sleep(0.01)
            await anyio.to_thread.run_sync(shells.close)
    ended = outcomes["long"]
    assert ended.error_code is ErrorCode.ABORTED, (ended.error_code, ended.error)
    assert ended.error == (
        "The shell session was closed while this command ran; the command and every process "
        "it started were killed.\nstdout so far:\nbegun\n"
    )
    assert survivors(marker) == []
