"""Anthropic's text editor on this package's engine: definitions and results in the SDK's
types, the documented texts, byte-exact edits, confinement, undo in the versions that have it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from anthropic.types import (
    ToolResultBlockParam,
    ToolTextEditor20250124Param,
    ToolTextEditor20250429Param,
    ToolTextEditor20250728Param,
)

from tests.adapters._sdk import sdk_valid
from tests.file_support import assert_diff_reproduces
from workspace_tools import ErrorCode, ToolResult, invoke_tool_sync
from workspace_tools.adapters.anthropic import anthropic_tool_result
from workspace_tools.adapters.anthropic_text_editor import (
    anthropic_text_editor_definition,
    text_editor_tool,
)


def run(root: Path, version: str = "20250728", **arguments: Any) -> ToolResult:
    return invoke_tool_sync(text_editor_tool(root, version=version), arguments, call_id="tu_1")


def block(result: ToolResult) -> dict[str, Any]:
    made = anthropic_tool_result(result)
    assert sdk_valid(ToolResultBlockParam, made)
    return made


@pytest.mark.parametrize(
    ("version", "param", "name"),
    [
        ("20250728", ToolTextEditor20250728Param, "str_replace_based_edit_tool"),
        ("20250429", ToolTextEditor20250429Param, "str_replace_based_edit_tool"),
        ("20250124", ToolTextEditor20250124Param, "str_replace_editor"),
    ],
)
def test_definitions_are_the_sdk_params(version: str, param: Any, name: str) -> None:
    definition = anthropic_text_editor_definition(version)
    assert definition == {"type": f"text_editor_{version}", "name": name}
    assert sdk_valid(param, definition)
    assert text_editor_tool(".", version=version).name == name


def test_max_characters_is_declared_and_clips_a_view(tmp_path: Path) -> None:
    definition = anthropic_text_editor_definition(max_characters=60)
    assert sdk_valid(ToolTextEditor20250728Param, definition)
    (tmp_path / "long.txt").write_text("".join(f"line {n}\n" for n in range(50)))
    tool = text_editor_tool(tmp_path, max_characters=60)
    result = invoke_tool_sync(tool, {"command": "view", "path": "long.txt"})
    assert result.content.startswith("Here's the result of running `cat -n` on long.txt:\n")
    assert result.content.endswith("</NOTE>")
    assert len(result.content.split("<response clipped>")[0]) == 60
    with pytest.raises(ValueError, match="max_characters exists only in text_editor_20250728"):
        anthropic_text_editor_definition("20250429", max_characters=5)


def test_view_numbers_lines_like_cat_n_and_takes_a_range(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_bytes(b"one\r\n\ttwo\r\nthree")
    whole = run(tmp_path, command="view", path="a.py")
    assert block(whole) == {
        "type": "tool_result",
        "tool_use_id": "tu_1",
        "content": "Here's the result of running `cat -n` on a.py:\n"
        "     1\tone\n     2\t\ttwo\n     3\tthree\n",
    }
    part = run(tmp_path, command="view", path=str(tmp_path / "a.py"), view_range=[2, -1])
    assert part.content == (
        f"Here's the result of running `cat -n` on {tmp_path / 'a.py'}:\n"
        "     2\t\ttwo\n     3\tthree\n"
    )
    bad = run(tmp_path, command="view", path="a.py", view_range=[2, 9])
    assert block(bad)["is_error"] is True
    assert bad.error == (
        "Error: Invalid `view_range`: [2, 9]. Its second element `9` should be smaller than "
        "the number of lines in the file: `3`"
    )
    backwards = run(tmp_path, command="view", path="a.py", view_range=[3, 2])
    assert backwards.error == (
        "Error: Invalid `view_range`: [3, 2]. Its second element `2` should be larger or "
        "equal than its first `3`"
    )


def test_view_of_a_directory_lists_two_levels_without_hidden_entries(tmp_path: Path) -> None:
    (tmp_path / "src/pkg/deep").mkdir(parents=True)
    (tmp_path / "src/pkg/deep/x.py").write_text("")
    (tmp_path / "src/main.py").write_text("")
    (tmp_path / ".git").mkdir()
    (tmp_path / "src/.hidden").write_text("")
    result = run(tmp_path, command="view", path="src")
    assert result.content == (
        "Here's the files and directories up to 2 levels deep in src, excluding hidden items:\n"
        "src/main.py\nsrc/pkg/\nsrc/pkg/deep/\n"
    )


def test_create_writes_a_new_file_and_refuses_an_existing_one(tmp_path: Path) -> None:
    made = run(tmp_path, command="create", path="new/file.txt", file_text="a\nb\n")
    assert block(made)["content"] == "File created successfully at: new/file.txt"
    assert (tmp_path / "new/file.txt").read_bytes() == b"a\nb\n"
    again = run(tmp_path, command="create", path="new/file.txt", file_text="other")
    assert (again.error_code, again.error) == (
        ErrorCode.ALREADY_EXISTS,
        "Error: File already exists at: new/file.txt. Cannot overwrite files using command "
        "`create`.",
    )
    assert (tmp_path / "new/file.txt").read_bytes() == b"a\nb\n"


def test_str_replace_keeps_tabs_encoding_and_line_endings(tmp_path: Path) -> None:
    before = b"caf\xe9\r\n\tif x:\r\n\t\treturn 1\r\n"
    (tmp_path / "m.c").write_bytes(before)
    result = run(
        tmp_path, command="str_replace", path="m.c", old_str="\t\treturn 1", new_str="\t\treturn 2"
    )
    after = b"caf\xe9\r\n\tif x:\r\n\t\treturn 2\r\n"
    assert block(result)["content"] == "Successfully replaced text at exactly one location."
    assert (tmp_path / "m.c").read_bytes() == after
    assert_diff_reproduces(tmp_path.parent / "scratch", "m.c", before, after, result.details)


def test_str_replace_failures_carry_the_documented_texts(tmp_path: Path) -> None:
    (tmp_path / "d.py").write_text("x = 1\nx = 1\n")
    twice = run(tmp_path, command="str_replace", path="d.py", old_str="x = 1", new_str="x = 2")
    assert twice.error_code == ErrorCode.AMBIGUOUS_MATCH
    assert twice.error.startswith(
        "Error: Found 2 matches for replacement text. Please provide more context to make a "
        "unique match.\nold_str matches 2 times in d.py (lines 1, 2); include more "
        "surrounding lines to make it unique"
    )
    none = run(tmp_path, command="str_replace", path="d.py", old_str="y = 1", new_str="y")
    assert none.error_code == ErrorCode.NO_MATCH
    assert none.error.startswith(
        "Error: No match found for replacement. Please check your text and try again.\n"
        "old_str was not found in d.py. View the file again and copy the text exactly"
    )
    # The model of this format has old_str, new_str and view, not edit_file's words.
    for words in (twice.error, none.error):
        assert not {"old_text", "new_text", "read_file", "replace_all"} & set(
            words.replace(",", " ").replace(";", " ").split()
        ), words
    missing = run(tmp_path, command="str_replace", path="nope.py", old_str="a", new_str="b")
    assert block(missing) == {
        "type": "tool_result",
        "tool_use_id": "tu_1",
        "content": "Error: File not found\nThe path nope.py does not exist.",
        "is_error": True,
    }
    assert (tmp_path / "d.py").read_bytes() == b"x = 1\nx = 1\n"


def test_a_miss_in_a_long_line_names_the_place_in_the_editors_terms(tmp_path: Path) -> None:
    # The editor's model has no grep: the pointer to it is left out, the place stays.
    (tmp_path / "m.js").write_text("var a=1;" * 300 + "var b=2;")
    none = run(tmp_path, command="str_replace", path="m.js", old_str="var a=1;var b=3;", new_str="")
    assert none.error == (
        "Error: No match found for replacement. Please check your text and try again.\n"
        "old_str was not found in m.js. View the file again and copy the text exactly, "
        "including whitespace and punctuation. Line 1 is 2,408 characters long; old_str's "
        "first 14 characters are found in it at column 2,393, and then the file has "
        "'var a=1;var b=2;' where old_str has 'var a=1;var b=3;'."
    )


@pytest.mark.parametrize("field", ["new_str", "insert_text"])
def test_insert_takes_new_str_or_insert_text(tmp_path: Path, field: str) -> None:
    (tmp_path / "i.txt").write_bytes(b"one\r\ntwo")
    result = run(tmp_path, command="insert", path="i.txt", insert_line=2, **{field: "three"})
    assert result.content == "Text inserted after line 2 of i.txt."
    assert (tmp_path / "i.txt").read_bytes() == b"one\r\ntwo\r\nthree"
    top = run(tmp_path, command="insert", path="i.txt", insert_line=0, **{field: "zero\n"})
    assert top.error is None, top.error
    assert (tmp_path / "i.txt").read_bytes() == b"zero\r\none\r\ntwo\r\nthree"
    bad = run(tmp_path, command="insert", path="i.txt", insert_line=9, **{field: "x"})
    assert bad.error == (
        "Error: Invalid `insert_line` parameter: 9. It should be within the range of lines of "
        "the file: [0, 4]"
    )


def test_paths_outside_the_root_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "w"
    root.mkdir()
    (tmp_path / "secret.txt").write_text("s\n")
    for path in ("../secret.txt", str(tmp_path / "secret.txt")):
        result = run(root, command="view", path=path)
        assert result.error_code == ErrorCode.OUTSIDE_WORKSPACE, result.error


def test_undo_edit_exists_only_in_the_versions_that_have_it(tmp_path: Path) -> None:
    (tmp_path / "u.txt").write_bytes(b"v1\n")
    tool = text_editor_tool(tmp_path, version="20250124")
    edit = {"command": "str_replace", "path": "u.txt", "old_str": "v1", "new_str": "v2"}
    assert invoke_tool_sync(tool, edit).error is None
    undone = invoke_tool_sync(tool, {"command": "undo_edit", "path": "u.txt"})
    assert undone.content == "Last edit to u.txt undone successfully."
    assert (tmp_path / "u.txt").read_bytes() == b"v1\n"
    nothing = invoke_tool_sync(tool, {"command": "undo_edit", "path": "u.txt"})
    assert nothing.error == "Error: No edit history found for u.txt."
    for version in ("20250728", "20250429"):
        newer = invoke_tool_sync(
            text_editor_tool(tmp_path, version=version), {"command": "undo_edit", "path": "u.txt"}
        )
        assert (newer.error_code, newer.error) == (
            ErrorCode.INVALID_ARGUMENTS,
            "Invalid arguments for str_replace_based_edit_tool:\n- command: the undo_edit command "
            "does not exist in this version of the text editor; make the reverse edit with "
            "str_replace instead",
        )
        # An unknown command is answered with the commands this version has.
        unknown = invoke_tool_sync(
            text_editor_tool(tmp_path, version=version), {"command": "undo", "path": "u.txt"}
        )
        assert unknown.error == (
            "Invalid arguments for str_replace_based_edit_tool:\n- command: Input should be "
            "'view', 'create', 'str_replace' or 'insert'"
        )
    assert (tmp_path / "u.txt").read_bytes() == b"v1\n"


def test_presentation_names_the_command_and_path(tmp_path: Path) -> None:
    tool = text_editor_tool(tmp_path)
    args = tool.parameters.model_validate({"command": "str_replace", "path": "a.py"})
    presented = tool.present(args)
    assert (presented.label, presented.icon, presented.detail) == ("Edit file", "file-pen", "a.py")


@pytest.mark.parametrize(
    "arguments",
    [
        {"command": "view", "path": "SRC/app.py"},
        {"command": "view", "path": "src/App.py:2"},
        {"command": "str_replace", "path": "SRC/app.py", "old_str": "x", "new_str": "y"},
        {"command": "insert", "path": "SRC/app.py", "insert_line": 0, "new_str": "y"},
    ],
)
def test_a_missing_file_names_the_one_most_likely_meant(
    tmp_path: Path, arguments: dict[str, object]
) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "App.py").write_bytes(b"x = 1\n")
    result = invoke_tool_sync(text_editor_tool(tmp_path), arguments)
    assert (result.error_code, result.error) == (
        ErrorCode.NOT_FOUND,
        f"Error: File not found\nThe path {arguments['path']} does not exist. "
        "Did you mean 'src/App.py'?",
    )
    assert (tmp_path / "src" / "App.py").read_bytes() == b"x = 1\n"
