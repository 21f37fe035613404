"""The session's output area: a directory in the workspace root for the whole output of
commands and background processes, which the agent pages through with ``read_file``.

Its name, ``.shell-output.<16 hex digits>.wt-tmp``, is a temp name of this package
(``workspace._tempfiles``): ``list_files``, ``glob``, ``grep`` and the session's
fingerprints skip it, as they skip the temp files of writes. A ``.gitignore`` of ``*``
inside keeps git from listing or committing it. It is removed with the session. A command
may remove it meanwhile (``rm -rf .shell-output.*``, ``git clean -fdx``): it is made again
(:func:`restore_area`, :func:`open_output`) before the next file goes into it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from pathlib import Path


def make_area(root: Path) -> Path:
    """Create a new output area in ``root`` (mode 0700) and return its path.

    Raises:
        OSError: the root is not writable.
    """
    area = root / f".shell-output.{secrets.token_hex(8)}.wt-tmp"
    _create(area)
    return area


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


def remove_area(area: Path) -> None:
    """Remove the output area and everything in it; never raises."""
    shutil.rmtree(area, ignore_errors=True)
