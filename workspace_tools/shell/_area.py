"""The session's output area: a directory in the workspace root for the whole output of
commands and background processes, which the agent pages through with ``read_file``.

Its name, ``.shell-output.<16 hex digits>.wt-tmp``, is a temp name of this package
(``workspace._tempfiles``): ``list_files``, ``glob``, ``grep`` and the session's
fingerprints skip it, as they skip the temp files of writes. A ``.gitignore`` of ``*``
inside keeps git from listing or committing it. It is removed with the session. A command
may remove it meanwhile (``rm -rf .shell-output.*``, ``git clean -fdx``): it is made again
(:func:`restore_area`, :func:`open_output`) before the next file goes into it.

The area is in the workspace, so a command (a sandboxed one too) can change it: put a
link where the next output file goes, or a link to a directory of the host in place of
the area. So this process, which is not confined, never reaches into it by path: it opens
the area from the root with ``O_NOFOLLOW`` (with a link or file under the area's name
no file is made: the output is counted and kept head and tail, as on a full disk), and
its files from that directory's descriptor, never through a link: an output file is
truncated only when it is a regular file of one link, else unlinked and made anew
(``O_EXCL | O_NOFOLLOW``), and a FIFO is made anew and checked to be the one made
(:func:`open_output`, :func:`open_fifo`, :func:`remove_file`). Nothing written for a
command lands outside the area.

A process killed outright (``kill -9``, the OOM killer) cannot remove its area. So each
area names its owner in ``.owner`` (the process's pid and start time, the boot and the PID
namespace it ran in), and :func:`make_area` first removes the areas in the root whose
owner is gone: the same boot and namespace, and no process of that pid and start time.
An area it cannot judge (another boot, host or namespace, no owner file, another user's)
is left alone.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

#: The name of an output area; only such directories are ever judged stale.
_AREA_NAME = re.compile(r"\.shell-output\.[0-9a-f]{16}\.wt-tmp")
#: The file in an area that names its owner.
OWNER_FILE = ".owner"


def make_area(root: Path) -> Path:
    """Create a new output area in ``root`` (mode 0700) and return its path, once the
    areas of owners that are gone were removed (:func:`remove_stale_areas`).

    Raises:
        OSError: the root is not writable.
    """
    remove_stale_areas(root)
    area = root / f".shell-output.{secrets.token_hex(8)}.wt-tmp"
    fd = os.open(root, _DIRECTORY)
    try:
        _create(fd, area.name)
    finally:
        os.close(fd)
    return area


def remove_stale_areas(root: Path) -> list[str]:
    """Remove the output areas in ``root`` whose owning process is gone (killed before it
    could remove them); returns their names, sorted. Never raises: an area it cannot read
    or judge is kept."""
    here = _owner_of_this_process()
    if here is None:
        return []  # no /proc: nothing can be judged
    removed = []
    with contextlib.suppress(OSError):
        with os.scandir(root) as entries:
            names = sorted(e.name for e in entries if _AREA_NAME.fullmatch(e.name))
        for name in names:
            if _is_stale(root / name, here):
                shutil.rmtree(root / name, ignore_errors=True)
                removed.append(name)
    return removed


def _is_stale(area: Path, here: tuple[str, str, str, str]) -> bool:
    """Whether ``area`` (a real directory of this user) names an owner of this boot and
    PID namespace (``here``: this process's owner fields) that is gone."""
    try:
        info = os.lstat(area)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            return False
        fd = os.open(area / OWNER_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fields = os.read(fd, 512).decode("ascii").split()
        finally:
            os.close(fd)
    except (OSError, UnicodeDecodeError):
        return False
    if len(fields) != 4 or not fields[0].isdigit() or fields[2:] != list(here[2:]):
        return False
    # A pid of this namespace: the owner lives while that pid has its start time.
    return _start_time(int(fields[0])) != fields[1]


def _owner_of_this_process() -> tuple[str, str, str, str] | None:
    """``(pid, start time, boot id, PID namespace)`` of this process, as an area's owner
    file holds them, or ``None`` without a /proc to read them from."""
    pid = os.getpid()
    started = _start_time(pid)
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as boot:
            boot_id = boot.read().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    return None if started is None else (str(pid), started, boot_id, namespace)


def _start_time(pid: int) -> str | None:
    """The start time of the live process ``pid`` (clock ticks since boot), or ``None``
    when there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as info:
            # Field 22; the name (field 2) may hold spaces and parentheses: count from its end.
            return info.read().rpartition(b")")[2].split()[19].decode()
    except (OSError, IndexError):
        return None


def restore_area(area: Path) -> None:
    """Make ``area`` again, as :func:`make_area` made it, when something removed it.

    Raises:
        OSError: it cannot be made (the root is gone or read-only; an existing entry of
            that name that is no directory is left as it is).
    """
    try:
        os.close(_area_fd(area))
    except OSError as exc:
        if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise


def open_output(path: Path) -> int:
    """A descriptor of ``path``, a file of the output area, for writing from its start:
    created (mode 0600), or truncated when it is a regular file of one link; a link in its
    place (symbolic, or a hard link to a file elsewhere) is removed and the file made
    anew. The area is made again first when it is gone.

    Raises:
        OSError: the file cannot be opened (or something took its name meanwhile).
    """
    at = _area_fd(path.parent)
    try:
        try:
            fd = os.open(path.name, _OUTPUT, 0o600, dir_fd=at)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            return _made_anew(path.name, at)
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode):
            if info.st_nlink > 1:
                os.close(fd)
                return _made_anew(path.name, at)
            os.ftruncate(fd, 0)
        return fd
    finally:
        os.close(at)


def _made_anew(name: str, at: int) -> int:
    """``name`` in the directory ``at``, unlinked and created again (never followed)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=at)
    return os.open(name, _NEW_FILE, 0o600, dir_fd=at)


def open_fifo(path: Path) -> int:
    """A FIFO made anew at ``path`` in the output area, opened for reading and writing
    without blocking (so opening it never waits for the other side, and it is not at end of
    file before a reader opens it).

    Raises:
        OSError: it cannot be made, or what was opened is not the FIFO made.
    """

    def make(name: str, at: int) -> int:
        os.mkfifo(name, 0o600, dir_fd=at)
        fd = os.open(name, os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=at)
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.close(fd)  # swapped meanwhile
            raise OSError(errno.EEXIST, "not the FIFO made", str(path))
        return fd

    return _make_in_area(path, make)


def remove_file(path: Path) -> None:
    """Remove ``path``, a file of the output area, if it is there (in the area itself: a
    link put in the area's place is not followed). Never raises."""
    with contextlib.suppress(OSError):
        root = os.open(path.parent.parent, _DIRECTORY)
        try:
            at = os.open(path.parent.name, _DIRECTORY | os.O_NOFOLLOW, dir_fd=root)
        finally:
            os.close(root)
        try:
            os.unlink(path.name, dir_fd=at)
        finally:
            os.close(at)


_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# Without O_TRUNC, which would empty a file elsewhere that a hard link here leads to; and
# not waiting on a FIFO put there.
_OUTPUT = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _make_in_area(path: Path, make: Callable[[str, int], int]) -> int:
    """``make(name, area_fd)`` for ``path`` in its area (made again when gone), once what
    had that name there is unlinked."""
    at = _area_fd(path.parent)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path.name, dir_fd=at)
        return make(path.name, at)
    finally:
        os.close(at)


