"""RemoteWorkspace against a hostile or broken server: a reply over the cap ends the call
with WORKSPACE_UNAVAILABLE naming the size and the cap (the client never buffers more than
the cap), and a server that stalls mid-reply ends at the call's timeout."""

from __future__ import annotations

import contextlib
import json
import tracemalloc
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import httpx
import pytest

pytest.importorskip("mcp")

from tests.probe4._hostile_server import hostile
from tests.remote._served import serve
from workspace_tools import ErrorCode, invoke_tool
from workspace_tools.adapters.remote import (
    MAX_REPLY_BYTES,
    RemoteWorkspace,
    _Reply,
    _ReplyTooLarge,
)

pytestmark = pytest.mark.anyio

CAP = 1_048_576
UNAVAILABLE = "The workspace server at {url} is unavailable: "


def _remote(server: object, **options: float) -> RemoteWorkspace:
    port = server.server_address[1]  # type: ignore[attr-defined]
    return RemoteWorkspace(f"http://127.0.0.1:{port}/mcp", "token", connect_timeout=5, **options)


def test_the_default_cap() -> None:
    assert MAX_REPLY_BYTES == 64 * 1024 * 1024


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        (
            "json-declared",
            f"its answer is {512 * 1024 * 1024:,} bytes long, over the {CAP:,} bytes a reply "
            "may be (max_reply_bytes); it was not read",
        ),
        (
            "json-chunked",
            f"its answer passed the {CAP:,} bytes a reply may be (max_reply_bytes); it was not "
            "read further",
        ),
        (
            "sse",
            f"its answer passed the {CAP:,} bytes a reply may be (max_reply_bytes); it was not "
            "read further",
        ),
    ],
)
async def test_a_reply_over_the_cap_is_refused(mode: str, said: str) -> None:
    with hostile(mode) as server, _remote(server, max_reply_bytes=CAP, retries=2) as remote:
        tracemalloc.start()
        try:
            with anyio.fail_after(60):
                result = await invoke_tool(remote.tools[0], {"path": "a.txt"})
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        url = remote.url
    assert (result.error_code, result.error) == (
        ErrorCode.WORKSPACE_UNAVAILABLE,
        UNAVAILABLE.format(url=url) + said,
    )
    # Not retried: the same call would get the same answer.
    assert server.calls == 1
    assert peak < 8 * CAP, peak


@pytest.mark.parametrize("mode", ["json-stall", "sse-stall"])
@pytest.mark.parametrize("read_only", [True, False])
async def test_a_server_stalled_mid_reply_ends_at_the_timeout(mode: str, read_only: bool) -> None:
    with hostile(mode) as server, _remote(server, call_timeout=1, retries=0) as remote:
        tool = remote.tools[0] if read_only else remote.tools[1]
        arguments = {"path": "a.txt"} if read_only else {"path": "a.txt", "content": "x"}
        with anyio.fail_after(60):
            result = await invoke_tool(tool, arguments)
        url = remote.url
    outcome = "" if read_only else "; the call may or may not have run: check first"
    assert (result.error_code, result.error) == (
        ErrorCode.WORKSPACE_UNAVAILABLE,
        UNAVAILABLE.format(url=url) + "no answer within 1 s" + outcome,
    )


async def test_an_answer_to_initialize_over_the_cap_ends_the_opening() -> None:
    with hostile("init-sse") as server, _remote(server, max_reply_bytes=CAP, retries=0) as remote:
        with anyio.fail_after(60):
            result = await invoke_tool(remote.tools[0], {"path": "a.txt"})
        url = remote.url
    assert (result.error_code, result.error) == (
        ErrorCode.WORKSPACE_UNAVAILABLE,
        UNAVAILABLE.format(url=url)
        + f"its answer passed the {CAP:,} bytes a reply may be (max_reply_bytes); it was not "
        "read further; the call did not run",
    )


P = "dev.agent-workspace-tools/"


def _result(value: object) -> Callable[[object], bytes]:
    return lambda request_id: json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "result": value}
    ).encode()


GARBLED: dict[str, tuple[Callable[[object], bytes], str]] = {
    "not-json": (
        lambda _: b"{not json",
        "its answer could not be read (Invalid JSON: key must be a string at line 1 column 2)",
    ),
    "not-json-rpc": (
        lambda _: b'{"hello": 1}',
        "its answer could not be read (JSONRPCRequest.method: Field required)",
    ),
    "another-id": (
        lambda _: b'{"jsonrpc": "2.0", "id": 999, "result": {"content": []}}',
        "its answer could not be read (Received response with an unknown request ID)",
    ),
    "deep": (
        lambda i: (
            b'{"jsonrpc":"2.0","id":%d,"result":{"content":[],"_meta":{"x":' % i
            + b"[" * 100_000
            + b"]" * 100_000
            + b"}}}"
        ),
        "its answer could not be read (Invalid JSON: recursion limit exceeded at line 1 "
        "column 259)",
    ),
    "content-not-a-list": (
        _result({"content": "x"}),
        "its answer is not a tools/call result (content: Input should be an array, not a string)",
    ),
    "no-content": (
        _result({}),
        "its answer is not a tools/call result (content: Field required)",
    ),
    "structured-list": (
        _result({"content": [], "structuredContent": [1]}),
        "its answer is not a tools/call result (structuredContent: Input should be an object, "
        "not an array)",
    ),
    "meta-content": (
        _result({"content": [], "_meta": {P + "content": {"type": "tool-content", "parts": 1}}}),
        "its answer's content is not valid (parts: Input should be an array, not a number)",
    ),
}


