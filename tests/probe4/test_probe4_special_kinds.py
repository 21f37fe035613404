"""Every tool that meets a FIFO or a socket where it needs a file or a directory names
what it met, in the words read_file uses (``f is a FIFO (named pipe), not a regular
file``): grep on a named special file, list_files and glob given one as their directory."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from workspace_tools import ErrorCode, Workspace, invoke_tool_sync, workspace_tools

KINDS = {"fifo": "a FIFO (named pipe)", "sock": "a socket"}


@pytest.fixture
def tools(tmp_path: Path) -> dict[str, object]:
    os.mkfifo(tmp_path / "fifo")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "sock"))
    return {t.name: t for t in workspace_tools(Workspace(tmp_path))}


@pytest.mark.parametrize("name", sorted(KINDS))
def test_grep_names_the_kind_of_a_special_file(tools: dict[str, object], name: str) -> None:
    result = invoke_tool_sync(tools["grep"], {"pattern": "x", "path": name})
    assert (result.error_code, result.error) == (
        ErrorCode.TOOL_ERROR,
        f"{name} is {KINDS[name]}, not a regular file; grep searches files and directories",
    )


@pytest.mark.parametrize("name", sorted(KINDS))
@pytest.mark.parametrize(("tool", "arguments"), [("list_files", {}), ("glob", {"pattern": "*"})])
def test_directory_tools_name_the_kind_of_a_special_file(
    tools: dict[str, object], name: str, tool: str, arguments: dict[str, str]
) -> None:
    result = invoke_tool_sync(tools[tool], {**arguments, "path": name})
    assert (result.error_code, result.error) == (
        ErrorCode.NOT_A_DIRECTORY,
        f"Path {name!r} is {KINDS[name]}, not a directory; pass its directory instead",
    )


def test_a_regular_file_is_still_called_a_file(tools: dict[str, object], tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x\n")
    result = invoke_tool_sync(tools["list_files"], {"path": "a.txt"})
    assert (result.error_code, result.error) == (
        ErrorCode.NOT_A_DIRECTORY,
        "Path 'a.txt' is a file, not a directory; pass its directory instead",
    )
