"""Opening, reading and atomically replacing files under the root without leaving it.

Every open walks from the root one directory at a time with ``O_NOFOLLOW`` (``openat``), so
a directory swapped for a symlink between :func:`~._paths.resolve_path` and the open is
refused instead of followed out of the root. Replacement is the classic atomic write: a temp
file in the same directory (named by :mod:`._tempfiles`), ``fsync``, ``rename`` over the
target (POSIX ``rename(2)`` is atomic), then ``fsync`` of the directory; a crash leaves the
old file or the new one.

The file's own permissions decide, as for ``echo > file``: the rename needs only the
directory, so before replacing a file its writability is asked of the kernel (an
``open(O_WRONLY)`` that writes nothing: mode bits against the effective uid, gid and
groups, ACLs, immutable and append-only attributes, read-only mounts). A file with no write
bit at all is refused also where the kernel would let the process write it (root), unless
the caller opts in. A replaced file keeps its owner and group; where the process may not
give the temp file away (the file is another user's, writable through its group) or may
not create one (the file is writable, its directory is not), the file is rewritten in
place instead, as ``echo > file`` does, giving up crash atomicity for that file only.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import posixpath
import resource
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from workspace_tools._errors import ErrorCode, ToolError, clipped
from workspace_tools.workspace._tempfiles import TempSweeps, create_temp, remove_stale_temps

Content = bytes | tuple[bytes | memoryview, ...]
"""A file's new content: its bytes, or pieces of them written one after another (an edit of
a large file writes the old content's slices around its change without copying them)."""


def content_size(content: Content) -> int:
    """The size of ``content`` in bytes."""
    if isinstance(content, bytes):
        return len(content)
    return sum(memoryview(piece).nbytes for piece in content)


#: Errors that say nothing of a file, only of this process (out of file descriptors): a
#: walk or a search raises them, never skips the file as if it were gone.
OUT_OF_FDS = (errno.EMFILE, errno.ENFILE)

#: What each of those means to the model, and what to do about it.
OUT_OF_FDS_WORDS = {
    errno.EMFILE: "this process has too many files open; try again when fewer calls run at once",
    errno.ENFILE: "the system has too many files open; try again later",
}

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Looks a directory up with search permission alone (no listing); never follows a link.
_PATH_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Opens an existing file for writing without changing it; O_NONBLOCK: a FIFO put in its
# place never blocks the open.
_WRITE_FLAGS = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

CommitGuard = Callable[[], AbstractContextManager[object]]
"""Entered around each step that changes the file system (a rename, a ``mkdir``): raises to
stop the change, and may hold off a cancellation while the step runs
(:meth:`~workspace_tools.ToolContext.committing`)."""


def os_error(exc: OSError, rel: str) -> ToolError:
    """A :class:`ToolError` a model can act on for an ``OSError`` on the path ``rel``.

    The one mapping of operating-system errors to error codes; the message names ``rel`` and
    says what happened in words, never ``[Errno N]``; a path of any length a caller sent is
    cut (:func:`~workspace_tools._errors.clipped`).
    """
    rel = clipped(rel)
    special = _ERRNO_ERRORS.get(exc.errno or 0)
    if special is not None:
        text, code = special
        return ToolError(text.format(rel=rel), code)
    if isinstance(exc, FileNotFoundError):
        return ToolError(f"File not found: {rel}", ErrorCode.NOT_FOUND)
    if isinstance(exc, IsADirectoryError):
        return ToolError(
            f"{rel} is a directory; use list_files to see its entries", ErrorCode.IS_A_DIRECTORY
        )
    if isinstance(exc, NotADirectoryError):
        return ToolError(f"A parent of {rel} is not a directory", ErrorCode.NOT_A_DIRECTORY)
    if isinstance(exc, PermissionError):
        return ToolError(f"Permission denied: {rel}", ErrorCode.PERMISSION_DENIED)
    return ToolError(f"Cannot access {rel}: {exc.strerror or exc}", ErrorCode.TOOL_ERROR)


