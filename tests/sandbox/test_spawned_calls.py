"""A call whose callable and arguments pickle by import (a module-level function, a
built-in tool's ``execute`` with its workspace as settings) is served by a warm worker
that the spawn server forked, not by a fork of the caller: nothing of the caller's memory
is there. A closure still runs in a fork of the caller. Whichever serves it, a worker
killed mid-call is replaced, and nothing outlives a timeout or ``Sandbox.close()``."""

from __future__ import annotations

import os
import secrets
import signal
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from sandbox import Sandbox, SandboxError, SandboxLimits
from sandbox.spawn._tree import descendants
from tests._processes import command_line, survivors
from tests._waiting import wait_until, wait_until_async
from workspace_tools import invoke_tool
from workspace_tools.tools import read_file as read_file_module
from workspace_tools.tools import workspace_tools
from workspace_tools.workspace import Workspace

pytestmark = pytest.mark.anyio


async def _spawned_worker(
    box: Sandbox, module: str, other_than: int = 0, *, reusing: bool = False
) -> Any:
    """The worker the spawn server forked for ``box``, once it imported ``module`` (and is
    not the worker ``other_than``); ``reusing``: the one whose one child runs the calls
    that keep no state (a built-in tool's)."""
    return await wait_until_async(
        lambda: (
            None
            if box._caller is None
            else (box._caller._reusing if reusing else box._caller._spawned)
        ),
        lambda w: w is not None and module in w.known and w.pid != other_than,
        f"a spawned worker that imported {module}",
    )


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
        first = await invoke_tool(tool, {"path": "three.txt"}, sandbox=box)  # forked on demand
        worker = await _spawned_worker(box, "workspace_tools.tools.read_file", reusing=True)
        served = await invoke_tool(tool, {"path": "three.txt"}, sandbox=box)
        parent = _parent_of(worker.pid)
        parent_argv = command_line(parent)
    finally:
        box.close()
    assert whole.content != one_line.content, one_line.content
    assert first.content == one_line.content
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
        await invoke_tool(tool, {"path": "many.txt"}, sandbox=box)  # forked on demand
        await _spawned_worker(box, "workspace_tools.tools.read_file", reusing=True)
        served = await invoke_tool(tool, {"path": "many.txt"}, sandbox=box)
    finally:
        box.close()
    assert expected.content.endswith("[Lines 1-3 of 10 shown. Use offset=4 to read on.]")
    assert served.error is None and served.content == expected.content, served


async def test_a_closure_runs_in_a_fork_of_the_caller() -> None:
    secret = secrets.token_hex(8)

    def closure() -> tuple[int, str]:
        return os.getppid(), secret

    box = Sandbox(layers=False)
    try:
        first = await box.call(closure)
        worker = await wait_until_async(
            lambda: box._caller._worker if box._caller is not None else None,
            lambda w: w is not None and id(closure) in w.known,
            "a worker forked from here that holds the closure",
        )
        served = await box.call(closure)
        spawned = box._caller._spawned if box._caller is not None else None
        by_lambda = await box.call(lambda: secret)
    finally:
        box.close()
    assert first == (os.getpid(), secret)
    assert served == (worker.pid, secret)
    assert spawned is None  # nothing that pickles by import was called
    assert by_lambda == secret


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
        worker = await _spawned_worker(box, __name__)
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                # Its pid written whole: the file exists a moment before.
                await wait_until_async(
                    lambda: flag.exists() and flag.read_text(), bool, "the call to start"
                )
                os.kill(worker.pid, signal.SIGKILL)
        after = await box.call(_parent_pid)  # on demand, or on the replacement
        replaced = await _spawned_worker(box, __name__, other_than=worker.pid)
        served = await box.call(_parent_pid)
    finally:
        box.close()
    assert [str(exc) for exc in raised] == [
        "the sandboxed call ended without a result: its warm worker was killed, "
        "and the call with it"
    ]
    assert after in (os.getpid(), replaced.pid)
    assert served == replaced.pid != worker.pid
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
        limits=SandboxLimits(timeout_seconds=2, grace_seconds=0.2),
    )
    try:
        await box.call(_parent_pid)
        worker = await _spawned_worker(box, __name__)
        with pytest.raises(TimeoutError):
            await box.call(_hang_leaving_a_process)
        left_after_timeout = survivors(f"WT_TEST_MARKER={marker}")
        replaced = await _spawned_worker(box, __name__, other_than=worker.pid)
        assert await box.call(_parent_pid) == replaced.pid
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
