"""DirFds: the fd it gives for a directory is that directory's, in any order of moves, with
few fds open however deep the tree; an ancestor moved meanwhile is refused, not followed."""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path

import pytest

from tests._fds import fds_under
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
    for order in orders:
        with DirFds(str(tmp_path), search_only=search_only) as fds:
            for rel in order:
                assert _identity(fds.get(rel)) == expected[rel], rel
                held = fds_under(tmp_path)
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


def test_out_of_fds_the_shallowest_levels_are_closed_and_the_open_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dirs = _tree(tmp_path)
    expected = {}
    for rel in dirs:
        fd = open_dir(str(tmp_path), rel)
        expected[rel] = _identity(fd)
        os.close(fd)
    real_open = os.open
    refused: list[str] = []

    def scarce_open(path: str, flags: int, *args: object, **kwargs: object) -> int:
        if fds_under(tmp_path) >= 4:
            refused.append(path)
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    with DirFds(str(tmp_path)) as fds:
        monkeypatch.setattr(os, "open", scarce_open)
        for rel in sorted(dirs) + sorted(dirs, reverse=True):
            assert _identity(fds.get(rel)) == expected[rel], rel
        monkeypatch.undo()
    assert refused, "the limit was never reached"
    assert fds_under(tmp_path) == 0


def test_a_released_level_is_closed_and_climbed_through_later(tmp_path: Path) -> None:
    (tmp_path / "a" / "b" / "c" / "d").mkdir(parents=True)
    with DirFds(str(tmp_path)) as fds:
        fds.get("a/b/c/d")
        fds.release(1)
        fds.release(2)
        fds.release(4)  # the deepest stays open
        assert fds_under(tmp_path) == 3  # the root, c and d
        fd = os.open(tmp_path / "a", os.O_RDONLY)
        try:
            assert _identity(fds.get("a")) == _identity(fd)
        finally:
            os.close(fd)