# Errors with a cause the model can name and act on, beyond those mapped by exception type.
_ERRNO_ERRORS: dict[int, tuple[str, ErrorCode]] = {
    errno.ENAMETOOLONG: (
        "Path {rel} is too long: a name in it, or the whole path, is longer than the file "
        "system allows; use a shorter path",
        ErrorCode.INVALID_ARGUMENTS,
    ),
    errno.EINVAL: (
        "The file system refuses {rel} as an invalid name; use another name",
        ErrorCode.INVALID_ARGUMENTS,
    ),
    errno.ELOOP: (
        "{rel}, or a directory on its way, became a symbolic link during the call; "
        "it is not followed",
        ErrorCode.OUTSIDE_WORKSPACE,
    ),
    errno.EROFS: ("Cannot write {rel}: the file system is read-only", ErrorCode.PERMISSION_DENIED),
    errno.ENOSPC: ("Cannot write {rel}: no space left on the device", ErrorCode.DISK_FULL),
    errno.EDQUOT: ("Cannot write {rel}: the disk quota is exceeded", ErrorCode.DISK_FULL),
    errno.EFBIG: (
        "Cannot write {rel}: over the file size limit of this process",
        ErrorCode.FILE_TOO_LARGE,
    ),
    errno.EMFILE: ("Cannot open {rel}: " + OUT_OF_FDS_WORDS[errno.EMFILE], ErrorCode.TOOL_ERROR),
    errno.ENFILE: ("Cannot open {rel}: " + OUT_OF_FDS_WORDS[errno.ENFILE], ErrorCode.TOOL_ERROR),
}


def _parts(root: Path, real: Path) -> tuple[str, ...]:
    return real.relative_to(root).parts


@contextmanager
def open_parent(
    root: Path, real: Path, *, create: bool = False, guard: CommitGuard = nullcontext
) -> Iterator[tuple[int, str]]:
    """Yield ``(dir_fd, name)``: an fd of ``real``'s parent reached from ``root`` without
    following any symlink, and ``real``'s last component.

    Args:
        root: the workspace root (a real path).
        real: a real path strictly below ``root``.
        create: make missing parent directories (mode 0o777 less the umask, as ``mkdir -p``).
        guard: entered around each ``mkdir``.

    Raises:
        OSError: ``ELOOP`` when a component is a symlink, ``ENOTDIR``/``ENOENT`` as ``openat``.
    """
    *dirs, name = _parts(root, real)
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in dirs:
            try:
                child = _open_dir(part, fd)
            except FileNotFoundError:
                if not create:
                    raise
                # A concurrent writer may make it first; open it below like any other.
                with guard(), contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=fd)
                child = _open_dir(part, fd)
            os.close(fd)
            fd = child
        yield fd, name
    finally:
        os.close(fd)


def _open_dir(name: str, dir_fd: int, flags: int = _DIR_FLAGS) -> int:
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except NotADirectoryError:
        # O_DIRECTORY wins over O_NOFOLLOW: a directory swapped for a link since the path
        # was resolved fails as ENOTDIR; say what it is. (A directory again by now was
        # swapped twice.)
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
        if stat.S_ISLNK(mode) or stat.S_ISDIR(mode):
            raise OSError(errno.ELOOP, "became a symbolic link") from None
        raise


def open_dir(root: str, rel: str) -> int:
    """An fd of the directory ``rel`` (``/``-separated, ``""`` for ``root`` itself) reached
    from ``root`` one component at a time without following any symlink; the caller closes
    it.

    Raises:
        OSError: ``ELOOP`` when a component is (or became) a symlink, ``ENOTDIR`` when one
            is not a directory, ``ENOENT``, ``EACCES`` as ``openat``.
    """
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in rel.split("/") if rel else ():
            child = _open_dir(part, fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def stat_below(root: Path, real: Path, *, follow_symlinks: bool = True) -> os.stat_result:
    """Stat ``real`` (``root`` itself or a path below it) from its parent's fd, reached
    from ``root`` one name at a time without following a symlink, so that a path deeper
    than ``PATH_MAX`` is found as the file tools find it (``os.stat`` by path fails with
    ``ENAMETOOLONG`` there).

    Raises:
        OSError: as ``openat`` and ``fstatat``.
    """
    if real == root:
        return os.stat(real, follow_symlinks=follow_symlinks)
    with open_parent(root, real) as (dir_fd, name):
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=follow_symlinks)


