"""Under bubblewrap a command starts in the directory its caller opened, or not at all.

bubblewrap enters the working directory by path inside its namespace. With a directory of
the workspace swapped for a link to outside (``renameat2(RENAME_EXCHANGE)`` in a loop), a
path checked on the host can name the outside directory by the time bubblewrap enters it.
``Sandbox.run(cwd_fd=...)`` checks the directory entered against the descriptor's
``(st_dev, st_ino)`` before exec. Each command prints the identity of the directory it
started in; the host compares it with the identities it took of the inside and outside
directories. A control run without the descriptor shows the swap does start commands
outside on this host.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox import Confinement, Sandbox, SandboxError
from sandbox.layers import BUBBLEWRAP, bwrap
from tests.test_discovery_race import _exchange, _renameat2
from workspace_tools import invoke_tool, workspace_tools

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(bwrap.available() is not None, reason=str(bwrap.available())),
]

# The race is met in about half the starts (the first test prints its count), and the
# control shows a start without the check goes outside on its first try: 200 starts meet
# the race about a hundred times.
ITERATIONS = 200
MARKER = "OUTSIDE-MARKER-5d1e08"
# Prints the identity of the directory the command started in, then reads relative to it.
PRINT_START = "stat -c %d:%i .; cat secret.txt"


def _identity(path: Path) -> str:
    info = os.stat(path)
    return f"{info.st_dev}:{info.st_ino}"


class Swapped:
    """``ws/d`` is a directory one moment and a link to ``outside/`` the next; the outside
    directory is writable in the sandbox too, so that bubblewrap can enter it."""

    def __init__(self, tmp_path: Path) -> None:
        self.root, self.outside = tmp_path / "ws", tmp_path / "outside"
        (self.root / "d").mkdir(parents=True)
        self.outside.mkdir()
        (self.root / "d" / "secret.txt").write_text("inside\n")
        (self.outside / "secret.txt").write_text(f"{MARKER}\n")
        (self.root / "link").symlink_to(self.outside)
        self.inside_id = _identity(self.root / "d")
        self.outside_id = _identity(self.outside)
        self.swaps = 0
        self.outcomes: Counter[str] = Counter()

    def judge(self, stdout: str) -> None:
        """Count where a command that ran started, by the identity it printed."""
        started = stdout.splitlines()[0] if stdout else ""
        if MARKER in stdout or started == self.outside_id:
            self.outcomes["outside"] += 1
        elif started == self.inside_id:
            self.outcomes["inside"] += 1
        else:
            self.outcomes[f"elsewhere {stdout!r}"] += 1


@pytest.fixture
def swapped(tmp_path: Path) -> Iterator[Swapped]:
    """Exchanges ``ws/d`` and ``ws/link`` in a thread until the test ends."""
    state = Swapped(tmp_path)
    renameat2 = _renameat2()
    a, b = os.fsencode(state.root / "d"), os.fsencode(state.root / "link")
    try:
        if renameat2 is None:
            raise OSError("no renameat2")
        _exchange(renameat2, a, b)
        _exchange(renameat2, a, b)
    except OSError as exc:
        pytest.skip(f"renameat2(RENAME_EXCHANGE) is not available here: {exc}")
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            _exchange(renameat2, a, b)
            state.swaps += 1

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()


@pytest.fixture
def box(swapped: Swapped) -> Iterator[Sandbox]:
    sandbox = Sandbox(writable=[str(swapped.root), str(swapped.outside)])
    assert BUBBLEWRAP in sandbox.capabilities.values(), sandbox.capabilities
    yield sandbox
    sandbox.close()


def _open_inside(path: Path) -> int:
    """The directory at ``path`` opened without following a link, as soon as it is the
    directory rather than the link (the swap makes it each in turn). A loaded machine can
    leave the swapping thread unscheduled for a while: wait for the swap by time, with a
    wide margin, not by a count of tries."""
    deadline = time.monotonic() + 60
    tries = 0
    while time.monotonic() < deadline:
        tries += 1
        try:
            return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except NotADirectoryError:
            continue
    raise AssertionError(f"{path} stayed a link for 60 s ({tries:,} opens)")


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the race, not the loop
async def test_command_never_starts_outside_the_directory_opened(
    swapped: Swapped, box: Sandbox
) -> None:
    cwd = str(swapped.root / "d")
    before = swapped.swaps
    for _ in range(ITERATIONS):
        fd = _open_inside(swapped.root / "d")
        try:
            result = await box.run(["sh", "-c", PRINT_START], cwd=cwd, cwd_fd=fd)
        except SandboxError as exc:
            if str(exc).startswith(f"cannot start in {cwd!r}: the working directory changed"):
                swapped.outcomes["refused"] += 1
            else:
                swapped.outcomes[f"error {exc}"] += 1
            continue
        finally:
            os.close(fd)
        swapped.judge(result.stdout.complete.decode(errors="replace"))
    print(f"{dict(swapped.outcomes)}; {swapped.swaps - before} exchanges")
    assert swapped.outcomes["outside"] == 0, dict(swapped.outcomes)
    assert set(swapped.outcomes) <= {"inside", "refused"}, swapped.outcomes
    # The race was met: commands ran inside, and the check refused the swapped ones.
    assert swapped.outcomes["inside"] > 0, dict(swapped.outcomes)
    assert swapped.outcomes["refused"] > 0, dict(swapped.outcomes)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the race, not the loop
async def test_run_command_in_a_bubblewrap_sandbox_never_starts_outside(
    swapped: Swapped, box: Sandbox
) -> None:
    tool = {t.name: t for t in workspace_tools(swapped.root, sandbox=box)}["run_command"]
    before = swapped.swaps
    calls = 0
    # Most calls meet the link when the tool opens the directory: go on past ITERATIONS
    # until some command did start, so that the check met the race.
    while calls < ITERATIONS or (not swapped.outcomes["inside"] and calls < 20 * ITERATIONS):
        calls += 1
        result = await invoke_tool(tool, {"command": PRINT_START, "cwd": "d"})
        if result.error_code is not None:
            swapped.outcomes[result.error_code.value] += 1
            assert MARKER not in (result.error or ""), result.error
            continue
        swapped.judge(result.content["stdout"])
    print(f"{calls} calls: {dict(swapped.outcomes)}; {swapped.swaps - before} exchanges")
    assert swapped.outcomes["outside"] == 0, dict(swapped.outcomes)
    assert set(swapped.outcomes) <= {"inside", "NOT_FOUND", "OUTSIDE_WORKSPACE"}, swapped.outcomes
    assert swapped.outcomes["inside"] > 0, dict(swapped.outcomes)
    assert swapped.swaps - before > ITERATIONS


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the race, not the loop
async def test_control_without_the_check_the_swap_starts_commands_outside(
    swapped: Swapped, box: Sandbox
) -> None:
    cwd = str(swapped.root / "d")
    index = 0
    for index in range(ITERATIONS):  # noqa: B007 - printed below
        try:
            result = await box.run(["sh", "-c", PRINT_START], cwd=cwd)
        except SandboxError:
            continue  # the supervisor's own chdir met the link's target or the swap
        swapped.judge(result.stdout.complete.decode(errors="replace"))
        if swapped.outcomes["outside"]:
            break
    print(f"started outside after {index + 1} commands: {dict(swapped.outcomes)}")
    assert swapped.outcomes["outside"] > 0, dict(swapped.outcomes)


def test_wrapped_argv_enters_and_checks_before_exec() -> None:
    argv = bwrap.wrap_argv(
        Confinement(writable=("/ws",)), ["make", "-j2"], "/ws/d", {}, cwd_identity=(5, 77)
    )
    command = argv[argv.index("--") + 1 :]
    stat = shutil.which("stat", path=os.defpath)
    if stat is None:
        pytest.skip("no stat program: the check runs in the interpreter (tested below)")
    assert command[:2] == ["/bin/sh", "-c"]
    assert command[3:] == ["sh", "/ws/d", "5:77", "make", "-j2"]
    assert f"{stat} -c %d:%i ." in command[2]


def _refusal(cwd: str) -> str:
    return (
        f"cannot start in {cwd!r}: the working directory changed while the command was "
        "starting (it is no longer the directory that was opened); nothing ran. Check the "
        "directory and run the command again"
    )


@pytest.mark.parametrize("stat_installed", [True, False], ids=["stat", "interpreter"])
async def test_check_runs_in_the_right_directory_and_refuses_any_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stat_installed: bool
) -> None:
    if not stat_installed:
        which = shutil.which
        monkeypatch.setattr(
            bwrap.shutil, "which", lambda name, **kw: None if name == "stat" else which(name, **kw)
        )
    a, b, gone = tmp_path / "a", tmp_path / "b", tmp_path / "gone"
    for directory in (a, b, gone):
        directory.mkdir()
    # A directory of the host that the sandbox's private /tmp hides.
    hidden = tempfile.mkdtemp(dir="/tmp")
    (tmp_path / "hidden").symlink_to(hidden)
    sandbox = Sandbox(writable=[str(tmp_path)])
    fd_a = os.open(a, os.O_RDONLY | os.O_DIRECTORY)
    fd_gone = os.open(gone, os.O_RDONLY | os.O_DIRECTORY)
    gone.rmdir()
    env = {"PATH": os.defpath, "A": "1"}
    refused = {}
    try:
        ran = await sandbox.run(["env"], cwd=str(a), cwd_fd=fd_a, env=env)
        for cwd, fd in ((b, fd_a), (gone, fd_gone), (tmp_path / "hidden", fd_a)):
            with pytest.raises(SandboxError) as raised:
                await sandbox.run(["sh", "-c", "echo ran"], cwd=str(cwd), cwd_fd=fd, env=env)
            refused[cwd.name] = str(raised.value)
    finally:
        os.close(fd_a)
        os.close(fd_gone)
        os.rmdir(hidden)
        sandbox.close()
    # The command's environment is the one given (and the private TMPDIR), with PWD
    # naming where it started.
    lines = ran.stdout.complete.decode().splitlines()
    assert (
        ran.exit_code,
        sorted(v for v in lines if not v.startswith("TMPDIR=")),
        ran.stderr.complete,
    ) == (
        0,
        ["A=1", f"PATH={os.defpath}", f"PWD={a}"],
        b"",
    )
    assert refused == {
        "b": _refusal(str(b)),
        "gone": _refusal(str(gone)),
        "hidden": _refusal(str(tmp_path / "hidden")),
    }


async def test_command_exiting_like_the_check_is_a_result(tmp_path: Path) -> None:
    # Only the check's exact output and status are its refusal; a command's own exit 125
    # with other output is the command's result.
    sandbox = Sandbox(writable=[str(tmp_path)])
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        result = await sandbox.run(
            ["sh", "-c", "echo own >&2; exit 125"], cwd=str(tmp_path), cwd_fd=fd
        )
    finally:
        os.close(fd)
        sandbox.close()
    assert (result.exit_code, result.stderr.complete) == (125, b"own\n")
