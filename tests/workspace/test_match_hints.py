"""NO_MATCH messages a model can act on: the most similar lines quoted with invisible
characters escaped, and each invisible difference named in words."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.file_support import call, tools
from workspace_tools import ErrorCode, ToolError
from workspace_tools.text._match import replace_text

HEAD = (
    "old_text was not found in f.py. Read the file again with read_file and copy the text "
    "exactly, including whitespace and punctuation. "
)
NOTE = "\n(\\t, \\r and \\uXXXX stand for the invisible characters the file holds.)"
ADVICE = (
    "\nold_text must hold the same characters as the file: write them in the arguments as "
    "the JSON escapes shown (\\t, \\r, \\uXXXX)."
)
ONLY = "only in characters that are hard to see: "


def _refusal(text: str, old: str) -> str:
    with pytest.raises(ToolError) as caught:
        replace_text(text, old, "NEW", replace_all=False, newline="\n", path="f.py")
    assert caught.value.code is ErrorCode.NO_MATCH
    return caught.value.message


# (name, file text, old_text, the message after HEAD)
HINTS = [
    (
        "no_break_space",
        "x\u00a0= 1\ny = 2\n",
        "x = 1",
        "The most similar line is 1: 'x\\u00a0= 1'" + NOTE + "\nLine 1 differs from "
        "old_text's line 1 " + ONLY + "the file has a no-break space (\\u00a0) where "
        "old_text has a space." + ADVICE,
    ),
    (
        "no_break_space_in_old_text",
        "x = 1\n",
        "x\u00a0= 1",
        "The most similar line is 1: 'x = 1'\nLine 1 differs from old_text's line 1 "
        + ONLY
        + "the file has a space where old_text has a no-break space (\\u00a0)."
        + ADVICE,
    ),
    (
        "em_space",
        "total\u2003= 0\n",
        "total = 0",
        "The most similar line is 1: 'total\\u2003= 0'" + NOTE + "\nLine 1 differs from "
        "old_text's line 1 " + ONLY + "the file has an em space (\\u2003) where old_text "
        "has a space." + ADVICE,
    ),
    (
        "ideographic_space",
        "name =\u3000'a'\n",
        "name = 'a'",
        "The most similar line is 1: 'name =\\u3000'a''" + NOTE + "\nLine 1 differs from "
        "old_text's line 1 " + ONLY + "the file has an ideographic space (\\u3000) where "
        "old_text has a space." + ADVICE,
    ),
    (
        "zero_width_space",
        "a = 1\nb\u200b = 2\nc = 3\n",
        "a = 1\nb = 2\n",
        "The most similar lines are 1-2:\n1: 'a = 1'\n2: 'b\\u200b = 2'" + NOTE + "\nLine 2 "
        "differs from old_text's line 2 " + ONLY + "the file has a zero width space "
        "(\\u200b) that old_text lacks." + ADVICE,
    ),
    (
        "zero_width_joiner",
        "pair = 'x\u200dy'\n",
        "pair = 'xy'",
        "The most similar line is 1: 'pair = 'x\\u200dy''" + NOTE + "\nLine 1 differs from "
        "old_text's line 1 " + ONLY + "the file has a zero width joiner (\\u200d) that "
        "old_text lacks." + ADVICE,
    ),
    (
        "zero_width_non_joiner",
        "w = 'a\u200cb'\n",
        "w = 'ab'",
        "The most similar line is 1: 'w = 'a\\u200cb''" + NOTE + "\nLine 1 differs from "
        "old_text's line 1 " + ONLY + "the file has a zero width non-joiner (\\u200c) that "
        "old_text lacks." + ADVICE,
    ),
    (
        "byte_order_mark_inside",
        "x = 1\n\ufeffy = 2\n",
        "x = 1\ny = 2",
        "The most similar lines are 1-2:\n1: 'x = 1'\n2: '\\ufeffy = 2'" + NOTE + "\nLine 2 "
        "differs from old_text's line 2 " + ONLY + "at the start, the file has a byte order "
        "mark (\\ufeff) that old_text lacks." + ADVICE,
    ),
    (
        "word_joiner",
        "k = 'a\u2060b'\n",
        "k = 'ab'",
        "The most similar line is 1: 'k = 'a\\u2060b''" + NOTE + "\nLine 1 differs from "
        "old_text's line 1 " + ONLY + "the file has a word joiner (\\u2060) that old_text "
        "lacks." + ADVICE,
    ),
    (
        "file_in_nfd",
        "cafe\u0301 = 1\n",
        "caf\u00e9 = 1",
        "The most similar line is 1: 'cafe\\u0301 = 1'" + NOTE + "\nLine 1 differs from "
        "old_text's line 1 " + ONLY + "the file's line is NFD-normalized where old_text's "
        "is NFC (the file writes \u00e9 as e + U+0301, old_text as one character)." + ADVICE,
    ),
    (
        "old_text_in_nfd",
        "caf\u00e9 = 1\n",
        "cafe\u0301 = 1",
        "The most similar line is 1: 'caf\u00e9 = 1'\nLine 1 differs from old_text's line 1 "
        + ONLY
        + "old_text's line is NFD-normalized where the file's is NFC (old_text "
        "writes \u00e9 as e + U+0301, the file as one character)." + ADVICE,
    ),
    (
        "tab_for_four_spaces",
        "a = 1\t# count\n",
        "a = 1    # count",
        "The most similar line is 1: 'a = 1\\t# count'" + NOTE + "\nLine 1 differs from "
        "old_text's line 1 " + ONLY + "the file has a tab (\\t) where old_text has 4 "
        "spaces." + ADVICE,
    ),
    (
        "stray_cr_inside_a_line",
        "print('a')\r# done\n",
        "print('a') # done",
        "The most similar line is 1: 'print('a')\\r# done'" + NOTE + "\nLine 1 differs from "
        "old_text's line 1 " + ONLY + "the file has a carriage return (\\r) where old_text "
        "has a space." + ADVICE,
    ),
    (
        "stray_cr_before_lf",
        "x = 1\r\ny = 2\n",
        "x = 1\ny",
        "The most similar lines are 1-2:\n1: 'x = 1\\r'\n2: 'y = 2'" + NOTE + "\nLine 1 "
        "differs from old_text's line 1 " + ONLY + "at the end, the file has a carriage "
        "return (\\r) that old_text lacks." + ADVICE,
    ),
    (
        "trailing_whitespace",
        "x = 1  \ny = 2\n",
        "x = 1\ny",
        "The most similar lines are 1-2:\n1: 'x = 1  '\n2: 'y = 2'\nLine 1 differs from "
        "old_text's line 1 " + ONLY + "at the end, the file has 2 spaces that old_text "
        "lacks." + ADVICE,
    ),
    (
        "invisible_and_visible_differences",
        "x\u00a0= fetch(1)\n",
        "x = fetch(2)",
        "The most similar line is 1: 'x\\u00a0= fetch(1)'" + NOTE + "\nLine 1 differs from "
        "old_text's line 1: the file has 'x\\u00a0= fetch(1)' where old_text has "
        "'x = fetch(2)'; and in characters that are hard to see: the file has a no-break "
        "space (\\u00a0) where old_text has a space." + ADVICE,
    ),
    (
        "visible_difference_only",
        "alpha\nreturn fetch_user(uid)\n",
        "return fetch_users(uid)",
        "The most similar line is 2: 'return fetch_user(uid)'\nLine 2 differs from "
        "old_text's line 1: the file has 'return fetch_user(uid)' where old_text has "
        "'return fetch_users(uid)'.",
    ),
    (
        "backslashes_in_the_file_shown_as_they_are",
        'print("a\\tb")\n',
        'print("a\\tc")',
        "The most similar line is 1: 'print(\"a\\tb\")'\nLine 1 differs from old_text's "
        "line 1: the file has 'print(\"a\\tb\")' where old_text has 'print(\"a\\tc\")'.",
    ),
]


@pytest.mark.parametrize(
    ("text", "old", "expected"),
    [case[1:] for case in HINTS],
    ids=[case[0] for case in HINTS],
)
def test_no_match_hint_names_invisible_differences(text: str, old: str, expected: str) -> None:
    assert _refusal(text, old) == HEAD + expected


def test_nothing_similar_gives_no_quote() -> None:
    assert _refusal("alpha\nbeta\n", "completely different") == HEAD.removesuffix(". ")


MINIFIED = ";".join(f"var a{i}=function(x){{return x+{i}}}" for i in range(20_000))


def test_a_miss_inside_a_minified_line_says_where_it_stops_matching() -> None:
    """One line of 757,779 characters: no line is similar to old_text as a whole, and
    read_file shows only the line's first 2,000 characters, so the refusal says where in
    the line old_text's start is found and what the file has where it stops matching."""
    message = _refusal(MINIFIED, "var a15000=function(x){return x+15001}")
    assert message == HEAD + (
        "Line 1 is 757,779 characters long; old_text's first 36 characters are found in "
        "it at column 562,781, and then the file has '…ion(x){return x+15000};var "
        "a15001=functi…' where old_text has '…ion(x){return x+15001}'. grep shows the "
        "text around a match in a long line."
    )
    at_the_end = _refusal(MINIFIED, "var a19999=function(x){return x+19999};var")
    assert at_the_end == HEAD + (
        "Line 1 is 757,779 characters long; old_text's first 38 characters are found in "
        "it at column 757,742, and then the line ends where old_text has '…n(x){return "
        "x+19999};var'. grep shows the text around a match in a long line."
    )