# The most fds of directories below the root a DirFds keeps open; the ancestors above them
# are reached again by ".." (checked), so a tree deeper than the process's fd limit works.
_HELD_LEVELS = 64
# Under a low fd limit a DirFds keeps fewer: at most this share of the limit, so that the
# files its user opens beside it (and other DirFds of other threads) still find fds.
_LIMIT_SHARE = 16


def held_levels() -> int:
    """How many levels below the root a :class:`DirFds` keeps open: :data:`_HELD_LEVELS`,
    fewer under a low ``RLIMIT_NOFILE`` (a sixteenth of its soft value, at least 2)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return _HELD_LEVELS
    return min(_HELD_LEVELS, max(2, soft // _LIMIT_SHARE))


class DirFds:
    """fds of directories below ``root``, each reached without following a symlink, for
    opening many files in path order: the fds of the current directory's nearest
    ancestors are kept, so moving to a sibling directory costs one ``openat``. Close with
    :meth:`close` (or use as a context manager).

    A move costs the ``openat`` of the names not shared with the directory before and a
    comparison of the two paths as strings: no per-level work for the levels kept, so a
    walk of a chain ``n`` directories deep costs ``n`` opens, not ``n²`` steps.

    The fds held are bounded whatever the tree's depth and breadth (a tree deeper than the
    process's fd limit must not fail with ``EMFILE``): at most :func:`held_levels` levels
    below the root are open (64, fewer under a low fd limit), the shallowest closed first;
    an open that fails with ``EMFILE`` or ``ENFILE`` closes the shallowest open level and
    is tried again (until only the parent is left); a walker closes the levels it will
    not come back to (:meth:`release`). A closed level's device and inode are noted, and
    a move back up to it opens ``..`` level by level from the nearest open level below it,
    each checked to be the directory that level had: one moved out from under its parent
    meanwhile fails with ``ELOOP``, as a swapped one does on the way down (one moved
    together with its ancestors stays reachable, as through a kept fd). Moving up costs a
    level an ``openat``, as moving down does, so the total stays linear.

    Args:
        root: the workspace root (a real path).
        search_only: open the directories with ``O_PATH`` where there is one: search
            permission is enough, and the fds serve only to look names up (``fstatat``,
            ``openat``), never to list.
    """

    def __init__(self, root: str, *, search_only: bool = False) -> None:
        self._root = root
        self._flags = _PATH_FLAGS if search_only else _DIR_FLAGS
        self._current = ""  # the directory last asked for
        self._ends: list[int] = []  # where each level's path ends in _current (root: 0)
        self._fds: list[int] = []  # each level's fd, -1 once closed (the root's stays open)
        self._ids: dict[int, tuple[int, int]] = {}  # a closed level's (st_dev, st_ino)
        self._open = 0  # how many levels below the root have their fd open
        self._held = held_levels()

    def get(self, rel_dir: str) -> int:
        """The fd of the directory ``rel_dir`` (``""`` for the root); valid until the next
        call or :meth:`close`.

        Raises:
            OSError: as :func:`open_dir`; ``ELOOP`` when an ancestor left by ``..`` is no
                longer the directory it was.
        """
        fds, ends = self._fds, self._ends
        if not fds:
            fds.append(os.open(self._root, self._flags))
            ends.append(0)
        current = self._current
        keep = len(ends)
        while keep > 1:
            end = ends[keep - 1]
            if rel_dir[end : end + 1] in ("", "/") and rel_dir.startswith(current[:end]):
                break
            keep -= 1
        self._up_to(keep)
        self._current = rel_dir
        position = ends[-1]
        while position < len(rel_dir):
            start = position + 1 if position else 0
            after = rel_dir.find("/", start)
            after = len(rel_dir) if after < 0 else after
            fds.append(self._open_below(rel_dir[start:after]))
            ends.append(after)
            self._open += 1
            position = after
            if self._open > self._held:
                self._close_shallowest()
        return fds[-1]

    def release(self, level: int) -> None:
        """Close the fd of ``level`` (0: the root, 1: a directory right below it, ...) of
        the directory last asked for, if open, when the caller will not ask for a
        directory right below it again; the root's and the deepest level's stay open. A
        later move through it climbs by ``..`` as through any closed level."""
        if 0 < level < len(self._fds) - 1 and self._fds[level] >= 0:
            self._close(level)

    def _open_below(self, name: str) -> int:
        """``name`` opened in the deepest level; out of fds, the shallowest open levels
        are closed one by one (the deepest is needed) and the open tried again."""
        while True:
            try:
                return _open_dir(name, self._fds[-1], self._flags)
            except OSError as exc:
                if exc.errno not in OUT_OF_FDS or not self._close_shallowest():
                    raise

    def _close_shallowest(self) -> bool:
        """Close the shallowest open level below the root but the deepest; whether any."""
        fds = self._fds
        for level in range(1, len(fds) - 1):
            if fds[level] >= 0:
                self._close(level)
                return True
        return False

    def _close(self, level: int) -> None:
        """Close ``level``'s fd, noting its identity for a climb back through it."""
        fd = self._fds[level]
        info = os.fstat(fd)
        self._ids[level] = (info.st_dev, info.st_ino)
        os.close(fd)
        self._fds[level] = -1
        self._open -= 1

    def _up_to(self, keep: int) -> None:
        """Leave the first ``keep`` levels, the deepest of them with its fd open."""
        fds = self._fds
        target = keep - 1
        if target >= len(fds) - 1:
            return
        if fds[target] < 0:
            # Closed: climb by ".." from the nearest open level below it, checking each.
            level = next(lv for lv in range(target + 1, len(fds)) if fds[lv] >= 0)
            fd, fds[level] = fds[level], -1
            self._open -= 1
            try:
                while level > target:
                    level -= 1
                    try:
                        parent = os.open("..", self._flags, dir_fd=fd)
                    finally:
                        os.close(fd)
                    fd = parent
                    info = os.fstat(fd)
                    if (info.st_dev, info.st_ino) != self._ids[level]:
                        os.close(fd)
                        raise OSError(errno.ELOOP, "moved while it was walked")
            except BaseException:
                self._drop_from(1)  # the next move starts again from the root
                raise
            fds[target] = fd
            self._open += 1
            self._ids.pop(target, None)
        self._drop_from(keep)

    def _drop_from(self, keep: int) -> None:
        """Forget every level from ``keep`` on, closing those still open."""
        fds = self._fds
        while len(fds) > keep:
            fd = fds.pop()
            self._ends.pop()
            self._ids.pop(len(fds), None)
            if fd >= 0:
                os.close(fd)
                if fds:
                    self._open -= 1
        if len(fds) <= 1:
            self._current = ""
            self._open = 0

    def close(self) -> None:
        """Close every fd held."""
        self._drop_from(0)
        self._ids.clear()

    def __enter__(self) -> DirFds:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def special_kind(mode: int) -> str | None:
    """What a file of ``st_mode`` ``mode`` is when it is neither a regular file, a directory
    nor a symlink (``"a FIFO (named pipe)"``, ``"a socket"``, ``"a character device"``,
    ``"a block device"``); ``None`` for those three. Reading such a file may block forever
    (a FIFO with no writer), never end (``/dev/zero``) or fail (a socket)."""
    kinds = (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    for test, kind in kinds:
        if test(mode):
            return kind
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode):
        return None
    return "a special file"


