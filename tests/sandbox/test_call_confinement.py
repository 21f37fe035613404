"""Python calls in the sandbox are confined like commands: outside the writable directories
neither contents nor metadata (mode, owner, timestamps, extended attributes) change, and no
process outside the sandbox can be signalled.

Landlock alone confines file contents only; the child's read-only mount namespace refuses
the rest (EROFS). Each case checks the host's own view of the file or process afterwards,
and a control run (no layers) proves the attack works without the protection.
"""

from __future__ import annotations

import contextlib
import errno
import inspect
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox import Sandbox, SandboxUnavailable
from sandbox.layers import (
    LANDLOCK,
    MOUNT_NAMESPACE,
    SIGNAL_SCOPING,
    WRITE_CONFINEMENT,
    bwrap,
    landlock,
    mountns,
)
from sandbox.layers._syscall import Verdict
from tests._waiting import DEADLINE
from tests.sandbox._boxes import NewBox, force_landlock
from workspace_tools import invoke_tool
from workspace_tools.tools import workspace_tools

pytestmark = pytest.mark.anyio


#: Root can give a file away; anyone else can only "change" it to their own ids, which
#: still reaches the kernel's check (and a read-only mount's refusal).
NEW_OWNER = 12345 if os.geteuid() == 0 else os.getuid()
NEW_GROUP = 12345 if os.geteuid() == 0 else os.getgid()
# Writing updates the mtime, so utime comes last.
KINDS = ("chown", "chmod", "setxattr", "removexattr", "append", "utime")


def tamper(path: str) -> dict[str, str]:
    """Each kind of change to ``path``: "ok", or the errno name it failed with."""
    attempts: dict[str, Callable[[], object]] = {
        "chown": lambda: os.chown(path, NEW_OWNER, NEW_GROUP),
        "chmod": lambda: os.chmod(path, 0o751),
        "setxattr": lambda: os.setxattr(path, "user.x", b"planted"),
        "removexattr": lambda: os.removexattr(path, "user.kept"),
        "append": lambda: _append(path),
        "utime": lambda: os.utime(path, ns=(0, 0)),
    }
    seen = {}
    for kind, attempt in attempts.items():
        try:
            attempt()
            seen[kind] = "ok"
        except OSError as exc:
            seen[kind] = errno.errorcode[exc.errno or 0]
    return seen


def _append(path: str) -> None:
    with open(path, "ab") as handle:
        handle.write(b"planted")


def snapshot(path: Path) -> dict[str, Any]:
    """What the host sees of ``path``."""
    info = path.stat()
    return {
        "mode": oct(info.st_mode),
        "owner": (info.st_uid, info.st_gid),
        "mtime_ns": info.st_mtime_ns,
        "xattrs": {name: os.getxattr(path, name) for name in os.listxattr(path)},
        "content": path.read_bytes(),
    }


def tampered(before: dict[str, Any], capable: bool = os.geteuid() == 0) -> dict[str, Any]:
    """The snapshot of a file every change of ``tamper`` went through; ``capable``: by root
    with its capabilities (CAP_CHOWN gives the file away; else chown is to itself or fails)."""
    return {
        # No set-id bit: the sandbox refuses those anywhere (see the set-id test below).
        "mode": oct(0o100751),
        "owner": (NEW_OWNER, NEW_GROUP) if capable else before["owner"],
        "mtime_ns": 0,
        "xattrs": {"user.x": b"planted"},
        "content": before["content"] + b"planted",
    }


def make_file(path: Path) -> Path:
    path.write_bytes(b"host\n")
    os.setxattr(path, "user.kept", b"1")
    os.utime(path, ns=(10**18, 10**18))
    return path


@pytest.fixture
def outside() -> Iterator[Path]:
    """A host file outside the workspace and outside /tmp (bubblewrap gives commands a
    private /tmp, where the host's file would not even be seen)."""
    directory = Path(tempfile.mkdtemp(prefix="outside-", dir="/var/tmp"))
    try:
        yield make_file(directory / "outside.txt")
    finally:
        shutil.rmtree(directory)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


def call_box(new_box: NewBox, mode: str, workspace: Path) -> Sandbox:
    if mode == "plain":
        return new_box(layers=False, network=True)
    box = new_box(writable=[str(workspace)], best_effort=True)
    if WRITE_CONFINEMENT not in box.call_capabilities:
        pytest.skip(f"calls get no write confinement here: {box.call_capabilities}")
    assert box.call_capabilities[WRITE_CONFINEMENT] == MOUNT_NAMESPACE
    return box


