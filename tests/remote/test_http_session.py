"""`RemoteWorkspace` keeps one MCP session across calls: counted on a real `workspace-tools
serve` process (its session manager's log), recovered once after a server restart, and
ended with its thread by close(), a with block, or collection."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import anyio
import pytest

from tests._waiting import wait_until
from tests.remote._calls import named
from tests.remote._served import serve, sessions_opened
from workspace_tools import ErrorCode, invoke_tool, invoke_tool_sync
from workspace_tools.adapters.remote import RemoteWorkspace


def link_threads(url: str) -> list[str]:
    """The names of live threads holding a session with the server at ``url``."""
    return [t.name for t in threading.enumerate() if t.name == f"RemoteWorkspace {url}"]


def test_calls_share_one_session(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"alpha\n")
    log = tmp_path.parent / f"{tmp_path.name}.log"
    with (
        serve(tmp_path, "--no-checkpoints", session_log=log) as server,
        RemoteWorkspace(server.url, server.token) as remote,
    ):
        read = named(remote.tools, "read_file")
        for _ in range(10):
            result = invoke_tool_sync(read, {"path": "a.txt"})
            assert result.content == "     1\talpha", result
        written = invoke_tool_sync(
            named(remote.tools, "write_file"), {"path": "b.txt", "content": "b\n"}
        )
        assert written.error is None, written.error

        # Calls from another event loop, and concurrent ones, use the same session.
        async def concurrently() -> list[object]:
            out: list[object] = []

            async def one() -> None:
                out.append((await invoke_tool(read, {"path": "a.txt"})).content)

            async with anyio.create_task_group() as tg:
                for _ in range(5):
                    tg.start_soon(one)
            return out

        assert anyio.run(concurrently, backend="trio") == ["     1\talpha"] * 5
        assert sessions_opened(log) == 1, log.read_text()
    assert (tmp_path / "b.txt").read_bytes() == b"b\n"


def test_a_server_restart_is_recovered_with_one_new_session(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"alpha\n")
    first_log, second_log = tmp_path.parent / "first.log", tmp_path.parent / "second.log"
    env = {"WORKSPACE_TOOLS_TOKEN": "restart-token"}
    flags = ("--no-checkpoints",)
    with serve(tmp_path, *flags, env=env, token_line=False, session_log=first_log) as server:
        remote = RemoteWorkspace(server.url, "restart-token")
        assert invoke_tool_sync(remote.tools[0], {"path": "a.txt"}).error is None
        address = server.url.split("/")[2]
    assert sessions_opened(first_log) == 1
    # The same address, a new process that knows no session: the held one answers 404.
    with serve(
        tmp_path, *flags, env=env, token_line=False, address=address, session_log=second_log
    ):
        # A write too (never repeated after a connection failure): its first attempt was
        # refused unrun, so it is sent once more on the new session.
        written = invoke_tool_sync(
            named(remote.tools, "write_file"), {"path": "b.txt", "content": "b\n"}
        )
        assert written.error is None, written.error
        assert invoke_tool_sync(remote.tools[0], {"path": "b.txt"}).content == "     1\tb"
        assert sessions_opened(second_log) == 1, second_log.read_text()
        remote.close()
    assert (tmp_path / "b.txt").read_bytes() == b"b\n"


def test_close_leaves_no_thread_and_a_later_call_reconnects(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"alpha\n")
    with serve(tmp_path, "--no-checkpoints") as server:
        url = server.url
        remote = RemoteWorkspace(url, server.token)
        assert link_threads(url) == []  # no thread before the first call
        assert invoke_tool_sync(remote.tools[0], {"path": "a.txt"}).error is None
        assert link_threads(url) == [f"RemoteWorkspace {url}"]
        remote.close()
        assert link_threads(url) == []
        remote.close()  # idempotent
        assert invoke_tool_sync(remote.tools[0], {"path": "a.txt"}).error is None
        with remote:
            pass
        assert link_threads(url) == []
        # Collected without close(): the finalizer ends the session and the thread.
        collected = RemoteWorkspace(url, server.token)
        assert invoke_tool_sync(collected.tools[0], {"path": "a.txt"}).error is None
        assert link_threads(url) == [f"RemoteWorkspace {url}"]
        del collected
        gc.collect()
        wait_until(lambda: link_threads(url), lambda names: names == [], "the link thread to end")


@pytest.mark.anyio
async def test_async_with_closes(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"alpha\n")
    with serve(tmp_path, "--no-checkpoints") as server:
        async with RemoteWorkspace(server.url, server.token) as remote:
            read = await invoke_tool(remote.tools[0], {"path": "a.txt"})
            assert read.content == "     1\talpha"
        assert link_threads(server.url) == []
    # A closed workspace whose server is gone: a result, not a hang.
    failed = await invoke_tool(remote.tools[0], {"path": "a.txt"})
    assert failed.error_code is ErrorCode.WORKSPACE_UNAVAILABLE, failed
    await anyio.to_thread.run_sync(remote.close)
