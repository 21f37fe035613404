"""A private mount namespace in which chosen paths are bound read-only over themselves.

For children that bubblewrap cannot wrap (a forked Python call, or a command where
bubblewrap is missing). Follows mount_namespaces(7) and user_namespaces(7): a process
with CAP_SYS_ADMIN (root) unshares a mount namespace; any other process first unshares a
user namespace mapping its own uid and gid, which gives it that capability over the new
mount namespace only. Mounts are made private first, so nothing propagates to the host.

The bind mounts hold only while the child cannot undo them: Landlock, applied after them,
forbids a process every change of its mount topology (mount, umount, pivot_root), and it
cannot rejoin the host's mount namespace either (namespace files get no Landlock rule, and
setns by pidfd needs ptrace access, which Landlock denies outside the child's domain). So
this layer is used only together with Landlock (see `sandbox._layered`).
"""

from __future__ import annotations

import ctypes
import errno
import os
import tempfile
from collections.abc import Iterable

from ._syscall import in_child, libc

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21

# statvfs(3) f_flag bits -> the mount flag a remount must repeat: in a user namespace the
# kernel refuses to clear flags a more privileged namespace set (they are locked).
_KEPT_FLAGS = (
    (os.ST_NOSUID, MS_NOSUID),
    (os.ST_NODEV, MS_NODEV),
    (os.ST_NOEXEC, MS_NOEXEC),
    (os.ST_NOATIME, MS_NOATIME),
    (os.ST_NODIRATIME, MS_NODIRATIME),
    (os.ST_RELATIME, MS_RELATIME),
)


def make_read_only(paths: Iterable[str]) -> None:
    """Enter a private mount namespace and bind each existing path of `paths` read-only
    over itself (a path that is a symbolic link: its target). Call it in a single-threaded
    child (unsharing a user namespace requires one), then apply Landlock.

    Raises OSError (EPERM where neither CAP_SYS_ADMIN nor unprivileged user namespaces
    are available) from the underlying calls; the child must not go on to run untrusted
    work then.
    """
    _enter()
    for path in dict.fromkeys(os.path.realpath(p) for p in paths if os.path.lexists(p)):
        flags = os.statvfs(path).f_flag
        kept = sum(mount_flag for stat_flag, mount_flag in _KEPT_FLAGS if flags & stat_flag)
        _mount(path, path, MS_BIND | MS_REC)
        _mount(None, path, MS_REMOUNT | MS_BIND | MS_RDONLY | kept)


def works() -> bool:
    """True when `make_read_only` really turns a write into EROFS here (forked child)."""
    with tempfile.TemporaryDirectory() as directory:
        target = os.path.join(directory, "protected")
        with open(target, "w"):
            pass

        def refuses_write() -> bool:
            make_read_only([target])
            try:
                with open(target, "w"):
                    pass
            except OSError as exc:
                return exc.errno == errno.EROFS
            return False

        return in_child(refuses_write)


def _enter() -> None:
    # Root keeps its uid (files it writes stay root's); a user gets the capability over
    # mounts from a user namespace of its own.
    if os.geteuid() != 0 or _unshare(CLONE_NEWNS) != 0:
        uid, gid = os.geteuid(), os.getegid()
        if _unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"unshare(CLONE_NEWUSER | CLONE_NEWNS): {os.strerror(code)}")
        _write("/proc/self/setgroups", "deny")  # required before gid_map (user_namespaces(7))
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    _mount(None, "/", MS_REC | MS_PRIVATE)


def _unshare(flags: int) -> int:
    return int(libc().unshare(ctypes.c_int(flags)))


def _mount(source: str | None, target: str, flags: int) -> None:
    result = libc().mount(
        source.encode() if source else None,
        target.encode(),
        None,
        ctypes.c_ulong(flags),
        None,
    )
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"mount {target}: {os.strerror(code)}", target)


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)
