"""The sandbox keeps each promise, checked on the host.

Every promise runs once without the protection ("plain") to prove the setup would have
let the action through, so that a broken setup cannot pass as a denial; the check looks
at the host (a file, a listener), not at the exit code.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import pickle
import secrets
import select
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from sandbox import Sandbox, SandboxError, SandboxLimits, SandboxUnavailable, UnpicklableCall
from sandbox import _sandbox as sandbox_module
from sandbox.layers import LANDLOCK, MOUNT_NAMESPACE, SECCOMP, landlock, missing, mountns, seccomp
from sandbox.layers._plan import LayerPlan
from sandbox.spawn._tree import descendants
from tests._processes import command_line, marked_processes, survivors
from tests._waiting import DEADLINE, poll_async
from tests.sandbox._boxes import NewBox, call_on_a_new_worker, call_worker
from workspace_tools import ErrorCode, invoke_tool, tool
from workspace_tools.tools import workspace_tools

pytestmark = pytest.mark.anyio


@pytest.fixture
def plain(new_box: NewBox) -> Sandbox:
    """No layer, network on: the control run of each promise."""
    return new_box(layers=False, network=True)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


def _skip_unless(box: Sandbox, protection: str, kind: str = "commands") -> None:
    caps = box.capabilities if kind == "commands" else box.call_capabilities
    if protection not in caps:
        pytest.skip(f"{protection} not enforced for {kind} here: {missing(protection)}")


MODES = ["plain", "probed", "landlock"]


def command_box(
    new_box: NewBox,
    mode: str,
    monkeypatch: pytest.MonkeyPatch,
    protection: str,
    **kwargs: Any,
) -> Sandbox:
    """A sandbox for a command promise test: none ("plain", the control run), the layers
    the probe picked ("probed", bubblewrap where it works), or Landlock with seccomp
    forced ("landlock", what a host without bubblewrap uses)."""
    if mode == "plain":
        return new_box(layers=False, network=True)
    if mode == "landlock":
        if not (landlock.works() and seccomp.works() and mountns.works()):
            pytest.skip(
                "Landlock, seccomp or a mount namespace does not work here: " + missing(protection)
            )
        forced = {
            "write_confinement": MOUNT_NAMESPACE,
            "read_denial": LANDLOCK,
            "network_off": SECCOMP,
            "host_exec_protection": MOUNT_NAMESPACE,
        }
        monkeypatch.setattr(
            sandbox_module, "plan_layers", lambda: LayerPlan(commands=forced, calls={})
        )
    box = new_box(**kwargs)
    _skip_unless(box, protection)
    return box


# --- writes outside the workspace ------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_command_cannot_write_outside_the_workspace(
    new_box: NewBox, tmp_path: Path, workspace: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "outside.txt"
    box = command_box(new_box, mode, monkeypatch, "write_confinement", writable=[str(workspace)])
    result = await box.run(
        ["bash", "-c", f"echo ran; echo inside > in.txt; echo x > {target}"], cwd=str(workspace)
    )
    assert result.stdout.complete == b"ran\n"
    assert (workspace / "in.txt").read_text() == "inside\n"
    assert target.exists() is (mode == "plain")


@pytest.mark.parametrize("mode", MODES)
async def test_command_starts_with_no_signal_blocked(
    new_box: NewBox, workspace: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The supervisor blocks SIGCHLD for itself (it reads its children's ends from a
    # signalfd); whichever way it starts a command (posix_spawn, or a fork that applies
    # layers first, under bubblewrap or not), the command starts with nothing blocked.
    box = command_box(new_box, mode, monkeypatch, "write_confinement", writable=[str(workspace)])
    result = await box.run(["grep", "^SigBlk:", "/proc/self/status"], cwd=str(workspace))
    assert result.stdout.complete == b"SigBlk:\t0000000000000000\n"


@pytest.mark.parametrize("confined", [False, True], ids=["plain", "sandbox"])
async def test_call_cannot_write_outside_the_workspace(
    new_box: NewBox, plain: Sandbox, tmp_path: Path, workspace: Path, confined: bool
) -> None:
    target = tmp_path / "outside.txt"
    box = new_box(writable=[str(workspace)]) if confined else plain
    if confined:
        _skip_unless(box, "write_confinement", "calls")

    def write_both() -> str:
        (workspace / "in.txt").write_text("inside")
        try:
            target.write_text("x")
        except OSError as exc:
            return errno.errorcode[exc.errno or 0]
        return "written"

    # The call's view outside the workspace is a read-only mount.
    assert await box.call(write_both) == ("EROFS" if confined else "written")
    assert (workspace / "in.txt").read_text() == "inside"
    assert target.exists() is not confined


# --- reads of secrets ------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_secret_file_is_not_readable(
    new_box: NewBox, tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = secrets.token_hex(16)
    secret = tmp_path / "secret.txt"
    secret.write_text(token)
    box = command_box(new_box, mode, monkeypatch, "read_denial", read_denied=[str(secret)])
    result = await box.run(["bash", "-c", f"echo ran; cat {secret}"])
    seen = result.stdout.complete + result.stderr.complete
    assert seen.startswith(b"ran\n")
    assert (token.encode() in seen) is (mode == "plain")


@pytest.mark.parametrize("confined", [False, True], ids=["plain", "sandbox"])
async def test_secret_file_is_not_readable_by_a_call(
    new_box: NewBox, plain: Sandbox, tmp_path: Path, confined: bool
) -> None:
    token = secrets.token_hex(16)
    secret = tmp_path / "secret.txt"
    secret.write_text(token)
    box = new_box(read_denied=[str(secret)]) if confined else plain
    if confined:
        _skip_unless(box, "read_denial", "calls")

    def read() -> str:
        try:
            return secret.read_text()
        except PermissionError:
            return "denied"

    assert (await box.call(read) == token) is not confined


# --- network ---------------------------------------------------------------------------


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.create_server(("127.0.0.1", 0))
    server.setblocking(False)
    yield server
    server.close()


def _accepted(server: socket.socket) -> bool:
    """Whether a connection is queued on ``server``. On loopback, connect() returns once
    the handshake is done: a connection the child made is queued before it exited, so
    there is nothing to wait for."""
    if not select.select([server], [], [], 0)[0]:
        return False
    server.accept()[0].close()
    return True


CONNECT = (
    "import socket, sys; print('ran', flush=True); "
    "socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=3).close()"
)


@pytest.mark.parametrize("mode", MODES)
async def test_network_is_off(
    new_box: NewBox, listener: socket.socket, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = command_box(new_box, mode, monkeypatch, "network_off", network=False)
    port = str(listener.getsockname()[1])
    result = await box.run([sys.executable, "-c", CONNECT, port])
    assert result.stdout.complete == b"ran\n"
    assert _accepted(listener) is (mode == "plain")


@pytest.mark.parametrize("confined", [False, True], ids=["plain", "sandbox"])
async def test_network_is_off_for_a_call(
    new_box: NewBox, plain: Sandbox, listener: socket.socket, confined: bool
) -> None:
    box = new_box(network=False) if confined else plain
    if confined:
        _skip_unless(box, "network_off", "calls")
    port = listener.getsockname()[1]

    def connect() -> str:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=3).close()
        except OSError:
            return "refused"
        return "connected"

    assert await box.call(connect) == ("refused" if confined else "connected")
    assert _accepted(listener) is not confined


@pytest.mark.parametrize("mode", MODES)
async def test_host_unix_socket_is_off(
    new_box: NewBox, tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "host.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen()
    server.setblocking(False)
    try:
        box = command_box(new_box, mode, monkeypatch, "network_off", network=False)
        code = (
            "import socket, sys; print('ran', flush=True); "
            "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.close()"
        )
        result = await box.run([sys.executable, "-c", code, path])
        assert result.stdout.complete == b"ran\n"
        assert _accepted(server) is (mode == "plain")
    finally:
        server.close()


# --- process count ---------------------------------------------------------------------


# Forks up to 20 children. Each child confirms through a pipe that it runs, then lives
# until the parent exits (end of file on a pipe only the parent holds). The parent prints
# how many it forked and what stopped it once every child confirmed, then stays until the
# host counted and sent SIGUSR1 (60 s at most, so nothing hangs).
FORK_20 = """
import errno, os, signal
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
ready_r, ready_w = os.pipe()
hold_r, hold_w = os.pipe()
forked, refused = 0, "none"
for _ in range(20):
    try:
        pid = os.fork()
    except OSError as exc:
        refused = errno.errorcode.get(exc.errno, str(exc.errno))
        break
    if pid == 0:
        os.close(hold_w)
        os.write(ready_w, b"+")
        os.read(hold_r, 1)
        os._exit(0)
    forked += 1
