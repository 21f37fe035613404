"""`workspace-tools serve` over streamable HTTP, driven by the official MCP client, and
`RemoteWorkspace` against it: a real server process on 127.0.0.1."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from pydantic_core import to_jsonable_python

from tests._waiting import wait_until
from tests.remote._calls import CODES, PNG, TOOLS, comparable, named, populate, run_all
from tests.remote._served import Served, processes_with_argument, serve, wait_gone
from workspace_tools import (
    ErrorCode,
    ToolContent,
    ToolResult,
    ToolSession,
    invoke_tool,
    invoke_tool_sync,
    workspace_tools,
)
from workspace_tools._output import ImagePart
from workspace_tools.adapters import remote as remote_module
from workspace_tools.adapters.mcp import META_PREFIX
from workspace_tools.adapters.mcp_http import REQUEST_HEAD_SECONDS, parse_address
from workspace_tools.adapters.openai import openai_responses_output, openai_responses_tool
from workspace_tools.adapters.remote import RemoteWorkspace
from workspace_tools.cli._main import build_parser


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("served")
    (root / "a.txt").write_bytes(b"alpha\nbeta\n")
    # Without checkpoints a served write's details are exactly the local tool's; with them
    # (the default) they also list the changed files: see the test of that below.
    with serve(root, "--no-checkpoints") as server:
        yield server


def test_a_served_write_lists_the_files_it_changed_by_default(tmp_path: Path) -> None:
    local_root = tmp_path / "local"
    served_root = tmp_path / "served"
    local_root.mkdir()
    served_root.mkdir()
    arguments = {"path": "notes.txt", "content": "one\n"}
    local = invoke_tool_sync(named(workspace_tools(local_root), "write_file"), arguments)
    with serve(served_root) as server:
        remote = RemoteWorkspace(server.url, server.token)
        written = invoke_tool_sync(named(remote.tools, "write_file"), arguments)
    assert written.error is None, written.error
    assert written.details == {
        **to_jsonable_python(local.details),
        "changed_files": [
            {"path": "notes.txt", "change": "created", "type": "file", "restorable": True}
        ],
    }


def test_remote_workspace_gives_the_local_results(served: Served, tmp_path: Path) -> None:
    local_root = tmp_path / "local"
    local_root.mkdir()
    populate(local_root)
    populate(served.root)
    try:
        remote = RemoteWorkspace(served.url, served.token)
        assert [t.name for t in remote.tools] == TOOLS
        local_tools = workspace_tools(local_root)
        for mine, theirs in zip(remote.tools, local_tools, strict=True):
            assert mine.parameters is theirs.parameters
            assert (mine.description, mine.read_only) == (theirs.description, theirs.read_only)
        got = run_all(remote.tools, served.root)
        want = run_all(local_tools, local_root)
        for remote_result, local_result in zip(got, want, strict=True):
            assert comparable(remote_result) == comparable(local_result)
        codes = [r.error_code for r in got]
        assert codes == CODES, codes
        assert isinstance(got[5].content, ToolContent)
        images = [p for p in got[5].content.parts if isinstance(p, ImagePart)]
        assert [p.to_bytes() for p in images] == [PNG]
        long_listing = got[12]
        assert len(long_listing.content) > long_listing.max_result_length, len(long_listing.content)
        assert got[16].content == {
            "exit_code": 3,
            "stdout": "one\r\ntwo\r\nthree\r\n",
            "stderr": "err\n",
        }
        assert (served.root / "eq/new/hello.py").read_bytes() == b"print('patched')\n"
    finally:
        shutil.rmtree(served.root / "eq")


def test_the_official_client_calls_with_the_token(served: Served) -> None:
    async def main() -> tuple[list[str], Any]:
        headers = {"Authorization": f"Bearer {served.token}"}
        async with (
            httpx.AsyncClient(headers=headers) as client,
            streamable_http_client(served.url, http_client=client) as (read, write, _),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            listed = await session.list_tools()
            answer = await session.call_tool("read_file", {"path": "a.txt"})
            return [t.name for t in listed.tools], answer

    names, answer = anyio.run(main)
    assert names == TOOLS
    assert [block.text for block in answer.content] == ["     1\talpha\n     2\tbeta"]
    assert answer.meta[META_PREFIX + "details"]["total_lines"] == 2
    assert answer.meta[META_PREFIX + "presentation"] == {
        "label": "Read file",
        "icon": "file-text",
        "detail": "a.txt",
    }


def test_requests_without_the_token_get_401(served: Served) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": served.token}):
        answer = httpx.post(served.url, json=body, headers=headers, timeout=30)
        assert (answer.status_code, answer.json()) == (
            401,
            {"error": "invalid_token", "error_description": "Authentication required"},
        ), headers
        assert answer.headers["www-authenticate"].startswith('Bearer error="invalid_token"')
    refused = invoke_tool_sync(RemoteWorkspace(served.url, "wrong").tools[0], {"path": "a.txt"})
    assert (refused.error_code, refused.error) == (
        ErrorCode.PERMISSION_DENIED,
        "The workspace server refused the token (HTTP 401); check the token it printed at "
        "start or its WORKSPACE_TOOLS_TOKEN",
    )


def test_health_needs_no_token(served: Served) -> None:
    answer = httpx.get(served.base + "/health", timeout=30)
    assert (answer.status_code, answer.json()) == (
        200,
        {"status": "ok", "server": "workspace-tools", "version": "0.1.0"},
    )
    assert RemoteWorkspace(served.url, served.token).health()["status"] == "ok"


def test_a_connection_without_a_whole_request_head_is_closed(served: Served) -> None:
    # Connections that send a head a byte now and then, or nothing, held the server's
    # descriptors for ever (uvicorn waits for a head without end): past its limit of open
    # files, the token holder's requests and /health went unanswered.
    host, port = served.base.removeprefix("http://").split(":")
    margin = 30.0
    with (
        socket.create_connection((host, int(port)), timeout=REQUEST_HEAD_SECONDS + margin) as a,
        socket.create_connection((host, int(port)), timeout=REQUEST_HEAD_SECONDS + margin) as b,
    ):
        a.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1")  # and no more
        # Meanwhile a whole request is answered, and its connection is kept for the next.
        b.sendall(f"GET /health HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        answer = _response(b)
        assert answer.startswith(b"HTTP/1.1 200 OK"), answer
        assert a.recv(1) == b""  # closed by the server, within the margin
        assert b.recv(1) == b""  # idle after its response: closed as well


def test_a_request_answered_before_its_body_is_read_ends_its_connection(
    served: Served,
) -> None:
    # Without the token the answer is 401 before the body is read; the rest of a body
    # sent a byte now and then kept the connection open for ever.
    host, port = served.base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as connection:
        connection.sendall(
            f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            "Content-Length: 100000000\r\n\r\n{".encode()
        )
        answer = _response(connection)
        assert answer.startswith(b"HTTP/1.1 401 "), answer
        # Keep sending the body, a byte a second (each byte put off uvicorn's keep-alive
        # timeout), until the server closes the connection, for 20 s at most.
        connection.settimeout(1.0)
        closed, sent = False, 0
        while not closed and sent < 20:
            try:
                connection.sendall(b" ")
                sent += 1
                closed = connection.recv(1) == b""
            except TimeoutError:
                continue
            except OSError:  # reset: closed too
                closed = True
        assert closed, f"still open after {sent} bytes of body, a second apart"


def _response(connection: socket.socket) -> bytes:
    """One whole response read from ``connection``: its head and ``Content-Length`` bytes."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += connection.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += connection.recv(65536)
    return head + b"\r\n\r\n" + body


