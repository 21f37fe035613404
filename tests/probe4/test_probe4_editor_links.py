"""The text editor's view of a directory named through a symlink inside the root (``dl ->
d``, ``self -> .``): it lists the directory, under its real location as list_files does,
never "became a symbolic link during the call" for a link that was always there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from workspace_tools import Workspace, invoke_tool_sync
from workspace_tools.adapters.anthropic_text_editor import text_editor_tool


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "x.txt").write_text("x\n")
    os.symlink("d", tmp_path / "dl")
    os.symlink(".", tmp_path / "self")
    return tmp_path


@pytest.mark.parametrize(
    ("path", "entries"),
    [
        ("dl", ["d/e/", "d/x.txt"]),
        ("dl/", ["d/e/", "d/x.txt"]),
        ("self/d", ["d/e/", "d/x.txt"]),
        ("self", ["d/", "d/e/", "d/x.txt", "dl", "self"]),
    ],
)
def test_view_lists_a_directory_named_through_a_link(
    root: Path, path: str, entries: list[str]
) -> None:
    result = invoke_tool_sync(text_editor_tool(Workspace(root)), {"command": "view", "path": path})
    assert result.error is None, result.error
    assert result.model_text() == (
        f"Here's the files and directories up to 2 levels deep in {path}, excluding hidden "
        "items:\n" + "".join(f"{entry}\n" for entry in entries)
    )
