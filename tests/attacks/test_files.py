"""Hostile files: huge sparse files, hard links to files outside the root.

Memory is measured with tracemalloc (every thread's allocations, the tool's worker thread
included): a tool that loaded a 10 GB file would show gigabytes, one that did not shows
the few megabytes of its buffers.
"""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._users import as_nobody
from tests.file_support import call, tools
from workspace_tools import ErrorCode

TEN_GB = 10 * 1024**3
# Far below any of the files, far above the tools' own buffers (a few MiB).
MEMORY_BOUND = 64 * 1024 * 1024
IS_ROOT = os.geteuid() == 0


def _sparse(path: Path, size: int, head: bytes = b"") -> None:
    with path.open("wb") as f:
        f.write(head)
        f.truncate(size)


def _peak(work: Callable[[], Any]) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        result = work()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "w"
    path.mkdir()
    return path


TOO_LARGE = (
    "big.txt is 10,737,418,240 bytes, over the 67,108,864-byte limit for rewriting a file; "
    "change it with run_command instead"
)
CHANGES: dict[str, dict[str, str]] = {
    "edit_file": {"path": "big.txt", "old_text": "text", "new_text": "TEXT"},
    "write_file": {"path": "big.txt", "content": "small\n"},
    "apply_patch": {
        "patch": "*** Begin Patch\n*** Update File: big.txt\n@@\n-text\n+TEXT\n*** End Patch"
    },
}


@pytest.mark.parametrize("tool_name", list(CHANGES))
def test_a_10_gb_sparse_file_is_refused_without_being_loaded(root: Path, tool_name: str) -> None:
    _sparse(root / "big.txt", TEN_GB, b"text\n")
    tool = tools(root)[tool_name]
    result, peak = _peak(lambda: call(tool, **CHANGES[tool_name]))
    assert result.error_code is ErrorCode.FILE_TOO_LARGE, result.error
    assert TOO_LARGE in result.error
    assert peak < MEMORY_BOUND, f"peak {peak:,} bytes"
    assert (root / "big.txt").stat().st_size == TEN_GB


def test_grep_of_a_named_10_gb_binary_file_reads_only_its_head(root: Path) -> None:
    _sparse(root / "big.bin", TEN_GB)
    result, peak = _peak(lambda: call(tools(root)["grep"], pattern="x", path="big.bin"))
    assert result.error is None
    assert result.model_text().startswith("No matches\n[1 binary file was skipped, not searched")
    assert (result.details.binary_skipped, result.details.files_searched) == (1, 0)
    assert peak < MEMORY_BOUND, f"peak {peak:,} bytes"


def test_grep_of_a_named_big_text_file_goes_window_by_window(root: Path) -> None:
    # 3 MiB of text lines, the match on the last: found, by line number, from windows.
    body = b"".join(b"line %07d\n" % i for i in range(240_000)) + b"needle at the end\n"
    (root / "big.txt").write_bytes(body)
    result = call(tools(root)["grep"], pattern="needle", path="big.txt")
    assert result.model_text() == "big.txt:240001:needle at the end"


def test_an_image_growing_past_the_limit_while_read_is_refused(root: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(100)
    (root / "a.png").write_bytes(png)
    small = tools(root, max_image_bytes=len(png))
    assert call(small["read_file"], path="a.png").error is None
    (root / "a.png").write_bytes(png + b"more")
    result = call(small["read_file"], path="a.png")
    assert result.error_code is ErrorCode.FILE_TOO_LARGE
    assert result.error == "a.png is a 112-byte image, over the 108-byte limit for images"


# --- hard links ------------------------------------------------------------------------


@pytest.mark.parametrize("tool_name", ["edit_file", "write_file"])
def test_writing_through_a_hard_link_leaves_the_outside_file_alone(
    tmp_path: Path, root: Path, tool_name: str
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"secret outside\n")
    os.link(outside, root / "hl.txt")
    arguments = (
        {"old_text": "secret", "new_text": "PWNED"}
        if tool_name == "edit_file"
        else {"content": "PWNED\n"}
    )
    result = call(tools(root)[tool_name], path="hl.txt", **arguments)
    assert result.error is None
    assert outside.read_bytes() == b"secret outside\n"
    assert outside.stat().st_nlink == 1
    assert (root / "hl.txt").read_bytes() == (
        b"PWNED outside\n" if tool_name == "edit_file" else b"PWNED\n"
    )


@pytest.fixture
def shared_dirs() -> Iterator[tuple[Path, Path]]:
    """A workspace root and an outside directory that ``nobody`` can reach."""
    base = Path(tempfile.mkdtemp(prefix="wt-attacks-"))
    base.chmod(0o755)
    root, outside = base / "w", base / "outside"
    root.mkdir(mode=0o777)
    outside.mkdir()
    root.chmod(0o777)
    yield root, outside
    shutil.rmtree(base)


@pytest.mark.skipif(not IS_ROOT, reason="needs root (to be another user)")
@pytest.mark.parametrize("tool_name", ["edit_file", "write_file"])
def test_a_hard_link_that_could_only_be_rewritten_in_place_is_refused(
    shared_dirs: tuple[Path, Path], tool_name: str
) -> None:
    # nobody may write the file (group) but not give a replacement root's ownership, so a
    # write would go in place, into the inode the outside name shares.
    root, outside_dir = shared_dirs
    outside = outside_dir / "victim.txt"
    outside.write_bytes(b"old\n")
    os.chown(outside, 0, pwd.getpwnam("nobody").pw_gid)
    outside.chmod(0o664)
    os.link(outside, root / "hl.txt")
    arguments = (
        {"old_text": "old", "new_text": "new"} if tool_name == "edit_file" else {"content": "new\n"}
    )

    def attempt() -> list[Any]:
        result = call(tools(root)[tool_name], path="hl.txt", **arguments)
        return [result.error_code and result.error_code.value, result.error]

    assert as_nobody(attempt) == [
        "PERMISSION_DENIED",
        "Permission denied: hl.txt has 1 other hard link, possibly outside the workspace, "
        "and may only be rewritten in place here (its owner cannot be kept by a "
        "replacement), which would change them too; the file was left unchanged",
    ]
    assert outside.read_bytes() == b"old\n"
    assert sorted(os.listdir(root)) == ["hl.txt"]
