"""edit_file with an ``edits`` list: in order, each against the text the previous left, all
or nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.file_support import assert_diff_reproduces, call, tools
from workspace_tools import ErrorCode


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "w"
    path.mkdir()
    return path


def test_edits_apply_in_order_each_to_the_text_the_previous_left(root: Path) -> None:
    before = b"a = 1\r\nb = 2\r\nc = 3\r\n"
    (root / "f.py").write_bytes(before)
    edits = [
        {"old_text": "a = 1", "new_text": "a = 10\nz = 0"},
        # Unique only after the first edit: "z = 0" did not exist before it.
        {"old_text": "z = 0\nb = 2", "new_text": "b = 20"},
        {"old_text": "= 3", "new_text": "= 30", "replace_all": True},
    ]
    result = call(tools(root)["edit_file"], path="f.py", edits=edits)
    after = b"a = 10\r\nb = 20\r\nc = 30\r\n"
    assert result.error is None, result.error
    assert (root / "f.py").read_bytes() == after
    assert result.content == {
        "path": "f.py",
        "replacements": 3,
        "match": "exact",
        "edits": [
            {"replacements": 1, "match": "exact"},
            {"replacements": 1, "match": "exact"},
            {"replacements": 1, "match": "exact"},
        ],
    }
    assert_diff_reproduces(root.parent / "scratch", "f.py", before, after, result.details)


def test_a_failing_edit_leaves_the_file_unchanged_and_is_named(root: Path) -> None:
    before = b"x = 1\ny = 1\n"
    (root / "f.py").write_bytes(before)
    edits = [
        {"old_text": "x = 1", "new_text": "x = 2"},
        {"old_text": "= 1", "new_text": "= 3"},  # unique once the first edit is made
        {"old_text": "x = 1", "new_text": "x = 9"},  # gone after the first edit
    ]
    result = call(tools(root)["edit_file"], path="f.py", edits=edits)
    assert result.error_code == ErrorCode.NO_MATCH
    assert result.error.startswith(
        "edits[2] (edit 3 of 3, against the text the edits before it leave): old_text was "
        "not found in f.py."
    ), result.error
    assert result.error.endswith("Edits are applied in order; none was made, the file is unchanged")
    assert ".." not in result.error, result.error
    assert (root / "f.py").read_bytes() == before


def test_uniqueness_is_checked_against_the_text_so_far(root: Path) -> None:
    (root / "f.py").write_bytes(b"x = 1\n")
    edits = [
        {"old_text": "x = 1", "new_text": "x = 1\nx = 1"},
        {"old_text": "x = 1", "new_text": "x = 2"},
    ]
    result = call(tools(root)["edit_file"], path="f.py", edits=edits)
    assert result.error_code == ErrorCode.AMBIGUOUS_MATCH
    assert result.error.startswith(
        "edits[1] (edit 2 of 2, against the text the edits before it leave): old_text matches "
        "2 times in f.py"
    )
    assert (root / "f.py").read_bytes() == b"x = 1\n"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"old_text": "a", "new_text": "b", "edits": [{"old_text": "a", "new_text": "c"}]},
            "Give either edits or old_text/new_text, not both",
        ),
        ({}, "Give old_text and new_text, or an edits list of {old_text, new_text}"),
        ({"old_text": "a"}, "Give old_text and new_text, or an edits list of {old_text, new_text}"),
        (
            {"edits": [{"old_text": "a", "new_text": "b"}, {"old_text": "c", "new_text": "c"}]},
            "edits[1]: old_text and new_text are the same, so the edit would change nothing",
        ),
    ],
)
def test_the_two_forms_are_exclusive(root: Path, arguments: dict, message: str) -> None:
    (root / "f.py").write_bytes(b"a c\n")
    result = call(tools(root)["edit_file"], path="f.py", **arguments)
    assert (result.error_code, result.error) == (ErrorCode.INVALID_ARGUMENTS, message)
    assert (root / "f.py").read_bytes() == b"a c\n"


def test_an_empty_edits_list_is_refused_by_the_schema(root: Path) -> None:
    (root / "f.py").write_bytes(b"a\n")
    result = call(tools(root)["edit_file"], path="f.py", edits=[])
    assert result.error_code == ErrorCode.INVALID_ARGUMENTS
    assert "edits" in result.error
