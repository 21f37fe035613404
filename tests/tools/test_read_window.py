"""The line window behind read_file, fed in chunks cut anywhere, against the plain reading
of the whole content: the same lines, cuts, counts and newline tallies (hypothesis)."""

from __future__ import annotations

from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from workspace_tools.text import _lines
from workspace_tools.text._decode import lf_of
from workspace_tools.text._lines import LineWindow

ALPHABET = st.sampled_from(["a", "b", " ", "\n", "\r", "\r\n", "é", "\t"])


def expected(content: Any, offset: int, limit: int, cap: int) -> dict[str, Any]:
    lf, cr = content[:0] + ("\n" if isinstance(content, str) else b"\n"), None
    cr = "\r" if isinstance(content, str) else b"\r"
    parts = content.split(lf)
    tail = parts.pop()
    numbered = [(line, True) for line in parts] + ([(tail, False)] if tail else [])
    lines, capped = [], []
    for line, terminated in numbered[offset - 1 : offset - 1 + limit]:
        if len(line) > cap:
            lines.append(line[:cap])
            capped.append(True)
        else:
            lines.append(line[:-1] if terminated and line.endswith(cr) else line)
            capped.append(False)
    newlines = content.count(lf)
    return {
        "lines": lines,
        "capped": capped,
        "newlines": newlines,
        "total_lines": newlines + (1 if tail else 0),
        "sample_lf": newlines,
        "sample_crlf": content.count(cr + lf),
    }


def windowed(content: Any, cuts: list[int], offset: int, limit: int, max_chars: int) -> Any:
    lf, cr = ("\n", "\r") if isinstance(content, str) else (b"\n", b"\r")
    window = LineWindow(offset, limit, max_chars, lf, cr)
    start = 0
    for cut in [*sorted({min(c, len(content)) for c in cuts}), len(content)]:
        window.feed(content[start:cut])
        start = cut
    window.close()
    return window


@settings(max_examples=400, deadline=None)
@given(
    text=st.lists(ALPHABET, max_size=200).map("".join),
    cuts=st.lists(st.integers(0, 200), max_size=6),
    offset=st.integers(1, 40),
    limit=st.integers(1, 40),
    max_chars=st.integers(1, 4),
    as_bytes=st.booleans(),
    # Lines passed by a count of each block's LFs, blocks ending anywhere.
    block=st.integers(1, 12),
)
def test_a_window_fed_in_any_chunks_equals_the_whole_reading(
    text: str, cuts: list[int], offset: int, limit: int, max_chars: int, as_bytes: bool, block: int
) -> None:
    content: Any = text.encode() if as_bytes else text
    with mock.patch.object(_lines, "BLOCK_BYTES", block):
        window = windowed(content, cuts, offset, limit, max_chars)
    seen = {
        "lines": window.lines,
        "capped": window.capped,
        "newlines": window.newlines,
        "total_lines": window.total_lines,
        "sample_lf": window.sample_lf,
        "sample_crlf": window.sample_crlf,
    }
    assert seen == expected(content, offset, limit, max_chars * 4)


def test_a_window_deep_in_a_long_file_skips_to_its_lines() -> None:
    # Far more lines than one block of the skipping patterns (4,096), CRLF endings.
    content = "".join(f"line {i}\r\n" for i in range(1, 10_001))
    window = windowed(content, [12_345, 60_000], 9_000, 3, 2_000)
    assert (window.lines, window.total_lines, window.sample_crlf) == (
        ["line 9000", "line 9001", "line 9002"],
        10_000,
        10_000,
    )


def _naive_after_lfs(content: Any, pos: int, count: int) -> tuple[int, int]:
    lf = "\n" if isinstance(content, str) else b"\n"
    while count:
        found = content.find(lf, pos)
        if found < 0:
            break
        pos, count = found + 1, count - 1
    return pos, count


def test_passing_lfs_stops_right_after_the_last_one_passed() -> None:
    # Every start, count and block size over lines of every length from 0 to 4: the
    # blocks passed by their count end anywhere in a line, or right after its LF.
    text = "a\nbcd\n\nefgh\nij\nk\n\nlmn"
    for content in (text, text.encode()):
        for block in range(1, 9):
            with mock.patch.object(_lines, "BLOCK_BYTES", block):
                for pos in range(len(content) + 1):
                    for count in range(9):
                        end, missing = _naive_after_lfs(content, pos, count)
                        got, got_missing = _lines._after_lfs(content, pos, count)
                        where = (content, block, pos, count)
                        assert got_missing == missing, where
                        if missing:  # then only: no LF follows (the caller reads no more)
                            assert content.find(lf_of(content), got) < 0, where
                        else:
                            assert got == end, where
