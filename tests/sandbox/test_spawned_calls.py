"""Every sandboxed call is served by a warm worker that the spawn server forked, never by
a fork of the caller: nothing of the caller's memory is there but what the call carries.
A built-in tool's call pickles by import (its ``execute``, its workspace as settings); a
closure crosses by value, with what it captures. A worker killed mid-call is let go, and
nothing outlives a timeout or ``Sandbox.close()``."""

from __future__ import annotations

import os
import secrets
import signal
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from sandbox import Sandbox, SandboxError, SandboxLimits
from sandbox.spawn._tree import descendants
from tests._processes import command_line, survivors
from tests._waiting import wait_until, wait_until_async
from tests.sandbox._boxes import call_on_a_new_worker, call_worker
from workspace_tools import invoke_tool
from workspace_tools.tools import read_file as read_file_module
from workspace_tools.tools import workspace_tools
from workspace_tools.workspace import Workspace

pytestmark = pytest.mark.anyio


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        return int(next(line for line in f if line.startswith("PPid:")).split()[1])


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has ended)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _parent_pid() -> int:
    return os.getppid()


async def test_a_built_in_tools_sandboxed_call_runs_in_no_fork_of_the_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "three.txt").write_bytes(b"one\ntwo\nthree\n")
    tool = {t.name: t for t in workspace_tools(tmp_path)}["read_file"]
    whole = await invoke_tool(tool, {"path": "three.txt"})
    # A marker in this process's memory: read_file in a fork of it shows one line.
    monkeypatch.setattr(read_file_module, "MAX_TEXT_CHARS", 1)
    one_line = await invoke_tool(tool, {"path": "three.txt"})
    box = Sandbox(layers=False)
    try:
        first = await invoke_tool(tool, {"path": "three.txt"}, sandbox=box)  # waits for it
        worker = call_worker(box, reuse=True)
        served = await invoke_tool(tool, {"path": "three.txt"}, sandbox=box)
        parent = _parent_of(worker.pid)
        parent_argv = command_line(parent)
    finally:
        box.close()
    assert whole.content != one_line.content, one_line.content
    assert first.error is None and first.content == whole.content, first
    assert served.error is None and served.content == whole.content, served
    assert parent != os.getpid()
    assert any("sandbox.spawn._server" in arg for arg in parent_argv), parent_argv


async def test_arguments_of_a_model_made_for_the_workspace_reach_the_spawned_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # read_file's argument model for a workspace with its own read limit is made at run
    # time (no other process can import it): its values travel with the nearest model
    # that can be imported.
    (tmp_path / "many.txt").write_bytes(b"".join(b"line %d\n" % i for i in range(10)))
    tool = {t.name: t for t in workspace_tools(Workspace(tmp_path, read_limit=3))}["read_file"]
    expected = await invoke_tool(tool, {"path": "many.txt"})
    monkeypatch.setattr(read_file_module, "MAX_TEXT_CHARS", 1)  # as above: a fork shows less
    box = Sandbox(layers=False)
    try:
        served = [await invoke_tool(tool, {"path": "many.txt"}, sandbox=box) for _ in range(2)]
    finally:
        box.close()
    assert expected.content.endswith("[Lines 1-3 of 10 shown. Use offset=4 to read on.]")
    assert [(s.error, s.content) for s in served] == [(None, expected.content)] * 2


async def test_a_closure_runs_in_a_child_of_the_spawn_server_with_what_it_captures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = secrets.token_hex(8)

    def closure() -> tuple[int, str]:
        return os.getppid(), secret

    box = Sandbox(layers=False)
    try:
        first = await box.call(closure)
        worker = call_worker(box)
        parent_argv = command_line(_parent_of(worker.pid))
        # Changed here after the call was made: the next call carries the new value.
        secret = "changed"
        served = await box.call(closure)
        by_lambda = await box.call(lambda: secret * 2)
    finally:
        box.close()
    assert first == (worker.pid, first[1]) and first[1] != "changed", first
    assert any("sandbox.spawn._server" in arg for arg in parent_argv), parent_argv
    assert served == (worker.pid, "changed")
    assert by_lambda == "changedchanged"


