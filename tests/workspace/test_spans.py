"""Edits' spans, composed, say where a text changed, and a diff told them compares only the
lines around each: it applies (``git apply``), counts what unidiff counts, and never
sequence-matches the stretch between two edits far apart."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.file_support import assert_diff_reproduces, call, tools
from workspace_tools.text import _diff
from workspace_tools.text._diff import unified_diff
from workspace_tools.text._spans import Span, compose


@st.composite
def replacements(draw: st.DrawFn, text: str) -> tuple[str, list[Span]]:
    """An edit of ``text``: some ranges of it, apart or touching, each replaced; the new
    text and the edit's spans."""
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), min_size=2, max_size=6)))
    pieces = [(cuts[i], cuts[i + 1]) for i in range(0, len(cuts) - 1, 2)]
    out, spans, at, grown = [], [], 0, 0
    for begin, end in pieces:
        written = draw(st.text(alphabet="ab\n", max_size=4))
        out += [text[at:begin], written]
        spans.append((begin, end, begin + grown, begin + grown + len(written)))
        grown += len(written) - (end - begin)
        at = end
    out.append(text[at:])
    return "".join(out), spans


@settings(max_examples=600, deadline=None)
@given(data=st.data(), first=st.text(alphabet="ab\n", max_size=30))
def test_composed_spans_map_the_first_text_to_the_last(data: st.DataObject, first: str) -> None:
    text, spans = first, []
    for _ in range(data.draw(st.integers(1, 4))):
        text, edit = data.draw(replacements(text))
        spans = compose(spans, edit)
    # In order and apart; outside them both texts are the same; spliced, they make the last.
    old_at = new_at = 0
    rebuilt = []
    for index, (old_start, old_end, new_start, new_end) in enumerate(spans):
        assert old_start <= old_end and new_start <= new_end, spans
        if index:
            assert old_start > old_at and new_start > new_at, spans
        assert first[old_at:old_start] == text[new_at:new_start], (spans, first, text)
        rebuilt += [first[old_at:old_start], text[new_start:new_end]]
        old_at, new_at = old_end, new_end
    assert first[old_at:] == text[new_at:], (spans, first, text)
    assert "".join(rebuilt) + first[old_at:] == text


def test_compose_joins_what_touches_and_keeps_apart_what_does_not() -> None:
    # "0123456789": 2 becomes "xy", then (in "01xy3456789") 4 becomes "" and 8 "z".
    assert compose([(2, 3, 2, 4)], [(4, 5, 4, 4), (8, 9, 8, 9)]) == [(2, 4, 2, 4), (7, 8, 7, 8)]
    assert compose([], [(1, 1, 1, 3)]) == [(1, 1, 1, 3)]
    assert compose([(1, 1, 1, 3)], []) == [(1, 1, 1, 3)]


LINE = st.sampled_from(["", "a", "b", "x = 1", "    pass"])


@st.composite
def line_edits(draw: st.DrawFn) -> tuple[str, str, list[Span]]:
    """A text of 20-80 repeated-looking lines, and 1-3 edits of its lines made in turn
    (a range of lines replaced by others, maybe none): the first text, the last, and the
    edits' spans composed."""
    lines = draw(st.lists(LINE, min_size=20, max_size=80))
    final = draw(st.booleans())
    first = "\n".join(lines) + ("\n" if final else "")
    text, spans = first, []
    for _ in range(draw(st.integers(1, 3))):
        starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
        begin = draw(st.sampled_from(starts))
        end = draw(st.sampled_from([s for s in starts if s >= begin] + [len(text)]))
        written = "".join(line + "\n" for line in draw(st.lists(LINE, max_size=3)))
        if end == len(text) and not text.endswith("\n"):
            written = written.removesuffix("\n")
        if draw(st.integers(0, 4)) == 0:
            written = text[begin:end]  # it writes what was there: a span with no change
        spans = compose(spans, [(begin, end, begin, begin + len(written))])
        text = text[:begin] + written + text[end:]
    return first, text, spans


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=line_edits())
def test_a_diff_told_the_spans_applies_and_counts_right(
    tmp_path: Path, case: tuple[str, str, list[Span]]
) -> None:
    first, last, spans = case
    diff = unified_diff(first, last, "f.txt", spans=spans)
    details = SimpleNamespace(
        diff=diff.diff, additions=diff.additions, deletions=diff.deletions, encoding="utf-8"
    )
    assert_diff_reproduces(tmp_path / "apply", "f.txt", first.encode(), last.encode(), details)
    if len(spans) == 1:
        assert diff == unified_diff(first, last, "f.txt")  # one window: the whole diff


