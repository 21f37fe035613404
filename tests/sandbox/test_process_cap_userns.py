"""The process cap without a delegated cgroup: a caller that is not root gets a user
namespace of the child's own with RLIMIT_NPROC (counted per user namespace since Linux
5.14), reported as ``"process_cap": "user-namespace-nproc"``.

Run as ``nobody`` (the tests switch to it when they run as root): a fork bomb stops at the
cap, counted on the host in ``/proc``; a control run without the cap forks all it asks for.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from sandbox import Sandbox
from sandbox import _sandbox as sandbox_module
from sandbox.layers import (
    BUBBLEWRAP,
    LANDLOCK,
    MOUNT_NAMESPACE,
    PROCESS_CAP,
    SECCOMP,
    USER_NAMESPACE_NPROC,
    cgroup,
    landlock,
    mountns,
    probe,
    seccomp,
    userns,
)
from sandbox.layers._plan import LayerPlan
from tests._processes import marked_processes, survivors
from tests._users import as_nobody

CAP = 16
PR_SET_DUMPABLE = 4

# Forks up to 200 children that block on a pipe, prints how many it got, then waits for
# the host to create the release file (at most 30 s) before letting them go.
FORK_200 = """
import os, sys, time
release = sys.argv[1]
read_end, write_end = os.pipe()
children = []
for _ in range(200):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os.close(write_end)
        os.read(read_end, 1)
        os._exit(0)
    children.append(pid)
print(len(children), flush=True)
deadline = time.monotonic() + 30
while not os.path.exists(release) and time.monotonic() < deadline:
    time.sleep(0.01)
os.close(write_end)
for pid in children:
    os.waitpid(pid, 0)
"""


def _kernel_counts_per_namespace() -> bool:
    release = platform.release().split(".")
    return (int(release[0]), int(release[1].split("-")[0])) >= (5, 14)


def _user_namespaces_allowed() -> bool:
    try:
        return int(Path("/proc/sys/user/max_user_namespaces").read_text()) > 0
    except OSError:
        return False


@pytest.fixture(scope="module")
def interpreter() -> Iterator[str]:
    """An interpreter the unprivileged user can run, with this environment's packages:
    ``sys.executable``, or where it sits in a directory ``nobody`` cannot enter (root's
    home), a virtual environment of the system's ``python3`` whose ``.pth`` file adds
    this one's site-packages (the spawn server and the test's command run it)."""
    if os.geteuid() != 0 or as_nobody(lambda: os.access(sys.executable, os.X_OK)):
        yield sys.executable
        return
    system = shutil.which("python3", path="/usr/bin:/bin")
    if system is None:
        pytest.skip("no system python3 that nobody can run")
    with tempfile.TemporaryDirectory(prefix="nobody-venv-") as directory:
        os.chmod(directory, 0o755)
        subprocess.run([system, "-m", "venv", "--without-pip", directory], check=True)
        version = subprocess.run(
            [f"{directory}/bin/python", "-c", "import sys; print(sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if version != str(sys.version_info[:2]):
            pytest.skip(f"the system python3 is {version}, this one {sys.version_info[:2]}")
        site = Path(directory, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}")
        (site / "site-packages" / "outer.pth").write_text(
            "\n".join(p for p in sys.path if p.endswith("site-packages")) + "\n"
        )
        yield f"{directory}/bin/python"


def _in_fork(work: Callable[[], Any]) -> Any:
    """``work()`` in a forked child, so that what it changes (environment, interpreter,
    the sandbox's plan) stays there; returns its JSON value (``{"child_error": ...}`` when
    it raised)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read_fd)
            payload = json.dumps(work())
        except BaseException as exc:
            payload = json.dumps({"child_error": repr(exc)})
        with os.fdopen(write_fd, "w") as out:
            out.write(payload)
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as inp:
        data = inp.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def _unprivileged(work: Callable[[], Any], interpreter: str) -> Any:
    """``work()`` in a forked child: as ``nobody`` when this is root (``as_nobody``), else
    as this user (``_in_fork``), with ``interpreter``
    as ``sys.executable`` and its directory first on PATH (bubblewrap's private /tmp keeps
    PATH entries visible). A process that dropped root is not dumpable, which leaves its
    ``/proc/self`` files root's; one started as that user (a login, an exec) is dumpable,
    as this one is made."""

    def unprivileged_work() -> Any:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        sys.executable = interpreter
        os.environ["PATH"] = f"{os.path.dirname(interpreter)}:{os.environ.get('PATH', '')}"
        return work()

    return as_nobody(unprivileged_work) if os.geteuid() == 0 else _in_fork(unprivileged_work)