os.close(hold_r)
confirmed = 0
while confirmed < forked:
    confirmed += len(os.read(ready_r, forked - confirmed))
print(forked, refused, flush=True)
signal.sigtimedwait({signal.SIGUSR1}, 60)
"""
CAP = 8


def _bwrap_ancestors(pids: list[int]) -> int:
    """How many bubblewrap processes are above the topmost of ``pids`` (0 without it)."""
    chosen = set(pids)
    tops = [pid for pid in pids if _parent(pid) not in chosen]
    count, pid = 0, _parent(tops[0]) if len(tops) == 1 else 0
    while pid > 1 and _program_name(pid) == "bwrap":
        count, pid = count + 1, _parent(pid)
    return count


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _program_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


@pytest.mark.parametrize("confined", [False, True], ids=["plain", "sandbox"])
async def test_fork_loop_is_capped(
    new_box: NewBox, confined: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = f"WT_TEST_MARKER={secrets.token_hex(12)}"
    monkeypatch.setenv(*marker.split("="))
    allow = {"PATH", "WT_TEST_MARKER"}
    box = (
        new_box(max_processes=CAP, env_allowlist=allow)
        if confined
        else new_box(layers=False, env_allowlist=allow)
    )
    if confined:
        _skip_unless(box, "process_cap")
    # Every process of the program carries the marker. bubblewrap's own processes and the
    # shell that reports what the command left running are not the command's: the command
    # itself has CAP processes when a fork is refused, as it has without bubblewrap.
    expected = CAP if confined else 21
    printed = anyio.Event()
    alive: list[tuple[int, list[str]]] = []  # (pid, argv) of each marked process
    wrappers: list[int] = []  # bubblewrap's processes above the program

    def on_output(stream: str, chunk: bytes) -> None:
        printed.set()

    def is_program(argv: list[str]) -> bool:
        return argv[1:] == ["-c", FORK_20]

    async def count_then_release() -> None:
        await printed.wait()
        try:
            # The whole tree is up once the line is out; the wait only covers /proc lag.
            found = await poll_async(
                lambda: marked_processes(marker),
                lambda pids: sum(is_program(command_line(pid)) for pid in pids) == expected,
            )
            alive.extend((pid, command_line(pid)) for pid in found)
            wrappers.extend([_bwrap_ancestors(found)])
        finally:
            for pid in marked_processes(marker):
                if is_program(command_line(pid)):  # the children block SIGUSR1
                    # One released may end before it is signalled (its parent went first).
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGUSR1)

    async with anyio.create_task_group() as group:
        group.start_soon(count_then_release)
        result = await box.run([sys.executable, "-c", FORK_20], on_output=on_output, timeout=90)
        group.cancel_scope.cancel()

    words = [*result.stdout.complete.decode(errors="replace").split(), "", ""]
    forked, refused = int(words[0]) if words[0].isdigit() else -1, words[1]
    programs = sum(is_program(argv) for _, argv in alive)
    others = [argv[:1] for _, argv in alive if not is_program(argv)]
    seen = (
        f"forked {forked} (stopped by {refused!r}); {len(alive)} marked processes alive, "
        f"{programs} of them the program, the others {others}, {wrappers} bwrap above them"
        f"; exit {result.exit_code}, stderr {result.stderr.complete[-500:]!r}"
    )
    if confined:
        # The fork that would have given the command CAP + 1 processes failed.
        assert (programs, forked, refused) == (CAP, CAP - 1, "EAGAIN"), seen
    else:
        assert (forked, refused, len(alive), programs) == (20, "none", 21, 21), seen
    assert result.exit_code == 0, seen
    assert survivors(marker) == []


# --- memory ----------------------------------------------------------------------------

TOUCH_GIB = "b = bytearray(1 << 30); b[::4096] = b'y' * len(b[::4096]); print('touched')"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_memory_toucher_is_stopped_under_a_memory_limit(new_box: NewBox) -> None:
    box = new_box(layers=False, limits=SandboxLimits(memory_bytes=256 * 1024**2))
    result = await box.run([sys.executable, "-c", TOUCH_GIB])
    assert result.stdout.complete == b""
    assert b"MemoryError" in result.stderr.complete
    with pytest.raises(MemoryError):
        await box.call(lambda: bytearray(1 << 30))


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_memory_toucher_runs_without_a_limit(plain: Sandbox) -> None:
    with open("/proc/meminfo") as f:
        available_kib = next(int(x.split()[1]) for x in f if x.startswith("MemAvailable"))
    if available_kib < 3 * 1024**2:
        pytest.skip("needs 3 GiB of free memory to touch 1 GiB without a limit")
    result = await plain.run([sys.executable, "-c", TOUCH_GIB])
    assert result.stdout.complete == b"touched\n"


# --- crashes and errors ----------------------------------------------------------------


class NoArgs(__import__("pydantic").BaseModel):
    pass


def _segfault(args: NoArgs, context: object) -> str:
    ctypes.string_at(0)
    return "unreachable"


def _answer(args: NoArgs, context: object) -> str:
    return f"pid {os.getpid()}"


async def test_segfault_in_the_sandbox_is_sandbox_error_naming_sigsegv(new_box: NewBox) -> None:
    crashing = tool(name="crash", description="segfaults", parameters=NoArgs, execute=_segfault)
    answering = tool(name="answer", description="answers", parameters=NoArgs, execute=_answer)
    box = new_box()
    result = await invoke_tool(crashing, {}, sandbox=box)
    assert result.error_code == ErrorCode.SANDBOX_ERROR
    assert result.error == "the sandboxed call was killed by SIGSEGV"
    after = await invoke_tool(answering, {}, sandbox=box)
    assert after.error is None
    assert after.content != f"pid {os.getpid()}"


async def test_call_returns_result_and_reraises_exceptions(plain: Sandbox) -> None:
    def fail() -> None:
        raise KeyError("missing")

    async def add(a: int, b: int) -> int:
        return a + b

    assert await plain.call(add, 2, 3) == 5
    with pytest.raises(KeyError, match="missing"):
        await plain.call(fail)


async def test_calls_are_collected_without_pidfds_too(monkeypatch: pytest.MonkeyPatch) -> None:
    # Where pidfd_open is missing (macOS, old Linux) a waiting thread stands in for it.
    def no_pidfd(pid: int) -> int:
        raise OSError(errno.ENOSYS, "pidfd_open")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    box = Sandbox(layers=False)
    try:
        assert await box.call(pow, 2, 10) == 1024
        with pytest.raises(SandboxError, match="exited \\(status 3\\) without a result"):
            await box.call(os._exit, 3)
        with pytest.raises(SandboxError, match="killed by SIGSEGV"):
            await box.call(ctypes.string_at, 0)
    finally:
        box.close()


async def test_call_exiting_without_result_is_sandbox_error(plain: Sandbox) -> None:
    with pytest.raises(SandboxError, match="exited \\(status 3\\) without a result"):
        await plain.call(os._exit, 3)


async def test_call_timeout_stops_the_child_and_its_tree(
    new_box: NewBox, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = secrets.token_hex(12)
    monkeypatch.setenv("WT_TEST_MARKER", marker)
    box = new_box(
        layers=False,
        env_allowlist={"PATH", "WT_TEST_MARKER"},
        limits=SandboxLimits(timeout_seconds=1, grace_seconds=0.2),
    )

    def spawn_and_hang() -> None:
        os.system("setsid sleep 300 & sleep 300")

    with pytest.raises(TimeoutError):
        await box.call(spawn_and_hang)
    assert survivors(f"WT_TEST_MARKER={marker}") == []


# --- capabilities and required protections --------------------------------------------


def test_portable_level_reports_only_the_tree_stop() -> None:
    assert Sandbox(layers=False).capabilities == {"tree_stop": "subreaper"}
    assert Sandbox(layers=False).call_capabilities == {}


def test_required_protection_no_layer_gives_raises_naming_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sandbox_module, "plan_layers", LayerPlan)
    with pytest.raises(SandboxUnavailable) as raised:
        Sandbox(network=False, require=["network_off"])
    assert raised.value.protection == "network_off"
    assert raised.value.fix == missing("network_off")
    assert str(raised.value) == f"sandbox cannot enforce network_off: {missing('network_off')}"


def test_process_cap_required_without_cgroup_raises_or_is_enforced() -> None:
    try:
        box = Sandbox(max_processes=10, require=["process_cap"])
    except SandboxUnavailable as exc:
        assert exc.fix == missing("process_cap")
    else:
        assert box.capabilities["process_cap"] in (
            "cgroup-v2",
            "cgroup-v1",
            "user-namespace-nproc",
        )


@pytest.mark.parametrize(
    ("protection", "asks", "fix"),
    [
        ("read_denial", {"allow_read": ["/"]}, "read_denied=[paths]"),
        ("network_off", {"network": True}, "network=False"),
        ("process_cap", {}, "max_processes=N"),
    ],
)
def test_required_protection_must_be_asked_for(protection: str, asks: dict, fix: str) -> None:
    with pytest.raises(ValueError) as raised:
        Sandbox(require=[protection], layers=False, **asks)
    assert str(raised.value) == f"{protection} is required but not asked for: pass {fix}"


async def test_protection_missing_for_calls_is_sandbox_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan = LayerPlan(commands={"network_off": "bubblewrap"}, calls={})
    monkeypatch.setattr(sandbox_module, "plan_layers", lambda: plan)
    box = Sandbox(network=False, require=["network_off"], allow_read=["/"])
    answering = tool(name="answer", description="answers", parameters=NoArgs, execute=_answer)
    result = await invoke_tool(answering, {}, sandbox=box)
    assert result.error_code == ErrorCode.SANDBOX_UNAVAILABLE
    assert "network_off" in result.error


# --- the portable level ----------------------------------------------------------------


async def test_environment_is_allowlisted(new_box: NewBox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    monkeypatch.setenv("LC_TIME", "C")
    result = await new_box(layers=False, env_allowlist={"PATH"}).run(["env"])
    names = {line.split(b"=", 1)[0] for line in result.stdout.complete.splitlines()}
    assert names == {b"PATH", b"LC_TIME"}


async def test_resource_limits_apply(new_box: NewBox) -> None:
    limits = SandboxLimits(
        cpu_seconds=7, open_files=50, file_size_bytes=1024 * 10
    )  # bash counts 1 KiB blocks
    result = await new_box(layers=False, limits=limits).run(
        ["bash", "-c", "ulimit -t; ulimit -n; ulimit -f"]
    )
    assert result.stdout.complete == b"7\n50\n10\n"


async def test_stdin_is_dev_null_and_session_is_new(plain: Sandbox) -> None:
    result = await plain.run(["bash", "-c", "cat; ps -o sid= -p $$; echo $$"])
    sid, pid = result.stdout.complete.split()
    assert sid == pid


async def test_output_cap_keeps_head_and_tail_and_counts_all(new_box: NewBox) -> None:
    box = new_box(layers=False, limits=SandboxLimits(output_bytes=100))
    result = await box.run([sys.executable, "-c", "print('a' * 1000 + 'END')"])
    assert result.stdout.head == b"a" * 50
    assert result.stdout.tail == b"a" * 46 + b"END\n"
    assert result.stdout.total_bytes == 1004
    assert result.stdout.omitted_bytes == 904


async def test_workspace_tools_in_a_sandbox_confine_commands_to_the_root(
    new_box: NewBox, tmp_path: Path, workspace: Path
) -> None:
    box = new_box()
    _skip_unless(box.confined_to(str(workspace)), "write_confinement")
    target = tmp_path / "outside.txt"
    tools = {t.name: t for t in workspace_tools(workspace, sandbox=box)}
    result = await invoke_tool(
        tools["run_command"], {"command": f"echo ran > in.txt; echo x > {target}"}
    )
    assert result.error is None
    assert (workspace / "in.txt").read_text() == "ran\n"
    assert not target.exists()


# --- calls: a fresh process each, from a warm worker the spawn server forked ----------


async def test_each_call_runs_in_a_fresh_child_and_changes_stay_there() -> None:
    seen: list[int] = []

    def record() -> tuple[int, int]:
        seen.append(1)
        return os.getpid(), len(seen)

    box = Sandbox(layers=False)
    try:
        results = [await box.call(record) for _ in range(4)]
    finally:
        box.close()
    pids = {pid for pid, _ in results}
    assert len(pids) == 4
    assert os.getpid() not in pids
    assert [count for _, count in results] == [1, 1, 1, 1]
    assert seen == []


async def test_closures_made_after_the_child_was_forked_run_with_their_own_values() -> None:
    box = Sandbox(layers=False)
    try:
        results = []
        for i in range(4):

            def closure(offset: int, i: int = i) -> int:
                return i + offset

            results.append(await box.call(closure, 100))
    finally:
        box.close()
    assert results == [100, 101, 102, 103]


async def test_what_does_not_pickle_is_refused_naming_it_and_nothing_runs(
    tmp_path: Path,
) -> None:
    lock = threading.Lock()
    flag = tmp_path / "ran"

    def held(value: object) -> bool:
        flag.write_text("ran")
        return value is not None

    def over_a_lock() -> bool:
        return lock.locked()

    def numbers() -> Iterator[int]:
        yield 1

    box = Sandbox(layers=False)
    try:
        assert await box.call(held, 1) is True
        flag.unlink()
        refused = []
        for fn, args in ((held, (lock,)), (over_a_lock, ()), (list, (numbers(),))):
            with pytest.raises(UnpicklableCall) as raised:
                await box.call(fn, *args)
            refused.append(str(raised.value))
    finally:
        box.close()
    advice = (
        "make it importable (a module-level function or class) or capture only values "
        "that pickle (no lock, socket, open file or generator)"
    )
    where = "test_what_does_not_pickle_is_refused_naming_it_and_nothing_runs.<locals>"
    assert refused == [
        f"{where}.held cannot run in the sandbox: argument 1 (a lock) cannot be pickled to "
        f"cross to its process (TypeError: cannot pickle '_thread.lock' object); {advice}",
        f"{where}.over_a_lock cannot run in the sandbox: the callable ({where}.over_a_lock) "
        "cannot be pickled to cross to its process (TypeError: cannot pickle "
        f"'_thread.lock' object); {advice}",
        "list cannot run in the sandbox: argument 1 (a generator) cannot be pickled to "
        f"cross to its process (TypeError: cannot pickle 'generator' object); {advice}",
    ]
    assert not flag.exists()


def _parent_pid() -> int:
    return os.getppid()


def _served_by(box: Sandbox) -> Any:
    """``box``'s one warm worker forking a child per call (there must be one)."""
    worker = call_worker(box)
    assert worker is not None, box._caller
    return worker