@pytest.mark.parametrize("mode", ["plain", "sandbox"])
async def test_call_cannot_change_metadata_outside_the_workspace(
    new_box: NewBox, outside: Path, workspace: Path, mode: str
) -> None:
    inside = make_file(workspace / "inside.txt")
    before = snapshot(outside)
    box = call_box(new_box, mode, workspace)

    seen = await box.call(lambda: (tamper(str(outside)), tamper(str(inside))))

    confined = mode == "sandbox"
    # A sandboxed call has no capability left: root cannot give a file away, even its own.
    capable = os.geteuid() == 0 and not confined
    inside_seen = dict.fromkeys(KINDS, "ok")
    if os.geteuid() == 0 and not capable:
        inside_seen["chown"] = "EPERM"
    assert seen == (dict.fromkeys(KINDS, "EROFS" if confined else "ok"), inside_seen)
    assert snapshot(outside) == (before if confined else tampered(before))
    assert snapshot(inside) == tampered(before, capable)


def command_box(
    new_box: NewBox,
    mode: str,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
    network: bool = False,
) -> Sandbox:
    if mode == "plain":
        return new_box(layers=False, network=True)
    if mode == "landlock":
        force_landlock(monkeypatch)
    elif bwrap.available() is not None:
        pytest.skip(f"bubblewrap does not work here: {bwrap.available()}")
    return new_box(writable=[str(workspace)], network=network)


def _script(*functions: Callable[..., object], main: str) -> str:
    """A ``python -c`` program made of these functions' source and ``main``: a sandboxed
    command cannot import the tests (bubblewrap's private /tmp may hide the checkout)."""
    head = "import errno, json, os, signal, subprocess, sys\nfrom collections.abc import Callable\n"
    constants = f"NEW_OWNER, NEW_GROUP = {NEW_OWNER}, {NEW_GROUP}\n"
    return head + constants + "\n".join(inspect.getsource(f) for f in functions) + main


TAMPER_SCRIPT = _script(
    _append, tamper, main="print(json.dumps([tamper(sys.argv[1]), tamper(sys.argv[2])]))\n"
)