def _applied(old: str, diff: str) -> str:
    """``diff`` (one file's unified diff) applied to ``old``, each context and removed line
    checked against it: a small ``patch`` for many examples, where ``git apply`` is slow.
    As git places them, a hunk with no context line before its first change must start the
    file, and one with none after its last change must end it; each hunk's new start must
    be where its lines start in the new text."""
    old_lines = [line + "\n" for line in old.split("\n")]
    old_lines[-1] = old_lines[-1].removesuffix("\n")
    if not old_lines[-1]:
        old_lines.pop()
    lines = [line + "\n" for line in diff.split("\n")[3:-1]]  # after the header
    out: list[str] = []
    at = index = 0
    while index < len(lines):
        header = re.fullmatch(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@\n", lines[index])
        assert header, lines[index]
        first = int(header[1]) - (header[2] != "0")  # a count of 0 names the line before
        assert first >= at, (first, at)
        out += old_lines[at:first]
        assert int(header[3]) - (header[4] != "0") == len(out), (lines[index], len(out))
        at = first
        index += 1
        assert lines[index][0] == " " or first == 0, lines[index]
        while index < len(lines) and not lines[index].startswith("@@ "):
            tag, body = lines[index][0], lines[index][1:]
            if index + 1 < len(lines) and lines[index + 1].startswith("\\"):
                body = body.removesuffix("\n")  # "\ No newline at end of file" follows
                index += 1
            if tag in " -":
                assert old_lines[at] == body, (at, old_lines[at], body)
                at += 1
            if tag in " +":
                out.append(body)
            index += 1
        last = lines[index - 1] if not lines[index - 1].startswith("\\") else lines[index - 2]
        assert last[0] == " " or at == len(old_lines), (last, at, len(old_lines))
    return "".join(out + old_lines[at:])


@settings(max_examples=1000, deadline=None)
@given(case=line_edits())
def test_a_diff_told_the_spans_makes_the_new_text(case: tuple[str, str, list[Span]]) -> None:
    first, last, spans = case
    diff = unified_diff(first, last, "f.txt", spans=spans)
    assert _applied(first, diff.diff) == last, diff.diff
    body = diff.diff.split("\n")[3:]
    assert (diff.additions, diff.deletions) == (
        sum(line.startswith("+") for line in body),
        sum(line.startswith("-") for line in body),
    )


def _numbered(count: int) -> str:
    return "".join(f"line {i}\n" for i in range(1, count + 1))


def _hunk(changed: int, old: str, new: str) -> str:
    """The hunk of line ``changed`` of a numbered file becoming ``new`` (``old`` before)."""
    context = [f" line {i}\n" for i in range(changed - 3, changed)]
    after = [f" line {i}\n" for i in range(changed + 1, changed + 4)]
    return (
        f"@@ -{changed - 3},7 +{changed - 3},7 @@\n"
        + "".join(context)
        + f"-{old}\n+{new}\n"
        + "".join(after)
    )


def _edited(root: Path, text: str, edits: list[dict[str, str]], encoding: str = "utf-8") -> Any:
    """``edit_file`` of an ``edits`` list on ``f.txt`` holding ``text`` in ``encoding`` (UTF-8
    takes the byte path, ``utf-8-sig``, a BOM, the text path): the call's result, checked to
    have written each edit in turn, once."""
    (root / "f.txt").write_bytes(text.encode(encoding))
    result = call(tools(root)["edit_file"], path="f.txt", edits=edits)
    assert result.error is None, result.error
    for edit in edits:
        text = text.replace(edit["old_text"], edit["new_text"], 1)
    assert (root / "f.txt").read_bytes() == text.encode(encoding)
    return result


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig"])
def test_an_edits_list_far_apart_is_diffed_around_each_edit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, encoding: str
) -> None:
    # Two edits 9,990 lines apart in a 10,000-line file: the diff is their two hunks, and
    # no sequence match is given more than the edits' own lines (it was given the 9,990
    # between them). UTF-8 takes the byte path, a BOM the text path.
    matched: list[int] = []

    class Recording(difflib.SequenceMatcher[str]):
        def __init__(self, isjunk: Any, a: Any, b: Any) -> None:
            matched.append(max(len(a), len(b)))
            super().__init__(isjunk, a, b)

    monkeypatch.setattr(_diff.difflib, "SequenceMatcher", Recording)
    result = _edited(
        tmp_path,
        _numbered(10_000),
        [
            {"old_text": "line 5\n", "new_text": "line five\n"},
            # A swap of two lines: each is both removed and added, so they are matched.
            {"old_text": "line 9995\nline 9996\n", "new_text": "line 9996\nline 9995\n"},
        ],
        encoding,
    )
    assert result.details.diff == (
        "diff --git a/f.txt b/f.txt\n--- a/f.txt\n+++ b/f.txt\n"
        + _hunk(5, "line 5", "line five")
        + "@@ -9992,8 +9992,8 @@\n line 9992\n line 9993\n line 9994\n"
        + "+line 9996\n line 9995\n-line 9996\n line 9997\n line 9998\n line 9999\n"
    ), result.details.diff
    assert (result.details.additions, result.details.deletions) == (2, 2)
    assert matched and max(matched) == 2, matched


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig"])
def test_edits_that_undo_each_other_far_from_another_leave_no_hunk(
    tmp_path: Path, encoding: str
) -> None:
    # The last line (no final newline) changed and changed back: its window has no change
    # (it failed with "list index out of range" from the diff), and the hunk is the other.
    result = _edited(
        tmp_path,
        _numbered(40).removesuffix("\n"),
        [
            {"old_text": "line 40", "new_text": "X"},
            {"old_text": "X", "new_text": "line 40"},
            {"old_text": "line 5\n", "new_text": "line five\n"},
        ],
        encoding,
    )
    assert result.details.diff == (
        "diff --git a/f.txt b/f.txt\n--- a/f.txt\n+++ b/f.txt\n" + _hunk(5, "line 5", "line five")
    ), result.details.diff


