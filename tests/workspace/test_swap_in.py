"""swap_in: a temp file put at a name by exchanging the two (``renameat2``), then the old
file unlinked; as ``os.replace`` for everything a reader or a later writer sees."""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from workspace_tools import Workspace, invoke_tool_sync, workspace_tools
from workspace_tools.workspace import _files, _textfile
from workspace_tools.workspace._files import swap_in


@pytest.fixture
def dir_fd(tmp_path: Path) -> Iterator[int]:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


def _entries(root: Path) -> dict[str, bytes | str]:
    return {p.name: p.read_bytes() if p.is_file() else "dir" for p in sorted(root.iterdir())}


def test_the_name_gets_the_temp_file_and_the_old_file_is_gone(tmp_path: Path, dir_fd: int) -> None:
    (tmp_path / "f.txt").write_bytes(b"old\n")
    os.link(tmp_path / "f.txt", tmp_path / "other.txt")
    (tmp_path / "t.tmp").write_bytes(b"new\n")
    os.chmod(tmp_path / "t.tmp", 0o751)
    new_inode = os.stat(tmp_path / "t.tmp").st_ino
    swap_in(dir_fd, "t.tmp", "f.txt")
    # The temp file's inode (its mode with it) is at the name; the other hard link keeps
    # the old content, as after a rename; nothing is left at the temp name.
    info = os.stat(tmp_path / "f.txt")
    assert (info.st_ino, info.st_mode & 0o777, info.st_nlink) == (new_inode, 0o751, 1)
    assert _entries(tmp_path) == {"f.txt": b"new\n", "other.txt": b"old\n"}
    assert os.stat(tmp_path / "other.txt").st_nlink == 1


def test_a_missing_name_is_created(tmp_path: Path, dir_fd: int) -> None:
    (tmp_path / "t.tmp").write_bytes(b"new\n")
    swap_in(dir_fd, "t.tmp", "f.txt")
    assert _entries(tmp_path) == {"f.txt": b"new\n"}


def test_a_symlink_at_the_name_is_replaced_not_followed(tmp_path: Path, dir_fd: int) -> None:
    (tmp_path / "target.txt").write_bytes(b"target\n")
    (tmp_path / "f.txt").symlink_to("target.txt")
    (tmp_path / "t.tmp").write_bytes(b"new\n")
    swap_in(dir_fd, "t.tmp", "f.txt")
    assert not (tmp_path / "f.txt").is_symlink()
    assert _entries(tmp_path) == {"f.txt": b"new\n", "target.txt": b"target\n"}


def test_a_directory_at_the_name_is_refused_and_both_stay(tmp_path: Path, dir_fd: int) -> None:
    (tmp_path / "f.txt").mkdir()
    (tmp_path / "f.txt" / "inside").write_bytes(b"kept\n")
    (tmp_path / "t.tmp").write_bytes(b"new\n")
    with pytest.raises(IsADirectoryError):
        swap_in(dir_fd, "t.tmp", "f.txt")
    assert _entries(tmp_path) == {"f.txt": "dir", "t.tmp": b"new\n"}
    assert (tmp_path / "f.txt" / "inside").read_bytes() == b"kept\n"


def test_without_the_exchange_it_renames(
    tmp_path: Path, dir_fd: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A kernel or file system without RENAME_EXCHANGE answers EINVAL (or ENOSYS).
    def unsupported(*args: object) -> int:
        ctypes.set_errno(errno.EINVAL)
        return -1

    monkeypatch.setattr(_files, "_RENAMEAT2", unsupported)
    (tmp_path / "f.txt").write_bytes(b"old\n")
    (tmp_path / "t.tmp").write_bytes(b"new\n")
    swap_in(dir_fd, "t.tmp", "f.txt")
    assert _entries(tmp_path) == {"f.txt": b"new\n"}


PATCH = "*** Begin Patch\n" + "".join(
    f"*** Update File: d{i % 2}/f{i}.txt\n@@\n-line {i}\n+LINE {i}\n" for i in range(4)
)


def _tree(root: Path) -> dict[str, bytes]:
    for i in range(4):
        (root / f"d{i % 2}").mkdir(exist_ok=True)
        (root / f"d{i % 2}" / f"f{i}.txt").write_bytes(f"head\nline {i}\ntail\n".encode())
    return _tree_files(root)


def _tree_files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_apply_patch_without_fsync_swaps_every_existing_file_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(tmp_path)
    swapped: list[str] = []
    real_swap = _textfile.swap_in

    def swap(dir_fd: int, temp: str, name: str) -> None:
        swapped.append(name)
        real_swap(dir_fd, temp, name)

    monkeypatch.setattr(_textfile, "swap_in", swap)
    patch = PATCH + "*** Add File: d0/new.txt\n+added\n*** End Patch\n"
    tools = {t.name: t for t in workspace_tools(Workspace(tmp_path, fsync=False))}
    result = invoke_tool_sync(tools["apply_patch"], {"patch": patch})
    assert result.error is None, result.error
    # The four updated files are swapped in; the new one is renamed (nothing to swap).
    assert swapped == ["f0.txt", "f1.txt", "f2.txt", "f3.txt"], swapped
    assert _tree_files(tmp_path) == {
        **{f"d{i % 2}/f{i}.txt": f"head\nLINE {i}\ntail\n".encode() for i in range(4)},
        "d0/new.txt": b"added\n",
    }


@pytest.mark.parametrize("fail_at", [0, 2, 3])
def test_apply_patch_without_fsync_puts_back_every_file_when_a_swap_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_at: int
) -> None:
    before = _tree(tmp_path)
    swaps = 0
    real_swap = _textfile.swap_in

    def swap(dir_fd: int, temp: str, name: str) -> None:
        nonlocal swaps
        swaps += 1
        if swaps == fail_at + 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_swap(dir_fd, temp, name)

    monkeypatch.setattr(_textfile, "swap_in", swap)
    tools = {t.name: t for t in workspace_tools(Workspace(tmp_path, fsync=False))}
    result = invoke_tool_sync(tools["apply_patch"], {"patch": PATCH + "*** End Patch\n"})
    assert result.error == (
        f"Cannot write d{fail_at % 2}/f{fail_at}.txt: no space left on the device; the file "
        "was left unchanged\nNo file was changed: correct this part and send the whole "
        "patch again."
    ), result.error
    assert _tree_files(tmp_path) == before
