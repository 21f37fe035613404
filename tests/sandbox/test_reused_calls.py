"""A call that declares it keeps no state of its own (``Sandbox.call(...,
reuse_process=True)``, a built-in tool's ``execute``) runs in the long-lived child of a
spawned worker, one call after another in the same process; every other call still gets
a fresh child. The protections hold per call: the CPU and memory limits, what a call
leaves running stopped after it, a crash or a timeout ending that process (and nothing
of it left) with the next call served, hashes that round trip, files changed outside
seen by the next call."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sandbox import Sandbox, SandboxError, SandboxLimits
from sandbox.layers import SIGNAL_SCOPING, WRITE_CONFINEMENT
from sandbox.spawn._tree import descendants
from tests._processes import command_line, survivors
from tests._waiting import wait_until, wait_until_async
from tests.sandbox._boxes import NewBox, call_on_a_new_worker, call_worker
from tests.sandbox._slow_import import slow_import_module
from workspace_tools import ErrorCode, invoke_tool
from workspace_tools.tools import workspace_tools

pytestmark = pytest.mark.anyio


def _pids() -> tuple[int, int]:
    """This process and its parent."""
    return os.getpid(), os.getppid()


def _raise() -> None:
    raise ValueError("refused on purpose")


def _segfault() -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


def _burn(seconds: float) -> int:
    """Spend ``seconds`` of this process's CPU time; its pid."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
    return os.getpid()


def _spin() -> None:
    while True:
        pass


def _allocate(size: int) -> int:
    """Allocate ``size`` bytes and touch them; this process's pid."""
    block = bytearray(size)
    block[::4096] = b"x" * len(block[::4096])
    return os.getpid()


def _leave_a_process() -> int:
    os.system("setsid sleep 300 &")
    return os.getpid()


def _hang_leaving_a_process() -> None:
    os.system("setsid sleep 300 & sleep 300")


def _write_outside(path: str) -> str:
    try:
        Path(path).write_text("planted")
    except OSError as exc:
        return os.strerror(exc.errno or 0)
    return "written"


def _signal_parent() -> str:
    try:
        os.kill(os.getppid(), 0)
    except OSError as exc:
        return os.strerror(exc.errno or 0)
    return "signalled"


def _change_env_and_cwd() -> tuple[int, str]:
    os.environ["WT_LEFT_BY_A_CALL"] = "1"
    os.chdir("/")
    return os.getpid(), os.getcwd()


def _env_and_cwd() -> tuple[int, str | None, str]:
    return os.getpid(), os.environ.get("WT_LEFT_BY_A_CALL"), os.getcwd()


def _leave_a_thread() -> int:
    threading.Thread(target=time.sleep, args=(300,), daemon=True).start()
    return os.getpid()


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has ended)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def _reusing_worker(box: Sandbox, module: str = __name__, other_than: int = 0) -> Any:
    """The spawned worker whose child runs ``box``'s stateless calls, once it imported
    ``module`` (and is not the worker ``other_than``)."""
    return await wait_until_async(
        lambda: call_worker(box, reuse=True),
        lambda w: w is not None and module in w.modules and w.pid != other_than,
        f"a reusing worker that imported {module}",
    )


async def _warm(box: Sandbox, other_than: int = 0) -> tuple[Any, int]:
    """The reusing worker, once it serves ``box``'s stateless calls, and the pid of its
    child that runs them."""
    await call_on_a_new_worker(box, _pids, reuse_process=True)  # the first call starts it
    worker = await _reusing_worker(box, other_than=other_than)
    pid, parent = await box.call(_pids, reuse_process=True)
    assert parent == worker.pid, (parent, worker.pid)
    return worker, pid


async def test_stateless_calls_share_one_process_and_others_get_a_fresh_one(
    new_box: NewBox,
) -> None:
    box = new_box(layers=False)
    worker, first = await _warm(box)
    second = await box.call(_pids, reuse_process=True)
    fresh = [await box.call(_pids) for _ in range(2)]
    third = await box.call(_pids, reuse_process=True)
    assert second == third == (first, worker.pid)
    assert len({pid for pid, _ in fresh} | {first}) == 3, (fresh, first)


async def test_a_stateless_call_with_no_reusing_worker_waits_for_one_of_its_own(
    new_box: NewBox,
) -> None:
    box = new_box(layers=False)
    await box.call(_pids)  # the worker forking a child per call, started for it
    fresh_worker = call_worker(box)
    first = await box.call(_pids, reuse_process=True)  # not served by that one
    worker = call_worker(box, reuse=True)
    served = [await box.call(_pids, reuse_process=True) for _ in range(2)]
    assert fresh_worker is not None and worker is not None
    assert first == served[0] == served[1] and first[1] == worker.pid != fresh_worker.pid, (
        first,
        served,
    )


