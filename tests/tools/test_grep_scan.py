"""grep's scan of a file against a plain reference: decode the file, split it into lines,
search each line on its own. Same matching lines, same order, same line numbers, columns and
lengths, same count past the number kept, same context lines, whether the file is searched
from one buffer or window by window."""

from __future__ import annotations

import codecs
import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from workspace_tools.search import _reading
from workspace_tools.search._matcher import Matcher
from workspace_tools.search._pattern import searched_line_by_line

Row = tuple[int, int, str, int]

# Literals (the plain-literal path: bytes.find, re's literal[^\n]*) and patterns that take
# RE2 or Python's engine, over texts made of the same few characters so that they match.
PATTERNS = ["a", "ab", "b a", "aa", "Type", "a$", "^b", r"b\s", "a|é", "é", r"\d+", "b*", "x"]
# Python's engine (lookaround) with classes that hold a newline: searched line by line.
PATTERNS += [r"(?<=a)\s*b", r"(?<!b)[^a]{2}", r"(?:\w\s?){300}(?<=a)"]
ALPHABET = "ab \n\r\té1Ty"

TEXTS = st.text(alphabet=ALPHABET, max_size=120) | st.lists(
    st.sampled_from(["Type a", "ab", "", "b ab aab", "é a", "x\r", "1 b"]), max_size=30
).map("\n".join)


def encoded(text: str, encoding: str) -> bytes:
    if encoding == "latin-1":
        return text.encode("latin-1", "replace")
    if encoding == "utf-8-sig":
        return codecs.BOM_UTF8 + text.encode()
    return text.encode(encoding)


def reference(
    data: bytes, pattern: str, keep: int, context: int
) -> tuple[int, list[Row], dict[int, str]]:
    """Matches found line by line in the decoded text, as a user reads them."""
    for bom, codec in ((codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF8, "utf-8-sig")):
        if data.startswith(bom):
            text = data.decode(codec)
            break
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = data.decode("latin-1")
    lines = text.replace("\r\n", "\n").split("\n")
    if lines[-1] == "":
        lines.pop()
    rx = re.compile(pattern, re.MULTILINE)
    rows: list[Row] = []
    for number, line in enumerate(lines, 1):
        m = rx.search(line)
        if m is not None:
            rows.append((number, m.start() + 1, line, len(m.group())))
    kept = rows[:keep]
    shown = {row[0] for row in kept}
    near = {
        number: lines[number - 1]
        for line, *_ in kept
        for number in range(line - context, line + context + 1)
        if 1 <= number <= len(lines) and number not in shown
    }
    return len(rows), kept, near


def scanned(found: object) -> tuple[int, list[Row], dict[int, str]]:
    if found is None:
        return 0, [], {}
    return found.count, list(found.lines), dict(found.context)  # type: ignore[attr-defined]


@settings(max_examples=500, deadline=None)
@given(
    text=TEXTS,
    pattern=st.sampled_from(PATTERNS),
    encoding=st.sampled_from(["utf-8", "latin-1", "utf-8-sig", "utf-16"]),
    crlf=st.booleans(),
    keep=st.sampled_from([0, 1, 2, 5, 10_000]),
    context=st.integers(0, 2),
)
def test_scan_of_a_buffer_matches_the_line_by_line_reference(
    text: str, pattern: str, encoding: str, crlf: bool, keep: int, context: int
) -> None:
    data = encoded(text.replace("\n", "\r\n") if crlf else text, encoding)
    expected = reference(data, pattern, keep, context)
    got = scanned(Matcher(pattern).find(data, keep, context))
    if keep == 0:
        expected = (expected[0], [], {})
    assert got == expected, (pattern, data)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    text=TEXTS,
    pattern=st.sampled_from(PATTERNS),
    encoding=st.sampled_from(["utf-8", "latin-1"]),
    crlf=st.booleans(),
    keep=st.sampled_from([1, 3, 10_000]),
    context=st.integers(0, 2),
    window=st.sampled_from([8, 16, 64]),
)
def test_scan_window_by_window_matches_the_reference(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    pattern: str,
    encoding: str,
    crlf: bool,
    keep: int,
    context: int,
    window: int,
) -> None:
    data = encoded(text.replace("\n", "\r\n") if crlf else text, encoding)
    monkeypatch.setattr(_reading, "WINDOW", window)
    path = tmp_path / "f.txt"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        head = os.read(fd, window)
        got = scanned(Matcher(pattern).find_in_file(fd, head, keep, context))
    finally:
        os.close(fd)
    assert got == reference(data, pattern, keep, context), (pattern, data, window)


