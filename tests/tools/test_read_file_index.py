"""read_file's line index: a later window of an unchanged big file is read from the chunk
holding its first line, with exactly what a read of the whole file shows."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.file_support import call, tools
from workspace_tools.text import _lines
from workspace_tools.text._lines import read_lines
from workspace_tools.workspace import _line_index

pieces = st.sampled_from(
    [b"a", b"bc", b"\n", b"\r\n", b"\r", "é".encode(), b"\xe9", b"xyz" * 7, "日本".encode()]
)
files = st.lists(pieces, max_size=60).map(b"".join)


def _window(data: bytes, offset: int, limit: int, known=None):  # type: ignore[no-untyped-def]
    sliced = read_lines(io.BytesIO(data), offset, limit, 5, whole=False, name="f", known=known)
    return (sliced.lines, sliced.cut, sliced.total_lines, sliced.newline, sliced.format)


@settings(max_examples=300, deadline=None)
@given(
    data=files,
    offset=st.integers(1, 40),
    limit=st.integers(1, 6),
    chunk=st.integers(1, 9),
    block=st.integers(1, 9),
)
def test_a_window_from_the_index_equals_a_full_read(
    data: bytes, offset: int, limit: int, chunk: int, block: int
) -> None:
    if not data:
        return
    # The whole file as one chunk: every line passed through the window (the newline
    # style, judged on the first chunk, aside).
    with mock.patch.object(_lines, "CHUNK_BYTES", len(data) + 1):
        lines, cut, total, _, fmt = _window(data, offset, limit)
    # Tiny chunks and index blocks: windows start in every position of a chunk and of a
    # block, lines span chunks, chunks before and after the window pass by their count.
    with (
        mock.patch.object(_lines, "CHUNK_BYTES", chunk),
        mock.patch.object(_lines, "BLOCK_BYTES", block),
    ):
        first = read_lines(io.BytesIO(data), 1, 1, 5, whole=False, name="f")
        assert first.line_index is not None
        assert first.line_index.lf_before.tolist() == [
            data.count(b"\n", 0, at) for at in first.line_index.block_starts
        ]
        streamed = _window(data, offset, limit)
        assert (*streamed[:3], streamed[4]) == (lines, cut, total, fmt)
        assert _window(data, offset, limit, first.line_index) == streamed


@pytest.fixture
def big_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # Timestamps "settled" at once, so the first read's index is kept.
    monkeypatch.setattr(_line_index, "RACY_NS", 0)
    monkeypatch.setattr(_lines, "CHUNK_BYTES", 64)
    (tmp_path / "big.txt").write_bytes(b"".join(b"line %d\n" % n for n in range(1, 1001)))
    return tmp_path


def test_later_windows_use_the_index_and_match_a_fresh_tool(big_file: Path) -> None:
    read = tools(big_file, max_file_bytes=1)["read_file"]
    call(read, path="big.txt", offset=1, limit=1)
    # No second pass over the whole file.
    with mock.patch.object(_lines, "_stream_bytes", side_effect=AssertionError("full pass")):
        result = call(read, path="big.txt", offset=500, limit=3)
        last = call(read, path="big.txt", offset=999, limit=5)
    fresh = tools(big_file, max_file_bytes=1)["read_file"]
    assert result.content == call(fresh, path="big.txt", offset=500, limit=3).content
    assert result.content.startswith("   500\tline 500\n   501\tline 501\n   502\tline 502")
    assert result.details == call(fresh, path="big.txt", offset=500, limit=3).details
    assert last.content == "   999\tline 999\n  1000\tline 1000"
    assert last.details.total_lines == 1000


def test_a_changed_file_is_read_again(big_file: Path) -> None:
    read = tools(big_file, max_file_bytes=1)["read_file"]
    call(read, path="big.txt", offset=1, limit=1)
    (big_file / "big.txt").write_bytes(b"new\n" * 3)
    result = call(read, path="big.txt", offset=2, limit=5)
    assert result.content == "     2\tnew\n     3\tnew"
    assert result.details.total_lines == 3


def test_a_file_changed_within_the_clock_tick_is_not_indexed(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"a\nb\n")
    cache = _line_index.LineIndexCache()
    info = os.stat(tmp_path / "f")
    index = read_lines(io.BytesIO(b"a\nb\n"), 1, 1, 5, whole=False, name="f").line_index
    assert index is not None
    cache.put(info, index)  # written just now: its timestamps may not move for a change
    assert cache.get(info) is None
    old = time.time_ns() - 10 * _line_index.RACY_NS
    os.utime(tmp_path / "f", ns=(old, old))
    assert os.stat(tmp_path / "f").st_ctime_ns > old  # ctime is now: still not settled
    cache.put(os.stat(tmp_path / "f"), index)
    assert cache.get(os.stat(tmp_path / "f")) is None
