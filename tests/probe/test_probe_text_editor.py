"""Adversarial checks of the Anthropic text editor: a file changed outside the tool can
always be viewed again (the view is the editor's only read), messages name only what the
editor's model has, and ``undo_edit`` from the tool's own history never overwrites a change
made since by someone else."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from workspace_tools import ErrorCode, ToolResult, invoke_tool
from workspace_tools.adapters.anthropic_text_editor import text_editor_tool

pytestmark = pytest.mark.anyio


async def call(editor: Any, **arguments: Any) -> ToolResult:
    with anyio.fail_after(30):
        return await invoke_tool(editor, arguments)


@pytest.mark.parametrize("version", ["20250728", "20250124"])
async def test_a_file_changed_outside_is_viewed_as_it_now_is(tmp_path: Path, version: str) -> None:
    (tmp_path / "a.txt").write_bytes(b"one\ntwo\n")
    editor = text_editor_tool(tmp_path, version=version)
    edited = await call(editor, command="str_replace", path="a.txt", old_str="one", new_str="ONE")
    assert edited.error is None, edited.error
    (tmp_path / "a.txt").write_bytes(b"ONE\ntwo\nadded by the user\n")

    viewed = await call(editor, command="view", path="a.txt")
    assert viewed.error is None, viewed.error
    assert viewed.content == (
        "Here's the result of running `cat -n` on a.txt:\n"
        "     1\tONE\n     2\ttwo\n     3\tadded by the user\n"
    )
    # Seen now: an edit against what the view showed goes through.
    again = await call(editor, command="str_replace", path="a.txt", old_str="two", new_str="TWO")
    assert again.error is None, again.error
    assert (tmp_path / "a.txt").read_bytes() == b"ONE\nTWO\nadded by the user\n"


async def test_a_stale_edit_is_refused_in_the_editors_words(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"one\n")
    editor = text_editor_tool(tmp_path)
    assert (await call(editor, command="view", path="a.txt")).error is None
    (tmp_path / "a.txt").write_bytes(b"one\nuser\n")

    refused = await call(editor, command="insert", path="a.txt", insert_line=0, new_str="top")
    assert refused.error is not None
    assert refused.error_code is ErrorCode.STALE_FILE
    assert "read_file" not in refused.error, refused.error
    assert "view" in refused.error, refused.error
    assert (tmp_path / "a.txt").read_bytes() == b"one\nuser\n"


async def test_no_message_names_a_tool_the_editor_does_not_have(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    editor = text_editor_tool(tmp_path)
    for arguments in (
        {"command": "str_replace", "path": "d", "old_str": "x", "new_str": "y"},
        {"command": "create", "path": "d", "file_text": "x"},
        {"command": "insert", "path": "d", "insert_line": 0, "new_str": "x"},
    ):
        result = await call(editor, **arguments)
        assert result.error is not None
        assert result.error_code is ErrorCode.IS_A_DIRECTORY
        for other in ("list_files", "read_file", "edit_file", "write_file"):
            assert other not in result.error, (arguments, result.error)


async def test_undo_edit_from_memory_keeps_a_change_made_since(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"one\ntwo\n")
    editor = text_editor_tool(tmp_path, version="20250124")
    edited = await call(editor, command="str_replace", path="a.txt", old_str="one", new_str="ONE")
    assert edited.error is None, edited.error
    (tmp_path / "a.txt").write_bytes(b"ONE\ntwo\nadded by the user\n")
    # The model looks at the file (so the change counts as seen), then asks for the undo.
    assert (await call(editor, command="view", path="a.txt")).error is None

    undone = await call(editor, command="undo_edit", path="a.txt")
    assert undone.error is not None, undone.content
    assert undone.error_code is ErrorCode.STALE_FILE
    assert undone.error.startswith(
        "Error: a.txt was changed since this tool's last edit of it (by someone else); "
        "undo_edit left it as it is."
    ), undone.error
    assert (tmp_path / "a.txt").read_bytes() == b"ONE\ntwo\nadded by the user\n"


async def test_undo_edit_from_memory_walks_back_through_its_own_edits(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"a\r\nb\r\n")
    editor = text_editor_tool(tmp_path, version="20250124")
    for old, new in (("a", "A"), ("b", "B")):
        result = await call(editor, command="str_replace", path="a.txt", old_str=old, new_str=new)
        assert result.error is None, result.error
    assert (tmp_path / "a.txt").read_bytes() == b"A\r\nB\r\n"
    first = await call(editor, command="undo_edit", path="a.txt")
    assert first.error is None, first.error
    assert (tmp_path / "a.txt").read_bytes() == b"A\r\nb\r\n"
    second = await call(editor, command="undo_edit", path="a.txt")
    assert second.error is None, second.error
    assert (tmp_path / "a.txt").read_bytes() == b"a\r\nb\r\n"
    third = await call(editor, command="undo_edit", path="a.txt")
    assert third.error is not None
    assert third.error == "Error: No edit history found for a.txt."


@pytest.mark.parametrize("path", ["new/", "new/.", "d/", "a.txt/"])
@pytest.mark.parametrize(
    "arguments",
    [
        {"command": "create", "file_text": "x\n"},
        {"command": "str_replace", "old_str": "a", "new_str": "b"},
        {"command": "insert", "insert_line": 0, "new_str": "x"},
    ],
)
async def test_a_path_ending_in_a_slash_never_names_a_file_to_change(
    tmp_path: Path, path: str, arguments: dict[str, Any]
) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "a.txt").write_bytes(b"a\n")
    editor = text_editor_tool(tmp_path)
    result = await call(editor, path=path, **arguments)
    assert result.error is not None, result.content
    assert result.error_code in (ErrorCode.INVALID_ARGUMENTS, ErrorCode.NOT_A_DIRECTORY)
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "d"]
    assert os.listdir(tmp_path / "d") == []
    assert (tmp_path / "a.txt").read_bytes() == b"a\n"


async def test_paths_and_file_text_in_messages_are_never_reworded(tmp_path: Path) -> None:
    # The messages are put in the editor's words (old_str, view); the file's name and the
    # lines quoted from it are the user's, whatever words they hold.
    (tmp_path / "read_file.py").write_bytes(
        b"def list_files(old_text):\n    return read_file(old_text)\n"
    )
    editor = text_editor_tool(tmp_path)
    missed = await call(
        editor,
        command="str_replace",
        path="read_file.py",
        old_str="    return read_file(old_text )\n",
        new_str="    return None\n",
    )
    assert missed.error_code is ErrorCode.NO_MATCH
    assert missed.error.startswith(
        "Error: No match found for replacement. Please check your text and try again.\n"
        "old_str was not found in read_file.py."
    ), missed.error
    assert "'    return read_file(old_text)'" in missed.error, missed.error
    assert "view.py" not in missed.error and "(old_str)" not in missed.error, missed.error
