"""A grep that backtracks for ever blocks no other request of the MCP server, and closing
the server's stdin stops it and the grep's worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests._processes import command_line
from tests.adapters.test_mcp import REPO, connect, workspace_server
from tests.tools.test_grep_engine import child_processes, children, wait_for

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        not os.path.isdir("/proc/self/task"), reason="reads the process table from /proc"
    ),
]

# Python's engine only (a lookahead), exponential time on the file below.
SLOW = {"pattern": r"(a+)+(?=b)"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "f.txt").write_text("a" * 40 + "!\n")
    return tmp_path


def server_and_worker(before: set[int]) -> tuple[int, int] | None:
    """The server this test started (a new child of this process) and its grep worker."""
    for server in child_processes(os.getpid()) - before:
        if "mcp" not in command_line(server):
            continue  # a spawn server another test's tools started ahead
        workers = children(server)
        if workers:
            return server, min(workers)
    return None


async def wait_async(predicate: Any, what: str, seconds: float = 20.0) -> Any:
    with anyio.move_on_after(seconds):
        while not (value := predicate()):
            await anyio.sleep(0.02)
        return value
    pytest.fail(f"still waiting after {seconds} s for {what}")


async def test_tools_list_answers_while_a_backtracking_grep_runs(root: Path) -> None:
    before = child_processes(os.getpid())
    results: list[Any] = []
    async with connect(*workspace_server(root)) as session:

        async def slow_grep() -> None:
            results.append(await session.call_tool("grep", SLOW))

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow_grep)
            server, worker = await wait_async(
                lambda: server_and_worker(before), "the grep worker to start"
            )
            with anyio.fail_after(20):
                listed = await session.list_tools()
                other = await session.call_tool("grep", {"pattern": "a!"})
            assert "grep" in [t.name for t in listed.tools]
            assert other.content[0].text == "f.txt:1:" + "a" * 40 + "!"  # type: ignore[union-attr]
            assert results == [], "the slow grep ended before the other requests were answered"
            assert worker in children(server)
            tg.cancel_scope.cancel()
    # Leaving the client closed the server's stdin: the server and its worker are gone.
    wait_for(lambda: server not in child_processes(os.getpid()), "the server to exit")
    wait_for(lambda: not os.path.exists(f"/proc/{worker}"), "the worker to be gone")


def _send(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
    proc.stdin.flush()


def test_closing_stdin_stops_the_server_and_its_grep_worker(root: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, *workspace_server(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=REPO,
    )
    try:
        init = {"protocolVersion": "2025-06-18", "capabilities": {}}
        init["clientInfo"] = {"name": "test", "version": "1"}
        _send(proc, {"id": 1, "method": "initialize", "params": init})
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline())["id"] == 1
        _send(proc, {"method": "notifications/initialized"})
        _send(
            proc,
            {"id": 2, "method": "tools/call", "params": {"name": "grep", "arguments": SLOW}},
        )
        wait_for(lambda: children(proc.pid), "the grep worker to start")
        (worker,) = children(proc.pid)
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=20)
        wait_for(lambda: not os.path.exists(f"/proc/{worker}"), "the worker to be gone")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
