"""glob: wcmatch semantics over the shared walk, sorting, limits, errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.discovery_helpers import tools
from workspace_tools import ErrorCode, ToolPresentation, invoke_tool_sync


def glob(root: Path, **args: object):  # type: ignore[no-untyped-def]
    return invoke_tool_sync(tools(root)["glob"], args)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    for rel in [
        "setup.py",
        "src/a/x.ts",
        "src/b/y.ts",
        "src/c/z.ts",
        "src/pkg/mod.py",
        "src/pkg/deep/more.py",
        ".github/workflows/ci.yml",
        "node_modules/lib/index.py",
    ]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x\n")
    (tmp_path / ".gitignore").write_text("node_modules/\n")
    return tmp_path


@pytest.mark.parametrize(
    "pattern, path, expected",
    [
        ("*.py", ".", ["setup.py"]),
        ("**/*.py", ".", ["setup.py", "src/pkg/deep/more.py", "src/pkg/mod.py"]),
        ("src/{a,b}/*.ts", ".", ["src/a/x.ts", "src/b/y.ts"]),
        ("*.py", "src/pkg", ["src/pkg/mod.py"]),
        ("**/*.py", "src/pkg", ["src/pkg/deep/more.py", "src/pkg/mod.py"]),
        ("**/*.yml", ".", [".github/workflows/ci.yml"]),
        ("./src/?/*.ts", ".", ["src/a/x.ts", "src/b/y.ts", "src/c/z.ts"]),
        ("src/[!a]/*.ts", ".", ["src/b/y.ts", "src/c/z.ts"]),
        ("src/*", ".", []),
    ],
)
def test_glob_semantics(project: Path, pattern: str, path: str, expected: list[str]) -> None:
    result = glob(project, pattern=pattern, path=path)
    assert result.details.matches == expected
    assert result.model_text() == ("\n".join(expected) or "No files matched")


def test_a_leading_bang_is_literal_and_a_miss_says_so(project: Path) -> None:
    # A model writing '!**/*.py' means "everything but Python files": glob has no
    # exclusion (no NEGATE), so it matches names starting with '!', and says so.
    hint = (
        "[A leading '!' is a literal character in a glob, not an exclusion: give the files "
        "to keep (e.g. '**/*.py'), or use grep's glob filter, where '!pattern' leaves files "
        "out]"
    )
    for pattern in ["!*.py", "!**/*.py"]:
        assert glob(project, pattern=pattern).model_text() == f"No files matched\n{hint}"
    (project / "!keep.py").write_text("x\n")
    (project / "src/!b.py").write_text("x\n")
    assert glob(project, pattern="!*.py").details.matches == ["!keep.py"]
    # Three stars and a '!' run on RE2 now (a '!' outside [...] is a plain character).
    assert glob(project, pattern="**/!*.*y*").details.matches == ["!keep.py", "src/!b.py"]


def test_ignored_files_are_skipped_counted_and_includable(project: Path) -> None:
    result = glob(project, pattern="**/index.py")
    assert (result.model_text(), result.details.ignored) == ("No files matched", 1)
    included = glob(project, pattern="**/index.py", include_ignored=True)
    assert included.details.matches == ["node_modules/lib/index.py"]


def test_limit_note_gives_the_total(project: Path) -> None:
    result = glob(project, pattern="**/*.ts", limit=2)
    assert result.model_text().splitlines() == [
        "src/a/x.ts",
        "src/b/y.ts",
        "[Showing 2 of 3 matching files; narrow the pattern or path, or raise limit, to see "
        "the rest]",
    ]
    assert (result.details.count, result.details.truncated) == (3, True)
    assert result.presentation == ToolPresentation(
        label="Find files", icon="search", detail="**/*.ts"
    )


def test_symlinks_match_but_are_not_followed(project: Path) -> None:
    os.symlink("src", project / "linked")
    os.symlink("setup.py", project / "alias.py")
    assert glob(project, pattern="**/*.py").details.matches == [
        "alias.py",
        "setup.py",
        "src/pkg/deep/more.py",
        "src/pkg/mod.py",
    ]


def test_absolute_pattern_inside_the_root_is_relative(project: Path) -> None:
    real = os.path.realpath(project)
    assert glob(project, pattern=f"{real}/*.py").details.matches == ["setup.py"]
    outside = glob(project, pattern="/etc/*")
    assert (outside.error_code, outside.error) == (
        ErrorCode.OUTSIDE_WORKSPACE,
        "Glob pattern '/etc/*' is outside the workspace root; give a pattern relative to "
        "the search path, e.g. '**/*.py'",
    )


@pytest.mark.parametrize("pattern", ["../*", "src/../../*.py", "..", "./../x"])
def test_a_pattern_never_climbs(project: Path, pattern: str) -> None:
    # Walked paths never hold '..': such a pattern would say "No files matched" of a tree
    # it never looked at; the model is told to set path instead.
    result = glob(project, pattern=pattern)
    assert (result.error_code, result.error) == (
        ErrorCode.INVALID_ARGUMENTS,
        f"Glob pattern {pattern!r} has a '..' segment, but a pattern only matches paths "
        "below the search path; set path to the directory to search (inside the "
        "workspace) and give the pattern from there",
    )


@pytest.mark.parametrize(
    "path, code", [("missing", ErrorCode.NOT_FOUND), ("setup.py", ErrorCode.NOT_A_DIRECTORY)]
)
def test_errors(project: Path, path: str, code: ErrorCode) -> None:
    assert glob(project, pattern="*", path=path).error_code == code
