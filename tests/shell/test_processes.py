"""Background processes: started at once, read, written to, stopped and listed; capped;
bounded in memory; nothing left once stopped or once the session ends."""

from __future__ import annotations

import resource
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from sandbox import Sandbox
from tests._processes import survivors
from tests._waiting import wait_until
from workspace_tools import ErrorCode, ShellSession, invoke_tool, shell_tools

pytestmark = pytest.mark.anyio


@pytest.fixture
def session(tmp_path: Path, marker: str) -> Iterator[ShellSession]:
    shells = ShellSession(tmp_path)
    yield shells
    shells.close()
    assert survivors(marker) == []


async def call(session: ShellSession, name: str, **arguments: Any) -> Any:
    tool = next(t for t in shell_tools(session) if t.name == name)
    with anyio.fail_after(120):
        return await invoke_tool(tool, arguments)


def state(session: ShellSession, id_: str) -> str:
    return session.processes.get(id_).state


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _answers(port: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as response:
            return int(response.status)
    except OSError:
        return None


async def test_dev_server_is_started_polled_and_stopped(session: ShellSession, marker: str) -> None:
    port = _free_port()
    started = await call(
        session, "start_process", command=f"exec python3 -m http.server {port} --bind 127.0.0.1"
    )
    assert started.content["id"] == "p1" and started.content["state"] == "running"
    status = await anyio.to_thread.run_sync(
        lambda: wait_until(lambda: _answers(port), lambda s: s == 200, "the server to answer")
    )
    assert status == 200
    # Each read returns what came since the last one: the start banner may come alone, the
    # request's log line a moment after the answer.
    seen = ""
    with anyio.move_on_after(60):
        while '"GET / HTTP/1.1" 200' not in seen:
            read = await call(session, "read_process_output", id="p1", wait=5)
            seen += read.content["output"]
    assert '"GET / HTTP/1.1" 200' in seen, seen
    stopped = await call(session, "stop_process", id="p1")
    assert stopped.content["state"] == "stopped", stopped.model_text()
    assert survivors(marker) == []
    assert _answers(port) is None
    listing = await call(session, "list_processes")
    assert [(p["id"], p["state"]) for p in listing.content["processes"]] == [("p1", "stopped")]


async def test_stdin_writes_reach_the_process(session: ShellSession) -> None:
    await call(session, "start_process", command="read first; echo got:$first; cat; echo end")
    written = await call(session, "write_process_stdin", id="p1", input="one\n")
    assert written.content == {"id": "p1", "written_bytes": 4, "stdin_open": True}
    first = await call(session, "read_process_output", id="p1", wait=30)
    assert first.content["output"] == "got:one\n", first.model_text()
    closed = await call(session, "write_process_stdin", id="p1", input="two\nthree", close=True)
    assert closed.content == {"id": "p1", "written_bytes": 9, "stdin_open": False}
    session.processes.get("p1").process.wait(30)
    rest = await call(session, "read_process_output", id="p1")
    assert rest.content["output"] == "two\nthreeend\n"
    assert rest.content["state"] == "exited" and rest.content["exit_code"] == 0
    assert rest.content["total_bytes"] == len("got:one\ntwo\nthreeend\n")
    after = await call(session, "write_process_stdin", id="p1", input="x")
    assert after.error_code == ErrorCode.TOOL_ERROR
    assert after.error == "Process p1 is exited; its stdin takes no more input"


async def test_read_waits_for_output_and_returns_each_byte_once(
    session: ShellSession, tmp_path: Path
) -> None:
    flag = tmp_path / "go"
    await call(
        session,
        "start_process",
        command=f"echo a; while [ ! -e {flag} ]; do sleep 0.01; done; echo b; exit 4",
    )
    first = await call(session, "read_process_output", id="p1", wait=30)
    assert first.content["output"] == "a\n"
    empty = await call(session, "read_process_output", id="p1")
    assert (empty.content["output"], empty.content["new_bytes"]) == ("", 0)
    flag.touch()
    session.processes.get("p1").process.wait(30)
    second = await call(session, "read_process_output", id="p1", wait=30)
    assert second.content["output"] == "b\n"
    assert (second.content["state"], second.content["exit_code"]) == ("exited", 4)
    assert (tmp_path / second.content["output_file"]).read_bytes() == b"a\nb\n"


async def test_running_processes_are_capped(tmp_path: Path, marker: str) -> None:
    with ShellSession(tmp_path, max_processes=2) as shells:
        for _ in range(2):
            await call(shells, "start_process", command="sleep 1000")
        refused = await call(shells, "start_process", command="sleep 1000")
        assert refused.error_code == ErrorCode.TOOL_ERROR
        assert refused.error == (
            "2 background processes are running, the most this session allows (p1, p2); "
            "stop one with stop_process first"
        )
        await call(shells, "stop_process", id="p1")
        again = await call(shells, "start_process", command="sleep 1000")
        assert again.content["id"] == "p3"
    assert survivors(marker) == []


async def test_own_timeout_stops_the_tree(session: ShellSession, marker: str) -> None:
    await call(session, "start_process", command="sleep 1000 & sleep 1000", timeout=1)
    wait_until(lambda: state(session, "p1"), lambda s: s != "running", "the timeout")
    assert state(session, "p1") == "timed_out"
    assert survivors(marker) == []


async def test_unknown_handle_and_outside_cwd_are_refused(session: ShellSession) -> None:
    unknown = await call(session, "read_process_output", id="p9")
    assert unknown.error_code == ErrorCode.NOT_FOUND
    assert unknown.error == "No background process 'p9'; the session's processes are: none"
    outside = await call(session, "start_process", command="true", cwd="..")
    assert outside.error_code == ErrorCode.OUTSIDE_WORKSPACE, outside.model_text()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_one_gibibyte_in_the_background_keeps_memory_and_file_bounded(
    tmp_path: Path,
) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with ShellSession(tmp_path, output_file_bytes=1024 * 1024) as shells:
        await call(
            shells,
            "start_process",
            command="head -c 1073741824 /dev/zero | tr '\\0' 'y'; echo END",
        )
        shells.processes.get("p1").process.wait(300)
        read = await call(shells, "read_process_output", id="p1")
        assert read.content["new_bytes"] == 1024**3 + 4
        assert read.content["output"].endswith("yyyEND\n")
        assert (tmp_path / read.content["output_file"]).stat().st_size == 1024 * 1024
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 100 * 1024, f"grew by {grown_kib} KiB"


async def test_in_a_sandbox_a_process_gets_its_stdin_and_stays_confined(
    tmp_path: Path, marker: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outside = tmp_path_factory.mktemp("outside")
    box = Sandbox(best_effort=True, env_allowlist=("PATH", "WT_TEST_MARKER"))
    if "write_confinement" not in box.confined_to(str(tmp_path)).capabilities:
        box.close()
        pytest.skip("no layer here confines writes")
    try:
        with ShellSession(tmp_path, sandbox=box) as shells:
            # Written and closed at once: the input must wait in the FIFO for the process,
            # which opens it only once the sandbox is set up.
            await call(shells, "start_process", command=f"cat; touch {outside}/escaped")
            written = await call(shells, "write_process_stdin", id="p1", input="in\n", close=True)
            assert written.content["written_bytes"] == 3, written.model_text()
            shells.processes.get("p1").process.wait(60)
            read = await call(shells, "read_process_output", id="p1")
            assert read.content["output"].startswith("in\ntouch: cannot touch"), read.model_text()
            assert read.content["exit_code"] == 1
            assert not (outside / "escaped").exists()
        assert survivors(marker) == []
    finally:
        box.close()