async def test_a_warm_worker_that_died_is_replaced() -> None:
    box = Sandbox(layers=False)
    try:
        first = await box.call(_parent_pid)  # the first call waits for the worker
        worker = _served_by(box)
        assert first == worker.pid != os.getpid()
        os.kill(worker.pid, signal.SIGKILL)
        # Its child waiting for a call dies with it; the spawn server reaps it.
        assert select.select([worker.pidfd], [], [], DEADLINE)[0] == [worker.pidfd]
        after = await box.call(_parent_pid)  # on a worker started for it
        replaced = _served_by(box)
        assert after == replaced.pid != worker.pid
        assert await box.call(_parent_pid) == replaced.pid
    finally:
        box.close()


async def test_a_warm_worker_serves_callables_new_since_it_started() -> None:
    def first() -> int:
        return os.getppid()

    def second() -> int:
        return os.getppid()

    box = Sandbox(layers=False)
    try:
        await box.call(first)
        worker = _served_by(box)
        served = [await box.call(second), await box.call(first), await box.call(_echo, 1)]
    finally:
        box.close()
    assert served == [worker.pid, worker.pid, (1, worker.pid)]


def _echo(value: int) -> tuple[int, int]:
    return value, os.getppid()


async def test_calls_back_to_back_on_the_warm_worker_each_get_their_own_result() -> None:
    # The worker forks the next child while a call runs and reaps the last one meanwhile:
    # every request must reach exactly one child, whatever order those events come in.
    box = Sandbox(layers=False)
    try:
        await box.call(_echo, -1)
        worker = _served_by(box)
        with anyio.fail_after(60):
            results = [await box.call(_echo, i) for i in range(500)]
    finally:
        box.close()
    assert results == [(i, worker.pid) for i in range(500)]