@pytest.mark.parametrize("case", sorted(GARBLED))
async def test_an_answer_that_cannot_be_read_is_unavailable_at_once(case: str) -> None:
    reply, said = GARBLED[case]
    with hostile("json-stall") as server:
        server.reply = reply
        # The default call_timeout: the result must not wait for it.
        with _remote(server, retries=2) as remote:
            with anyio.fail_after(60):
                result = await invoke_tool(remote.tools[0], {"path": "a.txt"})
            url = remote.url
    assert (result.error_code, result.error) == (
        ErrorCode.WORKSPACE_UNAVAILABLE,
        UNAVAILABLE.format(url=url) + said,
    )
    assert server.calls == 1  # the same answer again would not help


async def test_a_json_rpc_error_is_quoted_clipped() -> None:
    def error(request_id: object) -> bytes:
        body = {"code": -32000, "message": "x" * 100_000}
        return json.dumps({"jsonrpc": "2.0", "id": request_id, "error": body}).encode()

    with hostile("json-stall") as server:
        server.reply = error
        with _remote(server, retries=0) as remote, anyio.fail_after(60):
            result = await invoke_tool(remote.tools[0], {"path": "a.txt"})
    assert (result.error_code, result.error) == (
        ErrorCode.TOOL_ERROR,
        "The workspace server answered the call with JSON-RPC error -32000: "
        + "x" * 200
        + "… (100,000 characters)",
    )


async def test_a_broken_presentation_is_left_out() -> None:
    meta = {P + "presentation": {"label": 5}, P + "details": {"n": 1}}
    with hostile("json-stall") as server:
        server.reply = _result({"content": [{"type": "text", "text": "hi"}], "_meta": meta})
        with _remote(server, retries=0) as remote, anyio.fail_after(60):
            result = await invoke_tool(remote.tools[0], {"path": "a.txt"})
    assert (result.error, result.content, result.details) == (None, "hi", {"n": 1})
    assert result.presentation == remote.tools[0].present(remote.tools[0].parameters(path="a.txt"))


class _Chunks(httpx.AsyncByteStream):
    """A response body that arrives as the given chunks."""

    def __init__(self, *chunks: bytes) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


async def _read_events(*chunks: bytes, limit: int) -> tuple[bytes, list[str]]:
    refused: list[str] = []
    reply = _Reply(_Chunks(*chunks), limit, declared=None, events=True, refuse=refused.append)
    got = b""
    with contextlib.suppress(_ReplyTooLarge):
        async for chunk in reply:
            got += chunk
    return got, refused


OVER = ["its answer passed the 100 bytes a reply may be (max_reply_bytes); it was not read further"]


@pytest.mark.parametrize(
    ("chunks", "passed", "refused"),
    [
        # An event over the cap whole in one chunk, alone or after a small one.
        ((b"data: " + b"x" * 200 + b"\n\n",), b"", OVER),
        ((b"data: a\n\ndata: " + b"x" * 200 + b"\r\n\r\n",), b"", OVER),
        # Its end in the next chunk, the blank line split between the two.
        (
            (b"data: a\n\ndata: " + b"x" * 90, b"y" * 20 + b"\n", b"\n"),
            b"data: a\n\ndata: " + b"x" * 90,
            OVER,
        ),
        # Many events under the cap in one chunk, and one that ends exactly at it.
        ((b"data: a\n\n" * 50,), b"data: a\n\n" * 50, []),
        (
            (b"data: " + b"x" * 92 + b"\n\n", b"data: b\r\r"),
            b"data: " + b"x" * 92 + b"\n\ndata: b\r\r",
            [],
        ),
    ],
)
async def test_every_sse_event_is_held_to_the_cap(
    chunks: tuple[bytes, ...], passed: bytes, refused: list[str]
) -> None:
    assert await _read_events(*chunks, limit=100) == (passed, refused)


async def test_a_real_server_answer_just_over_the_cap_is_refused(tmp_path: Path) -> None:
    # A real server sends a call's answer as one SSE event, here in one chunk: it is held
    # to the cap as a long stream is.
    (tmp_path / "big.txt").write_text("line of a file a little over the cap\n" * 300)
    with (
        serve(tmp_path, "--no-checkpoints") as server,
        RemoteWorkspace(server.url, server.token, max_reply_bytes=2000) as remote,
        anyio.fail_after(60),
    ):
        result = await invoke_tool(remote.tools[0], {"path": "big.txt"})
        whole = await invoke_tool(remote.tools[0], {"path": "big.txt", "limit": 10})
    assert (result.error_code, result.error) == (
        ErrorCode.WORKSPACE_UNAVAILABLE,
        UNAVAILABLE.format(url=server.url)
        + "its answer passed the 2,000 bytes a reply may be (max_reply_bytes); it was not "
        "read further",
    )
    assert whole.error is None, whole.error
