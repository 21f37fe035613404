"""cgroup v2: a per-call cgroup that caps the number of processes and can kill them all.

Follows Documentation/admin-guide/cgroup-v2.rst: a process may create child cgroups only
in a subtree delegated to it (writable directory, `pids` listed in its
`cgroup.subtree_control`), `pids.max` caps the tasks of a cgroup and its descendants, and
writing "1" to `cgroup.kill` (Linux >= 5.14) SIGKILLs every process in it, forks included.

Typical delegation: systemd's `Delegate=yes` (e.g. `systemd-run --user --scope -p
Delegate=yes ...`) or a container runtime giving the container its own cgroup namespace.
Without one, a process running as root creates its per-call cgroups in the cgroup v1
`pids` hierarchy where one is mounted (hybrid hosts; Documentation/admin-guide/cgroup-v1/
pids.rst: the same `pids.max`, no `cgroup.kill`, so the listed pids are killed until none
is left). `RLIMIT_NPROC` is no substitute: it binds per user, not per call, and not at all
for root (CAP_SYS_RESOURCE and CAP_SYS_ADMIN bypass it).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import select
import signal
import time

DELEGATION_HINT = (
    "a delegated cgroup v2 subtree with the pids controller (systemd Delegate=yes, or a "
    "container with its own cgroup namespace), or running as root where the cgroup v1 "
    "pids controller is mounted"
)


class CgroupUnavailable(OSError):
    """No usable delegated cgroup v2 subtree; the message says what is missing."""


def cgroup2_mount(mountinfo: str) -> tuple[str, str] | None:
    """(mount point, root inside the hierarchy) of the first cgroup2 mount, or None.

    `mountinfo` is the text of /proc/self/mountinfo (proc(5): fields 4 and 5 are the root
    and the mount point, the filesystem type follows the " - " separator).
    """
    for line in mountinfo.splitlines():
        before, _, after = line.partition(" - ")
        fields = before.split()
        if after.split()[:1] == ["cgroup2"] and len(fields) >= 5:
            return _unescape(fields[4]), _unescape(fields[3])
    return None


def own_cgroup(proc_cgroup: str) -> str | None:
    """The cgroup v2 path of a process from its /proc/PID/cgroup text (the `0::` line)."""
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


def locate(parent: str | None = None) -> str:
    """The directory under which per-call cgroups with a `pids.max` can be created.

    `parent` names a delegated cgroup directory explicitly; by default the calling
    process's own cgroup v2 is used, and failing that, for root, its own cgroup in the v1
    `pids` hierarchy. Proves it by creating and removing a trial child.
    Raises CgroupUnavailable naming what is missing.
    """
    if parent is not None:
        return _locate_v2(parent)
    try:
        return _locate_v2(own_directory())
    except CgroupUnavailable as exc:
        v1 = _own_v1_pids_directory() if os.geteuid() == 0 else None
        if v1 is None:
            raise
        try:
            remove(create(v1, max_processes=1))
        except OSError as v1_exc:
            raise CgroupUnavailable(
                exc.errno,
                f"{exc.strerror}; and as root in the cgroup v1 pids hierarchy "
                f"at {v1}: {v1_exc.strerror}",
            ) from v1_exc
        return v1


def is_v1(cgroup: str) -> bool:
    """True when `cgroup` is a directory of a cgroup v1 hierarchy (no cgroup.controllers)."""
    return not os.path.exists(os.path.join(cgroup, "cgroup.controllers"))


def _locate_v2(parent: str) -> str:
    controllers = _read(os.path.join(parent, "cgroup.controllers")).split()
    if "pids" not in controllers:
        raise CgroupUnavailable(
            errno.EOPNOTSUPP,
            f"cgroup v2 at {parent} has no pids controller"
            + (" (it is bound to cgroup v1 here)" if _v1_pids_mount() else "")
            + f"; needs {DELEGATION_HINT}",
        )
    if "pids" not in _read(os.path.join(parent, "cgroup.subtree_control")).split():
        try:
            _write(os.path.join(parent, "cgroup.subtree_control"), "+pids")
        except OSError as exc:
            raise CgroupUnavailable(
                exc.errno or errno.EACCES,
                f"cannot enable pids for children of {parent} ({exc.strerror}); "
                f"needs {DELEGATION_HINT}",
            ) from exc
    try:
        remove(create(parent, max_processes=1))
    except OSError as exc:
        raise CgroupUnavailable(
            exc.errno or errno.EACCES,
            f"cannot create a child cgroup under {parent} ({exc.strerror}); "
            f"needs {DELEGATION_HINT}",
        ) from exc
    return parent


def available(parent: str | None = None) -> str | None:
    """None when `locate(parent)` succeeds, else the reason it does not."""
    try:
        locate(parent)
    except OSError as exc:
        return str(exc.strerror or exc)
    return None


def create(parent: str, *, max_processes: int | None, memory_max: int | None = None) -> str:
    """Create a uniquely named child of `parent` with the given limits; returns its path.

    `max_processes` goes to `pids.max` (None: no cap); `memory_max` (bytes) to
    `memory.max`, which needs the memory controller delegated too. On failure the child
    is removed again and OSError propagates.
    """
    # os.urandom, as secrets.token_hex does, without importing secrets: its hmac and
    # hashlib load OpenSSL's libcrypto into the spawn server, and so into every worker
    # forked from it (its relocated pages copied on every fork of a worker).
    path = os.path.join(parent, f"sandbox-{os.getpid()}-{os.urandom(4).hex()}")
    os.mkdir(path)
    try:
        if max_processes is not None:
            _write(os.path.join(path, "pids.max"), str(max_processes))
        if memory_max is not None:
            _write(os.path.join(path, "memory.max"), str(memory_max))
            # Without this, the kernel swaps instead of killing at the limit.
            with contextlib.suppress(FileNotFoundError):
                _write(os.path.join(path, "memory.swap.max"), "0")
    except OSError:
        os.rmdir(path)
        raise
    return path


def add_process(cgroup: str, pid: int = 0) -> None:
    """Move process `pid` (0: the caller) into `cgroup`.

    Call it in the child before exec with pid 0, so that no fork escapes the cap.
    """
    _write(os.path.join(cgroup, "cgroup.procs"), str(pid))


def refused_forks(cgroup: str) -> int:
    """How many forks the `pids.max` of `cgroup` refused: the `max` line of its
    `pids.events` (cgroup-v2.rst and cgroup-v1/pids.rst name the same file); 0 when it
    cannot be read."""
    try:
        events = _read(os.path.join(cgroup, "pids.events"))
    except OSError:
        return 0
    for line in events.splitlines():
        name, _, count = line.partition(" ")
        if name == "max" and count.isdigit():
            return int(count)
    return 0


def kill(cgroup: str, timeout: float = 5.0) -> None:
    """SIGKILL every process in `cgroup` and wait until it is empty (at most `timeout` s).

    Uses `cgroup.kill` where the kernel has it; before 5.14, kills the listed pids until
    none is left. Raises TimeoutError when processes remain (e.g. stuck in the kernel).
    """
    has_kill_file = os.path.exists(os.path.join(cgroup, "cgroup.kill"))
    if has_kill_file:
        _write(os.path.join(cgroup, "cgroup.kill"), "1")
    else:
        _kill_listed(cgroup)
    _wait_unpopulated(cgroup, timeout, retry_kill=not has_kill_file)


def remove(cgroup: str, timeout: float = 5.0) -> None:
    """Kill what is left in `cgroup` and remove it. A cgroup already gone is fine."""
    if not os.path.isdir(cgroup):
        return
    kill(cgroup, timeout)
    os.rmdir(cgroup)


def _kill_listed(cgroup: str) -> None:
    for pid in _read(os.path.join(cgroup, "cgroup.procs")).split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)


def _wait_unpopulated(cgroup: str, timeout: float, *, retry_kill: bool) -> None:
    # cgroup.events signals each change of "populated" with POLLPRI (cgroup-v2.rst).
    deadline = time.monotonic() + timeout
    events = os.path.join(cgroup, "cgroup.events")
    if not os.path.exists(events):
        _wait_empty_v1(cgroup, deadline)
        return
    with open(events, "rb", buffering=0) as handle:
        poller = select.poll()
        poller.register(handle, select.POLLPRI | select.POLLERR)
        while True:
            handle.seek(0)
            if b"populated 0" in handle.read():
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"processes remain in {cgroup} after SIGKILL")
            if retry_kill:
                # Without cgroup.kill, a fork can race the kill: kill the newcomers too.
                _kill_listed(cgroup)
            poller.poll(min(remaining, 0.1) * 1000)


def _wait_empty_v1(cgroup: str, deadline: float) -> None:
    # cgroup v1 has no populated event: kill the newcomers and look again until none is
    # listed (a killed process leaves the list once it is reaped, within milliseconds).
    while True:
        if not _read(os.path.join(cgroup, "cgroup.procs")).split():
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"processes remain in {cgroup} after SIGKILL")
        _kill_listed(cgroup)
        time.sleep(0.005)


def _own_v1_pids_directory() -> str | None:
    """This process's cgroup in a mounted cgroup v1 `pids` hierarchy, or None."""
    mount = _v1_pids_mount()
    if mount is None:
        return None
    with open("/proc/self/cgroup") as handle:
        # Lines are "ID:CONTROLLERS:PATH" (cgroups(7)).
        path = next(
            (
                line.rstrip("\n").split(":", 2)[2]
                for line in handle
                if "pids" in line.split(":", 2)[1].split(",")
            ),
            None,
        )
    if path is None:
        return None
    mount_point, root = mount
    relative = path[len(root) :] if path.startswith(root) and root != "/" else path
    return os.path.normpath(os.path.join(mount_point, relative.lstrip("/")))


def own_directory() -> str:
    """The calling process's cgroup v2 directory; raises CgroupUnavailable without one."""
    with open("/proc/self/mountinfo") as handle:
        mount = cgroup2_mount(handle.read())
    if mount is None:
        raise CgroupUnavailable(errno.ENOENT, f"no cgroup v2 is mounted; needs {DELEGATION_HINT}")
    with open("/proc/self/cgroup") as handle:
        path = own_cgroup(handle.read())
    if path is None:
        raise CgroupUnavailable(errno.ENOENT, "this process is in no cgroup v2")
    mount_point, root = mount
    relative = path[len(root) :] if path.startswith(root) and root != "/" else path
    return os.path.normpath(os.path.join(mount_point, relative.lstrip("/")))


def _v1_pids_mount() -> tuple[str, str] | None:
    """(mount point, root) of the cgroup v1 hierarchy holding the pids controller."""
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            before, _, after = line.partition(" - ")
            fields, source = before.split(), after.split()
            if source[:1] == ["cgroup"] and "pids" in source[-1].split(",") and len(fields) >= 5:
                return _unescape(fields[4]), _unescape(fields[3])
    return None


def _read(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read()
    except FileNotFoundError:
        return ""


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as three octal digits (\040).
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)
