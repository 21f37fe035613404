"""Adversarial checks of the persistent shell: a command that redirects or closes the
shell's own stdout or stderr for good (``exec >file``, ``exec 2>/dev/null``, ``exec >&-``)
ends when it ends, in the same shell, and the next command's output is captured again."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests._processes import survivors
from workspace_tools import ShellSession, ToolResult, invoke_tool, shell_tools

pytestmark = pytest.mark.anyio

#: Seconds a command may take: far above what any of these needs, far below the 60 s the
#: test waits, so a command that hides its trailer shows up as a timeout, not a hang.
TIMEOUT = 20


@pytest.fixture
def marker(monkeypatch: pytest.MonkeyPatch) -> str:
    value = secrets.token_hex(12)
    monkeypatch.setenv("WT_TEST_MARKER", value)
    return f"WT_TEST_MARKER={value}"


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
