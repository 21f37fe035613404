"""A private mount namespace whose view is read-only but for the writable directories, and
in which chosen paths are bound read-only over themselves.

For children that bubblewrap cannot wrap (a forked Python call, or a command where
bubblewrap is missing). Landlock confines writes of file contents, but not changes of a
file's metadata (chmod, chown, utime, extended attributes): a read-only mount refuses
those too (EROFS), so write confinement needs this view.

Follows mount_namespaces(7) and user_namespaces(7): a process with CAP_SYS_ADMIN (root)
unshares a mount namespace; any other process first unshares a user namespace mapping its
own uid and gid, which gives it that capability over the new mount namespace only. Mounts
are made private first, so nothing propagates to the host.

The bind mounts hold only while the child cannot undo them: Landlock, applied after them,
forbids a process every change of its mount topology (mount, umount, pivot_root), and it
cannot rejoin the host's mount namespace either (namespace files get no Landlock rule, and
setns by pidfd needs ptrace access, which Landlock denies outside the child's domain). So
this layer is used only together with Landlock (see `sandbox.layers._plan`).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import re
import stat
import tempfile
from collections.abc import Iterable

from sandbox.layers._checks import Check, run_checks
from sandbox.layers._realpath import realpath
from sandbox.layers._syscall import Verdict, libc
from sandbox.layers.userns import map_ids

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


def confine(
    writable: Iterable[str] | None, read_only: Iterable[str], pinned: Iterable[str] = ()
) -> None:
    """Enter a private mount namespace; unless `writable` is None, make every mount of it
    read-only but each existing directory of `writable` (bound over itself, with what is
    mounted beneath it); then bind each existing path of `read_only` read-only over itself
    (a path that is a symbolic link: its target), after binding each directory of `pinned`
    over itself, writable still, so that the child cannot rename or remove it (see
    `sandbox.layers._confinement.pinned_directories`). Call it in a single-threaded child
    (unsharing a user namespace requires one), then apply Landlock.

    Device nodes, pipes and sockets stay usable on a read-only mount (`> /dev/null`);
    what it refuses is creating, removing, renaming, writing regular files, and changing
    any file's mode, owner, timestamps or extended attributes. The working directory and
    the inherited descriptors of directories and of files open read-only are reopened
    through the new view (see `_reopen_inherited`).

    A mount this process cannot reach by any path (beneath a directory it may not search)
    is left as it is, as one hidden beneath a later mount is.

    Raises OSError (EPERM where neither CAP_SYS_ADMIN nor unprivileged user namespaces
    are available, or a mount the kernel will not make read-only) from the underlying
    calls; the child must not go on to run untrusted work then.
    """
    _enter()
    if writable is not None:
        kept_open = _existing(writable)
        for path in kept_open:
            _mount(path, path, MS_BIND | MS_REC)
        for point in _mount_points():
            if any(_contains(directory, point) for directory in kept_open):
                continue
            try:
                found = os.statvfs(point).f_flag
            except FileNotFoundError:
                continue  # hidden beneath a later mount: no path reaches it
            except PermissionError as exc:
                if exc.errno != errno.EACCES:
                    raise
                # Beneath a directory this process may not search (another user's mount,
                # such as a tmpfs under root's 0700 temp dir): no path of its reaches it,
                # nor of its children (a descriptor it inherited there is reopened by path
                # below, which fails the same way, and so is closed).
                continue
            _remount(point, MS_RDONLY, found)
        # The working directory and inherited descriptors still lie on the mounts they were
        # opened through, which stay writable.
        os.chdir(os.getcwd())
        _reopen_inherited(kept_open)
    for path in _existing(pinned):
        _mount(path, path, MS_BIND | MS_REC)
    for path in _existing(read_only):
        _mount(path, path, MS_BIND | MS_REC)
        _remount(path, MS_RDONLY)
    if writable is not None:
        _hide_other_processes()


def _hide_other_processes() -> None:
    """Mount a read-only procfs of its own over ``/proc`` that lists only the processes
    this one may ptrace (proc(5): ``hidepid=ptraceable``, Linux 5.8). Under Landlock,
    which denies ptrace outside the child's domain whatever its capabilities, that hides
    every process of the host: otherwise the child reads their environments
    (``/proc/PID/environ``: an agent's API keys) and memory maps. Only a process that
    may mount a procfs of the host's PID namespace (root) can; elsewhere, and on an older
    kernel, ``/proc`` stays as it is."""
    options = b"hidepid=ptraceable"
    flags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
    libc().mount(b"proc", b"/proc", b"proc", ctypes.c_ulong(flags), options)


def works() -> Verdict:
    """A verdict, True when `confine` really turns writes into EROFS here (`confines`, in a
    child of a spawned interpreter)."""
    with tempfile.TemporaryDirectory() as scratch:
        return run_checks([check(scratch)])[0]


def check(scratch: str) -> Check:
    """The check behind `works`, on files it makes in `scratch` (an existing directory
    the caller removes afterwards)."""
    writable = os.path.join(scratch, "writable")
    protected = os.path.join(writable, "protected")
    outside = os.path.join(scratch, "outside")
    os.mkdir(writable)
    for path in (protected, outside):
        with open(path, "w"):
            pass
    return Check(__name__, confines.__name__, (writable, protected, outside))


def confines(writable: str, protected: str, outside: str) -> bool:
    """Confine to `writable` with `protected` bound read-only: True when changing the mode
    of `outside` and truncating `protected` fail with EROFS while a file inside `writable`
    can still be written. Irreversible: only for a child of its own."""
    confine([writable], [protected])
    refused = 0
    for attempt in (lambda: os.truncate(protected, 0), lambda: os.chmod(outside, 0o600)):
        try:
            attempt()
        except OSError as exc:
            refused += exc.errno == errno.EROFS
    with open(os.path.join(writable, "new"), "w"):
        pass
    return refused == 2


def _enter() -> None:
    # Root keeps its uid (files it writes stay root's); a user gets the capability over
    # mounts from a user namespace of its own.
    if os.geteuid() != 0 or _unshare(CLONE_NEWNS) != 0:
        uid, gid = os.geteuid(), os.getegid()
        if _unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"unshare(CLONE_NEWUSER | CLONE_NEWNS): {os.strerror(code)}")
        map_ids(uid, gid)
    _mount(None, "/", MS_REC | MS_PRIVATE)


def _reopen_inherited(writable: list[str]) -> None:
    """Reopen each inherited descriptor of a directory or of a file opened read-only
    outside `writable` through this namespace's view, at the same offset, so that fchmod,
    fchown, futimens, fsetxattr and the *at calls relative to it meet the read-only mount.
    A file opened for writing stays as it is (the caller's process handed it over to be
    written); one that cannot be reopened (deleted, renamed) is closed."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            info = os.fstat(fd)
            path = os.readlink(f"/proc/self/fd/{fd}")
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        except OSError:
            continue  # the listing's own descriptor, closed since
        if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
            continue
        if flags & os.O_ACCMODE != os.O_RDONLY and not flags & _O_PATH:
            continue
        if not path.startswith("/") or any(_contains(d, path) for d in writable):
            continue
        inheritable = os.get_inheritable(fd)
        try:
            fresh = os.open(path, flags & _REOPEN_FLAGS | os.O_NOFOLLOW)
        except OSError:
            os.close(fd)
            continue
        same = os.fstat(fresh)
        if (same.st_dev, same.st_ino) != (info.st_dev, info.st_ino):
            os.close(fresh)
            os.close(fd)
            continue
        if not flags & _O_PATH and stat.S_ISREG(info.st_mode):
            os.lseek(fresh, os.lseek(fd, 0, os.SEEK_CUR), os.SEEK_SET)
        os.dup2(fresh, fd, inheritable=inheritable)
        os.close(fresh)


_O_PATH = getattr(os, "O_PATH", 0)
_REOPEN_FLAGS = os.O_ACCMODE | os.O_DIRECTORY | os.O_NONBLOCK | os.O_APPEND | _O_PATH


def _existing(paths: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(realpath(p) for p in paths if os.path.lexists(p)))


def _contains(directory: str, path: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _mount_points() -> list[str]:
    """Every mount point of this namespace, parents first (proc(5): mountinfo field 5,
    with space, tab, newline and backslash written as octal escapes)."""
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as handle:
        points = [line.split(" ")[4] for line in handle if line.strip()]
    decoded = (_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), point) for point in points)
    return list(dict.fromkeys(decoded))


_ESCAPE = re.compile(r"\\([0-7]{3})")


def _remount(path: str, flags: int, found: int | None = None) -> None:
    """Remount the mount at `path` with `flags`, repeating the flags it has (`found`, its
    statvfs(3) f_flag, read here unless given)."""
    if found is None:
        found = os.statvfs(path).f_flag
    kept = sum(mount_flag for stat_flag, mount_flag in _KEPT_FLAGS if found & stat_flag)
    _mount(None, path, MS_REMOUNT | MS_BIND | flags | kept)


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
