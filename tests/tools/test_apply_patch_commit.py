"""apply_patch's commit order: every new content written and flushed before the first
rename, one flush after the last; a failure between renames puts back every file."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from tests.file_support import call, tools
from workspace_tools import ErrorCode
from workspace_tools.tools import apply_patch
from workspace_tools.workspace import _textfile

UNCHANGED = "No file was changed: correct this part and send the whole patch again."


def envelope(*operations: str) -> str:
    return "*** Begin Patch\n" + "".join(operations) + "*** End Patch\n"


def update(path: str, old: str, new: str) -> str:
    return f"*** Update File: {path}\n@@\n-{old}\n+{new}\n"


def tree(root: Path, count: int) -> dict[str, bytes]:
    """``count`` files in two directories; returns every file's bytes by path."""
    for index in range(count):
        path = root / f"d{index % 2}" / f"f{index}.txt"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(f"head\nline {index}\ntail\n".encode())
    return files(root)


def files(root: Path) -> dict[str, bytes]:
    """Every file below ``root`` (temp files too) by path, with its bytes."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("count", [2, 6])
def test_data_is_flushed_before_the_first_rename_and_renames_after_the_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    tree(tmp_path, count)
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    real_write, real_writeback = _textfile._write_all, _textfile.start_writeback
    real_output = apply_patch._output

    def write_all(fd: int, data: bytes) -> None:
        events.append("write")
        real_write(fd, data)

    def start_writeback(fd: int) -> None:
        events.append("writeback")
        real_writeback(fd)

    def output(*args: Any) -> object:
        events.append("result")
        return real_output(*args)

    def fsync(fd: int) -> None:
        events.append("fsync")
        real_fsync(fd)

    def replace(*args: Any, **kwargs: Any) -> None:
        events.append("rename")
        real_replace(*args, **kwargs)

    monkeypatch.setattr(_textfile, "_write_all", write_all)
    monkeypatch.setattr(_textfile, "start_writeback", start_writeback)
    monkeypatch.setattr(apply_patch, "_output", output)
    monkeypatch.setattr(_textfile.os, "fsync", fsync)
    monkeypatch.setattr(_textfile.os, "replace", replace)
    ops = [update(f"d{i % 2}/f{i}.txt", f"line {i}", f"LINE {i}") for i in range(count)]
    result = call(tools(tmp_path)["apply_patch"], patch=envelope(*ops))
    assert result.error is None, result.error
    # Each temp file written and its writeback started; the result made while the disk
    # writes them; one fsync a file's data, every rename after them, then one fsync a
    # directory (d0, d1).
    assert events == (
        ["write", "writeback"] * count
        + ["result"]
        + ["fsync"] * count
        + ["rename"] * count
        + ["fsync", "fsync"]
    ), events
    assert files(tmp_path) == {
        f"d{i % 2}/f{i}.txt": f"head\nLINE {i}\ntail\n".encode() for i in range(count)
    }


@pytest.mark.parametrize("fail_at", [0, 1, 3])
def test_a_failure_after_some_renames_leaves_every_file_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_at: int
) -> None:
    before = tree(tmp_path, 4)
    renames = 0
    real_replace = os.replace

    def replace(*args: Any, **kwargs: Any) -> None:
        nonlocal renames
        renames += 1
        if renames == fail_at + 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_replace(*args, **kwargs)

    monkeypatch.setattr(_textfile.os, "replace", replace)
    ops = [update(f"d{i % 2}/f{i}.txt", f"line {i}", f"LINE {i}") for i in range(4)]
    ops.append("*** Add File: new/dir/added.txt\n+added\n")
    result = call(tools(tmp_path)["apply_patch"], patch=envelope(*ops))
    assert result.error_code is ErrorCode.DISK_FULL, result.error
    failed = f"d{fail_at % 2}/f{fail_at}.txt"
    assert result.error == (
        f"Cannot write {failed}: no space left on the device; the file was left unchanged\n"
        + UNCHANGED
    )
    # Every file as it was, no temp file left, and the Add's directories gone again.
    assert files(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d0", "d1"]


def test_a_failure_while_writing_the_temp_files_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = tree(tmp_path, 3)
    writes = 0
    real_write = _textfile._write_all

    def write_all(fd: int, data: bytes) -> None:
        nonlocal writes
        writes += 1
        if writes == 3:
            raise OSError(errno.EDQUOT, "Disk quota exceeded")
        real_write(fd, data)

    monkeypatch.setattr(_textfile, "_write_all", write_all)
    ops = [update(f"d{i % 2}/f{i}.txt", f"line {i}", f"LINE {i}") for i in range(3)]
    result = call(tools(tmp_path)["apply_patch"], patch=envelope(*ops))
    assert result.error_code is ErrorCode.DISK_FULL, result.error
    assert result.error == (
        "Cannot write d0/f2.txt: the disk quota is exceeded; the file was left unchanged\n"
        + UNCHANGED
    )
    assert files(tmp_path) == before


def test_a_failed_flush_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = tree(tmp_path, 3)
    flushes = 0
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        nonlocal flushes
        flushes += 1
        if flushes == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(_textfile.os, "fsync", fsync)
    ops = [update(f"d{i % 2}/f{i}.txt", f"line {i}", f"LINE {i}") for i in range(3)]
    ops.append("*** Add File: new/dir/added.txt\n+added\n")
    result = call(tools(tmp_path)["apply_patch"], patch=envelope(*ops))
    assert result.error_code is ErrorCode.DISK_FULL, result.error
    assert result.error == (
        "Cannot write d1/f1.txt: no space left on the device; no file was changed\n" + UNCHANGED
    )
    # Every file as it was, no temp file left, and the Add's directories gone again.
    assert files(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d0", "d1"]


def test_a_failure_while_the_result_is_made_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The result is made between writing the temp files and flushing them: whatever goes
    # wrong there, no file changes, no temp file stays, and the Add's directories go.
    before = tree(tmp_path, 3)

    def output(*args: Any) -> object:
        raise RuntimeError("result failed")

    monkeypatch.setattr(apply_patch, "_output", output)
    ops = [update(f"d{i % 2}/f{i}.txt", f"line {i}", f"LINE {i}") for i in range(3)]
    ops.append("*** Add File: new/dir/added.txt\n+added\n")
    result = call(tools(tmp_path)["apply_patch"], patch=envelope(*ops))
    assert (result.error_code, result.error) == (ErrorCode.TOOL_ERROR, "result failed")
    assert files(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d0", "d1"]
