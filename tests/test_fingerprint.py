"""Cache fingerprints: exact for a file, every entry's lstat for a tree, ignore files included."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from workspace_tools import Workspace
from workspace_tools.workspace import _fingerprint
from workspace_tools.workspace._fingerprint import file_fingerprint, tree_fingerprint


@pytest.fixture(autouse=True)
def _clock(clock_moved_on: None) -> None:
    """These tests are about what a cache key sees, not about the clock (see
    test_a_tree_changed_within_the_clock_tick_has_no_fingerprint)."""


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_file_fingerprint_follows_content_not_timestamps(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    target = tmp_path / "a.txt"
    target.write_bytes(b"abc")
    first = file_fingerprint(ws, "a.txt")
    os.utime(target, ns=(5, 5))
    assert file_fingerprint(ws, "a.txt") == first
    target.write_bytes(b"abd")
    os.utime(target, ns=(5, 5))
    assert file_fingerprint(ws, "a.txt") != first


def test_file_fingerprint_of_absent_and_refused_paths(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    assert file_fingerprint(ws, "absent.txt") == "missing"
    assert file_fingerprint(ws, "../elsewhere") is None
    assert file_fingerprint(ws, "a\x00b") is None


def test_file_fingerprint_follows_a_retargeted_link(tmp_path: Path) -> None:
    (tmp_path / "one").write_text("1")
    (tmp_path / "two").write_text("2")
    (tmp_path / "link").symlink_to("one")
    ws = Workspace(tmp_path)
    first = file_fingerprint(ws, "link")
    (tmp_path / "link").unlink()
    (tmp_path / "link").symlink_to("two")
    assert file_fingerprint(ws, "link") != first


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "mod.py").write_text("x = 1\n")
    git(root, "init", "-q")
    return root


def fingerprints(root: Path) -> tuple[str | None, str | None]:
    ws = Workspace(root)
    return tree_fingerprint(ws, "src", recursive=False), tree_fingerprint(ws, "src")


def _git_object(root: Path) -> None:
    (root / ".git" / "objects" / "junk").write_text("x")


def _deep_rewrite(root: Path) -> None:
    # In place: the directory entry, and so the directory's own stat, stays the same.
    (root / "src" / "pkg" / "mod.py").write_text("x = 2\n")


@pytest.mark.parametrize(
    ("change", "one_level_changes", "recursive_changes"),
    [
        (_git_object, False, False),
        (lambda root: (root / "src" / "new.py").write_text(""), True, True),
        (_deep_rewrite, False, True),
        (lambda root: (root / "src" / ".gitignore").write_text("*.log\n"), True, True),
        (lambda root: (root / ".gitignore").write_text("*.log\n"), True, True),
        (lambda root: (root / ".ignore").write_text("*.log\n"), True, True),
        (lambda root: (root / ".git" / "info" / "exclude").write_text("*.log\n"), True, True),
        (lambda root: git(root, "add", "src/pkg/mod.py"), True, True),
        (lambda root: (root / "unrelated.txt").write_text(""), False, False),
    ],
    ids=[
        "git-object",
        "new-file",
        "deep-rewrite",
        "nested-gitignore",
        "root-gitignore",
        "root-ignore",
        "info-exclude",
        "git-index",
        "sibling-file",
    ],
)
def test_tree_fingerprint_sees_what_discovery_depends_on(
    repo: Path, change, one_level_changes: bool, recursive_changes: bool
) -> None:
    before = fingerprints(repo)
    change(repo)
    after = fingerprints(repo)
    assert (before[0] != after[0], before[1] != after[1]) == (
        one_level_changes,
        recursive_changes,
    )


def test_tree_fingerprint_sees_the_exclude_file_of_a_linked_worktree(repo: Path) -> None:
    git(
        repo,
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "0",
    )
    linked = repo.parent / "linked"
    git(repo, "worktree", "add", "-q", str(linked))
    (linked / "src").mkdir()
    before = fingerprints(linked)
    (repo / ".git" / "info" / "exclude").write_text("*.tmp\n")
    assert fingerprints(linked)[1] != before[1]


def test_tree_fingerprint_does_not_descend_into_linked_directories(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "src" / "link").symlink_to("../elsewhere")
    (tmp_path / "src" / "loop").symlink_to(".")
    ws = Workspace(tmp_path)
    before = tree_fingerprint(ws, "src")
    (tmp_path / "elsewhere" / "file").write_text("x")
    assert tree_fingerprint(ws, "src") == before


def test_tree_fingerprint_of_a_file_is_its_content_hash(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x")
    ws = Workspace(tmp_path)
    assert tree_fingerprint(ws, "a.py") == file_fingerprint(ws, "a.py")
    assert tree_fingerprint(ws, "../x") is None


def test_a_tree_changed_within_the_clock_tick_has_no_fingerprint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file system's clock is coarse: a same-size rewrite in place within one tick of the
    # last change keeps every stat field, so a tree with an entry that recent cannot vouch
    # for its content (git's "racily clean"). A timestamp ahead of the clock is as recent.
    monkeypatch.setattr(_fingerprint, "time_ns", time.time_ns)  # the real clock
    ws = Workspace(tmp_path)
    (tmp_path / "old.txt").write_bytes(b"old\n")
    (tmp_path / "sub").mkdir()
    recent = tmp_path / "sub" / "recent.txt"
    recent.write_bytes(b"one\n")
    ahead = time.time_ns() + 3600 * 10**9
    os.utime(recent, ns=(ahead, ahead))
    assert tree_fingerprint(ws) is None
    assert tree_fingerprint(ws, "sub") is None
    monkeypatch.setattr(_fingerprint, "time_ns", lambda: ahead + 2 * _fingerprint.RACY_NS)
    settled = tree_fingerprint(ws)
    assert settled is not None and settled.startswith("dir:")