def test_hunks_below_a_change_of_the_line_count_are_numbered_in_the_new_file(
    tmp_path: Path,
) -> None:
    # The first edit removes two lines: the second's hunk starts two lines higher in the
    # new file (it said the old file's line, and git apply took it all the same).
    result = _edited(
        tmp_path,
        _numbered(60),
        [
            {"old_text": "line 5\nline 6\nline 7\n", "new_text": "line five\n"},
            {"old_text": "line 50\n", "new_text": "line fifty\nline fifty-one\n"},
        ],
    )
    assert result.details.diff == (
        "diff --git a/f.txt b/f.txt\n--- a/f.txt\n+++ b/f.txt\n"
        "@@ -2,9 +2,7 @@\n line 2\n line 3\n line 4\n-line 5\n-line 6\n-line 7\n+line five\n"
        " line 8\n line 9\n line 10\n"
        "@@ -47,7 +45,8 @@\n line 47\n line 48\n line 49\n-line 50\n+line fifty\n"
        "+line fifty-one\n line 51\n line 52\n line 53\n"
    ), result.details.diff
    patch = (
        "*** Begin Patch\n*** Update File: f.txt\n@@\n line 4\n-line five\n+line 5\n"
        "+line 6\n+line 7\n line 8\n@@\n line 49\n-line fifty\n-line fifty-one\n+line 50\n"
        " line 51\n*** End Patch\n"
    )
    back = call(tools(tmp_path)["apply_patch"], patch=patch)
    assert back.error is None, back.error
    assert (tmp_path / "f.txt").read_text() == _numbered(60)
    assert "@@ -2,7 +2,9 @@" in back.details.files[0].diff, back.details
    assert "@@ -45,8 +47,7 @@" in back.details.files[0].diff, back.details


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig"])
def test_a_change_sliding_to_the_end_of_a_run_keeps_its_trailing_context(
    tmp_path: Path, encoding: str
) -> None:
    # A "}" added after the first of seven: as a diff sees it, after the last of them,
    # past the lines the byte path's window held around the edit, whose own window ended
    # there and took that end for the file's: the hunk had no trailing context and git
    # apply refused it. UTF-8 takes the byte path, a BOM the text path.
    text = _numbered(30) + "end\n" + "}\n" * 7 + "".join(f"after {i}\n" for i in range(5))
    edits = [
        {"old_text": "line 3\n", "new_text": "line three\n"},
        {"old_text": "end\n}\n", "new_text": "end\n}\n}\n"},
    ]
    result = _edited(tmp_path, text, edits, encoding)
    new = text.replace("line 3\n", "line three\n").replace("end\n}\n", "end\n}\n}\n")
    assert result.details.diff.split("@@ -36", 1)[1] == (
        ",6 +36,7 @@\n }\n }\n }\n+}\n after 0\n after 1\n after 2\n"
    ), result.details.diff
    assert_diff_reproduces(
        tmp_path / "apply", "f.txt", text.encode(encoding), new.encode(encoding), result.details
    )
