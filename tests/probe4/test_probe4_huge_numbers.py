"""Integers of any size in arguments (JSON's have no bound; Python refuses to print one past
4,300 digits): a message quoting one shows its first 200 digits and its count of digits,
with the argument's own code, never Python's "Exceeds the limit" as a TOOL_ERROR."""

from __future__ import annotations

from pathlib import Path

import pytest

from workspace_tools import ErrorCode, Workspace, invoke_tool_sync, workspace_tools
from workspace_tools._errors import shown_number
from workspace_tools.adapters.anthropic_text_editor import text_editor_tool

HUGE = 10**5000  # 5,001 digits
SHOWN = "1" + "0" * 199 + "… (5,001 digits)"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0, "0"),
        (-7, "-7"),
        (10**199, "1" + "0" * 199),
        (10**200 - 1, "9" * 200),
        (10**200, "1" + "0" * 199 + "… (201 digits)"),
        (-(10**5000) - 5, "-1" + "0" * 199 + "… (5,001 digits)"),
        (HUGE, SHOWN),
    ],
    ids=["zero", "negative", "200-digits", "200-nines", "201-digits", "minus-huge", "huge"],
)
def test_shown_number(value: int, shown: str) -> None:
    assert shown_number(value) == shown


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "a.txt").write_text("one\ntwo\nthree\n")
    return tmp_path


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"command": "view", "path": "a.txt", "view_range": [1, HUGE]},
            f"Error: Invalid `view_range`: [1, {SHOWN}]. Its second element `{SHOWN}` should "
            "be smaller than the number of lines in the file: `3`",
        ),
        (
            {"command": "view", "path": "a.txt", "view_range": [-HUGE, 2]},
            f"Error: Invalid `view_range`: [-{SHOWN}, 2]. Its first element `-{SHOWN}` should "
            "be within the range of lines of the file: [1, 3]",
        ),
        (
            {"command": "insert", "path": "a.txt", "insert_line": HUGE, "insert_text": "x"},
            f"Error: Invalid `insert_line` parameter: {SHOWN}. It should be within the range "
            "of lines of the file: [0, 3]",
        ),
    ],
    ids=["view-end", "view-start", "insert-line"],
)
def test_the_text_editor_quotes_a_huge_number_clipped(
    root: Path, arguments: dict[str, object], message: str
) -> None:
    editor = text_editor_tool(Workspace(root), version="20250124")
    result = invoke_tool_sync(editor, arguments)
    assert (result.error_code, result.error) == (ErrorCode.INVALID_ARGUMENTS, message)


def test_read_file_quotes_a_huge_offset_clipped(root: Path) -> None:
    read = next(t for t in workspace_tools(root) if t.name == "read_file")
    result = invoke_tool_sync(read, {"path": "a.txt", "offset": HUGE})
    assert (result.error_code, result.error) == (
        ErrorCode.INVALID_ARGUMENTS,
        f"offset {SHOWN} is past the end of a.txt, which has 3 lines",
    )


def test_a_json_rpc_line_with_a_huge_number_gets_a_plain_parse_error() -> None:
    pytest.importorskip("mcp")
    from workspace_tools.adapters._jsonrpc import parse_message

    line = b'{"jsonrpc":"2.0","id":4,"method":"ping","params":{"n":-1' + b"0" * 5000 + b"}}"
    assert parse_message(line) == (
        None,
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": -32700,
                "message": "Parse error: a number has 5,001 digits, more than the 4,300 this "
                "server reads",
            },
        },
    )
    # Below the reader's limit any size is read.
    assert parse_message(b'{"n": 1' + b"0" * 4000 + b"}") == ({"n": 10**4000}, None)