def test_a_miss_inside_a_long_line_then_edits_with_the_file_text(tmp_path: Path) -> None:
    (tmp_path / "f.js").write_text(MINIFIED)
    edit = tools(tmp_path)["edit_file"]
    refused = call(edit, path="f.js", old_text="var a7=function(x){return x+8}", new_text="z")
    assert refused.error_code is ErrorCode.NO_MATCH
    assert "the file has '…unction(x){return x+7};var a8=function(x…'" in refused.error
    done = call(edit, path="f.js", old_text="var a7=function(x){return x+7}", new_text="z")
    assert (done.error, done.content["match"]) == (None, "exact")


def test_a_short_start_in_a_long_line_gives_no_place() -> None:
    # "var a1" is all that matches: too little to name a place.
    assert _refusal(MINIFIED, "var a1 = function") == HEAD.removesuffix(". ")


NUMBERED = (
    "\nold_text's lines start with the line numbers read_file shows (a number and a tab): "
    "leave them out, they are not in the file."
)


def test_old_text_copied_with_read_files_line_numbers_is_told_to_leave_them_out() -> None:
    # The most common copying slip: the "cat -n" prefix of read_file's lines.
    numbered = _refusal("a = 0\nx = 1\ny = 2\n", "     2\tx = 1\n     3\ty = 2")
    assert numbered == HEAD + (
        "The most similar lines are 2-3:\n2: 'x = 1'\n3: 'y = 2'\nLine 2 differs from "
        "old_text's line 1: the file has 'x = 1' where old_text has '2\\tx = 1'.\nLine 3 "
        "differs from old_text's line 2: the file has 'y = 2' where old_text has "
        "'3\\ty = 2'." + NUMBERED
    )
    assert _refusal("z = 9\n", "7\tz = 8\n8\tz = 9") == HEAD.removesuffix(". ") + NUMBERED
    # Tab-separated data that starts with numbers: without them, no line of the file.
    assert _refusal("1\tAlice\n2\tBob\n", "3\tCarol") == HEAD.removesuffix(". ")


