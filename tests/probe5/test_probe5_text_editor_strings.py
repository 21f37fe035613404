"""Anthropic's text editor: every failure kind answers with the documented first line (the
texts the models were trained on, field notes 1.1), then our hint, as a ``tool_result`` the
``anthropic`` SDK's own type accepts; and where the quickstart's reference executor expands
tabs, we keep them (README: "unique matches, tabs, encodings and line endings kept")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from anthropic.types import ToolResultBlockParam

from tests.adapters._sdk import sdk_valid
from tests.probe5._oracle import said_in_readme
from workspace_tools import invoke_tool_sync
from workspace_tools.adapters.anthropic import anthropic_tool_result
from workspace_tools.adapters.anthropic_text_editor import text_editor_tool

FILE = b"def f():\n\treturn 1\n\treturn 1\n"

CASES = {
    "view of a missing file": (
        {"command": "view", "path": "nope.py"},
        "Error: File not found\nThe path nope.py does not exist.",
    ),
    "str_replace in a missing file": (
        {"command": "str_replace", "path": "nope.py", "old_str": "a", "new_str": "b"},
        "Error: File not found\nThe path nope.py does not exist.",
    ),
    "insert into a missing file": (
        {"command": "insert", "path": "nope.py", "insert_line": 0, "new_str": "b"},
        "Error: File not found\nThe path nope.py does not exist.",
    ),
    "create over a file": (
        {"command": "create", "path": "a.py", "file_text": "x"},
        "Error: File already exists at: a.py. Cannot overwrite files using command `create`.",
    ),
    "ambiguous old_str": (
        {"command": "str_replace", "path": "a.py", "old_str": "\treturn 1", "new_str": "x"},
        "Error: Found 2 matches for replacement text. Please provide more context to make a "
        "unique match.\nold_str matches 2 times in a.py (lines 2, 3); include more "
        "surrounding lines to make it unique",
    ),
    "old_str not found": (
        {"command": "str_replace", "path": "a.py", "old_str": "zzz", "new_str": "b"},
        "Error: No match found for replacement. Please check your text and try again.\n"
        "old_str was not found in a.py. View the file again and copy the text exactly, "
        "including whitespace and punctuation",
    ),
}


@pytest.mark.parametrize(("arguments", "text"), CASES.values(), ids=CASES.keys())
def test_failures_answer_with_the_documented_texts(
    tmp_path: Path, arguments: dict[str, Any], text: str
) -> None:
    (tmp_path / "a.py").write_bytes(FILE)
    result = anthropic_tool_result(
        invoke_tool_sync(text_editor_tool(tmp_path), arguments, call_id="t1")
    )
    assert result == {"type": "tool_result", "tool_use_id": "t1", "content": text, "is_error": True}
    assert sdk_valid(ToolResultBlockParam, result)
    assert (tmp_path / "a.py").read_bytes() == FILE


def test_a_replacement_keeps_the_files_tabs_where_the_quickstart_expands_them(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.py").write_bytes(FILE)
    arguments = {
        "command": "str_replace",
        "path": "a.py",
        "old_str": "def f():\n\treturn 1\n",
        "new_str": "def g():\n\treturn 2\n",
    }
    result = anthropic_tool_result(
        invoke_tool_sync(text_editor_tool(tmp_path), arguments, call_id="t2")
    )
    assert result == {
        "type": "tool_result",
        "tool_use_id": "t2",
        "content": "Successfully replaced text at exactly one location.",
    }
    assert sdk_valid(ToolResultBlockParam, result)
    # The quickstart's edit.py writes `FILE.expandtabs()` with the change: every tab spaces.
    assert (tmp_path / "a.py").read_bytes() == b"def g():\n\treturn 2\n\treturn 1\n"
    said_in_readme("`str_replace` (the `edit_file` engine: unique matches, tabs, encodings")