async def test_a_call_that_raises_leaves_the_process_serving(new_box: NewBox) -> None:
    box = new_box(layers=False)
    _, pid = await _warm(box)
    with pytest.raises(ValueError) as raised:
        await box.call(_raise, reuse_process=True)
    after = await box.call(_pids, reuse_process=True)
    assert str(raised.value) == "refused on purpose"
    assert after[0] == pid


async def test_the_environment_and_directory_a_call_changed_are_put_back(
    new_box: NewBox,
) -> None:
    box = new_box(layers=False)
    _, pid = await _warm(box)
    changed = await box.call(_change_env_and_cwd, reuse_process=True)
    after = await box.call(_env_and_cwd, reuse_process=True)
    assert changed == (pid, "/")
    assert after == (pid, None, os.getcwd())


async def test_a_call_that_leaves_a_thread_running_gets_the_process_replaced(
    new_box: NewBox,
) -> None:
    box = new_box(layers=False)
    _, pid = await _warm(box)
    left = await box.call(_leave_a_thread, reuse_process=True)
    after = await box.call(_pids, reuse_process=True)
    assert left == pid
    assert after[0] != pid
    assert wait_until(lambda: _alive(pid), lambda alive: not alive, "its end") is False


# Seconds of CPU burnt: the limit is checked, not the loop.
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_each_call_gets_the_whole_cpu_limit_and_a_spinning_one_is_stopped(
    new_box: NewBox,
) -> None:
    box = new_box(layers=False, limits=SandboxLimits(cpu_seconds=1))
    _, pid = await _warm(box)
    # Two calls of 0.6 s in one process: 1.2 s there, past one call's limit of 1 s.
    burnt = [await box.call(_burn, 0.6, reuse_process=True) for _ in range(2)]
    with pytest.raises(SandboxError) as stopped:
        await box.call(_spin, reuse_process=True)
    after = await box.call(_burn, 0.6, reuse_process=True)
    assert burnt == [pid, pid]
    assert (str(stopped.value), stopped.value.signal) == (
        "the sandboxed call was killed by SIGXCPU",
        "SIGXCPU",
    )
    assert after != pid


