"""Hostile MCP peers: JSON nested past the parser's recursion, and web pages reaching the
HTTP server by DNS rebinding."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workspace_tools.adapters._jsonrpc import JsonRpcGate

NESTED = {
    "arrays": b"[" * 1_000_000 + b"]" * 1_000_000,
    "objects": b'{"jsonrpc":"2.0","id":3,"method":"ping","params":{"_meta":'
    + b'{"a":' * 100_000
    + b"1"
    + b"}" * 100_002,
}
TOO_DEEP = {
    "jsonrpc": "2.0",
    "id": None,
    "error": {"code": -32700, "message": "Parse error: arrays or objects nested too deeply"},
}


@pytest.mark.parametrize("line", list(NESTED.values()), ids=list(NESTED))
def test_deeply_nested_json_is_a_parse_error(line: bytes) -> None:
    assert JsonRpcGate().incoming(line) == TOO_DEEP


def test_the_stdio_server_answers_nested_json_and_keeps_serving(tmp_path: Path) -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    lines = [
        json.dumps(init).encode(),
        NESTED["arrays"],
        b'{"jsonrpc":"2.0","id":2,"method":"ping"}',
    ]
    done = subprocess.run(
        [sys.executable, "-m", "workspace_tools", "mcp", "--root", str(tmp_path)],
        input=b"\n".join(lines) + b"\n",
        capture_output=True,
        timeout=120,
        check=False,
    )
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert [a.get("id") for a in answers] == [1, None, 2], done.stderr[-2000:]
    assert answers[1] == TOO_DEEP
    assert answers[2] == {"jsonrpc": "2.0", "id": 2, "result": {}}
    assert done.returncode == 0
    assert b"Traceback" not in done.stderr


# --- HTTP: Host and Origin -------------------------------------------------------------

pytest.importorskip("mcp")
from starlette.testclient import TestClient  # noqa: E402

from workspace_tools.adapters.mcp import create_server  # noqa: E402
from workspace_tools.adapters.mcp_http import allowed_hosts, create_http_app  # noqa: E402


def test_allowed_hosts_of_a_loopback_bind_are_its_loopback_names() -> None:
    assert allowed_hosts("127.0.0.1", 8765) == {
        "127.0.0.1:8765",
        "localhost:8765",
        "[::1]:8765",
    }
    assert allowed_hosts("::1", 80) == {"[::1]:80", "localhost:80", "127.0.0.1:80"}
    assert allowed_hosts("10.0.0.5", 8765) == {"10.0.0.5:8765"}
    assert allowed_hosts("0.0.0.0", 8765) == frozenset()


@pytest.mark.parametrize(
    "headers, status, body",
    [
        ({"host": "evil.example:8765"}, 421, "Invalid Host header"),
        ({"host": "127.0.0.1:9999"}, 421, "Invalid Host header"),
        ({"host": "localhost:8765", "origin": "http://evil.example"}, 403, "Invalid Origin header"),
        ({"host": "localhost:8765", "origin": "null"}, 403, "Invalid Origin header"),
        # Past the check, the token decides.
        ({"host": "localhost:8765", "origin": "http://localhost:8765"}, 401, None),
        ({"host": "127.0.0.1:8765"}, 401, None),
    ],
)
def test_http_refuses_a_foreign_host_or_origin(
    tmp_path: Path, headers: dict[str, str], status: int, body: str | None
) -> None:
    from workspace_tools import workspace_tools

    app = create_http_app(
        create_server(workspace_tools(tmp_path)), "t0ken", hosts=allowed_hosts("127.0.0.1", 8765)
    )
    client = TestClient(app, base_url="http://127.0.0.1:8765")
    response = client.post(
        "/mcp", content=b"{}", headers={"content-type": "application/json", **headers}
    )
    assert response.status_code == status, response.text
    if body is not None:
        assert response.text == body
