"""RemoteWorkspace against a hostile or broken server: a reply over the cap ends the call
with WORKSPACE_UNAVAILABLE naming the size and the cap (the client never buffers more than
the cap), and a server that stalls mid-reply ends at the call's timeout."""

from __future__ import annotations

import tracemalloc

import anyio
import pytest

pytest.importorskip("mcp")

from tests.probe4._hostile_server import hostile
from workspace_tools import ErrorCode, invoke_tool
from workspace_tools.adapters.remote import MAX_REPLY_BYTES, RemoteWorkspace

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
