"""The shared walk: symlinks, special files, and a cache that is never stale."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest

from tests._fds import fds_under
from tests.discovery_helpers import git
from workspace_tools.workspace import _walk
from workspace_tools.workspace._walk import Entry, Walker

OLD = time.time() - 3600


def age(root: Path) -> None:
    """Date every entry (and the index) an hour back, so that a walk of it is cacheable."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            os.utime(os.path.join(dirpath, name), (OLD, OLD), follow_symlinks=False)
    os.utime(root, (OLD, OLD))


def walk(walker: Walker, root: Path, include_ignored: bool = False) -> list[Entry]:
    return walker.walk(str(root), "", recursive=True, include_ignored=include_ignored).entries


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # Dating the entries back sets their ctimes to now: the walker judges them as a few
    # seconds later, once the file-system clock has moved on (any later change still
    # shows in the ctime it sets).
    ahead = 2 * _walk._RACY_NS
    monkeypatch.setattr(_walk, "time_ns", lambda: time.time_ns() + ahead)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("a\n")
    (tmp_path / ".gitignore").write_text("*.log\n")
    (tmp_path / "x.log").write_text("x\n")
    age(tmp_path)
    return tmp_path


def test_symlinks_are_entries_and_never_followed(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("f\n")
    os.symlink("..", tmp_path / "d" / "loop")
    os.symlink("/", tmp_path / "outside")
    os.symlink("d", tmp_path / "inside")
    os.symlink("missing", tmp_path / "dangling")
    entries = walk(Walker(str(tmp_path)), tmp_path)
    assert entries == [
        Entry("d", "directory"),
        Entry("d/f", "file"),
        Entry("d/loop", "symlink"),
        Entry("dangling", "symlink"),
        Entry("inside", "symlink"),
        Entry("outside", "symlink"),
    ]


def test_special_files_and_dot_git_are_left_out(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / ".git").mkdir()
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / ".git").write_text("gitdir: nowhere\n")
    (tmp_path / ".hidden").write_text("h\n")
    assert walk(Walker(str(tmp_path)), tmp_path) == [
        Entry(".hidden", "file"),
        Entry("sub", "directory"),
    ]


def test_walk_of_an_unchanged_old_tree_is_reused(tree: Path) -> None:
    walker = Walker(str(tree))
    first = walker.walk(str(tree), "", recursive=True, include_ignored=False)
    assert walker.walk(str(tree), "", recursive=True, include_ignored=False) is first


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda r: (r / "src" / "b.py").write_text("b\n"), ["src/a.py", "src/b.py"]),
        (lambda r: (r / "src" / "a.py").unlink(), []),
        (lambda r: (r / "src" / "a.py").rename(r / "src" / "c.py"), ["src/c.py"]),
        (lambda r: (r / ".gitignore").write_text("*.py\n"), ["x.log"]),
        (lambda r: (r / ".gitignore").write_text("*.lo?\n"), ["src/a.py"]),
        (lambda r: (r / "src" / ".ignore").write_text("a.py\n"), ["src/.ignore"]),
        (lambda r: (r / ".gitignore").unlink(), ["src/a.py", "x.log"]),
    ],
    ids=["add", "delete", "rename", "edit-ignore", "edit-same-size", "new-ignore", "drop-ignore"],
)
def test_cached_walk_sees_every_change(tree: Path, change, expected: list[str]) -> None:  # type: ignore[no-untyped-def]
    walker = Walker(str(tree))
    walk(walker, tree)
    change(tree)
    files = [e.rel for e in walk(walker, tree) if e.type == "file" and e.rel != ".gitignore"]
    assert files == expected


def test_change_right_after_a_walk_is_seen(tmp_path: Path) -> None:
    # Fresh timestamps may not have ticked yet: such a walk must not be reused.
    (tmp_path / "a").write_text("a\n")
    walker = Walker(str(tmp_path))
    walk(walker, tmp_path)
    (tmp_path / "b").write_text("b\n")
    assert [e.rel for e in walk(walker, tmp_path)] == ["a", "b"]


def test_newly_tracked_ignored_file_appears(tree: Path) -> None:
    git(tree, "init", "-q")
    age(tree)
    walker = Walker(str(tree))
    assert "x.log" not in [e.rel for e in walk(walker, tree)]
    git(tree, "add", "-f", "x.log")
    assert "x.log" in [e.rel for e in walk(walker, tree)]


def test_include_ignored_lists_everything_and_counts_nothing(tree: Path) -> None:
    result = Walker(str(tree)).walk(str(tree), "", recursive=True, include_ignored=True)
    assert [e.rel for e in result.entries] == [".gitignore", "src", "src/a.py", "x.log"]
    assert result.ignored == 0