def not_regular(rel: str, mode: int, unchanged: str = "") -> ToolError:
    """The ``TOOL_ERROR`` for a path that names a special file, saying what it is; the
    message ends ``not a regular file`` (``unchanged`` follows it after ``; ``)."""
    kind = special_kind(mode) or "a special file"
    tail = f"; {unchanged}" if unchanged else ""
    return ToolError(f"{clipped(rel)} is {kind}, not a regular file{tail}", ErrorCode.TOOL_ERROR)


@contextmanager
def open_read(root: Path, real: Path, rel: str) -> Iterator[tuple[BinaryIO, os.stat_result]]:
    """Yield a binary file object for the regular file ``real`` and its ``fstat``.

    Raises:
        ToolError: ``NOT_FOUND``, ``IS_A_DIRECTORY``, ``PERMISSION_DENIED``,
            ``OUTSIDE_WORKSPACE`` (a component became a symlink), or ``TOOL_ERROR`` for a
            special file (FIFO, device) whose reading could block.
    """
    if real == root:
        raise os_error(IsADirectoryError(), rel)
    try:
        with open_parent(root, real) as (dir_fd, name):
            # A device or socket is never opened (opening a device may act on it; a socket
            # cannot be opened); O_NONBLOCK: opening a FIFO swapped in meanwhile must not
            # wait for a writer; it is refused below.
            before = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if special_kind(before.st_mode) is not None:
                raise not_regular(rel, before.st_mode)
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
            fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        raise os_error(exc, rel) from exc
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        if stat.S_ISDIR(info.st_mode):
            raise os_error(IsADirectoryError(), rel)
        raise not_regular(rel, info.st_mode)
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as handle:
        yield handle, info


