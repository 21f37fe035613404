"""``workspace-tools mcp --shell``: the persistent shell and background processes over MCP,
driven by the official client against a real server process; what they started ends with
the server, checked on the host."""

from __future__ import annotations

import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from tests._processes import marked_processes, survivors
from tests._waiting import poll_async
from tests.adapters.test_mcp import REPO, connect, workspace_server
from workspace_tools.tools import SHELL_TOOL_NAMES, TOOL_NAMES

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the server is a subprocess; the client's backend is not under test


async def test_shell_flag_serves_a_persistent_shell_whose_processes_end_with_the_server(
    tmp_path: Path,
) -> None:
    marker = f"WT_TEST_MARKER={secrets.token_hex(12)}"
    async with connect(*workspace_server(tmp_path, "--shell")) as session:
        names = [t.name for t in (await session.list_tools()).tools]
        assert names == [*TOOL_NAMES, *SHELL_TOOL_NAMES]
        first = await session.call_tool(
            "shell", {"command": "mkdir -p sub && cd sub && export GREETING=hi"}
        )
        assert not first.isError, first.content
        second = await session.call_tool("shell", {"command": "pwd; echo $GREETING"})
        assert second.structuredContent is not None
        assert second.structuredContent["stdout"] == f"{tmp_path / 'sub'}\nhi\n"
        started = await session.call_tool("start_process", {"command": f"{marker} exec sleep 1000"})
        assert started.structuredContent is not None, started.content
        assert started.structuredContent["state"] == "running"
        alive = await poll_async(lambda: marked_processes(marker), bool, timeout=30)
        assert len(alive) == 1, alive
    # The client closed the server's stdin: the server exits and ends its processes.
    assert survivors(marker) == []


def test_shell_flag_is_refused_with_read_only(tmp_path: Path) -> None:
    argv = [sys.executable, *workspace_server(tmp_path, "--shell", "--read-only")]
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr.endswith(
        "error: --shell runs commands: it cannot be served with --read-only\n"
    ), done.stderr
