"""invoke_tool_sync: an event loop of its own per call, with asyncio.run's guarantees."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path

import anyio
import pytest
from pydantic import BaseModel

from tests._processes import survivors
from tests._waiting import poll
from workspace_tools import ToolContext, ToolSession, invoke_tool_sync, tool, workspace_tools

REPO = Path(__file__).resolve().parent.parent


class NoArgs(BaseModel):
    pass


def test_ctrl_c_cancels_the_call_stops_its_command_and_raises(tmp_path: Path) -> None:
    marker = f"INVOKE_SYNC_{uuid.uuid4().hex}"
    started = tmp_path / "started"
    script = textwrap.dedent(
        f"""
        import faulthandler, signal, sys
        faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test's report of a hang
        # Python's own Ctrl-C, as an interactive Python has it: a test run started as a
        # background job of a shell inherits SIGINT ignored (POSIX), and so would this.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.path.insert(0, {str(REPO)!r})
        from workspace_tools import invoke_tool_sync, workspace_tools
        tools = {{t.name: t for t in workspace_tools({str(tmp_path)!r})}}
        try:
            invoke_tool_sync(tools["run_command"], {{"command": "touch started; sleep 60"}})
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        else:
            print("returned", flush=True)
        """
    )
    env = {**os.environ, marker: "1"}
    child = subprocess.Popen(
        [sys.executable, "-c", script],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        seen = poll(started.exists, bool)
        assert seen, "the command never started"
        child.send_signal(signal.SIGINT)
        try:
            out, err = child.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"no exit 30 s after SIGINT:\n{_hang_report(child)}")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert (out, child.returncode) == ("interrupted\n", 0), err
    assert survivors(marker) == []


def _hang_report(child: subprocess.Popen[str]) -> str:
    """What a child that did not exit was doing: its signal state and each thread's
    kernel wait (/proc), then its Python stacks (faulthandler, on SIGUSR1); kills it."""
    lines = []
    with contextlib.suppress(OSError):
        status = Path(f"/proc/{child.pid}/status").read_text().splitlines()
        lines += [line for line in status if line.startswith(("Sig", "ShdPnd", "State"))]
        for task in os.listdir(f"/proc/{child.pid}/task"):
            wchan = Path(f"/proc/{child.pid}/task/{task}/wchan").read_text()
            lines.append(f"thread {task}: {wchan}")
    child.send_signal(signal.SIGUSR1)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=2)
    child.kill()
    out, err = child.communicate()
    return "\n".join([*lines, f"stdout: {out!r}", err])


def test_tasks_the_call_left_are_cancelled_before_it_returns() -> None:
    seen: list[str] = []

    async def linger() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    async def execute(args: NoArgs, context: ToolContext) -> str:
        asyncio.get_running_loop().create_task(linger())
        await asyncio.sleep(0)
        return "done"

    leaver = tool(name="leaver", description="leaves a task", parameters=NoArgs, execute=execute)
    result = invoke_tool_sync(leaver, {})
    assert (result.content, result.error, seen) == ("done", None, ["cancelled"])


def test_the_default_executor_is_shut_down_before_it_returns() -> None:
    workers: list[threading.Thread] = []

    def work() -> int:
        workers.append(threading.current_thread())
        return 7

    async def execute(args: NoArgs, context: ToolContext) -> int:
        return await asyncio.get_running_loop().run_in_executor(None, work)

    threaded = tool(name="threaded", description="executor", parameters=NoArgs, execute=execute)
    result = invoke_tool_sync(threaded, {})
    assert (result.content, result.error) == (7, None)
    assert [w.is_alive() for w in workers] == [False], workers


@pytest.mark.anyio
async def test_refused_inside_a_running_loop() -> None:
    echo = tool(name="echo", description="e", parameters=NoArgs, execute=lambda a, c: "x")
    with pytest.raises(RuntimeError, match="cannot block inside a running"):
        invoke_tool_sync(echo, {})
    # The loop it refused to nest in still runs.
    await anyio.sleep(0)


def test_a_session_call_sync_cancels_what_the_call_left_too() -> None:
    seen: list[str] = []

    async def linger() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    async def execute(args: NoArgs, context: ToolContext) -> str:
        asyncio.get_running_loop().create_task(linger())
        await asyncio.sleep(0)
        return "done"

    leaver = tool(name="leaver", description="leaves a task", parameters=NoArgs, execute=execute)
    result = ToolSession([leaver]).call_sync("leaver", {})
    assert (result.content, result.error, seen) == ("done", None, ["cancelled"])


@pytest.mark.anyio
async def test_a_session_call_sync_is_refused_inside_a_running_loop() -> None:
    echo = tool(name="echo", description="e", parameters=NoArgs, execute=lambda a, c: "x")
    with pytest.raises(RuntimeError, match="cannot block inside a running"):
        ToolSession([echo]).call_sync("echo", {})


def _sigint_probe() -> tuple[list[object], object]:
    """A tool that records the SIGINT handler in place while it runs."""
    seen: list[object] = []

    async def execute(args: NoArgs, context: ToolContext) -> str:
        seen.append(signal.getsignal(signal.SIGINT))
        return "done"

    probe = tool(
        name="probe", description="records SIGINT's handler", parameters=NoArgs, execute=execute
    )
    return seen, probe


def test_python_s_sigint_handler_is_put_back_after_the_call() -> None:
    # Python's own handler, as an interactive Python has it (a test run started as a
    # background job of a shell has SIGINT ignored).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        seen, probe = _sigint_probe()
        result = invoke_tool_sync(probe, {})
        after = signal.getsignal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert (result.content, result.error) == ("done", None)
    # The call's own handler while it ran (Ctrl-C cancels it), Python's again after.
    assert len(seen) == 1 and seen[0] is not signal.default_int_handler, seen
    assert after is signal.default_int_handler, after


def test_a_sigint_handler_of_the_application_is_left_in_place() -> None:
    def own(signum: int, frame: object) -> None:
        raise AssertionError("no SIGINT is sent")

    previous = signal.signal(signal.SIGINT, own)
    try:
        seen, probe = _sigint_probe()
        result = invoke_tool_sync(probe, {})
        after = signal.getsignal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert (result.content, result.error) == ("done", None)
    assert seen == [own] and after is own, (seen, after)


_NO_FD_LEFT = r"""
import json, os, resource, sys
from workspace_tools import ToolSession, invoke_tool_sync, workspace_tools

