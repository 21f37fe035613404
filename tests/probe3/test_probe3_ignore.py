"""A huge ignore file (megabytes, a million patterns, one endless line) costs a walk at most
its capped head: list_files, glob and grep answer, apply the first patterns as git does and
say that the rest was not read."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from workspace_tools import invoke_tool, workspace_tools
from workspace_tools.workspace._ignore import MAX_IGNORE_BYTES, MAX_IGNORE_PATTERNS

pytestmark = pytest.mark.anyio

NOTE = (
    "(note: {name}: ignore file too big; only its first 10,000 patterns within 1 MiB were "
    "applied, the rest was not read)"
)


async def call(root: Path, name: str, **args: object) -> tuple[str, Any]:
    tool = next(t for t in workspace_tools(root) if t.name == name)
    with anyio.fail_after(120):
        result = await invoke_tool(tool, args)
    assert result.error is None, result.error
    return result.model_text(), result.details


def _tree(root: Path, patterns: list[bytes]) -> None:
    (root / ".gitignore").write_bytes(b"\n".join(patterns) + b"\n")
    for name in ("first.log", "last.log", "kept.txt"):
        (root / name).write_text("hit\n")


async def test_a_million_patterns_apply_the_first_ten_thousand(tmp_path: Path) -> None:
    # "first.log" is pattern 1; "last.log" comes after a million others: not read.
    patterns = [b"first.log", *(b"pattern%d.tmp" % i for i in range(1_000_000)), b"last.log"]
    _tree(tmp_path, patterns)
    assert (tmp_path / ".gitignore").stat().st_size > 10 * MAX_IGNORE_BYTES
    note = NOTE.format(name=".gitignore")
    listed, details = await call(tmp_path, "list_files")
    assert listed.splitlines() == [".gitignore", "kept.txt", "last.log", note]
    assert details.ignored == 1
    found, _ = await call(tmp_path, "glob", pattern="*")
    assert found.splitlines() == [".gitignore", "kept.txt", "last.log", note]
    grep, _ = await call(tmp_path, "grep", pattern="hit")
    assert grep.splitlines() == ["kept.txt:1:hit", "last.log:1:hit", note]


async def test_under_the_caps_the_files_are_git_s(tmp_path: Path) -> None:
    patterns = [b"first.log", *(b"p%d.tmp" % i for i in range(MAX_IGNORE_PATTERNS - 2))]
    _tree(tmp_path, [*patterns, b"last.log"])
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    git = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard"],
        cwd=tmp_path,
        capture_output=True,
        check=True,
        text=True,
    ).stdout.splitlines()
    listed, _ = await call(tmp_path, "list_files")
    assert listed.splitlines() == sorted(git) == [".gitignore", "kept.txt"]


async def test_one_endless_pattern_line_is_left_out(tmp_path: Path) -> None:
    _tree(tmp_path, [b"*a" * 500_000 + b"b", b"first.log"])
    listed, _ = await call(tmp_path, "list_files")
    note = NOTE.format(name=".gitignore")
    assert listed.splitlines() == [".gitignore", "kept.txt", "last.log", note]


async def test_a_cut_in_a_subdirectory_is_named_by_its_path(tmp_path: Path) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / ".gitignore").write_bytes(b"x\n" * (MAX_IGNORE_PATTERNS + 1))
    (sub / "a.txt").write_text("a\n")
    listed, _ = await call(tmp_path, "list_files", recursive=True)
    note = NOTE.format(name="sub/.gitignore")
    assert listed.splitlines() == ["sub/", "sub/.gitignore", "sub/a.txt", note]
