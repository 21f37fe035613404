"""MCP transports against hostile sizes: an unbounded line over stdio, a 100 KB tool name or
method echoed into answers and logs, an HTTP body over the cap. The stdio cases run the real
``workspace-tools mcp`` process with raw bytes on its stdin."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")
from starlette.testclient import TestClient

from workspace_tools import workspace_tools
from workspace_tools.adapters._jsonrpc import (
    MAX_MESSAGE_BYTES,
    Oversized,
    bounded_lines,
)
from workspace_tools.adapters.mcp import create_server
from workspace_tools.adapters.mcp_http import allowed_hosts, create_http_app
from workspace_tools.tools import TOOL_NAMES

REPO = Path(__file__).resolve().parents[2]
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "probe3", "version": "1"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def line(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


def ping(request_id: int, pad: int = 0) -> bytes:
    """A ping request whose line is exactly ``pad`` bytes long when ``pad`` is given."""
    base = {"jsonrpc": "2.0", "id": request_id, "method": "ping"}
    if not pad:
        return line(base)
    empty = line({**base, "params": {"_meta": {"pad": ""}}})
    return line({**base, "params": {"_meta": {"pad": "a" * (pad - len(empty))}}})


def oversized(size: int) -> dict[str, Any]:
    text = (
        f"Invalid Request: the message is {size:,} bytes long, over the limit of "
        f"{MAX_MESSAGE_BYTES:,} bytes (4 MiB); send a smaller one"
    )
    return {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": text}}


def serve(root: Path, lines: list[bytes], *, end: bytes = b"\n") -> tuple[list[Any], bytes]:
    """Run ``workspace-tools mcp`` on ``lines`` (then EOF); its answers and its stderr. The
    last request is a ``tools/list`` whose answer the caller waits for: closing stdin
    cancels calls in flight, so stdin stays open until that answer came."""
    process = subprocess.Popen(
        [sys.executable, "-m", "workspace_tools", "mcp", "--root", str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
    )
    assert process.stdin is not None and process.stdout is not None
    final = line({"jsonrpc": "2.0", "id": "last", "method": "tools/list"})
    process.stdin.write(b"\n".join([line(INIT), line(INITIALIZED), *lines]) + end)
    process.stdin.write(final + b"\n")
    process.stdin.flush()
    answers = []
    for raw in process.stdout:
        answers.append(json.loads(raw))
        if answers[-1].get("id") == "last":
            break
    process.stdin.close()
    stderr = process.stderr.read() if process.stderr is not None else b""
    assert process.wait(timeout=60) == 0, stderr[-2000:]
    return answers[1:], stderr


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("probe3-mcp")


def test_a_line_over_the_cap_is_refused_and_the_server_keeps_serving(root: Path) -> None:
    at_cap = ping(3, pad=MAX_MESSAGE_BYTES)
    over = ping(4, pad=MAX_MESSAGE_BYTES + 1)
    answers, stderr = serve(root, [ping(2), at_cap, over, ping(5)])
    ids = [a.get("id") for a in answers]
    assert ids == [2, 3, None, 5, "last"], [str(a)[:200] for a in answers]
    assert answers[1] == {"jsonrpc": "2.0", "id": 3, "result": {}}
    assert answers[2] == oversized(MAX_MESSAGE_BYTES + 1)
    assert [t["name"] for t in answers[4]["result"]["tools"]] == list(TOOL_NAMES)
    assert b"Traceback" not in stderr


def test_a_50_mib_line_without_json_is_one_error(root: Path) -> None:
    answers, _ = serve(root, [b"{" + b"x" * (50 << 20), ping(2)])
    assert [a.get("id") for a in answers] == [None, 2, "last"]
    assert answers[0] == oversized((50 << 20) + 1)


def test_a_200_mib_line_is_counted_not_held() -> None:
    class Chunks(io.RawIOBase):
        """A stream of ``total`` bytes without a newline, then ``b"\\nrest"``."""

        def __init__(self, total: int) -> None:
            self.left = total
            self.most = 0

        def readable(self) -> bool:
            return True

        def readinto(self, buffer: Any) -> int:
            if self.left == 0:
                tail = b"\nrest"
                buffer[: len(tail)] = tail
                self.left = -1
                return len(tail)
            if self.left < 0:
                return 0
            n = min(len(buffer), self.left)
            buffer[:n] = b"y" * n
            self.left -= n
            return n

    async def collect() -> list[bytes | int]:
        source = anyio.wrap_file(io.BufferedReader(Chunks(200 << 20)))
        return [x async for x in bounded_lines(source, limit=1000)]

    tracemalloc.start()
    try:
        seen = anyio.run(collect)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert seen == [200 << 20, b"rest"]
    assert peak < 8 << 20, f"peak {peak:,} bytes"
    assert isinstance(seen[0], Oversized)


@pytest.mark.parametrize("end", [b"", b"\r\n"])
def test_line_endings_and_a_last_line_without_newline(end: bytes) -> None:
    async def collect() -> list[bytes | int]:
        source = anyio.wrap_file(io.BytesIO(b"a\r\n\nbb" + end))
        return [x async for x in bounded_lines(source, limit=3)]

    assert anyio.run(collect) == [b"a\r", b"", b"bb\r" if end else b"bb"]


def test_a_100kb_tool_name_is_clipped_in_the_answer_and_the_logs(root: Path) -> None:
    name = "x" * 100_000
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": name, "arguments": {}},
    }
    method = {"jsonrpc": "2.0", "id": 3, "method": "m" * 100_000}
    answers, stderr = serve(root, [line(call), line(method)])
    by_id = {a.get("id"): a for a in answers}
    known = ", ".join(TOOL_NAMES)
    text = f"Unknown tool '{'x' * 200}…' (100,000 characters); available: {known}"
    assert by_id[2]["result"]["content"] == [{"type": "text", "text": text}]
    assert by_id[2]["result"]["isError"] is True
    assert by_id[3]["error"] == {
        "code": -32601,
        "message": f"Method not found: '{'m' * 200}…' (100,000 characters)",
    }
    # The SDK logs the name it did not find; the line is cut and says how long it was.
    assert len(stderr) < 3000, stderr[:300]
    assert b"xxxxx" in stderr and b"characters)" in stderr


def _http_client(tmp_path: Path) -> TestClient:
    app = create_http_app(
        create_server(workspace_tools(tmp_path)), "t0ken", hosts=allowed_hosts("127.0.0.1", 8765)
    )
    return TestClient(app, base_url="http://127.0.0.1:8765")


HEADERS = {
    "authorization": "Bearer t0ken",
    "content-type": "application/json",
    "accept": "application/json, text/event-stream",
}


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_an_http_body_over_the_cap_is_413_and_the_server_keeps_serving(
    tmp_path: Path, chunked: bool
) -> None:
    body = ping(9, pad=MAX_MESSAGE_BYTES + 1)
    with _http_client(tmp_path) as client:
        content: Any = iter([body[: 1 << 20]] * 5) if chunked else body
        response = client.post("/mcp", content=content, headers=HEADERS)
        assert response.status_code == 413, response.text[:300]
        error = response.json()["error"]
        assert error["code"] == -32600
        assert error["message"].endswith(
            f"bytes long or more, over the limit of {MAX_MESSAGE_BYTES:,} bytes (4 MiB); "
            "send a smaller one"
        )
        answer = client.post("/mcp", content=line(INIT), headers=HEADERS)
        assert answer.status_code == 200, answer.text[:300]
        assert "protocolVersion" in answer.text


def test_an_http_body_at_the_cap_reaches_the_server(tmp_path: Path) -> None:
    body = json.loads(ping(1))
    padded = {**INIT, "params": {**INIT["params"], "_meta": {"pad": ""}}}
    size = len(line(padded))
    padded["params"]["_meta"]["pad"] = "a" * (MAX_MESSAGE_BYTES - size)
    assert len(line(padded)) == MAX_MESSAGE_BYTES and body["id"] == 1
    with _http_client(tmp_path) as client:
        answer = client.post("/mcp", content=line(padded), headers=HEADERS)
        assert answer.status_code == 200, answer.text[:300]
        assert "protocolVersion" in answer.text


@pytest.mark.parametrize(
    "body, message",
    [
        (b"[" * 100_000 + b"]" * 100_000, "Parse error: arrays or objects nested too deeply"),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":'
            + b'{"a":' * 50_000
            + b"1"
            + b"}" * 50_002,
            "Parse error: arrays or objects nested too deeply",
        ),
        (b'{"jsonrpc":"2.0","id":NaN,"method":"ping"}', "Parse error: NaN is not JSON"),
    ],
    ids=["arrays", "objects", "nan"],
)
def test_an_http_body_that_is_not_json_is_a_parse_error_not_a_500(
    tmp_path: Path, body: bytes, message: str
) -> None:
    with _http_client(tmp_path) as client:
        response = client.post("/mcp", content=body, headers=HEADERS)
        assert (response.status_code, response.json()) == (
            400,
            {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": message}},
        )
        answer = client.post("/mcp", content=line(INIT), headers=HEADERS)
        assert answer.status_code == 200, answer.text[:300]


def test_a_strangers_body_is_never_read(tmp_path: Path) -> None:
    body = ping(9, pad=MAX_MESSAGE_BYTES + 1)
    headers = {**HEADERS, "authorization": "Bearer wrong"}
    with _http_client(tmp_path) as client:
        for content in (body, b"[" * 100_000):
            response = client.post("/mcp", content=content, headers=headers)
            assert response.status_code == 401, response.text[:300]