def test_progress_reaches_the_remote_caller(served: Served) -> None:
    run_command = named(RemoteWorkspace(served.url, served.token).tools)
    updates = []
    command = "for i in 1 2 3; do echo line$i; sleep 0.2; done"
    result = invoke_tool_sync(run_command, {"command": command}, on_update=updates.append)
    assert result.content["stdout"] == "line1\nline2\nline3\n"
    assert "".join(u.content for u in updates) == "line1\nline2\nline3\n", updates
    assert updates[-1].details["stdout_bytes"] == 18
    assert {u.name for u in updates} == {"run_command"}


def test_concurrent_clients_each_get_their_answer(served: Served) -> None:
    remote = RemoteWorkspace(served.url, served.token)
    run_command = named(remote.tools)
    results: dict[int, ToolResult] = {}

    async def one(i: int) -> None:
        results[i] = await invoke_tool(run_command, {"command": f"sleep 0.3; echo {i}"})

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for i in range(6):
                tg.start_soon(one, i)

    anyio.run(main)
    assert {i: r.content["stdout"] for i, r in results.items()} == {i: f"{i}\n" for i in range(6)}


def test_session_and_adapters_work_unchanged(served: Served) -> None:
    remote = RemoteWorkspace(served.url, served.token)
    session = ToolSession(remote.tools)
    first = session.call_sync("read_file", {"path": "a.txt"})
    assert first.model_text() == "     1\talpha\n     2\tbeta"
    assert session.record().steps[0].tool == "read_file"
    definitions = [openai_responses_tool(t) for t in workspace_tools(served.root)]
    assert [openai_responses_tool(t) for t in remote.tools] == definitions
    found = session.call_sync("grep", '{"pattern": "beta"}', call_id="fc_1")
    assert openai_responses_output(found) == {
        "type": "function_call_output",
        "call_id": "fc_1",
        "output": "a.txt:2:beta",
    }


