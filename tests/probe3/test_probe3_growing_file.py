"""A checkpoint reads a file as its stat described it: one a process keeps appending to
(or that shrank) since is listed by its stat, never read on without end."""

from __future__ import annotations

import os
from pathlib import Path

from workspace_tools.workspace._manifest import read_entry


def test_a_file_grown_since_its_stat_is_not_read_on(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    path.write_bytes(b"a" * 100)
    st = os.lstat(path)
    with path.open("ab") as handle:
        handle.write(b"b" * 1_000_000)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert read_entry(fd, "log.txt", "file", st) is None
        path.write_bytes(b"c" * 10)  # shrank: changed too
        assert read_entry(fd, "log.txt", "file", st) is None
        path.write_bytes(b"d" * 100)
        assert read_entry(fd, "log.txt", "file", os.lstat(path)) == b"d" * 100
        (tmp_path / "empty").write_bytes(b"")
        assert read_entry(fd, "empty", "file", os.lstat(tmp_path / "empty")) == b""
    finally:
        os.close(fd)