def test_relative_indentation_in_tabs_against_spaces_is_named() -> None:
    message = _refusal(
        "def f():\n\tif x:\n\t\treturn 1\n", "def f():\n    if x:\n        return 1\n"
    )
    assert message == (
        "old_text was not found in f.py exactly. With indentation ignored it matches lines "
        "1-3, but not with the same indentation structure, and an edit never changes the "
        "structure of the code. Past the indentation its lines share, the file indents line "
        "2 by a tab (\\t) where old_text indents its line 2 by 4 spaces. Copy old_text with "
        "the file's indentation:\n1: 'def f():'\n2: '\\tif x:'\n3: '\\t\\treturn 1'" + NOTE
    )


def test_new_text_left_of_the_base_is_named() -> None:
    with pytest.raises(ToolError) as caught:
        replace_text(
            "class A:\n    def f(self):\n        return 1\n",
            "  def f(self):\n      return 1",
            "  def f(self):\n      return 1\ndef g():\n  pass",
            replace_all=False,
            newline="\n",
            path="f.py",
        )
    assert caught.value.message == (
        "old_text was not found in f.py exactly. With indentation ignored it matches lines "
        "2-3, where old_text's lines start with 2 spaces and the file's with 4 spaces; "
        "new_text's line 3 does not start with 2 spaces, so its depth in the file cannot be "
        "told. Copy old_text with the file's indentation and indent new_text to match:\n"
        "2: '    def f(self):'\n3: '        return 1'"
    )


def test_old_text_found_inside_the_indentation_is_not_called_absent() -> None:
    """requests' tests/test_utils.py: old_text begins 7 spaces into a 12-space indentation;
    it is in the file exactly, and the refusal says so rather than 'not found'."""
    with pytest.raises(ToolError) as caught:
        replace_text(
            'def f():\n    x = [\n            ("rb", 0),\n    ]\n',
            '       ("rb", 0),\n',
            '("rb", 1),\n',
            replace_all=False,
            newline="\n",
            path="f.py",
        )
    assert caught.value.code is ErrorCode.NO_MATCH
    assert caught.value.message == (
        "old_text is in f.py at line 3, but it starts inside the line's indentation, where "
        "old_text's lines start with 7 spaces and the file's with 12 spaces; new_text's line "
        "1 does not start with 7 spaces, so its depth in the file cannot be told. Copy "
        "old_text with the file's indentation and indent new_text to match:\n"
        "3: '            (\"rb\", 0),'"
    )