def test_ignored_directory_counts_once(tmp_path: Path) -> None:
    (tmp_path / "node_modules" / "pkg").mkdir(parents=True)
    (tmp_path / "node_modules" / "pkg" / "i.js").write_text("x\n")
    (tmp_path / ".gitignore").write_text("node_modules/\n")
    result = Walker(str(tmp_path)).walk(str(tmp_path), "", recursive=True, include_ignored=False)
    assert result.entries == [Entry(".gitignore", "file")]
    assert result.ignored == 1


def test_named_ignored_directory_is_walked(tmp_path: Path) -> None:
    (tmp_path / "build" / "sub").mkdir(parents=True)
    (tmp_path / "build" / "sub" / "o.txt").write_text("x\n")
    (tmp_path / "build" / "o.tmp").write_text("x\n")
    (tmp_path / ".gitignore").write_text("build/\n*.tmp\n")
    start = tmp_path / "build"
    result = Walker(str(tmp_path)).walk(str(start), "build", recursive=True, include_ignored=False)
    assert [e.rel for e in result.entries] == ["build/sub", "build/sub/o.txt"]
    assert result.ignored == 1


def test_walk_of_a_subdirectory_applies_rules_from_above(tmp_path: Path) -> None:
    (tmp_path / "src" / "gen").mkdir(parents=True)
    (tmp_path / "src" / "gen" / "g.py").write_text("x\n")
    (tmp_path / "src" / "a.py").write_text("x\n")
    (tmp_path / "src" / "a.pyc").write_text("x\n")
    (tmp_path / ".gitignore").write_text("/src/gen/\n*.pyc\n")
    start = tmp_path / "src"
    result = Walker(str(tmp_path)).walk(str(start), "src", recursive=True, include_ignored=False)
    assert result.entries == [Entry("src/a.py", "file")]
    assert result.ignored == 2


def test_the_discovery_tools_and_fingerprints_share_the_workspaces_walker(
    tree: Path, monkeypatch: pytest.MonkeyPatch, clock_moved_on: None
) -> None:
    from workspace_tools import ToolSession, Workspace, invoke_tool_sync, workspace_tools

    workspace = Workspace(tree)
    walked: list[tuple[str, bool, bool]] = []
    real_walk = workspace.walker.walk

    def recording(start_abs: str, start_rel: str, **kwargs: bool) -> object:
        walked.append((start_rel, kwargs["recursive"], kwargs["include_ignored"]))
        return real_walk(start_abs, start_rel, **kwargs)

    monkeypatch.setattr(workspace.walker, "walk", recording)
    tools = {t.name: t for t in workspace_tools(workspace)}
    assert invoke_tool_sync(tools["list_files"], {"path": "src"}).model_text() == "src/a.py"
    assert invoke_tool_sync(tools["glob"], {"pattern": "**/*.py"}).model_text() == "src/a.py"
    assert invoke_tool_sync(tools["grep"], {"pattern": "a"}).model_text() == "src/a.py:1:a"
    assert walked == [("src", False, False), ("", True, False), ("", True, False)]
    walked.clear()
    session = ToolSession(workspace)
    assert session.call_sync("glob", {"pattern": "*.log"}).model_text() == "No files matched"
    # The session fingerprints the tree below the call's path (ignored entries too), then
    # the call walks it.
    assert walked == [("", True, True), ("", True, False)], walked


def test_a_wide_and_deep_tree_keeps_few_fds_open(tmp_path: Path) -> None:
    depth, width = 40, 200
    for index in range(width):
        (tmp_path / f"s{index}").mkdir()
        (tmp_path / f"s{index}" / "f").write_text("x")
    level = tmp_path
    for _ in range(depth):
        level = level / "d"
        level.mkdir()
        (level / "f").write_text("x")
    opened: list[int] = []
    real_open = os.open

    def counting_open(*args: object, **kwargs: object) -> int:
        fd = real_open(*args, **kwargs)  # type: ignore[arg-type]
        opened.append(fds_under(tmp_path))
        return fd

    walker = Walker(str(tmp_path))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "open", counting_open)
        entries = walk(walker, tmp_path, include_ignored=True)
    assert len(entries) == 2 * width + 2 * depth
    # A directory's fd is closed once its last subdirectory is opened, not held for each
    # pending sibling: here the root's, a chain link and its child, whatever the width and
    # depth; none is left open.
    assert max(opened) <= 3, opened
    assert fds_under(tmp_path) == 0


def test_a_start_directory_that_became_a_link_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("x")
    (tmp_path / "ws" / "d").symlink_to(tmp_path / "outside")
    walker = Walker(str(tmp_path / "ws"))
    with pytest.raises(OSError) as raised:
        walker.walk(str(tmp_path / "ws" / "d"), "d", recursive=True, include_ignored=True)
    assert raised.value.errno == errno.ELOOP
