"""The session's output area: a directory in the workspace root for the whole output of
commands and background processes, which the agent pages through with ``read_file``.

Its name, ``.shell-output.<16 hex digits>.wt-tmp``, is a temp name of this package
(``workspace._tempfiles``): ``list_files``, ``glob``, ``grep`` and the session's
fingerprints skip it, as they skip the temp files of writes. A ``.gitignore`` of ``*``
inside keeps git from listing or committing it. It is removed with the session. A command
may remove it meanwhile (``rm -rf .shell-output.*``, ``git clean -fdx``): it is made again
(:func:`restore_area`, :func:`open_output`) before the next file goes into it.

A process killed outright (``kill -9``, the OOM killer) cannot remove its area. So each
area names its owner in ``.owner`` (the process's pid and start time, the boot and the PID
namespace it ran in), and :func:`make_area` first removes the areas in the root whose
owner is gone: the same boot and namespace, and no process of that pid and start time.
An area it cannot judge (another boot, host or namespace, no owner file, another user's)
is left alone.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import stat
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
    _create(area)
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
            that name is left as it is).
    """
    with contextlib.suppress(FileExistsError):
        _create(area)


def open_output(path: Path) -> int:
    """A new descriptor of ``path``, a file of the output area, created or truncated (mode
    0600) for writing; the area is made again first when it is gone.

    Raises:
        OSError: the file cannot be opened.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
    try:
        return os.open(path, flags, 0o600)
    except FileNotFoundError:
        restore_area(path.parent)
        return os.open(path, flags, 0o600)


def _create(area: Path) -> None:
    os.mkdir(area, 0o700)
    (area / ".gitignore").write_text("*\n", encoding="utf-8")
    owner = _owner_of_this_process()
    if owner is not None:
        (area / OWNER_FILE).write_text(" ".join(owner) + "\n", encoding="ascii")


def remove_area(area: Path) -> None:
    """Remove the output area and everything in it; never raises."""
    shutil.rmtree(area, ignore_errors=True)