def test_literal_lines_hold_their_first_occurrence_and_number() -> None:
    data = b"x TypeVar TypeVar\n\nno\r\nTypeVar\r\nend TypeVar"
    found = Matcher("TypeVar").find(data, 2, 0)
    assert found is not None
    assert (found.count, found.lines) == (
        3,
        [(1, 3, "x TypeVar TypeVar", 7), (4, 1, "TypeVar", 7)],
    )


# Lines for the literal path: the literal at a line's start, end, twice, next to
# characters of two, three and four UTF-8 bytes, with CRLF endings and lone CRs.
LITERAL_PIECES = ["TypeVar", "x TypeVar TypeVar", "é", "€ TypeVar", "𝄞TypeVar€", "", "\r", "Ty"]


@settings(max_examples=400, deadline=None)
@given(
    pieces=st.lists(st.sampled_from(LITERAL_PIECES), max_size=12),
    separators=st.lists(st.sampled_from(["\n", "\r\n", ""]), min_size=12, max_size=12),
    final=st.sampled_from(["", "\n", "\r\n"]),
    encoding=st.sampled_from(["utf-8", "latin-1", "utf-8-sig"]),
    keep=st.sampled_from([0, 1, 2, 10_000]),
    context=st.integers(0, 1),
)
@example(
    pieces=["x TypeVar TypeVar", "\r"],
    separators=["\r"] * 12,
    final="",
    encoding="utf-8",
    keep=10_000,
    context=0,
)
def test_literal_lines_match_a_naive_reference(
    pieces: list[str],
    separators: list[str],
    final: str,
    encoding: str,
    keep: int,
    context: int,
) -> None:
    # Line numbers, columns in characters, texts and the count past those kept, as a
    # reader of the decoded file sees them: a literal at the file's start or end, a file
    # without a final newline, several occurrences on a line (one matching line, as
    # ripgrep counts it), non-ASCII lines in UTF-8 and in latin-1 (not valid UTF-8).
    text = "".join(p + s for p, s in zip(pieces, separators, strict=False)) + final
    data = encoded(text, encoding)
    lines = text.replace("\r\n", "\n").split("\n")
    if encoding == "latin-1":
        lines = data.decode("latin-1").replace("\r\n", "\n").split("\n")
    if lines[-1] == "":
        lines.pop()
    rows = [
        (number, line.index("TypeVar") + 1, line, 7)
        for number, line in enumerate(lines, 1)
        if "TypeVar" in line
    ]
    found = Matcher("TypeVar").find(data, keep, context)
    count, kept, near = scanned(found)
    assert (count, kept) == (len(rows), rows[:keep] if keep else []), data
    assert near == (reference(data, "TypeVar", keep, context)[2] if keep else {}), data
    if encoding == "utf-8-sig" or not rows:
        return
    # The same file searched where grep reads it, in a reused buffer whose bytes past
    # the file are another file's (CRLFs not read as LFs before): one that goes on, and
    # one whose next byte is a LF, which must not end a last line ending in a lone CR.
    for stale in (b"TypeVar\r\n\xff TypeVar\n", b"\nTypeVar\n"):
        buffer = bytearray(data + stale)
        matcher = Matcher("TypeVar")
        assert matcher.plain and matcher.find_required is not None
        first = matcher.find_required(buffer, 0, len(data))
        found = matcher.find_plain(buffer, len(data), first, keep)
        assert scanned(found)[:2] == (len(rows), rows[:keep] if keep else []), (data, stale)


@pytest.mark.parametrize(
    ("pattern", "by_line"),
    [
        ("foo", False),
        (r"(?:ab|c){0,1500}x", False),
        (r"(?:\w+ ){127}", False),
        (r"(?:\w+ ){128}", True),
        (r"(?<=def )\w+", True),
        (r"(\w+) \1", True),
        (r"(?:\w+\s){1001}", True),
        (r"a[^b]c", True),
        (r"a(?=\n)", True),
        (r"\Aimport", True),
        (r"(?-m:^)x", True),
    ],
)
def test_patterns_searched_line_by_line(pattern: str, by_line: bool) -> None:
    # By line where a whole buffer would differ (text ends, a newline, a lookaround that
    # could see the next line) or cost more (a shortest match longer than nearly every
    # line, which re's length check skips).
    assert searched_line_by_line(pattern, re.MULTILINE) is by_line