async def test_a_crash_or_a_timeout_on_the_warm_worker_replaces_it(
    new_box: NewBox, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = secrets.token_hex(12)
    monkeypatch.setenv("WT_TEST_MARKER", marker)
    box = new_box(
        layers=False,
        env_allowlist={"PATH", "WT_TEST_MARKER"},
        limits=SandboxLimits(timeout_seconds=1, grace_seconds=0.2),
    )

    def work(how: str) -> int:
        if how == "hang":
            os.system("setsid sleep 300 & sleep 300")
        if how == "crash":
            ctypes.string_at(0)
        return os.getppid()

    for how in ("crash", "hang"):
        answer = await call_on_a_new_worker(box, work, "answer")
        worker = _served_by(box)
        assert answer == worker.pid
        with pytest.raises((SandboxError, TimeoutError)) as raised:
            await box.call(work, how)
        assert (
            str(raised.value)
            == {
                "crash": "the sandboxed call was killed by SIGSEGV",
                "hang": "",
            }[how]
        )
        assert survivors(f"WT_TEST_MARKER={marker}") == []
        with pytest.raises(ChildProcessError):
            os.waitpid(worker.pid, os.WNOHANG)  # that worker was let go, and reaped


async def test_a_call_can_neither_signal_nor_tamper_with_its_warm_worker(
    new_box: NewBox,
) -> None:
    box = new_box()
    if "signal_scoping" not in box.call_capabilities:
        pytest.skip(f"calls cannot be kept from signalling here: {box.call_capabilities}")

    def reach_parent() -> tuple[int, str, str]:  # a closure: it crosses by value
        return _reach_parent()

    first = await box.call(reach_parent)
    worker = _served_by(box)
    assert first == (worker.pid, "EPERM", "EACCES")
    assert await box.call(_reach_parent) == (worker.pid, "EPERM", "EACCES")


def _reach_parent() -> tuple[int, str, str]:
    """Try to kill this process's parent and to open its memory: the parent and what each
    attempt met."""
    try:
        os.kill(os.getppid(), signal.SIGKILL)
        signalled = "sent"
    except PermissionError:
        signalled = "EPERM"
    try:
        with open(f"/proc/{os.getppid()}/mem", "r+b"):
            memory = "opened"
    except OSError as exc:
        memory = errno.errorcode[exc.errno or 0]
    return os.getppid(), signalled, memory


async def test_supervisor_killed_mid_command_is_sandbox_error_and_leaks_no_descriptor() -> None:
    box = Sandbox(layers=False, network=True)
    await box.run(["true"])  # the spawn server and a supervisor exist before the count
    before = _own_descriptors()  # with the pooled supervisor's socket
    started = anyio.Event()
    pids: list[int] = []  # the supervisor, then the command

    def on_output(stream: str, chunk: bytes) -> None:
        pids.extend(int(pid) for pid in chunk.split())
        started.set()

    async def kill_supervisor() -> None:
        await started.wait()
        os.kill(pids[0], signal.SIGKILL)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(kill_supervisor)
            with (
                anyio.fail_after(10),
                pytest.raises(SandboxError, match="supervisor exited unexpectedly"),
            ):
                await box.run(["bash", "-c", "echo $PPID $$; exec sleep 30"], on_output=on_output)
        # The dead supervisor's socket is closed; the output pipes are closed too.
        after = _own_descriptors()
        assert len(after) == len(before) - 1, f"before {before}, after {after}"
    finally:
        os.kill(pids[1], signal.SIGKILL)  # outside the supervisor's reach once it is gone
        box.close()


async def test_each_command_sees_its_own_environment_on_a_reused_supervisor() -> None:
    # A supervisor keeps the last environment it was sent; a changed one must replace it.
    box = Sandbox(layers=False, network=True)
    base = {"PATH": os.environ.get("PATH", os.defpath)}
    seen = []
    try:
        for value in ("one", "one", "two", "one"):
            result = await box.run(["sh", "-c", 'echo "$X"'], env={**base, "X": value})
            seen.append(result.stdout.complete)
        result = await box.run(["sh", "-c", 'echo "${X-unset}"'], env=base)
        seen.append(result.stdout.complete)
    finally:
        box.close()
    assert seen == [b"one\n", b"one\n", b"two\n", b"one\n", b"unset\n"]


def _own_descriptors() -> dict[int, str]:
    """This process's open descriptors and what each refers to."""
    found = {}
    for entry in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor is gone
            found[int(entry)] = os.readlink(f"/proc/self/fd/{entry}")
    return found


def _descriptors_of_descendants() -> int:
    """Open descriptors of every process this one started (spawn servers, supervisors)."""
    return sum(len(os.listdir(f"/proc/{pid}/fd")) for pid in descendants(os.getpid()))


async def test_supervisor_open_descriptors_stay_flat_across_commands() -> None:
    # Every job hands the supervisor two pipes (and under bubblewrap with the network off,
    # a filter pipe): all must be closed when the job ends, or a pooled supervisor runs out.
    box = Sandbox(network=False)
    counts = []
    try:
        for _ in range(4):
            result = await box.run(["true"])
            assert result.exit_code == 0, result.stderr.complete
            counts.append(_descriptors_of_descendants())
    finally:
        box.close()
    assert counts == [counts[0]] * 4


async def test_a_warm_worker_holds_no_pipe_of_the_caller() -> None:
    """A subprocess the host starts in another thread waits for end of file on its pipes; a
    worker forked at that instant must not keep their write ends open."""
    read_end, write_end = os.pipe()  # stands for a pipe another thread has open
    box = Sandbox(layers=False)

    def parent_pid() -> int:  # a closure: it crosses by value
        return os.getppid()

    try:
        assert await box.call(parent_pid) == _served_by(box).pid
        os.close(write_end)
        write_end = -1
        ready = await anyio.to_thread.run_sync(
            lambda: select.select([read_end], [], [], DEADLINE)[0]
        )
        data = os.read(read_end, 1) if ready else None
        assert data == b"", f"no end of file on the pipe within {DEADLINE} s: read {data!r}"
    finally:
        box.close()
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


async def test_a_sandbox_pickles_as_its_settings_and_its_copy_runs_commands(
    tmp_path: Path,
) -> None:
    box = Sandbox(writable=[str(tmp_path)], best_effort=True, limits=SandboxLimits(cpu_seconds=7))
    copy = pickle.loads(pickle.dumps(box))
    try:
        result = await copy.run(["sh", "-c", "echo copied > out.txt"], cwd=str(tmp_path))
    finally:
        copy.close()
        box.close()
    assert (copy.limits, copy.confinement) == (box.limits, box.confinement)
    assert (copy.capabilities, copy.call_capabilities) == (
        box.capabilities,
        box.call_capabilities,
    )
    assert result.exit_code == 0, result.stderr.complete
    assert (tmp_path / "out.txt").read_text() == "copied\n"


async def test_stopped_process_gets_to_handle_sigterm_before_the_kill(
    new_box: NewBox, tmp_path: Path
) -> None:
    # A process stopped by SIGSTOP (or ^Z's SIGTSTP) acts on SIGTERM only once continued;
    # without that it sits out the grace and is killed without its cleanup.
    box = new_box(layers=False, limits=SandboxLimits(grace_seconds=DEADLINE))
    cleaned = tmp_path / "cleaned"
    command = f"trap 'echo cleaned > {cleaned}; exit 0' TERM; kill -STOP $$"
    result = await box.run(["/bin/sh", "-c", command], timeout=1)
    assert result.timed_out
    assert cleaned.read_text() == "cleaned\n"


_CLEANS_UP_SLOWLY = """
import signal, sys, time
def cleanup(*_):
    with open(sys.argv[1], "a") as f:
        f.write("term\\n")
    time.sleep(0.5)
    with open(sys.argv[1], "a") as f:
        f.write("done\\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, cleanup)
open(sys.argv[2], "w").close()
while True:
    time.sleep(1)
"""


async def test_stop_sends_sigterm_to_a_process_once(new_box: NewBox, tmp_path: Path) -> None:
    # The grace is the tree's to clean up in: a SIGTERM sent again while a handler runs
    # starts the handler again and cuts the first run short. The command leaves the
    # process behind once its handler is set; the tree's stop at the command's end sends it.
    box = new_box(layers=False, limits=SandboxLimits(grace_seconds=DEADLINE))
    marker, ready = tmp_path / "marker", tmp_path / "ready"
    script = tmp_path / "cleans_up.py"
    script.write_text(_CLEANS_UP_SLOWLY)
    command = (
        f"{sys.executable} {script} {marker} {ready} >/dev/null 2>&1 & "
        f"until [ -e {ready} ]; do sleep 0.01; done"
    )
    result = await box.run(["/bin/sh", "-c", command], timeout=DEADLINE)
    assert (result.exit_code, result.timed_out) == (0, False), result.stderr.complete
    assert marker.read_text() == "term\ndone\n"
