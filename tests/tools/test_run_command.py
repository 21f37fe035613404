"""run_command: nothing leaks, nothing hangs, the model sees what matters."""

from __future__ import annotations

import os
import resource
from pathlib import Path

import anyio
import pytest

from sandbox import Sandbox
from sandbox.layers import BUBBLEWRAP
from tests._processes import survivors
from workspace_tools import ErrorCode, ToolUpdate, invoke_tool
from workspace_tools.tools import workspace_tools

pytestmark = pytest.mark.anyio


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "sub").mkdir()
    return tmp_path


def run_command(root: Path, **options: object):
    return next(t for t in workspace_tools(root, **options) if t.name == "run_command")


async def test_timeout_kills_background_loop_and_keeps_partial_output(
    root: Path, marker: str
) -> None:
    # Only the timeout can end this command; the outer deadline turns a broken timeout
    # into a failure instead of a hang. Its 1 s is many times what the loop needs to
    # start and print twice; the tests below start their trees within 1 s too.
    with anyio.fail_after(60):
        result = await invoke_tool(
            run_command(root),
            {"command": "(while true; do echo c; sleep 0.1; done) & sleep 1000", "timeout": 1},
        )
    assert result.error_code == ErrorCode.TOOL_TIMEOUT
    assert result.details.timed_out is True
    assert result.details.exit_code is None
    assert result.details.stdout.startswith("c\nc\n")
    assert "stdout so far:\nc\nc\n" in result.error
    assert survivors(marker) == []


async def test_timeout_kills_busy_loops_nothing_reparented(root: Path, marker: str) -> None:
    result = await invoke_tool(
        run_command(root),
        {"command": "for i in 1 2; do (while :; do :; done) & done; sleep 100", "timeout": 1},
    )
    assert result.error_code == ErrorCode.TOOL_TIMEOUT
    assert survivors(marker) == []


@pytest.mark.parametrize(
    "command",
    [
        # setsid and a double fork: the grandchild is in its own session, parent gone.
        "setsid bash -c '(sleep 300 &) ; sleep 300' & sleep 300",
        # A child that ignores SIGTERM, and a detached one that does too.
        "trap '' TERM; (trap '' TERM; sleep 300) & setsid bash -c \"trap '' TERM; sleep 300\" &"
        " sleep 300",
    ],
    ids=["setsid-double-fork", "sigterm-trap"],
)
async def test_timeout_kills_detached_and_sigterm_trapping_children(
    root: Path, marker: str, command: str
) -> None:
    result = await invoke_tool(run_command(root), {"command": command, "timeout": 1})
    assert result.error_code == ErrorCode.TOOL_TIMEOUT
    assert survivors(marker) == []


async def test_invoke_timeout_kills_the_tree(root: Path, marker: str) -> None:
    result = await invoke_tool(
        run_command(root), {"command": "setsid sleep 300 & sleep 300"}, timeout=1
    )
    assert result.error_code == ErrorCode.TOOL_TIMEOUT
    assert survivors(marker) == []


async def test_long_output_keeps_head_and_tail_with_counts(root: Path) -> None:
    command = "python3 -c \"print('x'*2_000_000); print('FAILED: test_z')\""
    result = await invoke_tool(run_command(root), {"command": command})
    stdout = result.content["stdout"]
    assert stdout.startswith("x" * 7000 + "\n[... ")
    assert stdout.endswith("x" * (7000 - len("\nFAILED: test_z\n")) + "\nFAILED: test_z\n")
    assert "[... 1,986,016 of 2,000,016 bytes of stdout left out ...]" in stdout
    assert result.details.stdout_bytes == 2_000_016
    assert result.details.truncated is True
    assert "FAILED: test_z" in result.model_text()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_one_gibibyte_of_output_keeps_memory_bounded(root: Path) -> None:
    updates = []
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = await invoke_tool(
        run_command(root),
        {"command": "head -c 1073741824 /dev/zero | tr '\\0' 'y'; echo END"},
        on_update=updates.append,
    )
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert result.details.stdout_bytes == 1024**3 + 4
    assert result.content["stdout"].endswith("yyyEND\n")
    assert grown_kib < 100 * 1024, f"grew by {grown_kib} KiB"
    assert updates