def _require_layer_conditions() -> None:
    if not (_kernel_counts_per_namespace() and _user_namespaces_allowed()):
        pytest.skip("needs Linux >= 5.14 with user namespaces")


def test_root_is_not_capped_by_it() -> None:
    # The kernel lets root fork past RLIMIT_NPROC: the layer must not claim to hold.
    if os.geteuid() != 0:
        pytest.skip("runs as root")
    assert not userns.works()


def test_probe_reports_it_for_an_unprivileged_caller_without_a_cgroup(interpreter: str) -> None:
    _require_layer_conditions()

    def seen() -> dict[str, Any]:
        return {"cgroup": cgroup.available(), "probe": probe().get(PROCESS_CAP)}

    found = _unprivileged(seen, interpreter)
    if found["cgroup"] is None:
        pytest.skip("this user has a delegated cgroup, which the probe prefers")
    assert found == {"cgroup": found["cgroup"], "probe": USER_NAMESPACE_NPROC}


def _fork_bomb(directory: str, capped: bool, landlock_plan: bool = False) -> dict[str, Any]:
    """In the unprivileged process: run FORK_200 in a sandbox writable in ``directory``
    (where the release file goes: bubblewrap's private /tmp would hide it elsewhere),
    count the marked processes on the host once the tree is up, report what was seen."""
    marker = secrets.token_hex(12)
    os.environ["WT_TEST_MARKER"] = marker
    allow = {"PATH", "WT_TEST_MARKER"}
    release = os.path.join(directory, "release")
    if landlock_plan:
        _force_landlock_plan()
    if capped:
        box = Sandbox(max_processes=CAP, writable=[directory], env_allowlist=allow)
    else:
        box = Sandbox(layers=False, env_allowlist=allow)
    counted: list[int] = []

    def count_then_release(stream: str, chunk: bytes) -> None:
        # The command's tree is blocked until the release file exists: all are alive.
        counted.append(len(marked_processes(marker)))
        Path(release).touch()

    async def run() -> Any:
        with anyio.fail_after(60):
            return await box.run(
                [sys.executable, "-c", FORK_200, release], on_output=count_then_release
            )

    try:
        result = anyio.run(run)
    finally:
        box.close()
    return {
        "mechanism": box.capabilities.get(PROCESS_CAP),
        "bubblewrap": BUBBLEWRAP in box.capabilities.values(),
        "forked": int(result.stdout.complete or b"-1"),
        "counted": counted,
        "stderr": result.stderr.complete.decode(errors="replace")[-300:],
        "survivors": survivors(marker),
    }


def _in_own_directory(work: Any, *args: Any) -> Any:
    """``work(directory, *args)`` with a directory of this user's, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="cap-") as directory:
        return work(directory, *args)


def _force_landlock_plan() -> None:
    """In the unprivileged process (a fork: the change ends with it): the plan of a host
    without bubblewrap, Landlock and a mount namespace, with this layer's cap."""
    verdicts = {
        LANDLOCK: landlock.works(),
        SECCOMP: seccomp.works(),
        MOUNT_NAMESPACE: mountns.works(),
        USER_NAMESPACE_NPROC: userns.works(),
    }
    failed = {layer: verdict.why for layer, verdict in verdicts.items() if not verdict}
    if failed:
        raise OSError(f"these layers do not work here: {failed}")
    forced = {
        "write_confinement": MOUNT_NAMESPACE,
        "read_denial": LANDLOCK,
        "network_off": SECCOMP,
        "host_exec_protection": MOUNT_NAMESPACE,
        "process_cap": USER_NAMESPACE_NPROC,
    }
    plan = LayerPlan(commands=forced, calls=dict(forced))
    sandbox_module.plan_layers = lambda: plan  # type: ignore[attr-defined]


@pytest.mark.parametrize("capped", [False, True], ids=["control", "capped"])
def test_fork_bomb_stops_at_the_cap_for_an_unprivileged_caller(
    interpreter: str, capped: bool
) -> None:
    _require_layer_conditions()
    seen = _unprivileged(lambda: _in_own_directory(_fork_bomb, capped), interpreter)
    print(seen)
    assert "child_error" not in seen, seen
    forked = seen["forked"]
    # Under bubblewrap the shell that reports what the command left running is one more.
    assert seen["counted"] == [forked + 1 + (1 if seen["bubblewrap"] else 0)], seen
    assert seen["survivors"] == [], seen
    if not capped:
        assert (seen["mechanism"], forked) == (None, 200), seen
        return
    if seen["mechanism"] != USER_NAMESPACE_NPROC:
        pytest.skip(f"this user's process cap is {seen['mechanism']}")
    # The program and its children have the cap: bubblewrap's two processes (its monitor
    # outside the PID namespace and the namespace's init) and the shell that reports what
    # the command left running are added to it.
    assert forked == CAP - 1, seen


