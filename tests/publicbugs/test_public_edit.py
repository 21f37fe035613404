"""edit_file and the Anthropic text editor against public reports on peers' edit tools."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.file_support import call, tools
from workspace_tools import ErrorCode
from workspace_tools.adapters.anthropic_text_editor import text_editor_tool


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "w"
    path.mkdir()
    return path


@pytest.mark.parametrize(
    ("content", "old", "lines"),
    [
        ("foo\nfoo\nfoo\n", "foo\nfoo\n", [1, 2]),
        ("x = aaa\n", "aa", [1, 1]),
        ("a\r\nb\r\na\r\nb\r\na\r\n", "a\nb\na", [1, 3]),
    ],
)
def test_overlapping_occurrences_are_ambiguous(
    root: Path, content: str, old: str, lines: list[int]
) -> None:
    """https://github.com/earendil-works/pi/issues/9697: an old text matching two
    overlapping places was taken at the first one and the wrong block changed; it is
    AMBIGUOUS_MATCH naming both lines, and the file keeps its bytes."""
    (root / "f.txt").write_bytes(content.encode())
    result = call(tools(root)["edit_file"], path="f.txt", old_text=old, new_text="R")
    assert result.error_code is ErrorCode.AMBIGUOUS_MATCH, result.error
    shown = ", ".join(map(str, lines))
    assert result.error == (
        f"old_text matches 2 times in f.txt (lines {shown}); include more surrounding "
        "lines to make it unique, or set replace_all to replace every one"
    )
    assert (root / "f.txt").read_bytes() == content.encode()
    editor = text_editor_tool(root)
    replaced = call(editor, command="str_replace", path="f.txt", old_str=old, new_str="R")
    assert replaced.error_code is ErrorCode.AMBIGUOUS_MATCH, replaced.error
    assert (root / "f.txt").read_bytes() == content.encode()


def test_replace_all_replaces_left_to_right_without_overlap(root: Path) -> None:
    """https://github.com/earendil-works/pi/issues/9697: with replace_all the model asked
    for every occurrence; they are taken as str.replace and sed take them."""
    (root / "f.txt").write_text("foo\nfoo\nfoo\n")
    result = call(
        tools(root)["edit_file"], path="f.txt", old_text="foo\nfoo\n", new_text="R\n",
        replace_all=True,
    )  # fmt: skip
    assert result.error is None, result.error
    assert (root / "f.txt").read_text() == "R\nfoo\n"


def test_typographic_quotes_in_new_text_are_written_as_given(root: Path) -> None:
    """https://github.com/anthropics/claude-code/issues/26141: curly quotes in the new text
    came out straight when old text matched by normalisation."""
    (root / "q.md").write_text("She said, \u201cHello.\u201d\n")
    edit_file = tools(root)["edit_file"]
    result = call(
        edit_file, path="q.md", old_text='She said, "Hello."', new_text="She said, \u201cBye.\u201d"
    )
    assert result.error is None, result.error
    assert result.details.match == "quotes"
    assert (root / "q.md").read_text() == "She said, \u201cBye.\u201d\n"


def test_escape_bytes_and_cjk_outside_the_edit_are_untouched(root: Path) -> None:
    """https://github.com/cline/cline/issues/3272: a line holding ESC (0x1B) and non-ASCII
    text was corrupted by an edit elsewhere in the file."""
    before = 'echo "\x1b[1m\u3042\u308a\u304c\u3068\u3046\x1b[0m"\necho "Danke sch\u00f6n"\n'
    (root / "t.sh").write_bytes(before.encode())
    result = call(tools(root)["edit_file"], path="t.sh", old_text="Danke", new_text="Vielen Dank")
    assert result.error is None, result.error
    assert (root / "t.sh").read_bytes() == before.replace("Danke", "Vielen Dank").encode()


def test_a_failed_edit_leaves_the_file_as_it_was(root: Path) -> None:
    """https://github.com/cline/cline/issues/9555: a search block that did not match left
    the file empty."""
    (root / "Gemfile").write_bytes(b"source 'https://rubygems.org'\r\ngem 'rails'\r\n")
    result = call(tools(root)["edit_file"], path="Gemfile", old_text="gem 'rack'", new_text="x")
    assert result.error_code is ErrorCode.NO_MATCH
    assert (root / "Gemfile").read_bytes() == b"source 'https://rubygems.org'\r\ngem 'rails'\r\n"
    assert sorted(p.name for p in root.iterdir()) == ["Gemfile"]


def test_an_edit_adds_no_stray_blank_line(root: Path) -> None:
    """https://github.com/cline/cline/issues/11274: every replacement added a blank line
    after the replaced block."""
    (root / "m.py").write_text("try:\n    return 1\nexcept E:\n    pass\n")
    result = call(
        tools(root)["edit_file"], path="m.py", old_text="    return 1", new_text="    return 2"
    )
    assert result.error is None, result.error
    assert (root / "m.py").read_text() == "try:\n    return 2\nexcept E:\n    pass\n"
    assert (result.details.additions, result.details.deletions) == (1, 1)


def test_text_editor_insert_goes_right_after_the_named_line(root: Path) -> None:
    """https://github.com/OpenHands/OpenHands/issues/7724: insert_line among blank lines
    landed one line further down than asked."""
    (root / "i.py").write_text("a\nb\n\n\n\nc\n")
    editor = text_editor_tool(root)
    result = call(editor, command="insert", path="i.py", insert_line=3, insert_text="X")
    assert result.error is None, result.error
    assert (root / "i.py").read_text() == "a\nb\n\nX\n\n\nc\n"
