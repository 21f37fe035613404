"""An MCP client cannot make the server run thousands of calls at once: per session,
MAX_RUNNING_CALLS run, MAX_WAITING_CALLS more wait their turn, and any further call is
answered at once with an error result, unrun. Driven by the official client against real
server processes: ``workspace-tools serve`` on 127.0.0.1 and ``workspace-tools mcp``."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

pytest.importorskip("mcp")
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests._waiting import wait_until_async
from tests.remote._served import serve
from workspace_tools.adapters.mcp import (
    MAX_RUNNING_CALLS,
    MAX_WAITING_CALLS,
    META_PREFIX,
    create_server,
)

REPO = Path(__file__).resolve().parents[2]
EXTRA = 3
REFUSAL = (
    f"Too many calls at once: this MCP session runs {MAX_RUNNING_CALLS} calls and queues "
    f"{MAX_WAITING_CALLS} more, and both are full; this call was not run. Wait for answers "
    "to the calls already sent, then send it again"
)
# Counts the commands running at once (under a lock), records each count, then waits for
# the file "go".
HELD = (
    "flock .lock sh -c 'n=$(( $(cat n 2>/dev/null || echo 0) + 1 )); echo $n > n; "
    "echo $n >> peaks'; while [ ! -e go ]; do sleep 0.02; done; "
    "flock .lock sh -c 'echo $(( $(cat n) - 1 )) > n'"
)

Connect = Callable[[], AbstractAsyncContextManager[ClientSession]]


def _lines(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


async def _flood(root: Path, connect: Connect) -> None:
    total = MAX_RUNNING_CALLS + MAX_WAITING_CALLS + EXTRA
    answers: list[Any] = []
    async with connect() as session:

        async def one() -> None:
            answers.append(await session.call_tool("run_command", {"command": HELD}))

        with anyio.fail_after(240):
            async with anyio.create_task_group() as tg:
                for _ in range(total):
                    tg.start_soon(one)
                # The calls over both limits come back at once, while the others hold.
                await wait_until_async(lambda: len(answers), lambda n: n >= EXTRA, "refusals")
                await wait_until_async(
                    lambda: _lines(root / "peaks"),
                    lambda seen: len(seen) >= MAX_RUNNING_CALLS,
                    "the first calls running",
                )
                refused = [(a.isError, [b.text for b in a.content], a.meta) for a in answers]
                assert (
                    refused
                    == [(True, [REFUSAL], {META_PREFIX + "errorCode": "TOOL_ERROR"})] * EXTRA
                ), refused
                (root / "go").touch()
    ran = [a for a in answers if not a.isError]
    assert len(ran) == total - EXTRA, [a.content for a in answers if a.isError][:3]
    assert {a.structuredContent["exit_code"] for a in ran} == {0}
    peaks = _lines(root / "peaks")
    assert (len(peaks), max(peaks)) == (total - EXTRA, MAX_RUNNING_CALLS), peaks


def test_http_sessions_bound_their_calls(tmp_path: Path) -> None:
    with serve(tmp_path, "--no-checkpoints") as served:

        @asynccontextmanager
        async def connect() -> AsyncIterator[ClientSession]:
            headers = {"Authorization": f"Bearer {served.token}"}
            async with (
                httpx.AsyncClient(headers=headers, timeout=240) as client,
                streamable_http_client(served.url, http_client=client) as (read, write, _),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                yield session

        anyio.run(_flood, tmp_path, connect)


def test_a_stdio_session_bounds_its_calls(tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "workspace_tools", "mcp", "--root", str(tmp_path), "--no-checkpoints"],
        cwd=str(REPO),
    )

    @asynccontextmanager
    async def connect() -> AsyncIterator[ClientSession]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session

    anyio.run(_flood, tmp_path, connect)


def test_the_limits_must_allow_a_call() -> None:
    with pytest.raises(ValueError, match="max_running_calls must be at least 1"):
        create_server([], max_running_calls=0)
