"""Running out of file descriptors at one file, without lowering the process's limit."""

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