async def test_progress_streams_output_before_the_result(root: Path) -> None:
    # Each tick waits until the update of the one before reached the callback (which
    # leaves a file behind), so every update arrives while the command still runs.
    updates: list[ToolUpdate] = []

    def on_update(update: ToolUpdate) -> None:
        updates.append(update)
        (root / f"seen-{len(updates)}").touch()

    wait = "n=0; until [ -e seen-$i ] || [ $n -ge 3000 ]; do sleep 0.01; n=$((n + 1)); done"
    result = await invoke_tool(
        run_command(root),
        {"command": f"for i in 1 2 3; do echo tick $i; {wait}; done", "timeout": 120},
        on_update=on_update,
    )
    expected = "".join(f"tick {i}\n" for i in range(1, 4))
    assert result.content["stdout"] == expected
    assert [u.content for u in updates] == ["tick 1\n", "tick 2\n", "tick 3\n"]
    assert updates[-1].details == {"stdout_bytes": len(expected), "stderr_bytes": 0}


@pytest.mark.parametrize("via", ["invoke_tool", "workspace_tools"])
async def test_no_progress_in_a_sandbox(root: Path, via: str) -> None:
    updates = []
    box = Sandbox(layers=False)
    try:
        if via == "invoke_tool":
            tool, sandbox = run_command(root), box
        else:
            tool, sandbox = run_command(root, sandbox=box), None
        result = await invoke_tool(
            tool,
            {"command": "for i in 1 2 3; do echo tick $i; sleep 0.2; done"},
            on_update=updates.append,
            sandbox=sandbox,
        )
    finally:
        box.close()
    assert result.content["stdout"] == "tick 1\ntick 2\ntick 3\n"
    assert updates == []


async def test_cwd_outside_root_is_refused(root: Path) -> None:
    result = await invoke_tool(run_command(root), {"command": "pwd", "cwd": "../"})
    assert result.error_code == ErrorCode.OUTSIDE_WORKSPACE


@pytest.mark.parametrize(
    ("cwd", "code"), [("missing", ErrorCode.NOT_FOUND), ("file.txt", ErrorCode.NOT_A_DIRECTORY)]
)
async def test_cwd_must_be_a_directory(root: Path, cwd: str, code: ErrorCode) -> None:
    (root / "file.txt").write_text("x")
    result = await invoke_tool(run_command(root), {"command": "pwd", "cwd": cwd})
    assert result.error_code == code


async def test_runs_in_cwd_inside_root(root: Path) -> None:
    result = await invoke_tool(run_command(root), {"command": "pwd", "cwd": "sub"})
    assert result.content["stdout"] == f"{os.path.realpath(root / 'sub')}\n"


