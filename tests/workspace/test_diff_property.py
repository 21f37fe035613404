"""Property: every diff a write or an edit reports applies with ``git apply`` from the root
and reproduces the new bytes; its additions and deletions are unidiff's counts."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.file_support import assert_diff_reproduces, call, tools
from workspace_tools._errors import ToolError
from workspace_tools.text._diff import unified_diff
from workspace_tools.text._match import replace_text

# Lines mix what trips diff writers: CR, trailing blanks, tabs, form feed, U+2028, non-ASCII.
LINE = st.text(alphabet=st.sampled_from("ab \t\r\x0c\u2028é{}"), max_size=6)
ENDING = st.sampled_from(["\n", "\r\n"])


def _text(lines: list[str], ending: str, final_newline: bool) -> str:
    body = ending.join(lines)
    return body + ending if final_newline and lines else body


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    old_lines=st.lists(LINE, max_size=15),
    new_lines=st.lists(LINE, max_size=15),
    ending=ENDING,
    old_final=st.booleans(),
    new_final=st.booleans(),
    exists=st.booleans(),
    encoding=st.sampled_from(["utf-8", "latin-1"]),
)
# Repeated lines let the matcher slide a change to the end of the span it is given; the hunk
# must still carry the trailing context git apply needs (the last line follows it).
@example(["", "", "", ""], ["a", "", "", ""], "\n", True, True, True, "latin-1")
def test_write_diff_applies(
    old_lines: list[str],
    new_lines: list[str],
    ending: str,
    old_final: bool,
    new_final: bool,
    exists: bool,
    encoding: str,
) -> None:
    if encoding == "latin-1":  # latin-1 has no U+2028
        old_lines = [line.replace("\u2028", "") for line in old_lines]
        new_lines = [line.replace("\u2028", "") for line in new_lines]
    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp) / "w"
        (root / "sub").mkdir(parents=True)
        old = _text(old_lines, ending, old_final).encode(encoding) if exists else None
        if old is not None:
            # latin-1 bytes that are not UTF-8 keep the file latin-1.
            (root / "sub/f.txt").write_bytes(old + (b"\xff" if encoding == "latin-1" else b""))
            old = (root / "sub/f.txt").read_bytes()
        content = _text(new_lines, "\n", new_final) + ("ÿ" if encoding == "latin-1" else "")
        result = call(tools(root)["write_file"], path="sub/f.txt", content=content)
        assert result.error is None, result.error
        new = (root / "sub/f.txt").read_bytes()
        assert_diff_reproduces(Path(temp) / "apply", "sub/f.txt", old, new, result.details)


def _expected_edit(text: str, old: str, new: str) -> bytes | None:
    """The SPEC's exact edit: the literal text, else with its breaks in the file's dominant
    style (CR for a file with CRs and no LF); ``new`` gets that style. ``None`` when only a
    fallback can match (stray CRs)."""
    crlf = text.count("\r\n")
    newline = "\r\n" if crlf > text.count("\n") - crlf else "\n"
    if "\n" not in text and "\r" in text:
        newline = "\r"  # lone CRs only: a classic Mac OS file keeps CR breaks

    def styled(value: str) -> str:
        return value.replace("\r\n", "\n").replace("\n", newline)

    for candidate in (old, styled(old)):
        if candidate in text:
            return text.replace(candidate, styled(new), 1).encode()
    return None


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(LINE, min_size=1, max_size=25),
    data=st.data(),
    replacement=st.lists(LINE, max_size=4),
    ending=ENDING,
    final=st.booleans(),
)
def test_edit_diff_applies(
    lines: list[str], data: st.DataObject, replacement: list[str], ending: str, final: bool
) -> None:
    lines = [f"<{i}>{line}" for i, line in enumerate(lines)]  # numbered: every line unique
    start = data.draw(st.integers(0, len(lines) - 1))
    stop = data.draw(st.integers(start + 1, len(lines)))
    old_text = "\n".join(lines[start:stop])
    new_text = "\n".join(replacement)
    if old_text == new_text:
        return
    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp) / "w"
        root.mkdir()
        original = _text(lines, ending, final).encode()
        (root / "f.txt").write_bytes(original)
        result = call(tools(root)["edit_file"], path="f.txt", old_text=old_text, new_text=new_text)
        assert result.error is None, result.error
        expected = _expected_edit(original.decode(), old_text, new_text)
        new = (root / "f.txt").read_bytes()
        if expected is not None:
            assert result.details.match == "exact"
            assert new == expected
        assert_diff_reproduces(Path(temp) / "apply", "f.txt", original, new, result.details)


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from("ab\n\r"), max_size=40),
    old=st.text(alphabet=st.sampled_from("ab\n"), min_size=1, max_size=4),
    new=st.text(alphabet=st.sampled_from("ab\n"), max_size=4),
    replace_all=st.booleans(),
)
def test_an_edits_unchanged_ends_are_the_texts_shared_ends_and_the_diff_ignores_them(
    text: str, old: str, new: str, replace_all: bool
) -> None:
    # The edit reports what it left in place at each end; the diff told so skips comparing
    # it and must come out the same as one that compares everything.
    try:
        done = replace_text(text, old, new, replace_all=replace_all, newline="\n", path="f")
    except ToolError:
        return
    head, tail = done.unchanged
    assert head + tail <= min(len(text), len(done.text)), (head, tail, text, done.text)
    assert text[:head] == done.text[:head], (head, text, done.text)
    assert text[len(text) - tail :] == done.text[len(done.text) - tail :], (tail, text, done.text)
    assert unified_diff(text, done.text, "f", spans=done.spans) == unified_diff(
        text, done.text, "f"
    )
