"""list_files: entries, types, sizes, sorting, limits, ignore counts, errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.discovery_helpers import tools
from workspace_tools import ErrorCode, ToolPresentation, invoke_tool_sync


def list_files(root: Path, **args: object):  # type: ignore[no-untyped-def]
    return invoke_tool_sync(tools(root)["list_files"], args)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "mod.py").write_text("x = 1\n")
    (tmp_path / "src" / "main.py").write_text("print()\n")
    (tmp_path / ".env.example").write_text("A=1\n")
    (tmp_path / "README.md").write_text("# r\n")
    (tmp_path / ".gitignore").write_text("dist/\n*.pyc\n")
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / "out.whl").write_text("w")
    (tmp_path / "src" / "main.pyc").write_bytes(b"\0")
    os.symlink("src", tmp_path / "link")
    return tmp_path


def test_lists_direct_entries_sorted_with_directory_slashes(project: Path) -> None:
    result = list_files(project)
    assert result.model_text() == ".env.example\n.gitignore\nREADME.md\nlink\nsrc/"
    details = result.details
    assert [(e.path, e.type, e.size) for e in details.entries] == [
        (".env.example", "file", 4),
        (".gitignore", "file", 12),
        ("README.md", "file", 4),
        ("link", "symlink", 3),
        ("src", "directory", None),
    ]
    assert (details.path, details.count, details.truncated, details.ignored) == (".", 5, False, 1)
    assert result.presentation == ToolPresentation(label="List files", icon="folder", detail=".")


def test_recursive_listing_skips_ignored_and_counts_them(project: Path) -> None:
    result = list_files(project, recursive=True)
    assert result.model_text().splitlines() == [
        ".env.example",
        ".gitignore",
        "README.md",
        "link",
        "src/",
        "src/main.py",
        "src/pkg/",
        "src/pkg/mod.py",
    ]
    assert result.details.ignored == 2


def test_include_ignored(project: Path) -> None:
    result = list_files(project, recursive=True, include_ignored=True)
    paths = [e.path for e in result.details.entries]
    assert {"dist", "dist/out.whl", "src/main.pyc"} <= set(paths)
    assert result.details.ignored == 0


def test_subdirectory_paths_are_relative_to_the_root(project: Path) -> None:
    result = list_files(project, path="src")
    assert result.model_text() == "src/main.py\nsrc/pkg/"
    assert result.details.path == "src"


def test_limit_and_note(project: Path) -> None:
    result = list_files(project, recursive=True, limit=3)
    assert result.model_text().splitlines() == [
        ".env.example",
        ".gitignore",
        "README.md",
        "[Showing 3 of 8 entries; list a subdirectory or raise limit to see the rest]",
    ]
    assert (result.details.count, result.details.truncated) == (8, True)


def test_empty_directory_says_so(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert list_files(tmp_path, path="empty").model_text() == "Directory is empty"
    (tmp_path / "empty" / ".gitignore").write_text("*\n")
    assert list_files(tmp_path, path="empty").model_text() == (
        "Directory is empty (1 entry skipped by ignore rules; include_ignored=true shows them)"
    )


@pytest.mark.parametrize(
    "path, code",
    [
        ("missing", ErrorCode.NOT_FOUND),
        ("README.md", ErrorCode.NOT_A_DIRECTORY),
        ("..", ErrorCode.OUTSIDE_WORKSPACE),
        ("a\0b", ErrorCode.INVALID_ARGUMENTS),
    ],
)
def test_errors(project: Path, path: str, code: ErrorCode) -> None:
    assert list_files(project, path=path).error_code == code


def test_symlink_loop_does_not_hang(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    os.symlink("..", tmp_path / "a" / "up")
    os.symlink("self", tmp_path / "self")
    result = list_files(tmp_path, recursive=True)
    assert result.model_text() == "a/\na/up\nself"


def test_defaults_in_the_schema() -> None:
    from workspace_tools.tools.list_files import ListFilesArgs

    props = ListFilesArgs.model_json_schema()["properties"]
    assert (props["path"]["default"], props["recursive"]["default"]) == (".", False)


def test_configured_limit_is_the_schema_default_and_applies(project: Path) -> None:
    from workspace_tools import workspace_tools

    tool = {t.name: t for t in workspace_tools(project, list_limit=2)}["list_files"]
    assert tool.input_schema()["properties"]["limit"]["default"] == 2
    result = invoke_tool_sync(tool, {"recursive": True})
    assert (len(result.details.entries), result.details.truncated) == (2, True)