async def test_a_module_slow_to_import_does_not_spend_a_calls_cpu_limit(
    new_box: NewBox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worker imports the call's module before any call: 1.5 s of CPU there, past the
    # limit of 1 s a call, counts against no call (it ended the worker by SIGXCPU).
    module = slow_import_module(tmp_path, monkeypatch)
    box = new_box(layers=False, limits=SandboxLimits(cpu_seconds=1))
    first = await box.call(module.pid, reuse_process=True)
    burnt = await box.call(_burn, 0.6, reuse_process=True)
    assert burnt == first


async def test_each_call_gets_the_whole_memory_limit(new_box: NewBox) -> None:
    mib = 1024 * 1024
    box = new_box(layers=False, limits=SandboxLimits(memory_bytes=256 * mib))
    _, pid = await _warm(box)
    fitting = [await box.call(_allocate, 160 * mib, reuse_process=True) for _ in range(3)]
    with pytest.raises(MemoryError):
        await box.call(_allocate, 400 * mib, reuse_process=True)
    after = await box.call(_allocate, 160 * mib, reuse_process=True)
    assert fitting == [pid, pid, pid]
    assert after == pid


async def test_a_crash_is_a_sandbox_error_and_the_next_call_is_served(new_box: NewBox) -> None:
    box = new_box(layers=False)
    worker, pid = await _warm(box)
    with pytest.raises(SandboxError) as crashed:
        await box.call(_segfault, reuse_process=True)
    right_after = await box.call(_pids, reuse_process=True)
    replaced = await _reusing_worker(box, other_than=worker.pid)
    served = await box.call(_pids, reuse_process=True)
    assert (str(crashed.value), crashed.value.signal) == (
        "the sandboxed call was killed by SIGSEGV",
        "SIGSEGV",
    )
    assert right_after[0] != pid
    assert served[1] == replaced.pid
    assert wait_until(lambda: _alive(worker.pid), lambda alive: not alive, "its end") is False


async def test_what_a_call_leaves_running_is_stopped_after_it(
    new_box: NewBox, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = secrets.token_hex(12)
    monkeypatch.setenv("WT_TEST_MARKER", marker)
    box = new_box(layers=False, env_allowlist={"PATH", "WT_TEST_MARKER"})
    _, pid = await _warm(box)
    left = await box.call(_leave_a_process, reuse_process=True)
    running = survivors(f"WT_TEST_MARKER={marker}")
    after = await box.call(_pids, reuse_process=True)
    assert left == after[0] == pid
    assert running == []


async def test_a_timeout_ends_the_process_and_its_tree(
    new_box: NewBox, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = secrets.token_hex(12)
    monkeypatch.setenv("WT_TEST_MARKER", marker)
    box = new_box(
        layers=False,
        env_allowlist={"PATH", "WT_TEST_MARKER"},
        # 1 s, as a cold call gets for the same tree in test_sandbox.py: the call
        # starts its tree well within it; the rest is waiting for the deadline.
        limits=SandboxLimits(timeout_seconds=1, grace_seconds=0.2),
    )
    worker, pid = await _warm(box)
    with pytest.raises(TimeoutError):
        await box.call(_hang_leaving_a_process, reuse_process=True)
    left = survivors(f"WT_TEST_MARKER={marker}")
    served = await call_on_a_new_worker(box, _pids, reuse_process=True)  # a new worker
    replaced = call_worker(box, reuse=True)
    assert left == []
    assert served[1] == replaced.pid != worker.pid and served[0] != pid
    gone = wait_until(
        lambda: [p for p in (worker.pid, pid) if _alive(p)], lambda pids: not pids, "their end"
    )
    assert gone == []


async def test_the_reused_process_is_confined(
    new_box: NewBox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    outside = Path("/var/tmp") / f"reused-{secrets.token_hex(6)}.txt"
    box = new_box(writable=[str(workspace)], best_effort=True)
    capabilities = box.call_capabilities
    if WRITE_CONFINEMENT not in capabilities or SIGNAL_SCOPING not in capabilities:
        pytest.skip(f"calls get no write confinement or signal scoping here: {capabilities}")
    try:
        _, pid = await _warm(box)
        written = await box.call(_write_outside, str(outside), reuse_process=True)
        signalled = await box.call(_signal_parent, reuse_process=True)
        after = await box.call(_pids, reuse_process=True)
    finally:
        existed = outside.exists()
        outside.unlink(missing_ok=True)
    assert (written, existed) == ("Read-only file system", False)
    assert signalled == "Operation not permitted"
    assert after[0] == pid


async def test_built_in_tools_share_the_process_and_see_outside_changes(
    new_box: NewBox, tmp_path: Path
) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"alpha\nbravo\n")
    tools = {t.name: t for t in workspace_tools(tmp_path)}
    box = new_box(layers=False)
    await invoke_tool(tools["read_file"], {"path": "notes.txt"}, sandbox=box)
    worker = await _reusing_worker(box, "workspace_tools.tools.read_file")
    first = await invoke_tool(tools["read_file"], {"path": "notes.txt"}, sandbox=box)
    child = descendants(worker.pid)
    edited = await invoke_tool(
        tools["edit_file"],
        {"path": "notes.txt", "old_text": "bravo", "new_text": "charlie"},
        sandbox=box,
    )
    # Changed outside, same size: the next read sees it, the next edit refuses.
    path.write_bytes(b"alpha\ndelta!!\n")
    stale = await invoke_tool(
        tools["edit_file"],
        {"path": "notes.txt", "old_text": "alpha", "new_text": "omega"},
        sandbox=box,
    )
    reread = await invoke_tool(tools["read_file"], {"path": "notes.txt"}, sandbox=box)
    # The hashes came back to this process: an edit here agrees with the sandbox's read.
    here = await invoke_tool(
        tools["edit_file"], {"path": "notes.txt", "old_text": "alpha", "new_text": "omega"}
    )
    same_child = descendants(worker.pid)
    assert first.error is None and first.content == "     1\talpha\n     2\tbravo", first
    assert edited.error is None, edited
    assert stale.error_code == ErrorCode.STALE_FILE, stale
    assert reread.error is None and reread.content == "     1\talpha\n     2\tdelta!!", reread
    assert here.error is None, here
    assert path.read_bytes() == b"omega\ndelta!!\n"
    assert len(child) == 1 and same_child == child, (child, same_child)


_CALLER = """
import sys, time
import anyio
from sandbox import Sandbox

def sleeper(started):
    open(started, "w").close()
    time.sleep(300)

async def main(root, started):
    await Sandbox().confined_to(root).call(sleeper, started, reuse_process=True)

anyio.run(main, *sys.argv[1:])
"""


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM])
def test_a_reused_childs_call_ends_when_its_caller_is_stopped(
    tmp_path: Path, stop: signal.Signals
) -> None:
    # The one child runs the call and reads nothing meanwhile: its worker sees the caller
    # hang up, and ends, and the child with it.
    started = tmp_path / "started"
    caller = subprocess.Popen([sys.executable, "-c", _CALLER, str(tmp_path), str(started)])
    try:
        wait_until(started.exists, bool, "the call to start")
        tree = descendants(caller.pid)  # its spawn server, the worker, the call's child
    finally:
        caller.send_signal(stop)
        caller.wait(60)
    assert len(tree) >= 3, tree
    left = wait_until(
        lambda: [pid for pid in tree if _alive(pid)], lambda pids: not pids, "the tree to end"
    )
    assert left == [], [(pid, command_line(pid)) for pid in left]
