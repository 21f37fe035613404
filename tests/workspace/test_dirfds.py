"""DirFds: the fd it gives for a directory is that directory's, in any order of moves, with
few fds open however deep the tree; an ancestor moved meanwhile is refused, not followed."""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path

import pytest

from workspace_tools.workspace import _files
from workspace_tools.workspace._files import DirFds, open_dir


def _identity(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


def _tree(root: Path) -> list[str]:
    """A chain 40 deep with a side branch at every level; every directory's path."""
    dirs = [""]
    chain = ""
    for level in range(40):
        chain = f"{chain}/c{level}" if chain else f"c{level}"
        (root / chain / "side").mkdir(parents=True)
        dirs += [chain, chain + "/side"]
    return dirs


@pytest.mark.parametrize("search_only", [False, True])
def test_every_move_gives_the_directory_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, search_only: bool
) -> None:
    monkeypatch.setattr(_files, "_HELD_LEVELS", 4)  # moves up past the open fds, too
    dirs = _tree(tmp_path)
    expected = {}
    for rel in dirs:
        fd = open_dir(str(tmp_path), rel)
        expected[rel] = _identity(fd)
        os.close(fd)
    orders = [sorted(dirs), sorted(dirs, reverse=True), sorted(dirs, key=len)]
    orders.append(random.Random(7).sample(dirs, len(dirs)))
    baseline = len(os.listdir("/proc/self/fd"))
    for order in orders:
        with DirFds(str(tmp_path), search_only=search_only) as fds:
            for rel in order:
                assert _identity(fds.get(rel)) == expected[rel], rel
                held = len(os.listdir("/proc/self/fd")) - baseline
                assert held <= 4 + 1, held  # the root and four levels below it


def test_climbing_out_of_a_directory_moved_out_of_the_root_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_files, "_HELD_LEVELS", 2)
    (tmp_path / "w" / "a" / "b" / "c" / "d" / "e").mkdir(parents=True)
    root = str(tmp_path / "w")
    with DirFds(root) as fds:
        fds.get("a/b/c/d/e")  # a's, b's and c's fds closed, their identities noted
        os.rename(tmp_path / "w" / "a" / "b" / "c" / "d", tmp_path / "out")
        with pytest.raises(OSError) as caught:
            fds.get("a/b")  # ".." of d is now tmp_path, not c
        assert caught.value.errno == errno.ELOOP
        fd = os.open(root + "/a/b", os.O_RDONLY)
        try:
            assert _identity(fds.get("a/b")) == _identity(fd)  # walked afresh from the root
        finally:
            os.close(fd)
