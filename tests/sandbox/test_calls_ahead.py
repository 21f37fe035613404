"""Tools bound to a sandbox start the process's spawn server and one warm worker of calls at
once, in the background (a call is sure to come), so that the first call does not wait for
them; a sandbox no tool uses starts nothing; closing the session (or the sandbox) leaves no
process of its own (the spawn server, shared by the process's sandboxes, stops with the last
of them: tests/test_many_workspaces.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox import Sandbox
from tests._processes import command_line
from tests._waiting import wait_until, wait_until_async
from tests.sandbox._boxes import call_worker
from workspace_tools import ToolSession, invoke_tool
from workspace_tools.tools import workspace_tools

pytestmark = pytest.mark.anyio


def _children(pid: int) -> list[int]:
    """The live children of ``pid`` (``/proc/*/stat``), in ascending order."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[1]) == pid:
            found.append(int(entry))
    return sorted(found)


def _servers() -> list[int]:
    """This process's spawn servers."""
    return [
        pid
        for pid in _children(os.getpid())
        if any("sandbox.spawn._server" in arg for arg in command_line(pid))
    ]


def _forked() -> list[int]:
    """The children of this process's spawn servers (supervisors and warm workers)."""
    return sorted(pid for server in _servers() for pid in _children(server))


def _workers(before: list[int]) -> list[int]:
    """The warm workers and supervisors forked since ``before`` (a :func:`_forked`)."""
    return [pid for pid in _forked() if pid not in before]


def _alive(pids: list[int]) -> list[int]:
    def running(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    return [pid for pid in pids if running(pid)]


def test_a_sandbox_no_tool_uses_starts_nothing() -> None:
    servers, forked = _servers(), _forked()
    box = Sandbox(layers=False)
    try:
        assert box._caller is None
        assert (_servers(), _forked()) == (servers, forked)
    finally:
        box.close()


async def test_a_session_with_a_sandbox_starts_a_worker_before_any_call(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"one\n")
    before = _forked()  # of earlier tests' sandboxes not collected yet
    box = Sandbox(layers=False)
    session = ToolSession(tmp_path, sandbox=box)
    try:
        # No call: the server (if none ran) and one worker appear on their own.
        (worker,) = await wait_until_async(
            lambda: _workers(before), lambda s: len(s) == 1, "a worker"
        )
        pids = [worker, *_children(worker)]
        result = await session.call("read_file", {"path": "a.txt"})
        served_by = call_worker(session._sandbox, reuse=True)
        assert box._caller is None  # the session's copy
    finally:
        session.close()
    assert result.error is None and result.content == "     1\tone", result
    assert served_by is not None and served_by.pid == worker, (served_by, worker)
    left = wait_until(lambda: _alive(pids), lambda alive: not alive, "their end")
    assert left == []


async def test_tools_bound_to_a_sandbox_start_a_worker_that_closing_the_sandbox_stops(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.txt").write_bytes(b"one\n")
    before = _forked()  # of earlier tests' sandboxes not collected yet
    box = Sandbox(layers=False)
    try:
        tools = {t.name: t for t in workspace_tools(tmp_path, sandbox=box)}
        (worker,) = await wait_until_async(
            lambda: _workers(before), lambda s: len(s) == 1, "a worker"
        )
        pids = [worker, *_children(worker)]
        result = await invoke_tool(tools["read_file"], {"path": "a.txt"})
        served_by = call_worker(tools["read_file"].sandbox, reuse=True)
    finally:
        box.close()
    assert result.error is None and result.content == "     1\tone", result
    assert served_by is not None and served_by.pid == worker, (served_by, worker)
    left = wait_until(lambda: _alive(pids), lambda alive: not alive, "their end")
    assert left == []
