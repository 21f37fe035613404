"""File descriptors in tests: running out of them at one file (without lowering the
process's limit), and counting those a test's own tree holds."""

from __future__ import annotations

import errno
import os

import pytest

#: The words a result gives for each way of being out of fds (``os_error``).
OUT_OF_FDS_WORDS = {
    errno.EMFILE: "this process has too many files open; try again when fewer calls run at once",
    errno.ENFILE: "the system has too many files open; try again later",
}


def short_of_fds_at(monkeypatch: pytest.MonkeyPatch, name: str, number: int) -> None:
    """Make every ``os.open`` of ``name`` (as passed, relative to a ``dir_fd``) fail with
    ``number`` (``EMFILE`` or ``ENFILE``) until ``monkeypatch`` is undone."""
    real_open = os.open

    def open_short_of_fds(path: str, flags: int, mode: int = 0o777, **kwargs: object) -> int:
        if path == name:
            raise OSError(number, os.strerror(number), path)
        return real_open(path, flags, mode, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", open_short_of_fds)


def fds_under(root: str | os.PathLike[str]) -> int:
    """How many of this process's descriptors refer to ``root`` or a path below it
    (``/proc/self/fd``). Unlike a count of all of them, another thread's files (a server or
    worker an earlier test left closing, a pool's pipes) do not change it."""
    top = os.path.realpath(root)
    count = 0
    for entry in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{entry}")
        except OSError:  # the listing's own descriptor, or one closed meanwhile
            continue
        if target == top or target.startswith(top + "/"):
            count += 1
    return count
