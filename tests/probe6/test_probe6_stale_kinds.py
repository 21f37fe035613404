"""Each kind of stale answer the state machine (test_probe6_stale_machine.py) found, as a
test of its own: what is read outside the tree, the file-system clock's tick, and a
file's other names."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._index_builds import index_build_server
from workspace_tools import ToolSession, invoke_tool_sync, workspace_tools
from workspace_tools.search import _index
from workspace_tools.search._index import SearchIndex
from workspace_tools.tools.grep import INDEX_KEY
from workspace_tools.workspace import Workspace, _walk

OLD_NS = 1_600_000_000_123_456_789
#: The walker's window of a coarse clock, widened so that "changed just now" holds however
#: slowly the test runs (the ctime set by a change is minutes from an mtime of 2020).
WITHIN_REACH = 3600 * 1_000_000_000


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def fresh(root: Path, name: str, args: dict[str, object]) -> str:
    tool = {t.name: t for t in workspace_tools(root)}[name]
    return invoke_tool_sync(tool, args).model_text()


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock_moved_on: None) -> Path:
    """A repository with one text file and one log, its global git settings under the
    test's own home."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    (tmp_path / "home" / ".config" / "git").mkdir(parents=True)
    root = tmp_path / "ws"
    root.mkdir()
    git(root, "init", "-q")
    (root / "a.txt").write_bytes(b"NEEDLE\n")
    (root / "b.log").write_bytes(b"NEEDLE\n")
    return root


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("list_files", {"path": "."}),
        ("glob", {"pattern": "*"}),
        ("grep", {"pattern": "NEEDLE", "output_mode": "files_with_matches"}),
    ],
)
def test_a_session_sees_the_global_excludes_file_change(
    repo: Path, name: str, args: dict[str, object]
) -> None:
    session = ToolSession(repo)
    before = session.call_sync(name, args).model_text()
    assert "b.log" in before, before
    (repo.parent / "home" / ".config" / "git" / "ignore").write_bytes(b"*.log\n")
    after = session.call_sync(name, args).model_text()
    assert after == fresh(repo, name, args), (before, after)
    assert "b.log" not in after, after


def test_a_session_sees_core_excludes_file_set_and_its_file_change(repo: Path) -> None:
    session = ToolSession(repo)
    args = {"path": "."}
    assert session.call_sync("list_files", args).model_text() == "a.txt\nb.log"
    excludes = repo.parent / "excludes"
    excludes.write_bytes(b"a.*\n")
    git(repo, "config", "core.excludesFile", str(excludes))
    assert session.call_sync("list_files", args).model_text() == "b.log"
    excludes.write_bytes(b"b.*\n")
    assert session.call_sync("list_files", args).model_text() == "a.txt"
    assert fresh(repo, "list_files", args) == "a.txt"