@pytest.mark.parametrize("mode", ["plain", "bubblewrap", "landlock"])
async def test_command_cannot_change_metadata_outside_the_workspace(
    new_box: NewBox, outside: Path, workspace: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    inside = make_file(workspace / "inside.txt")
    before = snapshot(outside)
    box = command_box(new_box, mode, workspace, monkeypatch)

    result = await box.run(
        [sys.executable, "-c", TAMPER_SCRIPT, str(outside), str(inside)], cwd=str(workspace)
    )

    confined = mode != "plain"
    # The layers drop every capability: root cannot give a file away, even its own.
    capable = os.geteuid() == 0 and not confined
    inside_seen = dict.fromkeys(KINDS, "ok")
    if os.geteuid() == 0 and not capable:
        inside_seen["chown"] = "EPERM"
    assert json.loads(result.stdout.complete) == [
        dict.fromkeys(KINDS, "EROFS" if confined else "ok"),
        inside_seen,
    ], result.stderr.complete
    assert snapshot(outside) == (before if confined else tampered(before))
    assert snapshot(inside) == tampered(before, capable)


def everyday_writes(workspace: str) -> list[str]:
    """What a tool call writes legitimately: device nodes, the temp dir, the workspace."""
    with open(os.devnull, "w") as devnull:
        devnull.write("discarded")
    with tempfile.NamedTemporaryFile() as temp:  # in the sandbox's private temp dir
        temp.write(b"scratch")
    with open(os.path.join(workspace, "made.txt"), "w") as made:
        made.write("made")
    os.mkdir(os.path.join(workspace, "sub"))
    os.rename(os.path.join(workspace, "made.txt"), os.path.join(workspace, "sub", "moved.txt"))
    return sorted(os.listdir(os.path.join(workspace, "sub")))


async def test_call_keeps_writing_where_it_may(new_box: NewBox, workspace: Path) -> None:
    box = call_box(new_box, "sandbox", workspace)
    assert await box.call(everyday_writes, str(workspace)) == ["moved.txt"]
    assert (workspace / "sub" / "moved.txt").read_text() == "made"


async def test_workspace_tools_work_in_the_confined_call(
    new_box: NewBox, tmp_path: Path, workspace: Path
) -> None:
    box = new_box(best_effort=True)
    if WRITE_CONFINEMENT not in box.confined_to(str(workspace)).call_capabilities:
        pytest.skip(f"calls get no write confinement here: {box.call_capabilities}")
    tools = {t.name: t for t in workspace_tools(workspace, sandbox=box)}
    (workspace / "a.py").write_text("x = 1\n")
    os.chmod(workspace / "a.py", 0o751)

    written = await invoke_tool(tools["write_file"], {"path": "b.txt", "content": "new\n"})
    edited = await invoke_tool(
        tools["edit_file"], {"path": "a.py", "old_text": "x = 1", "new_text": "x = 2"}
    )
    read = await invoke_tool(tools["read_file"], {"path": "a.py"})

    assert (written.error, edited.error, read.error) == (None, None, None)
    assert (workspace / "b.txt").read_text() == "new\n"
    assert (workspace / "a.py").read_text() == "x = 2\n"
    assert oct((workspace / "a.py").stat().st_mode) == oct(0o100751)  # kept by the edit
    assert sorted(p.name for p in workspace.iterdir()) == ["a.py", "b.txt"]


# --- signals ------------------------------------------------------------------------


@pytest.fixture
def host_process() -> Iterator[subprocess.Popen[bytes]]:
    """A process of the host, outside any sandbox."""
    process = subprocess.Popen(["sleep", "600"])
    yield process
    process.kill()
    process.wait()


def kill_host_and_own(pid: int) -> dict[str, str]:
    """SIGKILL ``pid``, and a process the call started itself."""
    seen = {}
    own = subprocess.Popen(["sleep", "600"])
    for name, target in (("host", pid), ("own", own.pid)):
        try:
            os.kill(target, signal.SIGKILL)
            seen[name] = "ok"
        except OSError as exc:
            seen[name] = errno.errorcode[exc.errno or 0]
    seen["own exit"] = str(own.wait())
    return seen


@pytest.mark.parametrize("mode", ["plain", "sandbox"])
async def test_call_cannot_signal_a_host_process(
    new_box: NewBox, workspace: Path, host_process: subprocess.Popen[bytes], mode: str
) -> None:
    if mode == "plain":
        box = new_box(layers=False, network=True)
    else:
        box = new_box(writable=[str(workspace)], best_effort=True)
        if SIGNAL_SCOPING not in box.call_capabilities:
            pytest.skip(f"calls get no signal scoping here: {box.call_capabilities}")
        assert box.call_capabilities[SIGNAL_SCOPING] == LANDLOCK

    seen = await box.call(kill_host_and_own, host_process.pid)

    scoped = mode == "sandbox"
    assert seen == {"host": "EPERM" if scoped else "ok", "own": "ok", "own exit": "-9"}
    if scoped:
        assert host_process.poll() is None
    else:
        assert host_process.wait(timeout=DEADLINE) == -signal.SIGKILL


@pytest.mark.parametrize("mode", ["plain", "bubblewrap", "landlock"])
async def test_command_cannot_signal_a_host_process(
    new_box: NewBox,
    workspace: Path,
    host_process: subprocess.Popen[bytes],
    mode: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    box = command_box(new_box, mode, workspace, monkeypatch)
    if mode != "plain":
        if SIGNAL_SCOPING not in box.capabilities:
            pytest.skip(f"commands get no signal scoping here: {box.capabilities}")
        assert box.capabilities[SIGNAL_SCOPING] == {"bubblewrap": "bubblewrap"}.get(mode, LANDLOCK)

    result = await box.run(
        [
            sys.executable,
            "-c",
            _script(kill_host_and_own, main=f"print(kill_host_and_own({host_process.pid}))\n"),
        ],
        cwd=str(workspace),
    )

    # Bubblewrap's PID namespace names no host process; Landlock refuses the signal.
    refused = {"plain": "ok", "bubblewrap": "ESRCH", "landlock": "EPERM"}[mode]
    assert result.stdout.complete.decode() == (
        f"{{'host': '{refused}', 'own': 'ok', 'own exit': '-9'}}\n"
    ), result.stderr.complete
    if mode == "plain":
        assert host_process.wait(timeout=DEADLINE) == -signal.SIGKILL
    else:
        assert host_process.poll() is None


def read_environ(pid: int) -> str:
    """What ``/proc/PID/environ`` shows of ``pid``: its secret, or why it could not."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return "secret" if b"HOST_SECRET=" in handle.read() else "no secret"
    except OSError as exc:
        return errno.errorcode[exc.errno or 0]


@pytest.fixture
def secret_holder() -> Iterator[subprocess.Popen[bytes]]:
    """A host process of the same user holding a secret in its environment."""
    process = subprocess.Popen(["sleep", "300"], env={"HOST_SECRET": "hunter2"})
    yield process
    process.kill()
    process.wait()


@pytest.mark.parametrize("mode", ["plain", "call", "landlock command", "bubblewrap command"])
async def test_sandboxed_code_cannot_read_a_host_processs_environment(
    new_box: NewBox,
    workspace: Path,
    secret_holder: subprocess.Popen[bytes],
    mode: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # /proc/PID/environ of a process of the same user is readable to it, Landlock or not:
    # a call's mount namespace gets a procfs of its own listing only what it may ptrace
    # (under Landlock, no host process), which only root may mount; bubblewrap's commands
    # get a PID namespace of their own.
    if mode in ("call", "landlock command") and os.geteuid() != 0:
        pytest.skip("a procfs of a call's own needs root; as another user /proc stays the host's")
    seen = await run_where(mode, read_environ, secret_holder.pid, new_box, workspace, monkeypatch)
    assert seen == ("secret" if mode == "plain" else "ENOENT")


async def run_where(
    mode: str,
    fn: Callable[..., str],
    argument: object,
    new_box: NewBox,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> str:
    """``fn(argument)`` run with no layers (``"plain"``), as a sandboxed call, or in a
    sandboxed command (``"landlock command"``, ``"bubblewrap command"``, printing it); with
    network on where the mode ends in ``"with network"``."""
    network = mode.endswith("with network")
    if mode == "plain":
        return str(await new_box(layers=False, network=True).call(fn, argument))
    if mode.startswith("call"):
        return str(await new_box(writable=[str(workspace)], network=network).call(fn, argument))
    box = command_box(new_box, mode.split()[0], workspace, monkeypatch, network)
    main = f"print({fn.__name__}({argument!r}), end='')\n"
    result = await box.run(
        [sys.executable, "-c", "import shutil\n" + _script(fn, main=main)], cwd=str(workspace)
    )
    return result.stdout.complete.decode() or result.stderr.complete.decode()


def make_setuid(path: str) -> str:
    """Copy a shell to ``path`` and try to make it set-user-ID: its mode after, or why not."""
    shutil.copyfile("/bin/sh", path)
    try:
        os.chmod(path, 0o4755)
    except OSError as exc:
        return f"{errno.errorcode[exc.errno or 0]} {oct(os.stat(path).st_mode & 0o7777)}"
    return oct(os.stat(path).st_mode & 0o7777)


@pytest.mark.parametrize(
    "mode",
    [
        "plain",
        "call",
        "call with network",
        "landlock command",
        "bubblewrap command",
        "bubblewrap command with network",
    ],
)
async def test_sandboxed_code_leaves_no_set_id_program(
    new_box: NewBox, workspace: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Run by root, whose uid the sandbox keeps, a setuid copy of a shell left in the
    # workspace would give any user of the host a root shell.
    target = str(workspace / "rootsh")
    seen = await run_where(mode, make_setuid, target, new_box, workspace, monkeypatch)
    assert seen == ("0o4755" if mode == "plain" else "EPERM 0o644")
    expected = 0o4755 if mode == "plain" else 0o644
    assert stat.S_IMODE(os.stat(target).st_mode) == expected  # the host's view


def privileged_attempts(directory: str) -> dict[str, str]:
    """What root's capabilities would allow in ``directory``, each "ok" or its errno name:
    file capabilities on a program, a device node, a mount by the new mount API."""
    import ctypes

    seen = {}
    program = os.path.join(directory, "program")
    with open(program, "wb") as handle:
        handle.write(b"#!/bin/sh\n")
    # cap_setuid+ep as a VFS_CAP_REVISION_2 structure (linux/capability.h).
    caps = (0x02000001).to_bytes(4, "little") + (1 << 7).to_bytes(4, "little") + bytes(12)
    attempts = {
        "setxattr": lambda: os.setxattr(program, "security.capability", caps),
        "mknod": lambda: os.mknod(os.path.join(directory, "disk"), 0o60666, os.makedev(8, 0)),
    }
    for name, attempt in attempts.items():
        try:
            attempt()
            seen[name] = "ok"
        except OSError as exc:
            seen[name] = errno.errorcode[exc.errno or 0]
    libc = ctypes.CDLL(None, use_errno=True)
    # open_tree(AT_FDCWD, "/", OPEN_TREE_CLONE | AT_RECURSIVE): a copy of a read-only mount
    # that mount_setattr could make writable.
    fd = libc.syscall(428, -100, b"/", 1 | 0x8000)
    seen["open_tree"] = "ok" if fd >= 0 else errno.errorcode[ctypes.get_errno()]
    if fd >= 0:
        os.close(fd)
    return seen


@pytest.mark.skipif(os.geteuid() != 0, reason="only root has these capabilities to lose")
@pytest.mark.parametrize("mode", ["plain", "call", "call with network"])
async def test_a_root_call_has_no_capability_left(
    new_box: NewBox, workspace: Path, mode: str
) -> None:
    if mode == "plain":
        box = new_box(layers=False, network=True)
    else:
        box = new_box(writable=[str(workspace)], network=mode == "call with network")
    seen = await box.call(privileged_attempts, str(workspace))
    if mode == "plain":
        assert seen == {"setxattr": "ok", "mknod": "ok", "open_tree": "ok"}
    else:
        assert seen == {"setxattr": "EPERM", "mknod": "EPERM", "open_tree": "EPERM"}
        assert "security.capability" not in os.listxattr(workspace / "program")
        assert not (workspace / "disk").exists()


# --- what is not enforceable is not claimed -------------------------------------------


async def test_without_a_mount_namespace_calls_get_no_write_confinement(
    new_box: NewBox, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A host where neither root nor user namespaces allow a mount namespace.
    monkeypatch.setattr(mountns, "check", lambda scratch: Verdict(False, "EPERM from the test"))
    box = new_box(writable=[str(workspace)], host_exec_paths=(), best_effort=["network_off"])
    if not landlock.works():
        pytest.skip("Landlock does not work here")
    assert WRITE_CONFINEMENT not in box.call_capabilities

    with pytest.raises(SandboxUnavailable) as refused:
        await box.call(os.getpid)
    assert refused.value.protection == WRITE_CONFINEMENT
    assert "mount namespace" in refused.value.fix
    assert "modes, owners, timestamps and extended attributes" in refused.value.fix
    assert "best_effort=['write_confinement']" in refused.value.fix
    assert "(the mount namespace check failed here: EPERM from the test)" in refused.value.fix


@pytest.mark.parametrize("mode", ["plain", "sandbox"])
async def test_descriptors_the_caller_holds_do_not_reach_the_call(
    new_box: NewBox, outside: Path, workspace: Path, mode: str
) -> None:
    """A call's child is no fork of the caller: a directory or file the caller has open
    is open there under no number (the numbers a closure captures name none of them), so
    nothing reaches around the view through them."""
    box = call_box(new_box, mode, workspace)
    directory = os.open(outside.parent, os.O_RDONLY | os.O_DIRECTORY)
    file = os.open(outside, os.O_RDONLY)
    before = snapshot(outside)

    def named_there() -> list[str]:
        names = []
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                names.append(os.readlink(f"/proc/self/fd/{fd}"))
        for fd in (directory, file):
            with contextlib.suppress(OSError):
                os.fchmod(fd, 0o4777)
        return names

    try:
        names = await box.call(named_there)
    finally:
        os.close(directory)
        os.close(file)

    assert str(outside) not in names and str(outside.parent) not in names, names
    assert snapshot(outside) == before


def signal_parent() -> tuple[int, str]:
    """The parent's pid, and what sending it SIGURG (ignored unless handled) gave."""
    try:
        os.kill(os.getppid(), signal.SIGURG)
    except OSError as exc:
        return os.getppid(), errno.errorcode[exc.errno or 0]
    return os.getppid(), "ok"


@pytest.mark.parametrize("reuse", [False, True], ids=["fresh child", "reused child"])
async def test_a_call_cannot_signal_the_worker_it_was_forked_from(
    new_box: NewBox, workspace: Path, reuse: bool
) -> None:
    # Each call's child enters a Landlock domain nested in its worker's (its ruleset made
    # once by the worker): what the call runs cannot tamper with what later calls fork from.
    box = new_box(writable=[str(workspace)], best_effort=True)
    if box.call_capabilities.get(SIGNAL_SCOPING) != LANDLOCK:
        pytest.skip(f"calls get no Landlock signal scoping here: {box.call_capabilities}")
    seen = [await box.call(signal_parent, reuse_process=reuse) for _ in range(2)]
    worker = seen[0][0]
    assert worker != os.getpid()
    assert seen == [(worker, "EPERM")] * 2, seen