def test_the_model_reads_the_hint_and_can_act_on_it(tmp_path: Path) -> None:
    """Through edit_file: the refusal names the no-break space; old_text holding it then
    matches exactly."""
    (tmp_path / "f.py").write_bytes("limit\u00a0= 10\n".encode())
    edit = tools(tmp_path)["edit_file"]
    refused = call(edit, path="f.py", old_text="limit = 10", new_text="limit = 20")
    assert refused.error_code is ErrorCode.NO_MATCH
    assert "the file has a no-break space (\\u00a0) where old_text has a space" in refused.error
    done = call(edit, path="f.py", old_text="limit\u00a0= 10", new_text="limit = 20")
    assert (done.error, done.details.match) == (None, "exact")
    assert (tmp_path / "f.py").read_bytes() == b"limit = 20\n"


def _joined(line: int, first: int, last: int, what: str) -> str:
    return (
        f"\nLine {line} holds old_text's lines {first}-{last} as one line: it joins them with "
        f"{what}, which the tools do not count as a line break (only \\n is one); old_text "
        "must hold the same character there, not a line break."
    )


# (name, file text, old_text, the message after HEAD): every differing line of the quoted
# block is named, and lines a character that is no line break for the tools joins.
EVERY_LINE = [
    (
        "lone_cr_joins_two_lines",
        "a = 1\rb = 2\n",
        "a = 1\nb = 2",
        "The most similar line is 1: 'a = 1\\rb = 2'" + NOTE
        + _joined(1, 1, 2, "a carriage return (\\r)") + ADVICE,
    ),
    (
        "lone_cr_joins_two_lines_after_a_line",
        "x = 0\na = 1\rb = 2\n",
        "x = 0\na = 1\nb = 2",
        "The most similar lines are 1-2:\n1: 'x = 0'\n2: 'a = 1\\rb = 2'" + NOTE
        + _joined(2, 2, 3, "a carriage return (\\r)") + ADVICE,
    ),
    (
        "lone_cr_join_and_a_visible_difference",
        "a = 1\rb = 3\n",
        "a = 1\nb = 2",
        "The most similar line is 1: 'a = 1\\rb = 3'" + NOTE
        + _joined(1, 1, 2, "a carriage return (\\r)")
        + "\nPart 2 of line 1 differs from old_text's line 2: the file has 'b = 3' where "
        "old_text has 'b = 2'." + ADVICE,
    ),
    (
        "line_separator_joins_two_lines",
        "x = [\u2028    1,\n]\n",
        "x = [\n    1,\n]",
        "The most similar lines are 1-2:\n1: 'x = [\\u2028    1,'\n2: ']'" + NOTE
        + _joined(1, 1, 2, "a line separator (\\u2028)") + ADVICE,
    ),
    (
        "invisible_difference_and_a_word_on_the_next_line",
        "x = 0\na = 1\r\nc = 3\n",
        "a = 1\nc = 4",
        "The most similar lines are 2-3:\n2: 'a = 1\\r'\n3: 'c = 3'" + NOTE
        + "\nLine 2 differs from old_text's line 1 " + ONLY + "at the end, the file has a "
        "carriage return (\\r) that old_text lacks.\nLine 3 differs from old_text's line 2: "
        "the file has 'c = 3' where old_text has 'c = 4'." + ADVICE,
    ),
    (
        "two_lines_with_visible_differences",
        "def f(a, b):\n    total = a + b\n    return total\n",
        "def f(a, c):\n    total = a + b\n    return totals",
        "The most similar lines are 1-3:\n1: 'def f(a, b):'\n2: '    total = a + b'\n"
        "3: '    return total'\nLine 1 differs from old_text's line 1: the file has "
        "'def f(a, b):' where old_text has 'def f(a, c):'.\nLine 3 differs from old_text's "
        "line 3: the file has 'return total' where old_text has 'return totals'.",
    ),
    (
        "a_long_line_is_quoted_around_its_difference",
        "x = 0\ny = " + "q" * 100 + "1 + z\n",
        "x = 0\ny = " + "q" * 100 + "2 + z",
        "The most similar lines are 1-2:\n1: 'x = 0'\n2: 'y = " + "q" * 100 + "1 + z'\n"
        "Line 2 differs from old_text's line 2: the file has '…" + "q" * 20 + "1 + z' where "
        "old_text has '…" + "q" * 20 + "2 + z'.",
    ),
    (
        "a_cr_inside_a_line_where_old_text_has_a_space_stays_one_line",
        "print('a')\r# done\n",
        "print('a') # done",
        "The most similar line is 1: 'print('a')\\r# done'" + NOTE + "\nLine 1 differs from "
        "old_text's line 1 " + ONLY + "the file has a carriage return (\\r) where old_text "
        "has a space." + ADVICE,
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "old", "expected"),
    [case[1:] for case in EVERY_LINE],
    ids=[case[0] for case in EVERY_LINE],
)
def test_no_match_hint_names_every_differing_line(text: str, old: str, expected: str) -> None:
    assert _refusal(text, old) == HEAD + expected


