"""The caller's wait for a command: output of both streams, the exit, and the tree stop,
with each way of watching the pipes and the channel (a bare epoll on Linux, the
platform's selector elsewhere)."""

from __future__ import annotations

import asyncio
import secrets
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from sandbox import Sandbox, SandboxLimits
from sandbox.spawn import _process
from tests._processes import survivors
from tests.sandbox._boxes import NewBox

pytestmark = pytest.mark.anyio

READINESS: dict[str, Callable[[], object]] = {"selector": _process._Selector}
if hasattr(_process.select, "epoll"):
    READINESS["epoll"] = _process._Epoll

# Both streams well past a pipe's buffer (64 KiB on Linux), written in turns, so that the
# caller must read each many times while the command runs.
WRITER = (
    "import os\n"
    "for i in range(40):\n"
    "    os.write(1, bytes([97 + i % 26]) * 5000)\n"
    "    os.write(2, bytes([65 + i % 26]) * 3000)\n"
    "raise SystemExit(3)\n"
)
STDOUT = b"".join(bytes([97 + i % 26]) * 5000 for i in range(40))
STDERR = b"".join(bytes([65 + i % 26]) * 3000 for i in range(40))


@pytest.fixture(params=sorted(READINESS))
def box(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, new_box: NewBox
) -> Sandbox:
    monkeypatch.setattr(_process, "_readiness", READINESS[request.param])
    return new_box(layers=False, network=True)


async def test_both_streams_arrive_whole_and_in_order(box: Sandbox) -> None:
    seen: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
    with anyio.fail_after(60):
        result = await box.run(
            [sys.executable, "-c", WRITER],
            on_output=lambda stream, chunk: seen[stream].append(chunk),
        )
    assert (result.exit_code, result.signal, result.timed_out) == (3, None, False)
    assert result.stdout.complete == STDOUT, result.stdout.total_bytes
    assert result.stderr.complete == STDERR, result.stderr.total_bytes
    assert (result.stdout.total_bytes, result.stderr.total_bytes) == (200_000, 120_000)
    assert b"".join(seen["stdout"]) == STDOUT
    assert b"".join(seen["stderr"]) == STDERR