def read_bytes(root: Path, real: Path, rel: str, *, limit: int) -> bytes | None:
    """The whole content of ``real``, or ``None`` when it does not exist.

    At most ``limit + 1`` bytes are ever read: a file over ``limit`` bytes (a 10 GB sparse
    file, one that grows while it is read) is refused without being loaded.

    Raises:
        ToolError: ``FILE_TOO_LARGE`` over ``limit`` bytes; as :func:`open_read`, except
            that a missing file is ``None``.
    """
    try:
        with open_read(root, real, rel) as (handle, info):
            # The size the file has, and one byte more to see it grow: a read of the whole
            # limit would allocate (and fault in) a buffer that size for every file.
            data = b"" if info.st_size > limit else handle.read(info.st_size + 1)
            if info.st_size < len(data) <= limit:
                data += handle.read(limit + 1 - len(data))
    except ToolError as exc:
        if exc.code is ErrorCode.NOT_FOUND:
            return None
        raise
    if info.st_size > limit or len(data) > limit:
        size = f"{info.st_size:,} bytes" if info.st_size > limit else "growing"
        raise ToolError(
            f"{rel} is {size}, over the {limit:,}-byte limit for rewriting a file; change "
            "it with run_command instead",
            ErrorCode.FILE_TOO_LARGE,
        )
    return data


def atomic_write(
    root: Path,
    real: Path,
    rel: str,
    data: Content,
    *,
    write_read_only: bool = False,
    guard: CommitGuard = nullcontext,
    fsync: bool = True,
    sweeps: TempSweeps | None = None,
) -> int:
    """Replace (or create) ``real`` with ``data`` atomically; return how many other hard
    links the replaced file had (0 for a new file). Those names keep the old content: the
    new content is a file of its own at ``real`` (a file's other names may be outside the
    root, or a package store's, which a write here must not change).

    An existing file keeps its permission bits, owner and group; a new file gets 0o666 less
    the umask; missing parent directories are made. The temp file is removed on any
    failure, and temp files of dead writes in the directory are removed
    (:func:`~._tempfiles.remove_stale_temps`; with ``sweeps``, a workspace's, only when
    there may be some: :class:`~._tempfiles.TempSweeps`).

    Args:
        root, real, rel: the workspace root, the target's real path and its path as shown.
        data: the new content (its bytes, or pieces of them).
        write_read_only: replace a file that has no write permission bit at all where the
            process may (root); off, such a file is refused like for any other user.
        guard: entered around the rename (and each ``mkdir``): it may raise to stop the
            change (a cancelled call); the temp file is then removed.
        fsync: flush the data before the rename and the directory after it (durable once
            this returns); off, still atomic, but a power loss may lose the change.

    Raises:
        ToolError: ``PERMISSION_DENIED`` (the file is not writable by this process, has no
            write bit, is immutable or append-only, its directory is not writable for a
            new file, or the file system is read-only), ``DISK_FULL`` (no space, quota),
            ``FILE_TOO_LARGE`` (the process's file size limit), ``IS_A_DIRECTORY``,
            ``NOT_A_DIRECTORY``, ``OUTSIDE_WORKSPACE`` (a component became a symlink),
            ``TOOL_ERROR`` otherwise; whatever ``guard`` raises. Messages name ``rel``,
            never the temp file, and say that the file was left unchanged.
    """
    if real == root:
        raise os_error(IsADirectoryError(), rel)
    old: os.stat_result | None = None
    try:
        with open_parent(root, real, create=True, guard=guard) as (dir_fd, name):
            old = _existing(dir_fd, name)
            if old is not None:
                _check_writable(dir_fd, name, old, rel, write_read_only)
            if sweeps is None:
                remove_stale_temps(dir_fd)
            else:
                sweeps.sweep(dir_fd)
            _replace(dir_fd, name, data, old, rel, guard, fsync)
            if sweeps is not None:
                sweeps.wrote(dir_fd)
    except OSError as exc:
        error = os_error(exc, rel)
        outcome = "nothing was written" if old is None else "the file was left unchanged"
        raise ToolError(f"{error.message}; {outcome}", error.code) from exc
    return 0 if old is None else old.st_nlink - 1