@pytest.mark.parametrize(
    ("passthrough", "expected"), [((), "[]\n"), (("OPENAI_API_KEY",), "[x]\n")]
)
async def test_secret_variables_are_dropped_unless_passed_through(
    root: Path, monkeypatch: pytest.MonkeyPatch, passthrough: tuple[str, ...], expected: str
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    tool = run_command(root, env_passthrough=passthrough)
    result = await invoke_tool(tool, {"command": 'echo "[$OPENAI_API_KEY]"'})
    assert result.content["stdout"] == expected


@pytest.mark.parametrize(
    "name", ["GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "my_credentials", "apikey"]
)
async def test_every_secret_looking_name_is_dropped(
    root: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv(name, "hidden")
    result = await invoke_tool(run_command(root), {"command": "env"})
    assert "hidden" not in result.content["stdout"]


async def test_environment_changes_between_calls_reach_the_next_command(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The command environment is reused while the process environment is unchanged: a
    # variable set, changed or removed later, and a secret set later, must all show.
    tool = run_command(root)
    command = {"command": 'echo "[${WT_LATER-unset}] [${GITHUB_TOKEN-unset}]"'}
    seen = [(await invoke_tool(tool, command)).content["stdout"]]
    monkeypatch.setenv("WT_LATER", "one")
    monkeypatch.setenv("GITHUB_TOKEN", "hidden")
    seen.append((await invoke_tool(tool, command)).content["stdout"])
    monkeypatch.setenv("WT_LATER", "two")
    seen.append((await invoke_tool(tool, command)).content["stdout"])
    monkeypatch.delenv("WT_LATER")
    seen.append((await invoke_tool(tool, command)).content["stdout"])
    assert seen == ["[unset] [unset]\n", "[one] [unset]\n", "[two] [unset]\n", "[unset] [unset]\n"]


async def test_pager_and_git_prompt_are_off(root: Path) -> None:
    result = await invoke_tool(run_command(root), {"command": 'echo "$PAGER $GIT_TERMINAL_PROMPT"'})
    assert result.content["stdout"] == "cat 0\n"


async def test_stdin_is_empty(root: Path) -> None:
    result = await invoke_tool(run_command(root), {"command": "cat; echo done", "timeout": 5})
    assert result.content == {"exit_code": 0, "stdout": "done\n", "stderr": ""}


@pytest.mark.parametrize(
    ("command", "exit_code"), [("exit 3", 3), ("false", 1), ("no_such_command_zz", 127)]
)
async def test_exit_code_is_a_normal_result(root: Path, command: str, exit_code: int) -> None:
    result = await invoke_tool(run_command(root), {"command": command})
    assert result.error is None
    assert result.content["exit_code"] == exit_code
    assert result.details.exit_code == exit_code


async def test_background_job_holding_the_pipe_does_not_hold_the_call(
    root: Path, marker: str
) -> None:
    # The background job outlives any wait here: only a call that does not wait for it
    # returns before the deadline.
    with anyio.fail_after(60):
        result = await invoke_tool(run_command(root), {"command": "sleep 300 & echo started"})
    assert result.content["stdout"] == "started\n"
    assert survivors(marker) == []


async def test_stderr_is_kept_apart(root: Path) -> None:
    result = await invoke_tool(run_command(root), {"command": "echo out; echo err >&2"})
    assert result.content == {"exit_code": 0, "stdout": "out\n", "stderr": "err\n"}
    assert result.details.stderr_bytes == 4


CALL_TIMEOUT_ERROR = (
    "Command timed out after the call's timeout of 6 s; it and every process it started "
    "were killed.\nstdout so far:\npartial-out\n\nstderr so far:\nerr-out\n"
)


VIAS = [
    "in-process",
    "workspace-sandbox",
    "workspace-bubblewrap",
    "invoke-sandbox",
    "invoke-bubblewrap",
]


# Each case waits about 5 s: every way in under asyncio, trio's cancellation at both ends
# (in process, and through a call's sandbox with its layers).
@pytest.mark.parametrize(
    ("anyio_backend", "via"),
    [*(("asyncio", via) for via in VIAS), ("trio", "in-process"), ("trio", "invoke-bubblewrap")],
)
async def test_the_calls_timeout_keeps_the_partial_output_and_kills_the_tree(
    root: Path, marker: str, via: str
) -> None:
    # The command stops itself a little before the call's deadline: the same result as
    # its own timeout gives, naming the call's timeout. The marker is exported by the
    # command, so a sandbox's environment allowlist cannot hide the processes it leaves.
    # The call's timeout of 6 s stops the command 1.5 s before it (the sandbox's grace and
    # half a second are kept for stopping the tree): 4.5 s, many times what a loaded
    # machine needs, to start the command (bubblewrap too) and let it print before the
    # deadline; after that it only waits. (With 3 s, a machine at load 3.5 once took
    # more than the second kept for stopping it, and the call's bare timeout came first.)
    command = (
        f"export {marker}; echo partial-out; echo err-out >&2; (setsid sleep 300 &); sleep 300"
    )
    box = Sandbox(layers=via.endswith("bubblewrap")) if via != "in-process" else None
    try:
        if via in ("workspace-sandbox", "workspace-bubblewrap"):
            tool, sandbox = run_command(root, sandbox=box), None
        else:
            tool, sandbox = run_command(root), box
        with anyio.fail_after(60):
            result = await invoke_tool(tool, {"command": command}, timeout=6, sandbox=sandbox)
    finally:
        if box is not None:
            box.close()
    assert (result.error_code, result.error) == (ErrorCode.TOOL_TIMEOUT, CALL_TIMEOUT_ERROR)
    details = result.details.model_dump()
    del details["duration_ms"]
    assert details == {
        "command": command,
        "exit_code": None,
        "timed_out": True,
        "stdout_bytes": 12,
        "stderr_bytes": 8,
        "truncated": False,
        "stopped_processes": 0,
        "stopped_names": [],
        "stdout": "partial-out\n",
        "stderr": "err-out\n",
    }
    assert survivors(marker) == []


async def test_the_commands_own_shorter_timeout_is_the_one_named(root: Path, marker: str) -> None:
    result = await invoke_tool(
        run_command(root), {"command": "echo early; sleep 300", "timeout": 1}, timeout=30
    )
    assert (result.error_code, result.error) == (
        ErrorCode.TOOL_TIMEOUT,
        "Command timed out after 1 s; it and every process it started were killed.\n"
        "stdout so far:\nearly\n",
    )
    assert survivors(marker) == []


@pytest.mark.parametrize(
    ("command", "so_far"),
    [
        ("echo out; sleep 300", "\nstdout so far:\nout\n"),
        ("echo err >&2; sleep 300", "\nstderr so far:\nerr\n"),
        ("sleep 300", ""),
    ],
    ids=["stdout-only", "stderr-only", "silent"],
)
async def test_a_timeout_text_shows_only_the_streams_that_wrote(
    root: Path, marker: str, command: str, so_far: str
) -> None:
    result = await invoke_tool(run_command(root), {"command": command, "timeout": 1}, timeout=30)
    assert (result.error_code, result.error) == (
        ErrorCode.TOOL_TIMEOUT,
        f"Command timed out after 1 s; it and every process it started were killed.{so_far}",
    )
    assert survivors(marker) == []


#: Waits (in the command) until the background job ``$!`` runs ``sleep``, not the shell's
#: fork of itself, so that the name the note shows does not depend on timing.
UNTIL_SLEEPING = 'until [ "$(cat /proc/$!/comm 2>/dev/null)" = sleep ]; do :; done'


@pytest.mark.parametrize(
    ("command", "note", "names"),
    [
        (
            f"sleep 1000 & {UNTIL_SLEEPING}; echo started",
            "1 background process (sleep) was still running when the command ended and was "
            "stopped; start long-running servers or watchers with start_process where it is "
            "offered",
            ["sleep"],
        ),
        (
            f"sleep 1000 >/dev/null 2>&1 & {UNTIL_SLEEPING}; "
            f"sleep 1000 & {UNTIL_SLEEPING}; echo started",
            "2 background processes (sleep) were still running when the command ended and "
            "were stopped; start long-running servers or watchers with start_process where "
            "it is offered",
            ["sleep"],
        ),
    ],
)
@pytest.mark.parametrize("via", ["in-process", "workspace-bubblewrap"])
async def test_background_processes_left_running_are_stopped_and_reported(
    root: Path, marker: str, command: str, note: str, names: list[str], via: str
) -> None:
    # The marker is exported by the command, so a sandbox's environment allowlist cannot
    # hide the processes it leaves.
    command = f"export {marker}; {command}"
    box = Sandbox(layers=True, writable=[str(root)]) if via == "workspace-bubblewrap" else None
    try:
        if box is not None and BUBBLEWRAP not in box.capabilities.values():
            pytest.skip(f"commands do not run under bubblewrap here: {box.capabilities}")
        with anyio.fail_after(60):
            result = await invoke_tool(run_command(root, sandbox=box), {"command": command})
    finally:
        if box is not None:
            box.close()
    assert result.error is None, result.error
    assert result.content == {"exit_code": 0, "stdout": "started\n", "stderr": "", "note": note}
    count = 2 if "2 background" in note else 1
    assert (result.details.stopped_processes, result.details.stopped_names) == (count, names)
    assert survivors(marker) == []


async def test_a_command_that_leaves_nothing_running_gets_no_note(root: Path) -> None:
    # The background job ends before the command does: nothing is stopped.
    result = await invoke_tool(run_command(root), {"command": "sleep 0 & wait; echo done"})
    assert result.content == {"exit_code": 0, "stdout": "done\n", "stderr": ""}
    assert (result.details.stopped_processes, result.details.stopped_names) == (0, [])


async def test_a_timeout_keeps_its_message_and_reports_nothing_stopped(
    root: Path, marker: str
) -> None:
    with anyio.fail_after(60):
        result = await invoke_tool(
            run_command(root), {"command": "sleep 1000 & sleep 1000", "timeout": 1}
        )
    assert result.error_code == ErrorCode.TOOL_TIMEOUT
    assert result.error == (
        "Command timed out after 1 s; it and every process it started were killed."
    ), result.error
    assert "background process" not in result.error
    assert result.details.stopped_processes == 0
    assert survivors(marker) == []


async def test_the_default_working_directory_is_refused_once_the_root_moved(
    tmp_path: Path,
) -> None:
    # The root itself (cwd ".") opens without resolving while its real path is the
    # root's; swapped for a link out of the tree, or gone, it gets the errors any other
    # working directory would, and the command never runs.
    root, outside = tmp_path / "ws", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    run = run_command(root)
    assert (await invoke_tool(run, {"command": "true"})).content["exit_code"] == 0
    root.rename(tmp_path / "ws-old")
    root.symlink_to(outside)
    result = await invoke_tool(run, {"command": "touch ran"})
    assert (result.error_code, result.error) == (
        ErrorCode.OUTSIDE_WORKSPACE,
        "Path '.' is outside the workspace root through a symbolic link; use a path inside it",
    )
    assert list(outside.iterdir()) == []
    root.unlink()
    result = await invoke_tool(run, {"command": "touch ran"})
    assert (result.error_code, result.error) == (
        ErrorCode.NOT_FOUND,
        "Working directory not found: .",
    )


@pytest.mark.parametrize("seen_before", [True, False])
async def test_a_root_removed_once_opened_is_refused_and_nothing_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seen_before: bool
) -> None:
    # The root removed between its opening and the command's start (here: right after
    # the open) is still enterable through its fd: the command must not start there,
    # whether the root's identity was known from an earlier call or not.
    from workspace_tools.tools import _command_runner as module

    root = tmp_path / "ws"
    root.mkdir()
    run = run_command(root)
    if seen_before:
        assert (await invoke_tool(run, {"command": "true"})).content["exit_code"] == 0
    opened: list[int] = []
    real_open_dir = module.open_dir

    def open_then_remove(base: str, rel: str) -> int:
        fd = real_open_dir(base, rel)
        opened.append(fd)
        if not opened[1:]:
            os.rmdir(base)
        return fd

    monkeypatch.setattr(module, "open_dir", open_then_remove)
    result = await invoke_tool(run, {"command": "echo ran > /dev/stderr; touch ran"})
    assert (result.error_code, result.error) == (
        ErrorCode.NOT_FOUND,
        "Working directory . changed while the command was starting; check it and run the "
        "command again",
    ), (result.error, result.content)
    assert not root.exists()
    assert len(opened) == 1, opened


@pytest.mark.parametrize(
    ("cwd", "message"),
    [
        ("Sub", "Working directory not found: Sub; did you mean 'sub'?"),
        ("./sub/ ", "Working directory not found: sub/ ; did you mean 'sub'?"),
        ("nope", "Working directory not found: nope"),
    ],
)
async def test_a_missing_working_directory_names_the_one_most_likely_meant(
    root: Path, cwd: str, message: str
) -> None:
    from workspace_tools import ShellSession, shell_tools

    result = await invoke_tool(run_command(root), {"command": "touch ran", "cwd": cwd})
    assert (result.error_code, result.error) == (ErrorCode.NOT_FOUND, message)
    with ShellSession(root, sandbox=None) as shells:
        start = next(t for t in shell_tools(shells) if t.name == "start_process")
        started = await invoke_tool(start, {"command": "touch ran", "cwd": cwd})
    assert (started.error_code, started.error) == (ErrorCode.NOT_FOUND, message)
    assert not (root / "ran").exists() and not (root / "sub" / "ran").exists()