def _area_fd(area: Path) -> int:
    """A descriptor of the directory ``area`` in the root, never reached through a link:
    made again when gone.

    Raises:
        OSError: the area cannot be made (the root is gone or read-only), or something
            else has its name (a link, a file: left as it is, and nothing is made).
    """
    root = os.open(area.parent, _DIRECTORY)
    try:
        try:
            return os.open(area.name, _DIRECTORY | os.O_NOFOLLOW, dir_fd=root)
        except FileNotFoundError:
            with contextlib.suppress(FileExistsError):  # made meanwhile by another call
                _create(root, area.name)
            return os.open(area.name, _DIRECTORY | os.O_NOFOLLOW, dir_fd=root)
    finally:
        os.close(root)


def _create(root: int, name: str) -> None:
    """Make the area ``name`` in the directory ``root`` with its ``.gitignore`` and owner
    file.

    Raises:
        FileExistsError: something has that name.
    """
    os.mkdir(name, 0o700, dir_fd=root)
    at = os.open(name, _DIRECTORY | os.O_NOFOLLOW, dir_fd=root)
    try:
        _write_new(at, ".gitignore", b"*\n")
        owner = _owner_of_this_process()
        if owner is not None:
            _write_new(at, OWNER_FILE, (" ".join(owner) + "\n").encode("ascii"))
    finally:
        os.close(at)


def _write_new(at: int, name: str, data: bytes) -> None:
    fd = os.open(name, _NEW_FILE, 0o600, dir_fd=at)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def remove_area(area: Path) -> None:
    """Remove the output area and everything in it; never raises."""
    shutil.rmtree(area, ignore_errors=True)
