"""A process cap without a cgroup: a user namespace of the child's own with `RLIMIT_NPROC`.

Since Linux 5.14 the kernel counts `RLIMIT_NPROC` per user namespace (commit 21d1c5e386bc,
"Reimplement RLIMIT_NPROC on top of ucounts"; kernel/ucount.c): a fork is refused with
EAGAIN when the processes (threads, precisely) of the caller's uid *in its user namespace
and the namespaces beneath it* would exceed the caller's limit (user_namespaces(7),
getrlimit(2)). A child that unshares a user
namespace mapping only its own uid and gid starts that count at itself, so its limit caps
its own tree, not every process the user has; processes of nested namespaces (bubblewrap's)
are counted in it too.

It binds unprivileged callers only: the kernel lets a process whose real user is root (or
one with CAP_SYS_RESOURCE or CAP_SYS_ADMIN in the initial namespace) fork past the limit.
The hard limit is lowered too, and raising it needs CAP_SYS_RESOURCE in the initial user
namespace, so the child cannot lift the cap; after exec a non-root command keeps none of
the capabilities the new namespace gave.

`works()` proves the per-namespace count and the exact cap for real (a kernel that lets one
process more through says False); use this layer only where it says True.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource

from sandbox.layers._checks import Check, run_checks
from sandbox.layers._syscall import Verdict, libc

CLONE_NEWUSER = 0x10000000

#: The fix to name when neither this layer nor a cgroup caps processes.
HINT = (
    "for a caller that is not root, Linux >= 5.14 with unprivileged user namespaces "
    "(sysctl user.max_user_namespaces > 0, and kernel.unprivileged_userns_clone = 1 or "
    "an AppArmor profile allowing them where those exist)"
)


def cap_processes(max_processes: int) -> None:
    """Enter a new user namespace mapping this process's uid and gid onto themselves and
    limit its uid's processes there (soft and hard `RLIMIT_NPROC`) to `max_processes`,
    this process included. Call it in a single-threaded child before exec (unsharing a
    user namespace requires one), before any layer that unshares namespaces of its own.

    Raises OSError from the underlying calls (EPERM or ENOSPC where user namespaces are
    not available; EINVAL for a `max_processes` below 1); the child must not go on to run
    untrusted work then.
    """
    if max_processes < 1:
        raise OSError(errno.EINVAL, f"max_processes must be at least 1, got {max_processes}")
    uid, gid = os.geteuid(), os.getegid()
    if libc().unshare(ctypes.c_int(CLONE_NEWUSER)) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"unshare(CLONE_NEWUSER): {os.strerror(code)}")
    map_ids(uid, gid)
    resource.setrlimit(resource.RLIMIT_NPROC, (max_processes, max_processes))


def map_ids(uid: int, gid: int) -> None:
    """Map ``uid`` and ``gid``, this process's before it entered the user namespace it is
    in now, onto themselves there (``setgroups`` denied first, as user_namespaces(7)
    requires before a ``gid_map`` is written).

    Raises OSError from writing ``/proc/self``'s maps (a namespace whose maps are set)."""
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")


def works() -> Verdict:
    """A verdict, True when `cap_processes` caps a tree here (`caps_a_tree`, in a child of
    a spawned interpreter, a few milliseconds)."""
    return run_checks([check()])[0]


def check() -> Check:
    """The check behind `works`, for `sandbox.layers._checks.run_checks`."""
    return Check(__name__, caps_a_tree.__name__)


def caps_a_tree() -> bool:
    """With a cap of 2, this process's first fork succeeds although its parent (outside
    the new namespace, same uid) is running, so the count is per namespace; its second
    fork, while the first child lives, fails with EAGAIN, so the cap binds this caller (it
    does not bind root). Irreversible: only for a child of its own."""
    cap_processes(2)
    read_end, write_end = os.pipe()
    first = os.fork()
    if first == 0:
        os.close(write_end)
        os.read(read_end, 1)  # lives until the parent is done
        os._exit(0)
    try:
        second: int | None = os.fork()
    except BlockingIOError:
        second = None
    if second == 0:
        os._exit(0)
    os.close(write_end)
    os.close(read_end)
    os.waitpid(first, 0)
    if second is None:
        return True
    os.waitpid(second, 0)
    return False


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)
