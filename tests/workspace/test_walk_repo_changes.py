"""A cached walk follows the repository around the workspace: a ``git init`` in a parent
of a workspace that was in no repository, a parent's ``.git`` removed, a ``.git``
directory turned into a gitdir file (a worktree's), a repository made between the
workspace and the one it was in. Each change of which repository the root belongs to is
seen by the next call of the same tools (whose walks were cached), as git sees it:
``git ls-files -co --exclude-standard`` is the oracle."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sandbox import Sandbox
from tests._waiting import poll
from tests.discovery_helpers import BIG, call, git, git_listed
from workspace_tools import Tool, workspace_tools
from workspace_tools.workspace import _walk


def _file_sets(tools: dict[str, Tool[Any]]) -> tuple[set[str], set[str], set[str]]:
    listed = call(tools["list_files"], recursive=True, limit=BIG).details
    globbed = call(tools["glob"], pattern="**/*", limit=BIG).details
    grepped = call(tools["grep"], pattern="^", output_mode="files_with_matches", limit=BIG)
    return (
        {e.path for e in listed.entries if e.type != "directory"},
        set(globbed.matches),
        {f.path for f in grepped.details.files},
    )


def _tree(root: Path) -> None:
    for name in ("a.txt", "build/out.o", "notes.log", "src/main.py"):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{name}\n")


def _in_repo(root: Path) -> bool:
    return any((p / ".git").exists() for p in (root, *root.parents))


ALL = {"a.txt", "build/out.o", "notes.log", "src/main.py"}


def _git_init(where: Path) -> None:
    where.mkdir(parents=True, exist_ok=True)
    git(where, "init", "-q")


def _change_git_init_in_parent(parent: Path) -> None:
    _git_init(parent)


def _change_parent_git_removed(parent: Path) -> None:
    shutil.rmtree(parent / ".git")


def _change_git_dir_to_gitdir_file(parent: Path) -> None:
    other = parent.parent / "elsewhere"
    _git_init(other)
    (other / ".git" / "info" / "exclude").write_text("src/\n")
    shutil.rmtree(parent / ".git")
    (parent / ".git").write_text(f"gitdir: {other / '.git'}\n")


def _change_repo_between(parent: Path) -> None:
    middle = parent / "middle"
    _git_init(middle)
    (middle / ".git" / "info" / "exclude").write_text("src/\n")


CHANGES: dict[str, tuple[bool, Callable[[Path], None]]] = {
    # name: (parent in a repository before, the change)
    "git-init-in-parent": (False, _change_git_init_in_parent),
    "parent-git-removed": (True, _change_parent_git_removed),
    "git-dir-to-gitdir-file": (True, _change_git_dir_to_gitdir_file),
    "repo-made-between": (True, _change_repo_between),
}


def _setup(tmp_path: Path, in_repo: bool) -> tuple[Path, Path]:
    parent = tmp_path / "outer"
    root = parent / "middle" / "ws"
    _tree(root)
    # Rules that count only once a repository holds the workspace.
    (parent / ".gitignore").write_text("build/\n")
    (parent / "middle" / ".gitignore").write_text("*.o\n")
    if in_repo:
        _git_init(parent)
        (parent / ".git" / "info" / "exclude").write_text("notes.log\n")
    _age(tmp_path)
    return parent, root


def _age(top: Path) -> None:
    """Every mtime under ``top`` a minute back."""
    past = time.time() - 60
    for path in [top, *top.rglob("*")]:
        os.utime(path, (past, past), follow_symlinks=False)


def _settled(top: Path) -> None:
    """Wait until every timestamp under ``top`` is older than the walker's racy window:
    walks of it are cached from now on (the ctimes ``_age`` could not set back)."""
    newest = max(p.lstat().st_ctime_ns for p in [top, *top.rglob("*")])
    poll(time.time_ns, lambda now: now > newest + _walk._RACY_NS, timeout=30)


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_change_of_repository_around_the_root_is_seen_by_cached_walks(
    tmp_path: Path, change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every stamp counts as settled: the walks are cached at once.
    monkeypatch.setattr(_walk, "_RACY_NS", -60_000_000_000)
    scans: list[str] = []
    real_run = _walk._Scan.run

    def counted(self: _walk._Scan, start_abs: str, *args: Any) -> None:
        scans.append(start_abs)
        real_run(self, start_abs, *args)

    monkeypatch.setattr(_walk._Scan, "run", counted)
    in_repo, make_change = CHANGES[change]
    parent, root = _setup(tmp_path, in_repo)
    tools = {t.name: t for t in workspace_tools(root)}
    before = _file_sets(tools)
    want_before = git_listed(root) if in_repo else ALL
    assert before == (want_before,) * 3, before
    walked = len(scans)
    assert _file_sets(tools) == before
    assert len(scans) == walked, scans  # served from the cache
    make_change(parent)
    after = _file_sets(tools)
    want_after = git_listed(root) if _in_repo(root) else ALL
    assert want_after != want_before, (change, want_after)  # the change matters to git
    assert after == (want_after,) * 3, (change, after, want_after)


def test_sandboxed_tools_see_a_git_init_in_a_parent(tmp_path: Path) -> None:
    parent, root = _setup(tmp_path, in_repo=False)
    _settled(tmp_path)
    box = Sandbox(writable=[str(root)], best_effort=True)
    try:
        tools = {t.name: t for t in workspace_tools(root, sandbox=box)}
        assert _file_sets(tools) == (ALL,) * 3
        assert _file_sets(tools) == (ALL,) * 3
        _git_init(parent)
        want = git_listed(root)
        assert want == {"a.txt", "notes.log", "src/main.py"}, want
        assert _file_sets(tools) == (want,) * 3
    finally:
        box.close()


def test_a_linked_worktree_sees_its_common_config_change_the_excludes_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a linked worktree, git reads ``core.excludesFile`` from the common directory's
    config: a change there is a change of the top-level ignore sources."""
    monkeypatch.setattr(_walk, "_RACY_NS", -60_000_000_000)
    main = tmp_path / "main"
    _git_init(main)
    git(
        main,
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
    git(main, "worktree", "add", "-q", str(tmp_path / "linked"))
    root = tmp_path / "linked"
    _tree(root)
    tools = {t.name: t for t in workspace_tools(root)}
    before = git_listed(root)
    assert before == ALL, before
    assert _file_sets(tools) == (before,) * 3
    excludes = tmp_path / "excludes"
    excludes.write_text("*.log\n")
    git(main, "config", "core.excludesFile", str(excludes))
    after = git_listed(root)
    assert after == ALL - {"notes.log"}, after
    assert _file_sets(tools) == (after,) * 3
