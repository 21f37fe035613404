"""Each kind of gitignore rule, checked against git on a small tree."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.discovery_helpers import discovered, git, git_listed

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is the oracle")

FILES = [
    "keep.log",
    "x.log",
    "root.txt",
    "a/root.txt",
    "a/x.log",
    "a/keep.log",
    "build/out.o",
    "a/build/out.o",
    "build.txt",
    "a/b/c/deep.py",
    "a/b/deep.py",
    "a/deep.py",
    "#hash",
    "!bang",
    "space ",
    "café",
    "cafe",
    "foo/bar",
    "foox/y/bar",
    "d1/x",
    "n[1]",
    "star*",
    "sub/.env",
    ".env",
]

CASES: dict[str, bytes] = {
    "negation": b"*.log\n!keep.log\n",
    "negation_order_last_wins": b"!keep.log\n*.log\n",
    "directory_only": b"build/\n",
    "directory_only_not_a_file": b"build.txt/\n",
    "anchored": b"/root.txt\n",
    "slash_in_middle_anchors": b"a/root.txt\n",
    "no_slash_any_depth": b"root.txt\ndeep.py\n",
    "leading_double_star": b"**/deep.py\n",
    "middle_double_star": b"a/**/deep.py\n",
    "trailing_double_star": b"a/b/**\n",
    "double_star_after_literal_prefix": b"foo**/bar\n",
    "double_star_glued_is_single_star": b"a/**deep.py\n",
    "escaped_hash_and_bang": b"\\#hash\n\\!bang\n",
    "comment_is_not_a_rule": b"#hash\n",
    "trailing_spaces_dropped": b"x.log   \n",
    "escaped_trailing_space_kept": b"space\\ \n",
    "unescaped_trailing_space_dropped": b"space \n",
    "crlf_line_endings": b"x.log\r\nroot.txt\r\n",
    "utf8_bom": b"\xef\xbb\xbfx.log\n",
    "question_mark_is_one_byte": b"caf?\n",
    "two_bytes_for_non_ascii": b"caf??\n",
    "character_class": b"[kx].log\n",
    "negated_class": b"[!k]*.log\n",
    "posix_class": b"[[:alpha:]]1\nd[[:digit:]]/\n",
    "escaped_bracket": b"n\\[1]\n",
    "unclosed_bracket_matches_nothing": b"n[1\n",
    "trailing_backslash_matches_nothing": b"x.log\\\n",
    "escaped_star": b"star\\*\n",
    "cannot_reinclude_under_excluded_dir": b"a/\n!a/keep.log\n",
    "reinclude_with_star": b"a/*\n!a/keep.log\n",
    "hidden_files": b".env\n",
    "star_everything_then_negate": b"*\n!*/\n!*.py\n",
}


def build(root: Path, gitignore: bytes) -> None:
    git(root, "init", "-q")
    for rel in FILES:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x\n")
    if gitignore:  # an empty file has no line for the match-everything grep to find
        (root / ".gitignore").write_bytes(gitignore)


@pytest.mark.parametrize("gitignore", CASES.values(), ids=list(CASES))
def test_rule_kind_agrees_with_git(tmp_path: Path, gitignore: bytes) -> None:
    build(tmp_path, gitignore)
    expected = git_listed(tmp_path)
    assert discovered(tmp_path) == (expected, expected, expected)


@pytest.mark.parametrize("gitignore", CASES.values(), ids=list(CASES))
def test_rule_kind_in_nested_gitignore_agrees_with_git(tmp_path: Path, gitignore: bytes) -> None:
    build(tmp_path, b"")
    (tmp_path / "a" / ".gitignore").write_bytes(gitignore)
    expected = git_listed(tmp_path)
    assert discovered(tmp_path) == (expected, expected, expected)


def test_info_exclude_applies_and_gitignore_overrides_it(tmp_path: Path) -> None:
    build(tmp_path, b"!x.log\n")
    (tmp_path / ".git" / "info").mkdir(exist_ok=True)
    (tmp_path / ".git" / "info" / "exclude").write_bytes(b"*.log\nroot.txt\n")
    expected = git_listed(tmp_path)
    assert "x.log" in expected
    assert "root.txt" not in expected
    assert discovered(tmp_path) == (expected, expected, expected)


def test_deeper_gitignore_overrides_shallower(tmp_path: Path) -> None:
    build(tmp_path, b"*.log\n")
    (tmp_path / "a" / ".gitignore").write_bytes(b"!x.log\n")
    expected = git_listed(tmp_path)
    assert "a/x.log" in expected
    assert discovered(tmp_path) == (expected, expected, expected)


def test_tracked_files_are_listed_even_when_ignored(tmp_path: Path) -> None:
    build(tmp_path, b"*.log\nbuild/\n")
    git(tmp_path, "add", "-f", "x.log", "build/out.o")
    expected = git_listed(tmp_path)
    assert {"x.log", "build/out.o"} <= expected
    assert discovered(tmp_path) == (expected, expected, expected)


def test_ignore_file_rules_apply_above_gitignore(tmp_path: Path) -> None:
    # git does not read .ignore; ripgrep's convention ranks it above .gitignore.
    build(tmp_path, b"*.log\n")
    (tmp_path / ".ignore").write_bytes(b"!keep.log\nroot.txt\n")
    expected = git_listed(tmp_path) - {"root.txt", "a/root.txt"} | {"keep.log", "a/keep.log"}
    assert discovered(tmp_path) == (expected, expected, expected)


@pytest.mark.skipif(shutil.which("rg") is None, reason="the oracle is ripgrep")
def test_ignore_files_rank_above_gitignore_files_at_any_depth_as_ripgrep_ranks_them(
    tmp_path: Path,
) -> None:
    # A root .ignore's rule beats a deeper .gitignore's re-include, a deeper .ignore's
    # re-include beats a root .gitignore's rule, and a deeper .ignore beats a shallower one.
    build(tmp_path, b"*.log\n")
    (tmp_path / ".ignore").write_bytes(b"root.txt\ndeep.py\n")
    (tmp_path / "a" / ".gitignore").write_bytes(b"!root.txt\n")
    (tmp_path / "a" / ".ignore").write_bytes(b"!keep.log\n")
    (tmp_path / "a" / "b" / ".ignore").write_bytes(b"!deep.py\n")
    listed = subprocess.run(
        ["rg", "--files", "--hidden", "--glob", "!.git"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    expected = set(listed)
    assert {"a/keep.log", "a/b/deep.py"} <= expected
    assert not {"a/root.txt", "a/deep.py"} & expected
    assert discovered(tmp_path) == (expected, expected, expected)


def test_rules_apply_in_a_workspace_below_the_repository_top(tmp_path: Path) -> None:
    build(tmp_path, b"/a/x.log\ndeep.py\n")
    expected = {p[2:] for p in git_listed(tmp_path) if p.startswith("a/")}
    assert discovered(tmp_path / "a") == (expected, expected, expected)


def test_symlinks_are_listed_as_git_lists_them(tmp_path: Path) -> None:
    build(tmp_path, b"ignored-link\n")
    os.symlink("a", tmp_path / "dir-link")
    os.symlink("missing", tmp_path / "dangling")
    os.symlink("/", tmp_path / "outside")
    os.symlink("..", tmp_path / "a" / "loop")
    os.symlink("x.log", tmp_path / "ignored-link")
    expected = git_listed(tmp_path)
    assert {"dir-link", "dangling", "outside", "a/loop"} <= expected
    listed, globbed, grepped = discovered(tmp_path)
    assert listed == globbed == expected
    # grep reads no linked file it was not named.
    assert grepped == expected - {"dir-link", "dangling", "outside", "a/loop"}


def test_global_excludes_file_from_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    build(repo, b"!keep.log\n")
    excludes = tmp_path / "global-ignore"
    excludes.write_bytes(b"*.log\nroot.txt\n")
    config = tmp_path / "gitconfig"
    config.write_text(f"[core]\n\texcludesFile = {excludes}\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    expected = git_listed(repo)
    assert "x.log" not in expected
    assert "keep.log" in expected
    assert discovered(repo) == (expected, expected, expected)


def test_default_global_excludes_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    build(repo, b"")
    (tmp_path / "xdg" / "git").mkdir(parents=True)
    (tmp_path / "xdg" / "git" / "ignore").write_bytes(b"build/\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    expected = git_listed(repo)
    assert "build/out.o" not in expected
    assert discovered(repo) == (expected, expected, expected)
