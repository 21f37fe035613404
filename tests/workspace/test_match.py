from __future__ import annotations

import pytest

from workspace_tools import ErrorCode, ToolError
from workspace_tools.text._match import replace_text


def _replace(text: str, old: str, new: str, newline: str = "\n", replace_all: bool = False):
    return replace_text(text, old, new, replace_all=replace_all, newline=newline, path="f")


@pytest.mark.parametrize(
    ("text", "old", "new", "newline", "expected", "kind"),
    [
        ("a\r\nb\r\n", "a\nb", "c\nd", "\r\n", "c\r\nd\r\n", "exact"),
        ("a\r\nb\nc\n", "a\nb\n", "x\n", "\n", "x\r\nc\n", "line_endings"),
        ("    if x:  \n        go()\n", "if x:\n    go()\n", "if y:\n    stop()\n", "\n",
         "    if y:\n        stop()\n", "indentation"),
        ("\tif x:\n\t\tgo()\n", "if x:\n\tgo()", "if x:\n\tstop()", "\n",
         "\tif x:\n\t\tstop()\n", "indentation"),
        ("say(‘hi’)\n", "say('hi')", "say('bye')", "\n", "say('bye')\n", "quotes"),
        ("x = 1\ny = 2", "y = 2  \n", "y = 3\n", "\n", "x = 1\ny = 3", "trailing_whitespace"),
        ("keep  \nx\n", "keep\n", "kept\n", "\n", "kept\nx\n", "trailing_whitespace"),
    ],
    ids=[
        "newline_translated",
        "mixed_endings",
        "indent_added",
        "tabs_dedented",
        "typographic_quotes",
        "no_final_newline",
        "range_only",
    ],
)  # fmt: skip
def test_fallbacks(text: str, old: str, new: str, newline: str, expected: str, kind: str) -> None:
    result = _replace(text, old, new, newline)
    assert (result.text, result.replacements, result.match) == (expected, 1, kind)


@pytest.mark.parametrize(
    ("text", "old"),
    [
        ("load_user(uid)\n", "load_tag(uid)"),
        ("value = 1\n", "valve = 1"),
        ("x = 1\n", "x = 1;"),
        ("a b\n", "a  b"),
        ("go()", "  \n"),
        ("it's\n", "it’ll"),
    ],
    ids=["identifier", "one_letter", "punctuation", "inner_whitespace", "blank", "quote_word"],
)
def test_fallback_never_changes_words(text: str, old: str) -> None:
    with pytest.raises(ToolError) as caught:
        _replace(text, old, "y")
    assert caught.value.code is ErrorCode.NO_MATCH


def test_no_match_names_the_most_similar_line() -> None:
    with pytest.raises(ToolError) as caught:
        _replace("alpha\nreturn fetch_user(uid)\n", "return fetch_users(uid)", "x")
    assert caught.value.message == (
        "old_text was not found in f. Read the file again with read_file and copy the text "
        "exactly, including whitespace and punctuation. The most similar line is 2: "
        "'return fetch_user(uid)'\nLine 2 differs from old_text's line 1: the file has "
        "'return fetch_user(uid)' where old_text has 'return fetch_users(uid)'."
    )


def test_replacement_is_literal() -> None:
    result = _replace("a.b\n", ".", r"\g<0>$&\1")
    assert result.text == "a\\g<0>$&\\1b\n"


@pytest.mark.parametrize(
    ("text", "old", "expected"),
    [
        # Part of a line deleted: only the match goes, the rest keeps its indentation.
        ("a\n     pass    pass\nb\n", "  pass    ", "a\n   pass\nb\n"),
        (
            "def f():\n        x = compute(a)  # note\n",
            "    x = compute(a)",
            "def f():\n      # note\n",
        ),
        # The whole of a line's text deleted: its indentation goes with it; with its LF,
        # the line goes.
        ("def f():\n        x = 1\n    y\n", "    x = 1", "def f():\n\n    y\n"),
        ("def f():\n        x = 1\n    y\n", "    x = 1\n", "def f():\n    y\n"),
    ],
)
def test_an_empty_new_text_deletes_part_of_a_line_literally(
    text: str, old: str, expected: str
) -> None:
    result = replace_text(text, old, "", replace_all=False, newline="\n", path="f")
    assert result.text == expected
