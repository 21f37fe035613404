"""`workspace-tools mcp` answers every request with the JSON-RPC error its spec names.

Raw bytes go to the real server's stdin; JSON lines are read from its stdout by a thread, with
a deadline on every wait. After each bad input a ``tools/list`` must still be answered.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import types

from workspace_tools.adapters._jsonrpc import JsonRpcGate
from workspace_tools.tools import TOOL_NAMES

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 30.0  # seconds; only a broken server takes this long
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": "init",
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw-test", "version": "1"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


class RawServer:
    """`python -m workspace_tools mcp --root ROOT` with byte-level access to its stdio."""

    def __init__(self, root: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "workspace_tools", "mcp", "--root", str(root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.seen: list[Any] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._next_id = 0

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(b"")  # end of file

    def send(self, data: bytes | dict[str, Any]) -> None:
        line = data if isinstance(data, bytes) else json.dumps(data).encode()
        assert self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def receive(self) -> Any:
        """The next JSON message from stdout (fails after :data:`DEADLINE` or at EOF)."""
        try:
            line = self.lines.get(timeout=DEADLINE)
        except queue.Empty:
            pytest.fail(f"no message within {DEADLINE}s; seen so far: {self.seen}")
        assert line, f"the server closed stdout; seen so far: {self.seen}"
        message = json.loads(line)
        self.seen.append(message)
        return message

    def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Send a well-formed request with a fresh id; its response (nothing else came first)."""
        self._next_id += 1
        request_id = f"ok-{self._next_id}"
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        response = self.receive()
        assert response.get("id") == request_id, f"expected the answer to {request_id}: {response}"
        return response

    def initialize(self) -> None:
        self.send(INITIALIZE)
        response = self.receive()
        assert response["id"] == "init" and "result" in response, response
        self.send(INITIALIZED)

    def assert_lists_tools(self) -> None:
        """The server is up: ``tools/list`` is the next answer and lists the seven tools."""
        response = self.request("tools/list")
        assert [t["name"] for t in response["result"]["tools"]] == list(TOOL_NAMES), response

    def close(self) -> int:
        """Close stdin; the exit code (fails when the process outlives :data:`DEADLINE`)."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            return self.process.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"the server did not exit within {DEADLINE}s of stdin closing")


def running_server(root: Path) -> Iterator[RawServer]:
    server = RawServer(root)
    try:
        server.initialize()
        yield server
        assert server.close() == 0
    finally:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait()


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawServer]:
    """One initialized server for the table: each case must leave it answering."""
    yield from running_server(tmp_path_factory.mktemp("root"))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RawServer]:
    yield from running_server(tmp_path)


def error(request_id: str | int | None, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def call(request_id: Any, method: Any, params: Any = None, **extra: Any) -> bytes:
    message = {"jsonrpc": "2.0", "id": request_id, "method": method, **extra}
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode()


PARSE_ERRORS = [
    pytest.param(b"{bad", id="not-json"),
    pytest.param(b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"', id="truncated"),
    pytest.param(b'\xff\xfe{"jsonrpc": "2.0"}', id="not-utf8"),
    pytest.param(call(1, "tools/list").replace(b'"2.0"', b"NaN"), id="nan"),
    pytest.param(b'{"jsonrpc": "2.0", "id": 1, "method": "ping"} trailing', id="extra-data"),
]


@pytest.mark.parametrize("line", PARSE_ERRORS)
def test_malformed_json_gets_parse_error_with_null_id(shared: RawServer, line: bytes) -> None:
    shared.send(line)
    response = shared.receive()
    assert response["id"] is None and response["error"]["code"] == -32700, response
    assert response["error"]["message"].startswith("Parse error: "), response
    shared.assert_lists_tools()


NOT_AN_OBJECT = "Invalid Request: expected a JSON object, got "
BAD_ID = "Invalid Request: id must be a string or an integer"
BAD_VERSION = 'Invalid Request: jsonrpc must be "2.0"'
NOT_ARRAY = "Invalid params: params must be an object, got "

ANSWERS = [
    # Not a request object: -32600 (JSON-RPC 2.0 section 5.1), id null unless one was valid.
    (b"[]", error(None, -32600, "Invalid Request: an empty array")),
    (
        b"[" + call(1, "tools/list") + b"]",
        error(None, -32600, "Invalid Request: a batch (MCP 2025-06-18 has no batching)"),
    ),
    (
        b"[1, 2, 3]",
        error(None, -32600, "Invalid Request: a batch (MCP 2025-06-18 has no batching)"),
    ),
    (b"5", error(None, -32600, NOT_AN_OBJECT + "number")),
    (b'"tools/list"', error(None, -32600, NOT_AN_OBJECT + "string")),
    (b"null", error(None, -32600, NOT_AN_OBJECT + "null")),
    (b"true", error(None, -32600, NOT_AN_OBJECT + "boolean")),
    (b'{"foo": "boo"}', error(None, -32600, BAD_VERSION)),
    (
        b'{"jsonrpc": "2.0", "method": 1, "params": "bar"}',
        error(None, -32600, "Invalid Request: method must be a string"),
    ),
    (b'{"id": 6, "method": "tools/list"}', error(6, -32600, BAD_VERSION)),
    (b'{"jsonrpc": "1.0", "id": 6, "method": "tools/list"}', error(6, -32600, BAD_VERSION)),
    (b'{"jsonrpc": 2.0, "id": "six", "method": "tools/list"}', error("six", -32600, BAD_VERSION)),
    (call(7, 5), error(7, -32600, "Invalid Request: method must be a string")),
    (call(7, None), error(7, -32600, "Invalid Request: method must be a string")),
    (b'{"jsonrpc": "2.0", "id": 8}', error(8, -32600, "Invalid Request: no method")),
    (b'{"jsonrpc": "2.0"}', error(None, -32600, "Invalid Request: no method")),
    (call({}, "tools/list"), error(None, -32600, BAD_ID)),
    (call([1], "tools/list"), error(None, -32600, BAD_ID)),
    (call(True, "tools/list"), error(None, -32600, BAD_ID)),
    (call(1.5, "tools/list"), error(None, -32600, BAD_ID)),
    (call(None, "tools/list"), error(None, -32600, BAD_ID)),
    # params must be an object for every MCP method: -32602 with the request's id.
    (call(10, "tools/list", [1]), error(10, -32602, NOT_ARRAY + "array")),
    (call(11, "tools/list", "x"), error(11, -32602, NOT_ARRAY + "string")),
    (call(12, "tools/call", ["read_file", {}]), error(12, -32602, NOT_ARRAY + "array")),
    (call(13, "ping", 3), error(13, -32602, NOT_ARRAY + "number")),
    (
        b'{"jsonrpc": "2.0", "id": 14, "method": "tools/list", "params": null}',
        error(14, -32602, NOT_ARRAY + "null"),
    ),
    (call("s", "nope", [1]), error("s", -32602, NOT_ARRAY + "array")),
    # params the method's schema rejects
    (
        call(15, "tools/call", {}),
        error(15, -32602, "Invalid params for tools/call: name: Field required"),
    ),
    (
        call(16, "tools/call", {"name": "read_file", "arguments": [1]}),
        error(
            16,
            -32602,
            "Invalid params for tools/call: arguments: Input should be an object, not an array",
        ),
    ),
    (
        call(17, "initialize", {}),
        error(
            17,
            -32602,
            "Invalid params for initialize: protocolVersion: Field required;"
            " capabilities: Field required; clientInfo: Field required",
        ),
    ),
    (
        call(18, "tools/call"),
        error(18, -32602, "Invalid params for tools/call: params: Field required"),
    ),
    # unknown methods: -32601
    (call(20, "nope", {}), error(20, -32601, "Method not found: 'nope'")),
    (call("x", "tools/List"), error("x", -32601, "Method not found: 'tools/List'")),
    (call(21, "rpc.discover"), error(21, -32601, "Method not found: 'rpc.discover'")),
    (call(22, "prompts/list"), error(22, -32601, "Method not found")),  # MCP's, not served
]


@pytest.mark.parametrize(("line", "expected"), ANSWERS, ids=[a[0].decode()[:60] for a in ANSWERS])
def test_bad_request_gets_the_named_error(
    shared: RawServer, line: bytes, expected: dict[str, Any]
) -> None:
    shared.send(line)
    assert shared.receive() == expected
    shared.assert_lists_tools()


SILENT = [
    b"",
    b"   \t",
    b'{"jsonrpc": "2.0", "method": "notifications/unknown"}',
    b'{"jsonrpc": "2.0", "method": "nope", "params": [1]}',
    b'{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": [1]}',
    b'{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": "x"}',
    b'{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 999}}',
    b'{"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}',
    b'{"jsonrpc": "2.0", "method": "notifications/initialized", "params": 5}',
    # responses from the client are never answered, even to requests never sent
    b'{"jsonrpc": "2.0", "id": 99, "result": {}}',
    b'{"jsonrpc": "2.0", "id": 99, "error": {"code": -1, "message": "no"}}',
    b'{"jsonrpc": "2.0", "id": {}, "result": {}}',
    b'{"jsonrpc": "2.0", "id": 99, "error": "no"}',
]


@pytest.mark.parametrize("line", SILENT, ids=[s.decode()[:60] or "empty" for s in SILENT])
def test_notifications_and_responses_are_never_answered(shared: RawServer, line: bytes) -> None:
    shared.send(line)
    shared.assert_lists_tools()  # the next message is the answer to tools/list


def test_crlf_line_ending_is_accepted(shared: RawServer) -> None:
    shared.send(call("crlf", "ping") + b"\r")
    assert shared.receive() == {"jsonrpc": "2.0", "id": "crlf", "result": {}}


def test_unknown_tool_is_a_tool_error_result(shared: RawServer) -> None:
    response = shared.request("tools/call", {"name": "zz", "arguments": {}})
    known = ", ".join(TOOL_NAMES)
    assert response["result"] == {
        "_meta": {"dev.agent-workspace-tools/errorCode": "INVALID_ARGUMENTS"},
        "content": [{"type": "text", "text": f"Unknown tool 'zz'; available: {known}"}],
        "isError": True,
    }


def test_requests_before_initialize_get_server_not_initialized(tmp_path: Path) -> None:
    server = RawServer(tmp_path)
    try:
        server.send(call(1, "tools/list"))
        assert server.receive() == error(1, -32000, "Server not initialized: send initialize first")
        server.send(call(2, "tools/call", {"name": "read_file", "arguments": {"path": "x"}}))
        assert server.receive() == error(2, -32000, "Server not initialized: send initialize first")
        assert server.request("ping") == {"jsonrpc": "2.0", "id": "ok-1", "result": {}}
        server.send(call(3, "initialize", [1]))  # a failed initialize leaves the gate shut
        assert server.receive() == error(3, -32602, NOT_ARRAY + "array")
        server.send(call(4, "tools/list"))
        assert server.receive()["error"]["code"] == -32000
        server.initialize()
        server.assert_lists_tools()
        assert server.close() == 0
    finally:
        server.process.kill()
        server.process.wait()


def _start_sleeper(server: RawServer, request_id: int) -> int:
    """Start a call whose command prints its pid then sleeps; the pid, once it runs."""
    arguments = {"command": "echo $$; exec sleep 300"}
    params = {"name": "run_command", "arguments": arguments, "_meta": {"progressToken": "t"}}
    server.send(call(request_id, "tools/call", params))
    progress = server.receive()
    assert progress["method"] == "notifications/progress", progress
    return int(progress["params"]["message"].split()[0])


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + DEADLINE
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{pid}"), f"process {pid} outlived its call"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_cancelled_call_gets_no_response_and_its_process_ends(server: RawServer) -> None:
    pid = _start_sleeper(server, 30)
    server.send(
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 30}}
    )
    # Anything sent for request 30 (the SDK's code-0 error) would come before this answer.
    server.assert_lists_tools()
    _wait_gone(pid)
    assert all(m.get("id") != 30 for m in server.seen), server.seen
    # The id is free again: a new request with it is answered normally.
    server.send(call(30, "ping"))
    assert server.receive() == {"jsonrpc": "2.0", "id": 30, "result": {}}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_closing_stdin_ends_the_server_and_its_calls(tmp_path: Path) -> None:
    server = RawServer(tmp_path)
    try:
        server.initialize()
        pid = _start_sleeper(server, 40)
        assert server.close() == 0
        _wait_gone(pid)
    finally:
        server.process.kill()
        server.process.wait()


def test_no_response_carries_code_zero() -> None:
    """An SDK error with code 0 (a handler's exception) goes out as -32603 Internal error;
    one for a cancelled request is not sent at all."""
    gate = JsonRpcGate()
    gate.incoming(json.dumps(INITIALIZE).encode())
    for request_id in (1, 2):
        gate.incoming(call(request_id, "tools/call", {"name": "read_file"}))
    gate.incoming(
        b'{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}}'
    )

    def failed(request_id: int, text: str) -> types.JSONRPCMessage:
        data = types.ErrorData(code=0, message=text)
        return types.JSONRPCMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=data))

    line = gate.outgoing(failed(1, "boom"))
    assert line is not None and json.loads(line) == error(1, -32603, "boom")
    assert gate.outgoing(failed(2, "Request cancelled")) is None


def test_client_responses_reach_the_server_only_for_its_requests() -> None:
    """A response to the server's request is passed on once, its id echoed as a number or a
    string of digits (the SDK matches both); any other response is dropped."""
    gate = JsonRpcGate()
    for request_id in (0, 1):
        request = types.JSONRPCRequest(jsonrpc="2.0", id=request_id, method="elicitation/create")
        assert gate.outgoing(types.JSONRPCMessage(request)) is not None
    answered = b'{"jsonrpc": "2.0", "id": "0", "result": {"action": "decline"}}'
    forwarded = gate.incoming(answered)
    assert isinstance(forwarded, types.JSONRPCMessage), forwarded
    assert gate.incoming(answered) is None  # answered already
    failed = b'{"jsonrpc": "2.0", "id": 1, "error": {"code": -1, "message": "no"}}'
    assert isinstance(gate.incoming(failed), types.JSONRPCMessage)
    assert gate.incoming(b'{"jsonrpc": "2.0", "id": 2, "result": {}}') is None