def test_a_walk_is_not_reused_while_a_directory_changed_within_the_tick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory whose mtime was set back (``tar x``, ``rsync -a``, ``cp -a`` restore
    it right after changing its entries) changed just now all the same: its ctime says so.
    Where the clock is coarse (a kernel tick), a second such change within the tick keeps
    every stat field, so a walk taken meanwhile must not be reused: git's racily clean
    rule, on ctime as on mtime."""
    monkeypatch.setattr(_walk, "_RACY_NS", WITHIN_REACH)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x1").write_bytes(b"")
    os.utime(tmp_path / "d", ns=(OLD_NS, OLD_NS))
    os.utime(tmp_path, ns=(OLD_NS, OLD_NS))
    workspace = Workspace(tmp_path)
    listed: list[int] = []
    real_list_dir = _walk._list_dir

    def counting(fd: int) -> object:
        listed.append(fd)
        return real_list_dir(fd)

    monkeypatch.setattr(_walk, "_list_dir", counting)
    tool = {t.name: t for t in workspace_tools(workspace)}["list_files"]
    assert invoke_tool_sync(tool, {"path": "d"}).model_text() == "d/x1"
    first = len(listed)
    assert invoke_tool_sync(tool, {"path": "d"}).model_text() == "d/x1"
    # The walk was taken again: its directory's ctime is within the clock's reach.
    assert len(listed) == 2 * first, listed


def test_a_walk_is_not_reused_while_an_ignore_file_changed_within_the_tick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cp -p`` over an ignore file: a same-size rewrite with the old mtime put back."""
    (tmp_path / "a.txt").write_bytes(b"")
    (tmp_path / "b.txt").write_bytes(b"")
    (tmp_path / ".gitignore").write_bytes(b"a.txt\n")
    for path in tmp_path.iterdir():
        os.utime(path, ns=(OLD_NS, OLD_NS))
    os.utime(tmp_path, ns=(OLD_NS, OLD_NS))
    # Only the ignore file changed just now; its mtime is back where it was.
    (tmp_path / ".gitignore").write_bytes(b"b.txt\n")
    os.utime(tmp_path / ".gitignore", ns=(OLD_NS, OLD_NS))
    monkeypatch.setattr(_walk, "_RACY_NS", WITHIN_REACH)
    workspace = Workspace(tmp_path)
    walks: list[int] = []
    real_run = _walk._Scan.run

    def counting(self: _walk._Scan, *args: object) -> None:
        walks.append(1)
        real_run(self, *args)

    monkeypatch.setattr(_walk._Scan, "run", counting)
    tool = {t.name: t for t in workspace_tools(workspace)}["list_files"]
    assert invoke_tool_sync(tool, {"path": "."}).model_text() == ".gitignore\na.txt"
    assert invoke_tool_sync(tool, {"path": "."}).model_text() == ".gitignore\na.txt"
    assert len(walks) == 2, walks


@pytest.fixture(scope="module")
def build_server() -> Iterator[Callable[..., Any]]:
    """The warm index's builds on one spawn server (each in a child of a clean interpreter)."""
    with index_build_server() as in_child:
        yield in_child


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as handle:  # in place, through this name
        handle.write(data)


def _link_in_place(root: Path) -> None:
    os.link(root / "f1.txt", root / "f1-link.txt")
    _append(root / "f1-link.txt", b"WRITTEN_THROUGH\n")


def _link_in_other_directory(root: Path) -> None:
    os.link(root / "f1.txt", root / "sub" / "b.txt")
    _append(root / "sub" / "b.txt", b"WRITTEN_THROUGH\n")


def _link_in_a_new_directory(root: Path) -> None:
    (root / "new" / "deeper").mkdir(parents=True)
    os.link(root / "f1.txt", root / "new" / "deeper" / "x.txt")
    _append(root / "new" / "deeper" / "x.txt", b"WRITTEN_THROUGH\n")


def _link_moved_into_a_new_directory(root: Path) -> None:
    (root / "new").mkdir()
    os.link(root / "f1.txt", root / "tmp.txt")
    os.rename(root / "tmp.txt", root / "new" / "x.txt")
    _append(root / "new" / "x.txt", b"WRITTEN_THROUGH\n")


def _link_in_a_new_directory_renamed(root: Path) -> None:
    _link_in_a_new_directory(root)
    os.rename(root / "new", root / "renamed")  # found under its new name


def _link_in_a_new_directory_removed(root: Path) -> None:
    # A build tool's scratch directory: made, used and removed between two searches.
    _link_in_a_new_directory(root)
    shutil.rmtree(root / "new")


def _link_in_a_new_directory_moved_out(root: Path) -> None:
    _link_in_a_new_directory(root)
    os.rename(root / "new", root.parent / f"{root.name}-out")


def _link_written_and_removed(root: Path) -> None:
    os.link(root / "f1.txt", root / "tmp.txt")
    _append(root / "tmp.txt", b"WRITTEN_THROUGH\n")
    os.unlink(root / "tmp.txt")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the index is inotify's")