def test_the_model_copies_a_lone_cr_the_hint_names(tmp_path: Path) -> None:
    (tmp_path / "r.py").write_bytes(b"a = 1\rb = 2\n")
    edit = tools(tmp_path)["edit_file"]
    refused = call(edit, path="r.py", old_text="a = 1\nb = 2", new_text="a = 1\nb = 3")
    assert refused.error_code is ErrorCode.NO_MATCH
    assert "joins them with a carriage return (\\r)" in refused.error
    done = call(edit, path="r.py", old_text="a = 1\rb = 2", new_text="a = 1\nb = 3")
    assert (done.error, done.details.match) == (None, "exact")
    assert (tmp_path / "r.py").read_bytes() == b"a = 1\nb = 3\n"


STRUCTURE = (
    "old_text was not found in f.py exactly. With indentation ignored it matches lines "
    "{lines}, but not with the same indentation structure, and an edit never changes the "
    "structure of the code. {why} Copy old_text with the file's indentation:\n{quoted}"
)


@pytest.mark.parametrize(
    ("text", "old", "lines", "why", "quoted"),
    [
        pytest.param(
            "def f(x):\n        if x:\n\t    y = 1\n",
            "        if x:\n            y = 1",
            "2-3",
            "The file indents line 3 by a tab (\\t) and 4 spaces where the lines around it "
            "share 8 spaces; old_text indents its line 2 by 12 spaces.",
            "2: '        if x:'\n3: '\\t    y = 1'" + NOTE,
            id="tab_among_spaces_names_its_own_line",
        ),
        pytest.param(
            "    if x:\n        y = 1\n\tz = 2\n",
            "if x:\n    y = 1\nz = 2",
            "1-3",
            "The file indents line 3 by a tab (\\t) where the lines around it share 4 "
            "spaces; old_text indents its line 3 by nothing.",
            "1: '    if x:'\n2: '        y = 1'\n3: '\\tz = 2'" + NOTE,
            id="no_shared_indentation",
        ),
        pytest.param(
            "def f(x):\n    if x:\n        y = 1\n    return y\n",
            "if x:\ny = 1",
            "2-3",
            "Past the indentation its lines share, the file indents line 3 by 4 spaces where "
            "old_text indents its line 2 by nothing.",
            "2: '    if x:'\n3: '        y = 1'",
            id="flattened_block",
        ),
    ],
)
def test_a_structure_refusal_names_the_line_that_breaks_it(
    text: str, old: str, lines: str, why: str, quoted: str
) -> None:
    expected = STRUCTURE.format(lines=lines, why=why, quoted=quoted)
    assert _refusal(text, old) == expected


def test_a_file_too_long_to_search_for_similar_lines_says_to_grep() -> None:
    text = "".join(f"value_{n} = {n}\n" for n in range(20_001))
    with pytest.raises(ToolError) as raised:
        replace_text(text, "value_7 = 8", "x", replace_all=False, newline="\n", path="f.py")
    assert raised.value.code is ErrorCode.NO_MATCH
    assert raised.value.message == (
        "old_text was not found in f.py. Read the file again with read_file and copy the text "
        "exactly, including whitespace and punctuation. f.py has 20,001 lines, too many to "
        "look for the most similar ones: grep for a distinctive part of old_text to find "
        "where it is"
    )


def test_a_place_in_a_long_line_of_a_file_too_long_to_search_is_said_once() -> None:
    long = "x = " + "1 + " * 30 + "1"
    text = "".join(f"value_{n} = {n}\n" for n in range(20_001)) + long + "\n"
    with pytest.raises(ToolError) as raised:
        replace_text(text, "x = 1 + 1 + 2", "y", replace_all=False, newline="\n", path="f.py")
    message = raised.value.message
    assert "Line 20002 is 125 characters long" in message, message
    assert ".." not in message and "too many" not in message, message