def test_a_cancelled_call_stops_its_command_on_the_server(served: Served) -> None:
    marker = f"{30 + uuid.uuid4().int % 1000 / 1000:.3f}"  # sleep's argument marks it
    run_command = named(RemoteWorkspace(served.url, served.token).tools)
    result = invoke_tool_sync(run_command, {"command": f"sleep {marker}"}, timeout=2.0)
    assert result.error_code is ErrorCode.TOOL_TIMEOUT
    wait_gone(marker)


def test_a_client_killed_mid_call_leaves_no_process(served: Served) -> None:
    marker = f"{30 + uuid.uuid4().int % 1000 / 1000:.3f}"
    script = (
        "import sys; from workspace_tools import invoke_tool_sync; "
        "from workspace_tools.adapters.remote import RemoteWorkspace; "
        "tools = RemoteWorkspace(sys.argv[1], sys.argv[2]).tools; "
        "tool = next(t for t in tools if t.name == 'run_command'); "
        f"invoke_tool_sync(tool, {{'command': 'sleep {marker}'}})"
    )
    client = subprocess.Popen([sys.executable, "-c", script, served.url, served.token])
    try:
        wait_until(lambda: processes_with_argument(marker), bool, "the command to start")
    finally:
        client.kill()
        client.wait()
    wait_gone(marker)


def test_a_server_gone_mid_call_is_an_error_result_not_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing is on its way once the connection is gone: the call ends without waiting
    # out the grace a reply the SDK could not read is given (an hour here).
    monkeypatch.setattr(remote_module, "ANSWER_GRACE", 3600.0)
    marker = f"{30 + uuid.uuid4().int % 1000 / 1000:.3f}"
    with serve(tmp_path) as server:
        remote = RemoteWorkspace(server.url, server.token)
        outcome: list[ToolResult] = []
        caller = threading.Thread(
            target=lambda: outcome.append(
                invoke_tool_sync(named(remote.tools), {"command": f"sleep {marker}"})
            )
        )
        caller.start()
        wait_until(lambda: processes_with_argument(marker), bool, "the command to start")
        server.process.kill()
        caller.join(timeout=60)
        assert not caller.is_alive(), "the call hung after the server died"
        assert outcome[0].error_code is ErrorCode.WORKSPACE_UNAVAILABLE
        assert outcome[0].error == (
            f"The workspace server at {server.url} is unavailable: the connection closed "
            "before the answer came; the call may or may not have run: check first"
        )
        # Reads are retried, then reported; a write that could not connect did not run.
        read = invoke_tool_sync(remote.tools[0], {"path": "a.txt"})
        assert read.error_code is ErrorCode.WORKSPACE_UNAVAILABLE
        assert read.error == (
            f"The workspace server at {server.url} is unavailable (tried 3 times): "
            "ConnectError: All connection attempts failed; the call did not run"
        )
        write = invoke_tool_sync(remote.tools[1], {"path": "b.txt", "content": "x"})
        assert write.error == (
            f"The workspace server at {server.url} is unavailable: "
            "ConnectError: All connection attempts failed; the call did not run"
        )
    for pid in processes_with_argument(marker):  # the killed server's orphan, if any
        os.kill(pid, 9)


