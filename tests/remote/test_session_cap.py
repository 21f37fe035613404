"""`workspace-tools serve` caps the MCP sessions a client may keep open: one more is refused
with HTTP 503 and a JSON-RPC error saying what to do, the sessions open go on unaffected,
and room comes back when a session ends (DELETE) or goes idle. A real server process on
127.0.0.1, driven by the official MCP client."""

from __future__ import annotations

import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.remote._served import Served, serve
from workspace_tools import ErrorCode, invoke_tool_sync
from workspace_tools.adapters.mcp_http import (
    DEFAULT_MAX_SESSIONS,
    DEFAULT_SESSION_IDLE_TIMEOUT,
    session_cap_message,
)
from workspace_tools.adapters.remote import RemoteWorkspace
from workspace_tools.cli._main import build_parser

_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}
_ACCEPT = "application/json, text/event-stream"


async def _open(stack: AsyncExitStack, served: Served) -> ClientSession:
    """A session of the official client, initialized; ended (DELETE) when ``stack`` is."""
    client = await stack.enter_async_context(
        httpx.AsyncClient(headers={"Authorization": f"Bearer {served.token}"})
    )
    read, write, _ = await stack.enter_async_context(
        streamable_http_client(served.url, http_client=client)
    )
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    return session


def _raw_initialize(served: Served) -> httpx.Response:
    """An ``initialize`` POST that opens a session and never ends it."""
    headers = {"Authorization": f"Bearer {served.token}", "Accept": _ACCEPT}
    return httpx.post(served.url, json=_INITIALIZE, headers=headers, timeout=30)


def test_one_session_past_the_cap_is_refused_and_room_comes_back_when_one_ends(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.txt").write_text("alpha\n")
    with serve(tmp_path, "--no-checkpoints", "--max-sessions", "2") as served:

        async def main() -> tuple[httpx.Response, list[str], httpx.Response]:
            with anyio.fail_after(120):
                return await sessions()

        async def sessions() -> tuple[httpx.Response, list[str], httpx.Response]:
            async with AsyncExitStack() as first:
                one = await _open(first, served)
                async with AsyncExitStack() as second:
                    two = await _open(second, served)
                    refused = await anyio.to_thread.run_sync(_raw_initialize, served)
                    # The open sessions are unaffected.
                    texts = []
                    for session in (one, two):
                        answer = await session.call_tool("read_file", {"path": "a.txt"})
                        texts.append(answer.content[0].text)  # type: ignore[union-attr]
                # The second session ended (DELETE): there is room for one more.
                admitted = await anyio.to_thread.run_sync(_raw_initialize, served)
            return refused, texts, admitted

        refused, texts, admitted = anyio.run(main)
    assert refused.status_code == 503, refused.text
    assert refused.json() == {
        "jsonrpc": "2.0",
        "id": "server-error",
        "error": {
            "code": -32603,
            "message": session_cap_message(2, DEFAULT_SESSION_IDLE_TIMEOUT),
        },
    }
    assert texts == ["     1\talpha", "     1\talpha"]
    assert admitted.status_code == 200, admitted.text
    assert admitted.headers.get("mcp-session-id")


def test_an_idle_session_expires_and_makes_room(tmp_path: Path) -> None:
    flags = ("--no-checkpoints", "--max-sessions", "1", "--session-idle-timeout", "1")
    with serve(tmp_path, *flags) as served:
        first = _raw_initialize(served)  # opened, never ended
        assert first.status_code == 200, first.text
        refused = _raw_initialize(served)
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["message"] == session_cap_message(1, 1.0)
        # A second later the first session is closed for idleness: the next one opens.
        deadline = time.monotonic() + 60
        seen: list[int] = []
        while time.monotonic() < deadline:
            again = _raw_initialize(served)
            seen.append(again.status_code)
            if again.status_code == 200:
                break
            time.sleep(0.2)
        assert seen[-1] == 200, seen
        # The expired session's id is unknown now.
        headers = {
            "Authorization": f"Bearer {served.token}",
            "Accept": _ACCEPT,
            "Mcp-Session-Id": first.headers["mcp-session-id"],
        }
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        assert httpx.post(served.url, json=ping, headers=headers, timeout=30).status_code == 404


def test_the_message_names_the_limit_and_the_ways_out() -> None:
    assert session_cap_message(32, 1800.0) == (
        "Too many open sessions: this server keeps at most 32 MCP sessions open and all are "
        "in use (workspace-tools serve --max-sessions); end a session you no longer use (an "
        "HTTP DELETE with its Mcp-Session-Id) or wait: a session without a request for 1800 "
        "seconds is closed, then initialize again"
    )


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], (None, None)),
        (["--max-sessions", "5", "--session-idle-timeout", "2.5"], (5, 2.5)),
    ],
)
def test_the_serve_flags(flags: list[str], expected: tuple[Any, Any]) -> None:
    args = build_parser().parse_args(["serve", *flags])
    assert (args.max_sessions, args.session_idle_timeout) == expected
    assert (DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_IDLE_TIMEOUT) == (32, 1800.0)


@pytest.mark.parametrize(
    "flags", [["--max-sessions", "0"], ["--max-sessions", "x"], ["--session-idle-timeout", "0"]]
)
def test_a_bad_limit_is_a_usage_error(flags: list[str], capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["serve", *flags])
    assert exited.value.code == 2
    assert f"argument {flags[0]}: {flags[1]}: give" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "told"),
    [
        (["--session-idle-timeout", "inf"], "give a finite number of seconds above 0"),
        (["--session-idle-timeout", "nan"], "give a finite number of seconds above 0"),
        (["--max-sessions", "\u00b2"], "give a whole number, 1 or more"),
        (["--max-sessions", "1.5"], "give a whole number, 1 or more"),
    ],
)
def test_a_bad_limit_says_what_to_give(
    flags: list[str], told: str, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["serve", *flags])
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.endswith(f"error: argument {flags[0]}: {flags[1]}: {told}\n"), err


def test_a_remote_workspace_past_the_cap_reads_the_server_s_reason(tmp_path: Path) -> None:
    """`RemoteWorkspace` refused a session says why, as the server said it (an agent or
    harness with more clients than sessions learns what to do), not only the status."""
    (tmp_path / "a.txt").write_text("alpha\n")
    with serve(tmp_path, "--no-checkpoints", "--max-sessions", "1") as served:
        first = _raw_initialize(served)  # opened, never ended
        assert first.status_code == 200, first.text
        with RemoteWorkspace(served.url, served.token) as remote:
            read = next(t for t in remote.tools if t.name == "read_file")
            result = invoke_tool_sync(read, {"path": "a.txt"})
    assert result.error_code is ErrorCode.WORKSPACE_UNAVAILABLE, result.error
    reason = session_cap_message(1, DEFAULT_SESSION_IDLE_TIMEOUT)
    assert result.error == (
        f"The workspace server at {served.url} is unavailable (tried 3 times): HTTP 503: "
        f"{reason}; the call did not run"
    )