def test_fork_bomb_stops_at_the_cap_under_landlock_and_a_mount_namespace(
    interpreter: str,
) -> None:
    # Without bubblewrap the mount namespace layer unshares a user namespace of its own,
    # nested in this layer's: the count holds across it.
    _require_layer_conditions()
    seen = _unprivileged(lambda: _in_own_directory(_fork_bomb, True, True), interpreter)
    print(seen)
    assert "child_error" not in seen, seen
    assert (seen["mechanism"], seen["bubblewrap"]) == (USER_NAMESPACE_NPROC, False), seen
    assert seen["forked"] == CAP - 1, seen
    assert seen["counted"] == [CAP], seen
    assert seen["survivors"] == [], seen


def _fork_in_call() -> tuple[int, int]:
    """In a sandboxed call: fork up to 200 children that block, then count this call's
    processes in ``/proc`` (same user namespace: the children and the call) and let
    them go. Returns (children forked, processes seen)."""
    read_end, write_end = os.pipe()
    children = []
    for _ in range(200):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            os.close(write_end)
            os.read(read_end, 1)
            os._exit(0)
        children.append(pid)
    seen = sum(1 for pid in [os.getpid(), *children] if os.path.exists(f"/proc/{pid}"))
    os.close(write_end)
    for pid in children:
        os.waitpid(pid, 0)
    return len(children), seen


def _capped_call(directory: str) -> dict[str, Any]:
    box = Sandbox(max_processes=CAP, writable=[directory])
    try:
        forked, seen = anyio.run(box.call, _fork_in_call)
    finally:
        box.close()
    return {"mechanism": box.call_capabilities.get(PROCESS_CAP), "forked": forked, "seen": seen}


def test_fork_loop_in_a_python_call_stops_at_the_cap(interpreter: str) -> None:
    _require_layer_conditions()
    seen = _unprivileged(lambda: _in_own_directory(_capped_call), interpreter)
    assert "child_error" not in seen, seen
    if seen["mechanism"] != USER_NAMESPACE_NPROC:
        pytest.skip(f"this user's process cap for calls is {seen['mechanism']}")
    assert seen == {"mechanism": USER_NAMESPACE_NPROC, "forked": CAP - 1, "seen": CAP}, seen


@pytest.fixture
def unreachable_mount() -> Iterator[str]:
    """A tmpfs mounted on the host beneath a directory only root may enter (as a test of
    the tools' own suite mounts one under root's temp dir), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs on the host needs root")
    with tempfile.TemporaryDirectory(prefix="root-only-") as directory:
        os.chmod(directory, 0o700)
        point = os.path.join(directory, "small")
        os.mkdir(point)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", point],
            capture_output=True,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode().strip()}")
        try:
            yield point
        finally:
            subprocess.run(["umount", "-l", point], check=True)


def _chmod_error(path: str) -> str:
    """In a sandboxed call: the error changing ``path``'s mode meets, or ``"changed"``."""
    try:
        os.chmod(path, 0o600)
    except OSError as exc:
        return errno.errorcode[exc.errno or 0]
    return "changed"


def _calls_confined(directory: str) -> dict[str, Any]:
    """In the unprivileged process: the mount namespace's verdict, and a call writable in
    ``directory/writable`` changing the mode of a file of its own beside it and inside."""
    writable = os.path.join(directory, "writable")
    os.mkdir(writable)
    for path in (os.path.join(directory, "outside"), os.path.join(writable, "inside")):
        Path(path).touch()
    box = Sandbox(writable=[writable])
    try:
        outside = anyio.run(box.call, _chmod_error, os.path.join(directory, "outside"))
        inside = anyio.run(box.call, _chmod_error, os.path.join(writable, "inside"))
    finally:
        box.close()
    return {"verdict": repr(mountns.works()), "outside": outside, "inside": inside}


def test_a_mount_beneath_a_directory_the_caller_cannot_enter_leaves_calls_confined(
    interpreter: str, unreachable_mount: str
) -> None:
    # The caller cannot reach that mount by any path, so it needs no read-only remount; it
    # made the mount namespace's check fail, and the sandbox refuse every call that needs it.
    _require_layer_conditions()
    assert os.path.ismount(unreachable_mount)
    seen = _unprivileged(lambda: _in_own_directory(_calls_confined), interpreter)
    assert seen == {
        "verdict": "Verdict(held=True, why='')",
        "outside": "EROFS",
        "inside": "changed",
    }, seen
