"""Closing a sandbox from another thread while one of its calls runs: the call ends at once
with an error that says so, its processes are gone, and the descriptors the call was
reading are closed once, by the call (before, close() closed them under it: the call
raised ``OSError: [Errno 9] Bad file descriptor``, or could have closed a number another
file had taken meanwhile)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from sandbox import Sandbox, SandboxError
from tests._processes import GONE_DEADLINE, command_line, survivors
from tests._waiting import poll, wait_until_async

pytestmark = pytest.mark.anyio


def _started_then_waits(flag: str) -> None:
    Path(flag).write_text(str(os.getpid()))
    time.sleep(3600)


async def test_closing_the_sandbox_during_a_call_stops_it_with_an_error_saying_so(
    tmp_path: Path, marker: str
) -> None:
    box = Sandbox(layers=False)
    flag = tmp_path / "started"
    outcome: list[BaseException] = []

    async def run() -> None:
        try:
            await box.call(_started_then_waits, str(flag))
        except BaseException as exc:  # the error is the assertion's subject
            outcome.append(exc)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(run)
            await wait_until_async(flag.exists, bool, "the call to start")
            await anyio.to_thread.run_sync(box.close)
    assert [(type(exc), str(exc)) for exc in outcome] == [
        (SandboxError, "the sandbox was closed while the call ran; it was stopped")
    ]
    assert survivors(marker) == []


async def test_a_sandbox_in_a_with_block_is_closed_at_its_end() -> None:
    # A harness opens one per workspace: ``with`` stops its spawn server and workers.
    with Sandbox(layers=False) as box:
        worker = await box.call(os.getppid)  # a call's child is forked by its worker
        assert command_line(worker) != [], f"worker {worker} not seen running"
    gone = poll(lambda: command_line(worker), lambda argv: argv == [], timeout=GONE_DEADLINE)
    assert gone == [], f"worker {worker} still runs: {gone}"