def test_token_from_the_environment_and_flags_as_over_stdio(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"x\n")
    env = {"WORKSPACE_TOOLS_TOKEN": "s3cret-token"}
    flags = ("--read-only", "--deny", "grep", "--ask", "glob")
    with serve(tmp_path, *flags, env=env, token_line=False) as server:
        remote = RemoteWorkspace(server.url, "s3cret-token")
        by_name = {t.name: t for t in remote.tools}
        assert invoke_tool_sync(by_name["read_file"], {"path": "a.txt"}).content == "     1\tx"
        denied = invoke_tool_sync(by_name["grep"], {"pattern": "x"})
        assert denied.error_code is ErrorCode.PERMISSION_DENIED, denied
        # An ask goes to the client by elicitation; this client cannot ask anyone.
        asked = invoke_tool_sync(by_name["glob"], {"pattern": "*"})
        assert (asked.error_code, asked.error) == (
            ErrorCode.PERMISSION_DENIED,
            "Not run: the user declined this glob call: the MCP client cannot ask the user "
            "(no elicitation)",
        )
        unserved = invoke_tool_sync(by_name["write_file"], {"path": "b.txt", "content": "y"})
        assert unserved.error_code is ErrorCode.INVALID_ARGUMENTS
        assert unserved.error.startswith("Unknown tool 'write_file'; available: read_file, ")
        assert not (tmp_path / "b.txt").exists()


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("8765", "--http 8765: give HOST:PORT, e.g. 127.0.0.1:8765"),
        ("127.0.0.1:99999", "--http 127.0.0.1:99999: the port must be a number from 0 to 65535"),
    ],
)
def test_a_bad_address_is_a_usage_error(tmp_path: Path, address: str, message: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "workspace_tools",
            "serve",
            "--root",
            str(tmp_path),
            "--http",
            address,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        f"workspace-tools: error: {message}\n",
    )


def test_the_result_meta_is_json(served: Served) -> None:
    # Everything _meta carries went through JSON: what a non-Python client reads.
    result = invoke_tool_sync(RemoteWorkspace(served.url, served.token).tools[0], {"path": "a.txt"})
    assert json.loads(json.dumps(result.details)) == result.details


@pytest.mark.anyio
async def test_remote_calls_run_on_either_event_loop(served: Served) -> None:
    remote = RemoteWorkspace(served.url, served.token)
    read = await invoke_tool(remote.tools[0], {"path": "a.txt"})
    assert read.content == "     1\talpha\n     2\tbeta"
    stopped = await invoke_tool(named(remote.tools), {"command": "sleep 30"}, timeout=1.0)
    assert (stopped.error_code, stopped.error) == (
        ErrorCode.TOOL_TIMEOUT,
        "run_command timed out after 1 s",
    )


def test_serve_listens_on_this_machine_only_unless_told() -> None:
    assert build_parser().parse_args(["serve"]).http == "127.0.0.1:8765"


@pytest.mark.parametrize(
    ("address", "parsed"),
    [
        ("127.0.0.1:8765", ("127.0.0.1", 8765)),
        ("0.0.0.0:0", ("0.0.0.0", 0)),
        ("[::1]:9000", ("::1", 9000)),
        ("localhost:65535", ("localhost", 65535)),
    ],
)
def test_http_addresses(address: str, parsed: tuple[str, int]) -> None:
    assert parse_address(address) == parsed