@pytest.mark.parametrize(
    ("change", "kept"),
    [
        (_link_in_place, True),
        (_link_in_other_directory, True),
        (_link_in_a_new_directory, True),
        (_link_moved_into_a_new_directory, True),
        (_link_in_a_new_directory_renamed, True),
        # The name is gone: which file it was a link to cannot be told any more.
        (_link_written_and_removed, False),
        (_link_in_a_new_directory_removed, False),
        (_link_in_a_new_directory_moved_out, False),
    ],
)
def test_the_warm_index_sees_a_write_through_a_link_made_after_its_build(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    build_server: Callable[..., Any],
    change: Callable[[Path], None],
    kept: bool,
) -> None:
    """inotify reports a write under the name written through; a hard link made after the
    build is a name the index did not know for a file it holds."""
    monkeypatch.setattr(_index, "_in_child", build_server)
    (tmp_path / "sub").mkdir()
    for n in range(20):
        (tmp_path / f"f{n}.txt").write_bytes(b"alpha %d\n" % n)
    workspace = Workspace(tmp_path)
    index = SearchIndex(str(workspace.root), min_files=1)
    workspace.keep(INDEX_KEY, index)
    grep = {t.name: t for t in workspace_tools(workspace)}["grep"]
    args = {"pattern": "WRITTEN_THROUGH", "output_mode": "files_with_matches"}
    try:
        assert invoke_tool_sync(grep, args).model_text() == "No matches"
        assert index.wait(30), "the index was not built"
        built = index._built
        change(tmp_path)
        seen = invoke_tool_sync(grep, args).model_text()
        assert seen == fresh(tmp_path, "grep", args), seen
        assert "f1.txt" in seen.splitlines(), seen
        # The build still serves, or it was dropped (a new one may be under way).
        assert (index._built is built) is kept
        if kept:
            # Later links in a directory that appeared are seen as they are made.
            where = tmp_path / next(
                name for name in ("new", "renamed", "sub") if (tmp_path / name).is_dir()
            )
            os.link(tmp_path / "f2.txt", where / "y.txt")
            _append(where / "y.txt", b"AGAIN_THROUGH\n")
            again = {"pattern": "AGAIN_THROUGH", "output_mode": "files_with_matches"}
            seen = invoke_tool_sync(grep, again).model_text()
            assert "f2.txt" in seen.splitlines(), seen
            assert seen == fresh(tmp_path, "grep", again), seen
    finally:
        index.wait(30)  # a build under way ends before its server is closed
        workspace.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the index is inotify's")
def test_a_new_directory_swapped_for_a_link_out_is_not_walked_or_watched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, build_server: Callable[..., Any]
) -> None:
    """A directory that appears is walked for links and watched; one swapped for a link to
    a directory outside (``/``, say) before the next search must not take the walk, or a
    watch, out of the tree."""
    monkeypatch.setattr(_index, "_in_child", build_server)
    root = tmp_path / "ws"
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "o.txt").write_bytes(b"OUTSIDE\n")
    root.mkdir()
    for n in range(20):
        (root / f"f{n}.txt").write_bytes(b"alpha %d\n" % n)
    workspace = Workspace(root)
    index = SearchIndex(str(workspace.root), min_files=1)
    workspace.keep(INDEX_KEY, index)
    grep = {t.name: t for t in workspace_tools(workspace)}["grep"]
    args = {"pattern": "alpha 1$", "output_mode": "files_with_matches"}
    try:
        assert invoke_tool_sync(grep, args).model_text() == "f1.txt"
        assert index.wait(30), "the index was not built"
        built = index._built
        watched: list[str] = []
        add_watch = built.notify.add_watch
        monkeypatch.setattr(
            built.notify,
            "add_watch",
            lambda path, mask: watched.append(path) or add_watch(path, mask),
        )
        (root / "new").mkdir()
        (root / "new").rmdir()
        (root / "new").symlink_to(outside)
        assert invoke_tool_sync(grep, args).model_text() == "f1.txt"
        assert watched == [], watched
    finally:
        index.wait(30)
        workspace.close()
