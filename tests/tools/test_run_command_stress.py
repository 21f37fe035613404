"""run_command under load: two threads, each with its own event loop, share one runner and
its supervisors; every output is exact, nothing hangs, no descriptor is left behind."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

from tests._processes import survivors
from workspace_tools import Tool, invoke_tool
from workspace_tools.tools import workspace_tools

THREADS = 2
CALLS = 300
#: Seconds the whole run may take before the test calls it a hang: each thread's 300
#: commands of 20 ms take 6 s at the least; this is many times that.
HANG_SECONDS = 300


def _fds() -> dict[int, str]:
    """This process's descriptors and what each refers to (``/proc/self/fd``)."""
    found = {}
    for entry in os.listdir("/proc/self/fd"):
        try:
            found[int(entry)] = os.readlink(f"/proc/self/fd/{entry}")
        except OSError:  # the listing's own descriptor
            continue
    return found


def _run_calls(tool: Tool[Any], thread: int, count: int, outputs: list[object]) -> None:
    """``count`` commands of about 20 ms on an event loop of this thread, each printing its
    thread and number; what each call returned (or raised) is appended to ``outputs``."""

    async def calls() -> None:
        for i in range(count):
            result = await invoke_tool(tool, {"command": f"sleep 0.02; echo {thread}-{i}"})
            outputs.append(
                result.error
                if result.error is not None
                else (
                    result.content["exit_code"],
                    result.content["stdout"],
                    result.content["stderr"],
                )
            )

    try:
        asyncio.run(calls())
    except BaseException as exc:  # the assertion below names it
        outputs.append(exc)


def _in_threads(tool: Tool[Any], count: int) -> list[list[object]]:
    """What :func:`_run_calls` gave in each of :data:`THREADS` threads run at once."""
    outputs: list[list[object]] = [[] for _ in range(THREADS)]
    threads = [
        threading.Thread(target=_run_calls, args=(tool, n, count, outputs[n]), daemon=True)
        for n in range(THREADS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HANG_SECONDS)
    hung = [n for n, thread in enumerate(threads) if thread.is_alive()]
    assert hung == [], f"threads {hung} still running after {HANG_SECONDS} s"
    return outputs


def test_two_threads_of_short_commands_get_exact_output_and_leak_nothing(
    tmp_path: Path, marker: str
) -> None:
    tool = next(t for t in workspace_tools(tmp_path) if t.name == "run_command")
    # Warm: both threads' supervisors made and pooled, the spawn server started.
    _in_threads(tool, 3)
    before = _fds()
    outputs = _in_threads(tool, CALLS)
    for n, got in enumerate(outputs):
        expected = [(0, f"{n}-{i}\n", "") for i in range(CALLS)]
        wrong = [(i, g) for i, (g, e) in enumerate(zip(got, expected, strict=False)) if g != e]
        assert len(got) == CALLS and wrong == [], f"thread {n}: {len(got)} results, {wrong[:5]}"
    # Only what appeared is a leak: a thread an earlier test left (a server's lease given
    # back) may close a descriptor of its own meanwhile.
    appeared = {fd: target for fd, target in _fds().items() if before.get(fd) != target}
    assert appeared == {}, f"descriptors left open: {appeared}; before: {before}"
    assert survivors(marker) == []