async def test_timeout_stops_a_detached_process_that_holds_the_pipes(
    box: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    value = secrets.token_hex(12)
    monkeypatch.setenv("WT_TEST_MARKER", value)
    marker = f"WT_TEST_MARKER={value}"
    with anyio.fail_after(60):
        result = await box.run(
            ["bash", "-c", "setsid sleep 1000 & echo started; sleep 1000"],
            env={"PATH": "/usr/bin:/bin", "WT_TEST_MARKER": value},
            timeout=1,
        )
    assert (result.exit_code, result.timed_out) == (None, True)
    assert result.stdout.complete == b"started\n"
    assert survivors(marker) == []


async def test_a_command_that_never_stops_writing_still_times_out(
    box: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its pipe is readable at every pass of the event loop, the deadline's wake-up among
    # them: the timeout must still win, with the output so far kept and the tree gone.
    value = secrets.token_hex(12)
    monkeypatch.setenv("WT_TEST_MARKER", value)
    marker = f"WT_TEST_MARKER={value}"
    with anyio.fail_after(60):
        result = await box.run(
            ["bash", "-c", "yes flood; yes flood"],
            env={"PATH": "/usr/bin:/bin", "WT_TEST_MARKER": value},
            timeout=1,
        )
    assert (result.exit_code, result.signal, result.timed_out) == (None, "SIGTERM", True), result
    assert result.stdout.head.startswith(b"flood\nflood\n"), result.stdout.head[:40]
    assert result.stdout.total_bytes > 1_000_000, result.stdout.total_bytes
    assert result.stderr.total_bytes == 0, result.stderr.complete
    assert survivors(marker) == []


@pytest.mark.parametrize("readiness", sorted(READINESS))
async def test_output_written_after_the_exit_by_a_process_left_running_is_kept(
    readiness: str, monkeypatch: pytest.MonkeyPatch, new_box: NewBox
) -> None:
    # The command exits at once; a process it left running closes its stderr, waits until
    # the command is gone, then writes to stdout and exits. The caller reads stderr's end
    # and stdout's first line at the exit, then waits on stdout alone until its end (well
    # inside the drain time): nothing is lost, and a process that exits by itself as the
    # tree is stopped is not counted as stopped.
    monkeypatch.setattr(_process, "_readiness", READINESS[readiness])
    box = new_box(layers=False, network=True, limits=SandboxLimits(drain_seconds=60))
    command = (
        "( exec 2>&-; while kill -0 $$ 2>/dev/null; do sleep 0.01; done; echo late ) & echo early"
    )
    with anyio.fail_after(60):
        result = await box.run(["bash", "-c", command])
    seen = (result.exit_code, result.stdout.complete, result.stderr.complete)
    assert seen == (0, b"early\nlate\n", b""), result
    assert (result.stopped_processes, result.stopped_names, result.timed_out) == (0, (), False), (
        result
    )


def _count_waits(monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[int]]:
    """The caller's waits and its looks at the selector, each appended to a list, with the
    wait for a command's end alone stretched far beyond any command here (60 s), so that
    only the command's end can end it."""
    waits: list[int] = []
    looks: list[int] = []
    wait, ready = _process._wait_readable, _process._Streams.serve_ready

    async def counted_wait(fd: int, *args: Any, **kwargs: Any) -> bool:
        waits.append(fd)
        return await wait(fd, *args, **kwargs)

    def counted_ready(streams: _process._Streams) -> None:
        looks.append(1)
        ready(streams)

    monkeypatch.setattr(_process, "_wait_readable", counted_wait)
    monkeypatch.setattr(_process._Streams, "serve_ready", counted_ready)
    monkeypatch.setattr(_process, "QUIET_SECONDS", 60.0)
    return waits, looks


async def test_a_command_wakes_its_caller_once_for_its_end_not_for_its_output(
    box: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its output waits in the pipes while the caller waits for "done" alone: one wait,
    # one message, the pipes read to their end, no look at the selector.
    waits, looks = _count_waits(monkeypatch)
    with anyio.fail_after(30):
        result = await box.run(["bash", "-c", "echo out; echo err >&2; exit 4"])
    assert (result.exit_code, result.stdout.complete, result.stderr.complete) == (
        4,
        b"out\n",
        b"err\n",
    )
    assert (len(waits), len(looks)) == (1, 0)


async def test_the_supervisor_ends_the_quiet_wait_of_a_command_still_running(
    box: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The caller waits for the job's channel alone with no timer of its own: a command
    # over within QUIET_SECONDS sends "done" alone; one still running then is reported
    # "running" by its supervisor, once, and its caller watches it from there.
    kinds: list[str] = []
    deadlines: list[float | None] = []
    poll, wait = _process._Job.poll, _process._wait_readable

    def recorded_poll(job: _process._Job) -> Any:
        message = poll(job)
        if message is not None:
            kinds.append(message.kind)
        return message

    async def recorded_wait(fd: int, deadline: float | None = None, **kwargs: Any) -> bool:
        deadlines.append(deadline)
        return await wait(fd, deadline, **kwargs)

    monkeypatch.setattr(_process._Job, "poll", recorded_poll)
    monkeypatch.setattr(_process, "_wait_readable", recorded_wait)
    seen = []
    with anyio.fail_after(60):
        for quiet, command in ((60.0, "echo quick"), (0.05, "sleep 1; echo slow")):
            monkeypatch.setattr(_process, "QUIET_SECONDS", quiet)
            result = await box.run(["bash", "-c", command])
            seen.append((result.exit_code, result.stdout.complete, kinds[:], deadlines[0]))
            kinds.clear()
            deadlines.clear()
    assert seen == [
        (0, b"quick\n", ["done"], None),
        (0, b"slow\n", ["running", "done"], None),
    ]


async def test_running_and_done_read_at_once_end_the_call(
    box: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "running" goes out as the command starts (QUIET_SECONDS 0), "done" moments later;
    # this loop is held meanwhile, so one read of the channel takes both, and the socket
    # is empty after it: "done" must be taken from what was read, not waited for.
    monkeypatch.setattr(_process, "QUIET_SECONDS", 0.0)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tasks:
            results = []

            async def run() -> None:
                results.append(await box.run(["bash", "-c", "echo quick"]))

            tasks.start_soon(run)
            await anyio.sleep(0)  # the job goes out as run() starts its wait
            time.sleep(1)  # both messages arrive while this loop does nothing
    [result] = results
    assert (result.exit_code, result.stdout.complete) == (0, b"quick\n")


async def test_a_request_sent_once_its_wait_is_armed_is_not_waited_for_when_it_fails(
    anyio_backend: str,
) -> None:
    # The request goes out after the reader and the timer are set up; when it fails, both
    # are taken down again and the failure is the caller's.
    ours, theirs = socket.socketpair()
    try:

        def fail() -> None:
            raise ConnectionResetError("gone")

        with pytest.raises(ConnectionResetError):
            await _process._wait_readable(ours.fileno(), time.monotonic() + 60, then=fail)
        if anyio_backend == "asyncio":
            assert asyncio.get_running_loop().remove_reader(ours.fileno()) is False
        theirs.send(b"x")
        sent: list[bool] = []
        assert await _process._wait_readable(ours.fileno(), None, then=lambda: sent.append(True))
        assert sent == [True]
    finally:
        ours.close()
        theirs.close()
