"""read_bytes: the whole file within the limit, read to its end even when it grew since
its size was taken; refused once it is over the limit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from workspace_tools import ErrorCode, ToolError
from workspace_tools.workspace import _files
from workspace_tools.workspace._files import read_bytes


def _reporting_size(monkeypatch: pytest.MonkeyPatch, size: int) -> None:
    """Make ``fstat`` report ``size`` bytes: the file grew after its size was taken."""
    real_fstat = os.fstat

    def fstat(fd: int) -> os.stat_result:
        info = list(real_fstat(fd))
        info[6] = size  # st_size
        return os.stat_result(info)

    monkeypatch.setattr(_files.os, "fstat", fstat)


@pytest.mark.parametrize("reported", [0, 10, 99, 100])
def test_a_file_is_read_to_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reported: int
) -> None:
    data = bytes(range(100))
    (tmp_path / "f.bin").write_bytes(data)
    _reporting_size(monkeypatch, reported)
    assert read_bytes(tmp_path, tmp_path / "f.bin", "f.bin", limit=100) == data


@pytest.mark.parametrize("reported", [10, 50])
def test_a_file_grown_past_the_limit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reported: int
) -> None:
    (tmp_path / "f.bin").write_bytes(bytes(100))
    _reporting_size(monkeypatch, reported)
    with pytest.raises(ToolError) as caught:
        read_bytes(tmp_path, tmp_path / "f.bin", "f.bin", limit=50)
    assert (caught.value.code, caught.value.message) == (
        ErrorCode.FILE_TOO_LARGE,
        "f.bin is growing, over the 50-byte limit for rewriting a file; change it with "
        "run_command instead",
    )


def test_a_missing_file_is_none(tmp_path: Path) -> None:
    assert read_bytes(tmp_path, tmp_path / "absent", "absent", limit=10) is None