_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))  # few to fill
root = sys.argv[1]
tools = {t.name: t for t in workspace_tools(root)}
session = ToolSession(root)
held = []
try:
    while True:
        held.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    pass
results = [
    invoke_tool_sync(tools["read_file"], {"path": "a.txt"}, call_id="c1"),
    session.call_sync("read_file", {"path": "a.txt"}, call_id="c2"),
]
os.close(held.pop())  # one free: the loop gets its epoll, not its wake-up socket pair
results.append(invoke_tool_sync(tools["read_file"], {"path": "a.txt"}, call_id="c1b"))
held.append(os.open(os.devnull, os.O_RDONLY))  # that epoll was closed: the fd is free
for fd in held:
    os.close(fd)
results.append(invoke_tool_sync(tools["read_file"], {"path": "a.txt"}, call_id="c3"))
print(json.dumps([[r.call_id, r.error_code, r.error, r.content] for r in results]))
"""


def test_no_fd_left_for_the_event_loop_is_a_result_not_an_exception(tmp_path: Path) -> None:
    # The blocking twins make an event loop per call (an epoll and a wake-up pipe): out of
    # descriptors, that is the call's result, with the words every tool gives for it, and
    # nothing on stderr (asyncio's half-made loop, collected, printed an AttributeError).
    (tmp_path / "a.txt").write_text("x\n")
    done = subprocess.run(
        [sys.executable, "-c", _NO_FD_LEFT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    refused = (
        "read_file did not run: Cannot open an event loop for the call: this process has "
        "too many files open; try again when fewer calls run at once"
    )
    assert json.loads(done.stdout) == [
        ["c1", "TOOL_ERROR", refused, None],
        ["c2", "TOOL_ERROR", refused, None],
        ["c1b", "TOOL_ERROR", refused, None],
        ["c3", None, None, "     1\tx"],
    ]
    assert done.stderr == ""


_SEEN: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="unset")


def test_a_sync_tools_call_runs_in_a_thread_of_its_own_that_ends_with_it() -> None:
    ran: list[tuple[threading.Thread, str]] = []

    def execute(args: NoArgs, context: ToolContext) -> str:
        ran.append((threading.current_thread(), _SEEN.get()))
        return "done"

    probe = tool(name="probe", description="d", parameters=NoArgs, execute=execute)
    _SEEN.set("the caller's")
    result = invoke_tool_sync(probe, {})
    assert (result.error, result.content) == (None, "done")
    thread, seen = ran[0]
    # Another thread, seeing the caller's context variables, joined before the call returned.
    assert (thread is threading.current_thread(), seen, thread.is_alive()) == (
        False,
        "the caller's",
        False,
    )


def test_a_sync_tool_past_its_timeout_is_left_and_its_change_refused() -> None:
    release = threading.Event()
    outcome: list[str] = []

    def execute(args: NoArgs, context: ToolContext) -> str:
        release.wait(30)
        try:
            with context.committing():
                outcome.append("committed")
        except Exception as exc:  # the call was cancelled: ToolError ABORTED
            outcome.append(type(exc).__name__)
        return "late"

    slow = tool(name="slow", description="d", parameters=NoArgs, execute=execute)
    result = invoke_tool_sync(slow, {}, timeout=0.2)
    # The caller has its timeout while the tool still waits; then the tool may change nothing.
    assert (result.error_code, release.is_set(), outcome) == ("TOOL_TIMEOUT", False, [])
    release.set()
    assert poll(lambda: list(outcome), bool) == ["ToolError"]


def test_an_exception_of_a_sync_tool_is_its_calls_error() -> None:
    def execute(args: NoArgs, context: ToolContext) -> str:
        raise ValueError("no such thing")

    failing = tool(name="failing", description="d", parameters=NoArgs, execute=execute)
    result = invoke_tool_sync(failing, {})
    assert result.error_code == "TOOL_ERROR"
    assert "no such thing" in (result.error or "")


@pytest.mark.parametrize(
    ("limits", "error", "message"),
    [
        ({"timeout": "3"}, TypeError, "timeout must be seconds as a number (or None), not str '3'"),
        (
            {"timeout": True},
            TypeError,
            "timeout must be seconds as a number (or None), not bool True",
        ),
        ({"timeout": 0}, ValueError, "timeout must be above 0 seconds and finite, not 0"),
        ({"timeout": -1.5}, ValueError, "timeout must be above 0 seconds and finite, not -1.5"),
        ({"max_result_length": -1}, ValueError, "max_result_length must be 0 or more, not -1"),
        (
            {"max_result_length": 2.5},
            TypeError,
            "max_result_length must be a whole number of characters (or None), not float 2.5",
        ),
    ],
)
def test_a_callers_limits_of_the_wrong_kind_are_refused_before_anything_runs(
    tmp_path: Path, limits: dict[str, object], error: type[Exception], message: str
) -> None:
    # A value from a configuration file ("3") gave a bare TypeError from deep inside.
    write = {t.name: t for t in workspace_tools(tmp_path)}["write_file"]
    with pytest.raises(error) as raised:
        invoke_tool_sync(write, {"path": "a.txt", "content": "x"}, **limits)
    assert str(raised.value) == message
    assert not (tmp_path / "a.txt").exists()