async def test_a_closure_s_child_holds_none_of_the_caller_s_memory_it_did_not_capture(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A global of this module set at run time, in this process only: a fork of the
    # caller would have it; the worker imported this module from disk.
    token = secrets.token_hex(16)
    monkeypatch.setattr(sys.modules[__name__], "_CALLER_SECRET", token, raising=False)
    name = __name__

    def not_captured() -> tuple[bool, Any]:
        module = sys.modules.get(name)
        return module is not None, getattr(module, "_CALLER_SECRET", None)

    def captured() -> str:
        return str(_CALLER_SECRET)  # type: ignore[name-defined]  # noqa: F821

    box = Sandbox(layers=False)
    try:
        seen = await box.call(not_captured)
        carried = await box.call(captured)
    finally:
        box.close()
    assert seen == (True, None), seen
    assert carried == token


def _sleep_once_started(flag: str) -> int:
    Path(flag).write_text(str(os.getpid()))
    time.sleep(300)
    return os.getpid()


async def test_a_spawned_worker_killed_mid_call_is_replaced(tmp_path: Path) -> None:
    flag = tmp_path / "started"
    box = Sandbox(layers=False)
    raised: list[BaseException] = []

    async def call() -> None:
        try:
            await box.call(_sleep_once_started, str(flag))
        except SandboxError as exc:
            raised.append(exc)

    try:
        await box.call(_parent_pid)
        worker = call_worker(box)
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                # Its pid written whole: the file exists a moment before.
                await wait_until_async(
                    lambda: flag.exists() and flag.read_text(), bool, "the call to start"
                )
                os.kill(worker.pid, signal.SIGKILL)
        after = await box.call(_parent_pid)  # on a worker started for it
        replaced = call_worker(box)
        served = await box.call(_parent_pid)
    finally:
        box.close()
    assert [str(exc) for exc in raised] == [
        "the sandboxed call ended without a result: its warm worker was killed, "
        "and the call with it"
    ]
    assert after == served == replaced.pid != worker.pid
    call_pid = int(flag.read_text())
    assert wait_until(lambda: _alive(call_pid), lambda alive: not alive, "the call's end") is False


def _hang_leaving_a_process() -> None:
    os.system("setsid sleep 300 & sleep 300")


async def test_nothing_of_a_spawned_worker_outlives_a_timeout_or_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    marker = secrets.token_hex(12)
    monkeypatch.setenv("WT_TEST_MARKER", marker)
    box = Sandbox(
        layers=False,
        env_allowlist={"PATH", "WT_TEST_MARKER"},
        # 1 s, as a cold call gets for the same tree in test_sandbox.py: the call
        # starts its tree well within it; the rest is waiting for the deadline.
        limits=SandboxLimits(timeout_seconds=1, grace_seconds=0.2),
    )
    try:
        await call_on_a_new_worker(box, _parent_pid)
        worker = call_worker(box)
        with pytest.raises(TimeoutError):
            await box.call(_hang_leaving_a_process)
        left_after_timeout = survivors(f"WT_TEST_MARKER={marker}")
        served = await call_on_a_new_worker(box, _parent_pid)  # on a worker started for it
        replaced = call_worker(box)
        assert served == replaced.pid != worker.pid
        # The child forked ahead: the worker forks it once the previous one took its
        # call, under SCHED_BATCH, so a loaded host may run the call first.
        ahead = wait_until(lambda: descendants(replaced.pid), bool, "the child forked ahead")
        processes = [worker.pid, replaced.pid, *ahead]
    finally:
        box.close()
    assert left_after_timeout == []
    assert len(processes) >= 3, processes  # the worker and the child it forked ahead
    alive = wait_until(
        lambda: [pid for pid in processes if _alive(pid)], lambda pids: not pids, "their end"
    )
    assert alive == []


def _meet(directory: str, me: str, other: str) -> tuple[int, int]:
    """Say this call runs, then wait for the other one to run too (at most a minute): the
    two run at once. This process and its parent."""
    Path(directory, me).write_text(str(os.getpid()))
    end = time.monotonic() + 60
    while not Path(directory, other).exists() and time.monotonic() < end:
        time.sleep(0.01)
    return os.getpid(), os.getppid()


async def test_concurrent_calls_each_get_a_worker_of_the_spawn_server(tmp_path: Path) -> None:
    box = Sandbox(layers=False)
    seen: dict[str, tuple[int, int]] = {}

    async def call(me: str, other: str) -> None:
        seen[me] = await box.call(_meet, str(tmp_path), me, other)

    try:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "a", "b")
                tg.start_soon(call, "b", "a")
        parents = {parent for _, parent in seen.values()}
        argvs = [command_line(_parent_of(parent)) for parent in parents]
    finally:
        box.close()
    assert sorted(seen) == ["a", "b"] and len(parents) == 2, seen
    assert all(any("sandbox.spawn._server" in arg for arg in argv) for argv in argvs), argvs


