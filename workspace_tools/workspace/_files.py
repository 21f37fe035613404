"""Opening, reading and atomically replacing files under the root without leaving it.

Every open walks from the root one directory at a time with ``O_NOFOLLOW`` (``openat``), so
a directory swapped for a symlink between :func:`~._paths.resolve_path` and the open is
refused instead of followed out of the root. Replacement is the classic atomic write: a temp
file in the same directory, ``fsync``, ``rename`` over the target (POSIX ``rename(2)`` is
atomic), then ``fsync`` of the directory; a crash leaves the old file or the new one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from .._errors import ErrorCode, ToolError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Longest name part kept in a temp file name, so ".{name}.{hex}.tmp" fits NAME_MAX (255).
_TEMP_NAME_KEEP = 200


def os_error(exc: OSError, rel: str) -> ToolError:
    """A :class:`ToolError` a model can act on for an ``OSError`` on the path ``rel``.

    The one mapping of operating-system errors to error codes; the message names ``rel`` and
    says what happened in words, never ``[Errno N]``.
    """
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
    if exc.errno == errno.ELOOP:
        return ToolError(
            f"{rel}, or a directory on its way, became a symbolic link during the call; "
            "it is not followed",
            ErrorCode.OUTSIDE_WORKSPACE,
        )
    if exc.errno in (errno.EFBIG, errno.ENOSPC, errno.EDQUOT):
        return ToolError(f"Cannot write {rel}: {exc.strerror}", ErrorCode.FILE_TOO_LARGE)
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
    errno.EROFS: ("{rel} is on a read-only file system", ErrorCode.PERMISSION_DENIED),
}


def _parts(root: Path, real: Path) -> tuple[str, ...]:
    return real.relative_to(root).parts


@contextmanager
def open_parent(root: Path, real: Path, *, create: bool = False) -> Iterator[tuple[int, str]]:
    """Yield ``(dir_fd, name)``: an fd of ``real``'s parent reached from ``root`` without
    following any symlink, and ``real``'s last component.

    Args:
        root: the workspace root (a real path).
        real: a real path strictly below ``root``.
        create: make missing parent directories (mode 0o777 less the umask, as ``mkdir -p``).

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
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=fd)
                child = _open_dir(part, fd)
            os.close(fd)
            fd = child
        yield fd, name
    finally:
        os.close(fd)


def _open_dir(name: str, dir_fd: int) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except NotADirectoryError:
        # O_DIRECTORY wins over O_NOFOLLOW: a directory swapped for a link since the path
        # was resolved fails as ENOTDIR; say what it is. (A directory again by now was
        # swapped twice.)
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
        if stat.S_ISLNK(mode) or stat.S_ISDIR(mode):
            raise OSError(errno.ELOOP, "became a symbolic link") from None
        raise


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
            # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
            fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        raise os_error(exc, rel) from exc
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        if stat.S_ISDIR(info.st_mode):
            raise os_error(IsADirectoryError(), rel)
        raise ToolError(f"{rel} is not a regular file", ErrorCode.TOOL_ERROR)
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as handle:
        yield handle, info


def read_bytes(root: Path, real: Path, rel: str) -> bytes | None:
    """The whole content of ``real``, or ``None`` when it does not exist.

    Raises:
        ToolError: as :func:`open_read`, except that a missing file is ``None``.
    """
    try:
        with open_read(root, real, rel) as (handle, _):
            return handle.read()
    except ToolError as exc:
        if exc.code is ErrorCode.NOT_FOUND:
            return None
        raise


def atomic_write(root: Path, real: Path, rel: str, data: bytes) -> bool:
    """Replace (or create) ``real`` with ``data`` atomically; return whether it was created.

    An existing file keeps its permission bits and, where the process may, its owner. A new
    file gets 0o666 less the umask; missing parent directories are made. The temp file is
    removed on any failure.

    Raises:
        ToolError: ``IS_A_DIRECTORY``, ``NOT_A_DIRECTORY``, ``PERMISSION_DENIED``,
            ``OUTSIDE_WORKSPACE`` (a component became a symlink), ``FILE_TOO_LARGE`` (no
            space, quota or file size limit), ``TOOL_ERROR`` otherwise.
    """
    if real == root:
        raise os_error(IsADirectoryError(), rel)
    try:
        with open_parent(root, real, create=True) as (dir_fd, name):
            return _replace_in(dir_fd, name, data)
    except OSError as exc:
        raise os_error(exc, rel) from exc


def _replace_in(dir_fd: int, name: str, data: bytes) -> bool:
    try:
        old = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        old = None
    if old is not None and stat.S_ISDIR(old.st_mode):
        raise IsADirectoryError(errno.EISDIR, "Is a directory")
    if old is not None and stat.S_ISLNK(old.st_mode):
        # The resolved path was no link when checked: it became one since. Never follow it.
        raise OSError(errno.ELOOP, "became a symbolic link")
    temp = f".{name[:_TEMP_NAME_KEEP]}.{secrets.token_hex(4)}.tmp"
    mode = 0o666 if old is None else stat.S_IMODE(old.st_mode)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temp, flags, mode, dir_fd=dir_fd)
    try:
        try:
            _write_all(fd, data)
            if old is not None:
                _keep_owner_and_mode(fd, old)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        # Already renamed or gone: then nothing of ours is left to clean.
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
    os.fsync(dir_fd)
    return old is None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _keep_owner_and_mode(fd: int, old: os.stat_result) -> None:
    info = os.fstat(fd)
    if (info.st_uid, info.st_gid) != (old.st_uid, old.st_gid):
        # Only root may give a file away; the content lands either way.
        with contextlib.suppress(PermissionError):
            os.fchown(fd, old.st_uid, old.st_gid)
    # After fchown, which clears setuid/setgid bits; the umask never applies to fchmod.
    os.fchmod(fd, stat.S_IMODE(old.st_mode))
