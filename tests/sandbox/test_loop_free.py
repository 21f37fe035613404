"""The event loop goes on while a command waits for the process's one spawn server."""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path

import anyio
import pytest

from sandbox import Sandbox
from sandbox.spawn import _client
from tests._waiting import wait_until

pytestmark = pytest.mark.anyio

TICKS = 20


async def test_a_command_waiting_for_the_spawn_server_leaves_the_event_loop_free(
    tmp_path: Path,
) -> None:
    """The spawn server serves one request at a time (one a process, shared by every
    sandbox); a command that needs a new supervisor while it serves another's (a call
    worker's start, which can take a second under load) waits in a thread, and the event
    loop, which may serve many workspaces, runs on: here a ticker ticks while the server is
    held, and the command runs once it is let go."""
    box = Sandbox(layers=False)
    held, let_go = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}

    def hold_the_server() -> None:
        with _client._SERVER.lock:
            held.set()
            outcome["let go in time"] = let_go.wait(20)

    holder = threading.Thread(target=hold_the_server)
    holder.start()
    held.wait(20)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await anyio.sleep(0.005)
            ticks += 1

    async def run() -> None:
        result = await box.run(["bash", "-c", "echo ran"], cwd=str(tmp_path), env=dict(os.environ))
        outcome["stdout"] = result.stdout.complete

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(tick)
            group.start_soon(run)
            with anyio.move_on_after(20):
                while ticks < TICKS:
                    await anyio.sleep(0.005)
            outcome["ticks while held"] = ticks >= TICKS
            let_go.set()
            with anyio.fail_after(60):
                while "stdout" not in outcome:
                    await anyio.sleep(0.01)
            group.cancel_scope.cancel()
    finally:
        let_go.set()
        holder.join(30)
        box.close()
    assert outcome == {"let go in time": True, "ticks while held": True, "stdout": b"ran\n"}


def test_a_launcher_collected_while_the_server_is_busy_does_not_wait_for_it() -> None:
    # Another thread holds the spawn server (a call worker's start, say) when an unclosed
    # sandbox's launcher is collected, as a collection may be in an event loop's thread:
    # the collection returns at once, and the lease is given back once the server is free.
    # Launchers earlier tests of this process left unclosed give their leases back now,
    # not in the collection below, which would count them with this one's.
    gc.collect()
    launcher = _client.Launcher()
    launcher._connect_pool()  # a lease on the server, as a first command takes
    leases = _client._SERVER.leases
    held, release, letting_go = threading.Event(), threading.Event(), threading.Event()

    def hold() -> None:
        with _client._SERVER.lock:
            held.set()
            release.wait(60)
            letting_go.set()  # before the lock is let go: a collection that waited sees it

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(30)
        del launcher
        gc.collect()
        # No wall-clock bound (a loaded host may take seconds to collect): the collection
        # returned while the server was still held, which it could not have had it waited.
        assert not letting_go.is_set(), "the collection waited for the server"
        assert _client._SERVER.leases == leases, "given back while the server was held"
    finally:
        release.set()
        holder.join(30)
    wait_until(lambda: _client._SERVER.leases, (leases - 1).__eq__, "the lease back")
