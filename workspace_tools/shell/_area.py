"""The session's output area: a directory in the workspace root for the whole output of
commands and background processes, which the agent pages through with ``read_file``.

Its name, ``.shell-output.<16 hex digits>.wt-tmp``, is a temp name of this package
(``workspace._tempfiles``): ``list_files``, ``glob``, ``grep`` and the session's
fingerprints skip it, as they skip the temp files of writes. A ``.gitignore`` of ``*``
inside keeps git from listing or committing it. It is removed with the session.
"""

from __future__ import annotations

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
    os.mkdir(area, 0o700)
    (area / ".gitignore").write_text("*\n", encoding="utf-8")
    return area


def remove_area(area: Path) -> None:
    """Remove the output area and everything in it; never raises."""
    shutil.rmtree(area, ignore_errors=True)