async def test_run_command_run_in_a_sandbox_takes_its_runner_across(tmp_path: Path) -> None:
    # run_command's runner holds a sandbox (the plain one here): it crosses as its
    # settings, and the copy starts a spawn server of its own in the call's child.
    tools = {t.name: t for t in workspace_tools(tmp_path)}
    box = Sandbox(layers=False)
    try:
        result = await invoke_tool(
            tools["run_command"], {"command": "echo made > made.txt; cat made.txt"}, sandbox=box
        )
    finally:
        box.close()
    assert result.error is None, result
    assert result.content == {"exit_code": 0, "stdout": "made\n", "stderr": ""}
    assert (tmp_path / "made.txt").read_text() == "made\n"


async def test_a_custom_tool_s_worker_imports_only_what_its_call_needs() -> None:
    """A custom tool's call runs in a process that imported the tool's module and the
    stage that runs it, not the package's other tools, sessions, search or adapters."""
    from tests.sandbox._light_tool import IMPORTED_PARTS

    box = Sandbox()
    try:
        result = await invoke_tool(IMPORTED_PARTS, {}, sandbox=box)
    finally:
        box.close()
    assert result.error is None, result.error
    imported = result.content.splitlines()
    heavy = ("session", "tools", "search", "adapters", "cli", "shell")
    assert [m for m in imported if m.split(".")[1:2] and m.split(".")[1] in heavy] == [], imported
    assert "workspace_tools._child_call" in imported, imported


async def test_a_plain_call_s_worker_imports_no_event_loop_and_an_async_one_s_holds_it() -> None:
    """A sync tool without a workspace runs in a worker that imported neither anyio nor
    asyncio, cloudpickle or the workspace room (each fork of a smaller worker copies
    fewer page tables); an async tool's call has its worker import anyio once, so that
    the later children of that worker have it and none imports it per call."""
    from tests.sandbox._light_tool import OCCASIONAL_IMPORTED, OCCASIONAL_IMPORTED_ASYNC

    box = Sandbox()
    try:
        plain = await invoke_tool(OCCASIONAL_IMPORTED, {}, sandbox=box)
        awaited = await invoke_tool(OCCASIONAL_IMPORTED_ASYNC, {}, sandbox=box)
        after = await invoke_tool(OCCASIONAL_IMPORTED, {}, sandbox=box)
    finally:
        box.close()
    assert [plain.error, awaited.error, after.error] == [None, None, None]
    assert plain.content == ""
    assert awaited.content == "anyio\nasyncio\nssl"
    assert after.content == "anyio\nasyncio\nssl"


def test_a_module_that_starts_calls_when_imported_does_not_start_them_in_its_workers() -> None:
    """A module that runs a sandboxed call of its own tool at import (no ``__main__``
    guard) would start one sandbox in each worker that imports it to run that tool, and
    so on; in a worker its call is refused with words that say why, and the outer call
    gives that refusal back."""
    from tests.sandbox._calls_at_import import AT_IMPORT

    assert AT_IMPORT == (
        "SANDBOX_ERROR: a sandboxed call was started by a module's code while a sandbox's "
        "process imported that module to run a call: each process that imports it would "
        'start another. Start the module\'s calls under `if __name__ == "__main__":` or '
        "from a function."
    ), AT_IMPORT
