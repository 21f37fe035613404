"""The temp files of atomic writes: their names, and removal of those a killed write left.

A write goes to ``.{name}.{16 hex digits}.wt-tmp`` in the target's directory and renames it
over the target. The name is this package's own, so that:

- discovery (``list_files``, ``glob``, ``grep``, ``include_ignored`` too) and the session's
  tree fingerprint skip it by name (:func:`is_temp_name`) — a half-written copy of a file is
  never listed or searched, whether its write is running or was killed;
- a later write can remove what a killed write left (:func:`remove_stale_temps`) without
  touching anything else: only names of exactly this pattern, only regular files, and only
  files no writer holds. A writer holds an exclusive ``flock`` on its temp file from just
  after creating it until after the rename; the kernel drops the lock when the writer's
  process dies, however it dies. A file is removed only when that lock is free and it was
  last modified at least :data:`STALE_SECONDS` ago (which covers the instant between a
  writer's ``open`` and its ``flock``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import stat
import time
from collections.abc import Callable
from typing import NamedTuple

TEMP_SUFFIX = ".wt-tmp"
STALE_SECONDS = 60.0
"""A temp file unlocked and unmodified for this long is left over from a dead write."""

_TEMP_NAME = re.compile(r"\..+\.[0-9a-f]{16}\.wt-tmp", re.DOTALL)
# Bytes of the target's name kept in the temp name: 1 + 200 + 1 + 16 + 7 = 225 <= NAME_MAX.
_KEEP_BYTES = 200
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_PROBE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def is_temp_name(name: str) -> bool:
    """Whether ``name`` (one path component) is a temp file name of this package."""
    return name.endswith(TEMP_SUFFIX) and _TEMP_NAME.fullmatch(name) is not None


def create_temp(dir_fd: int, name: str, mode: int) -> tuple[str, int]:
    """Create a new temp file for the target ``name`` in the directory ``dir_fd``.

    Returns ``(temp name, fd)``: the fd is open for writing and holds an exclusive
    ``flock`` on the file; closing it releases the lock. ``mode`` is given to ``open``
    (the umask applies).

    Raises:
        OSError: as ``openat(O_CREAT | O_EXCL)``.
    """
    kept = os.fsdecode(os.fsencode(name)[:_KEEP_BYTES])
    temp = f".{kept}.{secrets.token_hex(8)}{TEMP_SUFFIX}"
    fd = os.open(temp, _CREATE_FLAGS, mode, dir_fd=dir_fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
    return temp, fd


def remove_stale_temps(dir_fd: int, *, now: float | None = None) -> list[str]:
    """Remove the temp files of dead writes from the directory ``dir_fd``.

    Only names :func:`is_temp_name` accepts, only regular files, only files whose
    ``flock`` is free and whose mtime is at least :data:`STALE_SECONDS` before ``now``
    (default: the current time). Never raises: what cannot be checked is left alone.

    Returns:
        The names removed.
    """
    return _sweep(dir_fd, time.time() if now is None else now)[0]


def _sweep(dir_fd: int, now: float) -> tuple[list[str], bool]:
    """:func:`remove_stale_temps`: ``(names removed, whether temp names were left)``."""
    try:
        with os.scandir(dir_fd) as entries:
            names = [entry.name for entry in entries if is_temp_name(entry.name)]
    except OSError:
        return [], True  # not looked at: as if something were left
    removed = [name for name in names if _remove_if_stale(dir_fd, name, now)]
    return removed, len(removed) < len(names)


class _Swept(NamedTuple):
    at: float  # the sweeps' clock at the sweep
    mtime_ns: int  # the directory's mtime after this workspace's last write there
    left: bool  # temp names were left: young, or held by their writer


#: Directories a :class:`TempSweeps` remembers; past this many it forgets them all (each
#: is then swept on its next write, as the first time).
_REMEMBERED = 4096


class TempSweeps:
    """Which directories a workspace's writes looked in for temp files of dead writes, so
    that a write looks (:func:`remove_stale_temps`, a listing of the whole directory) only
    when something there may be removable: the first time; while a temp file is left
    (young, or its writer alive); when the directory changed since this workspace's last
    write there (its mtime); and every :data:`STALE_SECONDS` in any case.

    What is removed, and when, is what a look on every write would remove: a temp file
    made after a look is not removable before it is :data:`STALE_SECONDS` old, and by then
    the next write looks again (the mtime rule catches one given an older mtime).

    Thread-safe: an entry is replaced whole, and two writes looking at once is harmless.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock  # seconds, monotonic
        self._dirs: dict[tuple[int, int], _Swept] = {}

    def sweep(self, dir_fd: int) -> list[str]:
        """Before a write in the directory ``dir_fd``: remove the stale temp files there
        when it is time to look (see the class). Returns the names removed."""
        info = os.fstat(dir_fd)
        key = (info.st_dev, info.st_ino)
        clock = self._clock()
        seen = self._dirs.get(key)
        if (
            seen is not None
            and not seen.left
            and seen.mtime_ns == info.st_mtime_ns
            and clock - seen.at < STALE_SECONDS
        ):
            return []
        removed, left = _sweep(dir_fd, time.time())
        if len(self._dirs) >= _REMEMBERED:
            self._dirs.clear()
        self._dirs[key] = _Swept(clock, info.st_mtime_ns, left)
        return removed

    def wrote(self, dir_fd: int) -> None:
        """After a write in the directory ``dir_fd``: its mtime now, so that the next write
        tells a change made by another from its own."""
        info = os.fstat(dir_fd)
        key = (info.st_dev, info.st_ino)
        seen = self._dirs.get(key)
        if seen is not None:
            self._dirs[key] = seen._replace(mtime_ns=info.st_mtime_ns)


def _remove_if_stale(dir_fd: int, name: str, now: float) -> bool:
    try:
        fd = os.open(name, _PROBE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or now - info.st_mtime < STALE_SECONDS:
            return False
        # Free only when its writer is gone (or done with it); raises when held.
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        current = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if (current.st_dev, current.st_ino) != (info.st_dev, info.st_ino):
            return False
        os.unlink(name, dir_fd=dir_fd)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
