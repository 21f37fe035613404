"""Line counts kept across a file's edits: every count is the number of LFs before the
offset (``str.count`` is the oracle), and every hunk an edit reports starts at the line of
the file where its old lines are (the file's own lines, split by the test, are the oracle)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from unidiff import PatchSet

from tests.file_support import assert_diff_reproduces, call, tools
from workspace_tools import Workspace
from workspace_tools.adapters.anthropic_text_editor import text_editor_tool
from workspace_tools.text import _line_counts
from workspace_tools.text._line_counts import LineCounts
from workspace_tools.workspace import _state

TEXT = st.text(alphabet="ab\n", max_size=120)
ASK = st.tuples(st.just("ask"), st.integers(0, 10**6))
CHANGE = st.tuples(st.just("change"), st.integers(0, 10**6), st.integers(0, 10**6), TEXT)


@contextmanager
def _small_steps(step: int = 5, near: int = 2) -> Iterator[None]:
    """Keep a count every ``step`` characters and the answer past ``near``: small texts
    then exercise every way a count is found (forwards, backwards, through kept counts,
    carried across a change no wider than ``step``)."""
    with (
        mock.patch.object(_line_counts, "STEP", step),
        mock.patch.object(_line_counts, "NEAR", near),
    ):
        yield


def _common(a: str, b: str, *, from_end: bool) -> int:
    if from_end:
        a, b = a[::-1], b[::-1]
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@settings(max_examples=400, deadline=None)
@given(
    text=TEXT,
    steps=st.lists(st.one_of(ASK, CHANGE), max_size=25),
    widest=st.booleans(),
)
def test_every_count_is_the_lfs_before_its_offset_through_changes(
    text: str, steps: list[tuple], widest: bool
) -> None:
    with _small_steps():
        counts = LineCounts()
        for step in steps:
            if step[0] == "ask":
                offset = step[1] % (len(text) + 1)
                assert counts.before(text, offset) == text.count("\n", 0, offset), (text, offset)
                continue
            _, a, b, inserted = step
            a, b = sorted((a % (len(text) + 1), b % (len(text) + 1)))
            new = text[:a] + inserted + text[b:]
            # What is known unchanged: the replaced span's bounds, or the texts' whole common
            # head and tail (which may overlap, as in "aa" -> "aaa").
            if widest:
                unchanged = (_common(text, new, from_end=False), _common(text, new, from_end=True))
            else:
                unchanged = (a, len(text) - b)
            counts = counts.changed(text, new, unchanged)
            text = new
        for offset in range(len(text) + 1):
            assert counts.before(text, offset) == text.count("\n", 0, offset), (text, offset)


def test_a_count_far_from_the_start_keeps_counts_along_the_way() -> None:
    text = "x\n" * 300_000
    counts = LineCounts()
    assert counts.before(text, 400_001) == 200_000
    # One every STEP characters passed, and the answer: the next count nearby is short.
    assert len(counts) == 1 + 400_001 // _line_counts.STEP + 1 == 8
    assert counts.before(text, 400_011) == 200_005
    assert len(counts) == 8  # 10 characters from a known count: not kept
    new = text[:10] + "y\n" + text[10:]
    moved = counts.changed(text, new, (10, len(text) - 10))
    assert len(moved) == 8
    assert moved.before(new, 400_013) == 200_006


def _hunks_start_where_their_lines_are(old: str, diff: str) -> None:
    """Each hunk's ``-start,count`` names the file's lines that its context and removed
    lines are, and the ``+start`` is where its context and added lines are after it."""
    # Without their LFs: unidiff gives a last line without one (before "\ No newline at
    # end of file") an LF; git apply checks the bytes.
    lines = old.split("\n")
    shift = 0
    for hunk in PatchSet(diff)[0]:
        source = [
            line.value.removesuffix("\n") for line in hunk if line.is_context or line.is_removed
        ]
        start = hunk.source_start - 1 if hunk.source_length else hunk.source_start
        assert lines[start : start + len(source)] == source, (hunk.source_start, source)
        assert hunk.target_start - hunk.source_start == shift, str(hunk)
        shift += hunk.added - hunk.removed


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    edits=st.lists(
        st.tuples(
            st.integers(0, 59),
            st.text(alphabet="ab\n\u00e9", max_size=12),
            st.sampled_from(
                ["edit_file", "edit_file", "str_replace", "insert", "changed on disk, read"]
            ),
            st.integers(1, 70),
        ),
        min_size=1,
        max_size=8,
    ),
    # A BOM is a character before the first line (the counts are of the text after it).
    encoding=st.sampled_from(["utf-8", "utf-8-sig", "latin-1"]),
    # Not kept whole: what was last seen of the file is known by its hash alone (a large
    # file's way), which a thread takes while the edit goes on.
    kept_whole=st.booleans(),
    # An ASCII file's single exact edits are made on its bytes (until an edit adds an é).
    letter=st.sampled_from(["\u00e9", "e"]),
)
def test_a_files_later_edits_number_their_hunks_from_the_file(
    edits: list[tuple[int, str, str, int]], encoding: str, kept_whole: bool, letter: str
) -> None:
    if letter == "e" and encoding == "latin-1":
        encoding = "utf-8"  # an ASCII file is UTF-8 by the decoding rules: so is its é
    # The text as the diff shows it: a BOM as U+FEFF.
    shown = "latin-1" if encoding == "latin-1" else "utf-8"
    # Counts every 24 characters of a 700-character file, carried across the edits (a
    # line of 10 characters replaced by up to 12).
    kept = _state.KEPT_FILE_BYTES if kept_whole else 16
    with (
        tempfile.TemporaryDirectory() as temp,
        _small_steps(24, 4),
        mock.patch.object(_state, "KEPT_FILE_BYTES", kept),
    ):
        root = Path(temp) / "w"
        root.mkdir()
        path = root / "f.txt"
        path.write_bytes("".join(f"line {letter} {i}\n" for i in range(60)).encode(encoding))
        workspace = Workspace(root)
        by_name = tools(workspace)
        editor = text_editor_tool(workspace)
        for number, (line, inserted, how, read_from) in enumerate(edits):
            old = path.read_bytes()
            if how == "changed on disk, read":
                old = old + f"tail {number}\n".encode(encoding).removeprefix(b"\xef\xbb\xbf")
                path.write_bytes(old)
                # A window near the edit, or past it: the read keeps what it learnt.
                read = call(by_name["read_file"], path="f.txt", offset=read_from, limit=5)
                assert read.error is None or read_from > len(old.splitlines()), read.error
                how = "edit_file"
            text = old.decode(encoding)
            lines = text.splitlines(keepends=True)
            target = lines[line % len(lines)]
            if how == "insert":
                at = line % (len(lines) + 1)
                block = inserted if inserted.endswith("\n") else inserted + "\n"
                expected = "".join(lines[:at]) + block + "".join(lines[at:])
                arguments = {"command": "insert", "path": "f.txt", "insert_line": at}
                result = call(editor, **arguments, new_str=inserted)
            elif text.count(target) != 1 or target == inserted:
                continue  # the edit would be refused: ambiguous, or changing nothing
            elif how == "str_replace":
                expected = text.replace(target, inserted)
                arguments = {"command": "str_replace", "path": "f.txt", "old_str": target}
                result = call(editor, **arguments, new_str=inserted)
            else:
                expected = text.replace(target, inserted)
                result = call(by_name[how], path="f.txt", old_text=target, new_text=inserted)
            assert result.error is None, result.error
            new = path.read_bytes()
            assert new == expected.encode(encoding)
            _hunks_start_where_their_lines_are(old.decode(shown), result.details.diff)
            assert_diff_reproduces(Path(temp) / "apply", "f.txt", old, new, result.details)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    # Empty lines often: a count one off at a line's start shows only before an LF.
    lines=st.lists(st.text(alphabet="ab\r\u00e9\u2028", max_size=3), max_size=25),
    final=st.booleans(),
    offset=st.integers(1, 30),
    limit=st.integers(1, 30),
)
def test_a_read_keeps_true_counts_of_the_lines_it_passed(
    lines: list[str], final: bool, offset: int, limit: int
) -> None:
    text = "\n".join(lines) + ("\n" if final and lines else "")
    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp)
        (root / "f.txt").write_bytes(text.encode())
        workspace = Workspace(root)
        call(tools(workspace)["read_file"], path="f.txt", offset=offset, limit=limit)
        decoded = (root / "f.txt").read_bytes().decode()
        counts = workspace.file_states.check_fresh(
            (root / "f.txt").resolve(), text.encode(), "f.txt"
        )
        assert counts is not None
        for at in range(len(decoded) + 1):
            assert counts.before(decoded, at) == decoded.count("\n", 0, at), at


@pytest.mark.parametrize("ascii_only", [True, False])
@pytest.mark.parametrize("kept_whole", [True, False])
@pytest.mark.parametrize("how", ["edit_file", "str_replace"])
def test_an_edit_keeps_the_counts_it_found_with_the_content_it_wrote(
    tmp_path: Path, how: str, kept_whole: bool, ascii_only: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not kept_whole:  # as a file over 8 MiB: known by its hash, its counts kept with it
        monkeypatch.setattr(_state, "KEPT_FILE_BYTES", 1000)
    path = tmp_path / "f.txt"
    # latin-1, not strict UTF-8: edited on its text.
    first_line = b"line 0\n" if ascii_only else "lin\u00e9 0\n".encode("latin-1")
    path.write_bytes(first_line + b"".join(b"line %d\n" % i for i in range(1, 50_000)))
    workspace = Workspace(tmp_path)
    if how == "edit_file":
        tool_ = tools(workspace)["edit_file"]
        result = call(tool_, path="f.txt", old_text="line 30000\n", new_text="a\nb\n")
    else:
        arguments = {"command": "str_replace", "old_str": "line 30000\n", "new_str": "a\nb\n"}
        result = call(text_editor_tool(workspace), path="f.txt", **arguments)
    assert result.error is None, result.error
    data = path.read_bytes()
    counts = workspace.file_states.check_fresh(path.resolve(), data, "f.txt")
    assert counts is not None
    text = data.decode("latin-1")
    # The start, one every STEP characters up to the first line numbered, and that line:
    # what the edit counted, carried. An ASCII file is edited on its bytes, which numbers
    # the lines around the change from their first, one above the hunk's 3 lines of context;
    # a latin-1 one on its text, which numbers the hunk's first line.
    first = 29_996 if ascii_only else 29_997
    hunk = text.index(f"line {first}\n")
    assert counts._known[-1] == (hunk, first)
    assert len(counts) == 2 + hunk // _line_counts.STEP
    for at, _ in counts._known:
        assert counts.before(text, at) == text.count("\n", 0, at), at