def other_links_note(rel: str, links: int) -> str | None:
    """What to tell the model after ``rel``, which had ``links`` other hard links, was
    replaced by a file of its own (``None`` when it had none)."""
    if links < 1:
        return None
    names = "its other name keeps" if links == 1 else "its other names keep"
    return (
        f"{rel} had {links} other hard link{'' if links == 1 else 's'}; {rel} is now a file "
        f"of its own, and {names} the old content"
    )


def _existing(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        old = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(old.st_mode):
        raise IsADirectoryError(errno.EISDIR, "Is a directory")
    if stat.S_ISLNK(old.st_mode):
        # The resolved path was no link when checked: it became one since. Never follow it.
        raise OSError(errno.ELOOP, "became a symbolic link")
    return old


def _check_writable(
    dir_fd: int, name: str, old: os.stat_result, rel: str, write_read_only: bool
) -> None:
    """Refuse a file the process may not write, as ``open(O_WRONLY)`` would."""
    unchanged = "the file was left unchanged"
    mode = stat.S_IMODE(old.st_mode)
    if not stat.S_ISREG(old.st_mode):
        raise not_regular(rel, old.st_mode, unchanged)
    if not write_read_only and not mode & 0o222:
        raise ToolError(
            f"Permission denied: {rel} is read-only (mode {mode:04o}); {unchanged}",
            ErrorCode.PERMISSION_DENIED,
        )
    try:
        fd = os.open(name, _WRITE_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.EPERM:
            raise ToolError(
                f"Permission denied: {rel} may not be changed (an immutable or append-only "
                f"attribute, or a security policy, forbids it); {unchanged}",
                ErrorCode.PERMISSION_DENIED,
            ) from exc
        if exc.errno == errno.EACCES:
            raise ToolError(
                f"Permission denied: {rel} is not writable by this process (mode "
                f"{mode:04o}, owner uid {old.st_uid}, group gid {old.st_gid}); {unchanged}",
                ErrorCode.PERMISSION_DENIED,
            ) from exc
        if exc.errno != errno.ETXTBSY:
            raise
        # A running program's file: replacing it by rename is how it is done (a linker's).
    else:
        os.close(fd)


def _replace(
    dir_fd: int,
    name: str,
    data: Content,
    old: os.stat_result | None,
    rel: str,
    guard: CommitGuard,
    fsync: bool,
) -> None:
    mode = 0o666 if old is None else stat.S_IMODE(old.st_mode)
    try:
        temp, fd = create_temp(dir_fd, name, mode)
    except PermissionError as exc:
        if old is None:
            where = posixpath.dirname(rel) or "."
            raise ToolError(
                f"Permission denied: cannot create {rel}: the directory {where} is not "
                "writable by this process; nothing was written",
                ErrorCode.PERMISSION_DENIED,
            ) from exc
        # The file is writable (checked), its directory is not: as echo > file does.
        _rewrite_in_place(dir_fd, name, rel, data, guard, fsync)
        return
    try:
        renamed = _fill_and_rename(dir_fd, fd, temp, name, data, old, guard, fsync)
    except BaseException:
        # Already renamed or gone: then nothing of ours is left to clean.
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
    finally:
        # Closing drops the temp file's lock, only now that it is renamed or removed.
        os.close(fd)
    if renamed:
        if fsync:
            os.fsync(dir_fd)
        return
    os.unlink(temp, dir_fd=dir_fd)
    _rewrite_in_place(dir_fd, name, rel, data, guard, fsync)


def _fill_and_rename(
    dir_fd: int,
    fd: int,
    temp: str,
    name: str,
    data: Content,
    old: os.stat_result | None,
    guard: CommitGuard,
    fsync: bool,
) -> bool:
    """Write ``data`` to the temp file and rename it over ``name``; False, with nothing
    renamed, when ``old``'s owner and group cannot be given to the temp file."""
    if old is not None and not _take_owner(fd, old):
        return False
    _write_all(fd, data)
    if old is not None:
        # After fchown and the writes, which clear setuid/setgid bits; no umask for fchmod.
        os.fchmod(fd, stat.S_IMODE(old.st_mode))
    if fsync:
        os.fsync(fd)
    with guard():
        if fsync or old is None:
            os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        else:
            swap_in(dir_fd, temp, name)
    return True


_RENAME_EXCHANGE = 2  # <linux/fs.h>: renameat2 swaps the two names, both must exist
# What renameat2 says when it cannot exchange here (an old kernel, a file system without
# it, seccomp): rename as before.
_NO_EXCHANGE = (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM)


def libc_function(name: str, *argtypes: Any) -> Any:
    """The C library's function ``name`` on Linux, taking ``argtypes`` and returning a C
    int (errno kept for ``ctypes.get_errno``), for a system call Python's ``os`` lacks;
    ``None`` elsewhere or when the library has no such function."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True)[name]
    except (OSError, AttributeError):
        return None
    function.argtypes = list(argtypes)
    function.restype = ctypes.c_int
    return function


# Linux's renameat2(2).
_RENAMEAT2: Callable[[int, bytes, int, bytes, int], int] | None = libc_function(
    "renameat2", ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint
)


def swap_in(dir_fd: int, temp: str, name: str) -> None:
    """Put the file ``temp`` at ``name`` in the directory ``dir_fd``, replacing what is
    there, as atomically for a reader as ``os.replace`` (the name always holds a whole
    file, the old or the new), without asking the file system to write the new file out.

    ``rename(2)`` over an existing file makes ext4 (``auto_da_alloc``, its default)
    allocate the new file's blocks and start writing them back, a guard for programs that
    replace a file without ``fsync``; on a 20-file patch that measured 2.5 ms of 11.
    A writer that chose not to flush (the workspace's ``fsync=False``, like ``git apply``)
    has no use for it; one that flushed first finds nothing left to write and gains
    nothing here (measured), so it renames. Exchanging the two names
    (``renameat2(RENAME_EXCHANGE)``) does not take that path; the old file, now at
    ``temp``, is then unlinked. Where the exchange is not possible (no such file at
    ``name``, not Linux, a file system without it) this is ``os.replace``. A directory
    found at ``name`` is swapped back and refused as ``os.replace`` refuses it.

    Raises:
        OSError: as ``os.replace``.
    """
    if _RENAMEAT2 is not None:
        if _RENAMEAT2(dir_fd, os.fsencode(temp), dir_fd, os.fsencode(name), _RENAME_EXCHANGE) == 0:
            try:
                os.unlink(temp, dir_fd=dir_fd)
            except IsADirectoryError:
                # A directory put at the name since it was checked: as rename refuses it.
                _RENAMEAT2(dir_fd, os.fsencode(temp), dir_fd, os.fsencode(name), _RENAME_EXCHANGE)
                raise
            except FileNotFoundError:
                pass  # already removed as a stale temp file (it is unlocked): it is gone
            return
        code = ctypes.get_errno()
        if code not in _NO_EXCHANGE and code != errno.ENOENT:
            raise OSError(code, os.strerror(code))
    os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def _take_owner(fd: int, old: os.stat_result) -> bool:
    info = os.fstat(fd)
    if (info.st_uid, info.st_gid) == (old.st_uid, old.st_gid):
        return True
    try:
        os.fchown(fd, old.st_uid, old.st_gid)
    except PermissionError:
        # Only root gives a file away, and only a member of a group gives one to it.
        return False
    return True


def _rewrite_in_place(
    dir_fd: int, name: str, rel: str, data: Content, guard: CommitGuard, fsync: bool
) -> None:
    """Overwrite the file itself (owner, group, mode and links stay): a crash part-way
    leaves a mix of old and new, as after ``echo > file``. A full disk is found out
    before any byte changes where the file system can reserve space."""
    fd = os.open(name, _WRITE_FLAGS, dir_fd=dir_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        if info.st_nlink > 1:
            # Its other names may be outside the root: writing the shared inode would
            # change a file there. A rename gives this name a new inode; in place cannot.
            others = info.st_nlink - 1
            raise ToolError(
                f"Permission denied: {rel} has {others} other hard "
                f"link{'' if others == 1 else 's'}, "
                "possibly outside the workspace, and may only be rewritten in place here "
                "(its owner cannot be kept by a replacement), which would change them too; "
                "the file was left unchanged",
                ErrorCode.PERMISSION_DENIED,
            )
        os.set_blocking(fd, True)
        size = content_size(data)
        with guard():
            _reserve(fd, info.st_size, size)
            _write_all(fd, data)
            os.ftruncate(fd, size)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _reserve(fd: int, size: int, needed: int) -> None:
    if needed <= size or not hasattr(os, "posix_fallocate"):
        return
    try:
        os.posix_fallocate(fd, size, needed - size)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise
        # Not supported here (EOPNOTSUPP, EINVAL): the writes themselves find out.


def _write_all(fd: int, data: Content) -> None:
    for piece in (data,) if isinstance(data, bytes) else data:
        view = memoryview(piece)
        while view:
            view = view[os.write(fd, view) :]


@dataclass(frozen=True)
class MadeDirs:
    """The directories a write of a file will make: the file's parents below the root
    (``parts``, one name each, the root's child first) from ``parts[first]`` down."""

    parts: tuple[str, ...]
    first: int


def missing_parents(root: Path, real: Path) -> MadeDirs | None:
    """The parents of ``real`` (strictly below ``root``) that do not exist, found by one
    walk from the root by fd (each name looked up in the directory above it, so a path
    ``n`` levels deep costs ``n`` lookups, not ``n²``); ``None`` when all exist or the walk
    stops for another reason (a file, a link: the write reports it)."""
    parts = tuple(str(real)[len(str(root).rstrip(os.sep)) + 1 :].split(os.sep)[:-1])
    fd = os.open(root, _PATH_FLAGS)
    try:
        for index, part in enumerate(parts):
            try:
                child = os.open(part, _PATH_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                return MadeDirs(parts, index)
            except OSError:
                return None
            os.close(fd)
            fd = child
    finally:
        os.close(fd)
    return None


def remove_made(root: Path, made: MadeDirs) -> None:
    """Remove the directories of ``made`` that are still empty, deepest first, stopping at
    the first that is not (or is gone); never raises.

    One walk down from the root by fd without following links, then up by ``..``: each
    parent reached that way must be the very directory passed on the way down (device
    and inode), so a directory moved meanwhile (perhaps out of the root) stops the removal
    instead of leading it elsewhere. Linear in the depth.
    """
    try:
        fd = os.open(root, _PATH_FLAGS)
    except OSError:
        return
    seen: list[tuple[int, int]] = []  # of the directories from the first made one's parent
    reached = 0
    try:
        for index, part in enumerate(made.parts):
            if index >= made.first:
                info = os.fstat(fd)
                seen.append((info.st_dev, info.st_ino))
            try:
                child = os.open(part, _PATH_FLAGS, dir_fd=fd)
            except OSError:
                break
            os.close(fd)
            fd = child
            reached = index + 1
        # fd is made.parts[reached - 1]; remove it and climb while it is one of ours.
        for index in range(reached - 1, made.first - 1, -1):
            parent = os.open("..", _PATH_FLAGS, dir_fd=fd)
            info = os.fstat(parent)
            os.close(fd)
            fd = parent
            if (info.st_dev, info.st_ino) != seen[index - made.first]:
                return
            os.rmdir(made.parts[index], dir_fd=fd)
    except OSError:
        return
    finally:
        os.close(fd)
