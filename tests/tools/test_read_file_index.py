"""read_file's line index: a later window of an unchanged big file is read from the chunk
holding its first line, with exactly what a read of the whole file shows."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.file_support import call, tools
from workspace_tools.text import _lines
from workspace_tools.text._lines import read_lines
from workspace_tools.tools import read_file
from workspace_tools.workspace import _line_index, _state
from workspace_tools.workspace._line_index import IndexedFile

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
    cache.put(info, IndexedFile(index))  # written just now: it may change without showing
    assert cache.get(info) is None
    old = time.time_ns() - 10 * _line_index.RACY_NS
    os.utime(tmp_path / "f", ns=(old, old))
    assert os.stat(tmp_path / "f").st_ctime_ns > old  # ctime is now: still not settled
    cache.put(os.stat(tmp_path / "f"), IndexedFile(index))
    assert cache.get(os.stat(tmp_path / "f")) is None


def _whole(data: bytes, offset: int, limit: int, known=None):  # type: ignore[no-untyped-def]
    sliced = read_lines(
        io.BytesIO(data), offset, limit, 5, whole=known is None, name="f", known=known, index=True
    )
    return sliced, (sliced.lines, sliced.cut, sliced.total_lines, sliced.newline, sliced.format)


@settings(max_examples=300, deadline=None)
@given(
    data=files,
    bom=st.sampled_from([b"", b"\xef\xbb\xbf"]),
    first=st.tuples(st.integers(1, 40), st.integers(1, 6)),
    later=st.tuples(st.integers(1, 40), st.integers(1, 6)),
    block=st.integers(1, 9),
)
def test_a_whole_files_index_gives_later_windows_as_a_whole_read(
    data: bytes,
    bom: bytes,
    first: tuple[int, int],
    later: tuple[int, int],
    block: int,
) -> None:
    data = bom + data
    with mock.patch.object(_lines, "BLOCK_BYTES", block):
        made, _ = _whole(data, *first)
        index = made.line_index
        if not made.format.byte_newlines:
            assert index is None
            return
        assert index is not None
        assert index.format == made.format  # decided on the whole file
        assert index.lf_before.tolist() == [data.count(b"\n", 0, at) for at in index.block_starts]
        assert index.total_lines == made.total_lines
        assert _whole(data, *later, known=index)[1] == _whole(data, *later)[1]


@pytest.fixture(params=["kept whole", "hashed"])
def indexed_big_file(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, Any]:
    """A file big enough to index, settled at once, read once whole: its directory and the
    tools that read it. Its content is kept whole for staleness checks, or (larger than
    edits keep whole) known by its hash."""
    monkeypatch.setattr(_line_index, "RACY_NS", 0)
    monkeypatch.setattr(read_file, "MIN_INDEXED_BYTES", 64)
    if request.param == "hashed":
        monkeypatch.setattr(read_file, "KEPT_FILE_BYTES", 64)
    (tmp_path / "big.txt").write_bytes("".join(f"ligne {n} é\n" for n in range(1, 1001)).encode())
    workspace_tools = tools(tmp_path)
    call(workspace_tools["read_file"], path="big.txt", offset=1, limit=1)
    return tmp_path, workspace_tools


def test_a_file_edits_take_is_indexed_and_later_windows_read_only_their_lines(
    indexed_big_file: tuple[Path, Any],
) -> None:
    root, workspace_tools = indexed_big_file
    read = workspace_tools["read_file"]
    with mock.patch.object(_lines, "decode_text", side_effect=AssertionError("whole decode")):
        result = call(read, path="big.txt", offset=500, limit=3)
    fresh = call(tools(root)["read_file"], path="big.txt", offset=500, limit=3)
    assert (result.content, result.details) == (fresh.content, fresh.details)
    assert result.content.startswith("   500\tligne 500 é\n")
    # The window read from the index vouches for the content as a whole read does.
    edited = call(
        workspace_tools["edit_file"], path="big.txt", old_text="ligne 501 é", new_text="line 501"
    )
    assert edited.error is None, edited.error
    assert edited.details.diff.splitlines()[3] == "@@ -498,7 +498,7 @@"


def test_a_window_from_the_index_of_a_file_changed_since_is_refused_its_edit(
    indexed_big_file: tuple[Path, Any],
) -> None:
    root, workspace_tools = indexed_big_file
    read = workspace_tools["read_file"]
    call(read, path="big.txt", offset=700, limit=1)  # from the index
    call(read, path="big.txt", offset=600, limit=1)  # and again, as the model reads on
    data = (root / "big.txt").read_bytes()
    (root / "big.txt").write_bytes(data.replace(b"ligne 9 ", b"ligne X "))
    edited = call(
        workspace_tools["edit_file"], path="big.txt", old_text="ligne 700 é", new_text="x"
    )
    assert edited.error_code.value == "STALE_FILE", edited.error
    again = call(read, path="big.txt", offset=9, limit=1)  # changed: read whole again
    assert again.content.startswith("     9\tligne X é")
    edited = call(
        workspace_tools["edit_file"], path="big.txt", old_text="ligne 700 é", new_text="x"
    )
    assert edited.error is None, edited.error


def test_a_streamed_file_with_a_utf8_bom_but_other_bytes_is_an_encoding_error(
    tmp_path: Path,
) -> None:
    (tmp_path / "f.txt").write_bytes(b"\xef\xbb\xbfok\n\xff\xfe bad\n")
    result = call(tools(tmp_path, max_file_bytes=1)["read_file"], path="f.txt")
    assert result.error_code.value == "ENCODING_ERROR"
    assert result.error == "f.txt starts with a UTF-8 byte order mark but is not valid UTF-8"


def test_a_file_whose_kept_content_was_let_go_is_read_whole_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_line_index, "RACY_NS", 0)
    monkeypatch.setattr(read_file, "MIN_INDEXED_BYTES", 64)
    # Room for one file's content: reading the second lets the first go (to its hash).
    monkeypatch.setattr(_state, "KEPT_TOTAL_BYTES", 15_000)  # files of 9,893 bytes
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text("".join(f"{name} {n}\n" for n in range(1, 1001)))
    workspace_tools = tools(tmp_path)
    read = workspace_tools["read_file"]
    call(read, path="a.txt", offset=1, limit=1)
    call(read, path="b.txt", offset=1, limit=1)
    decodes = []
    real_decode = _lines.decode_text

    def decode(data: bytes, name: str) -> Any:
        decodes.append(name)
        return real_decode(data, name)

    with mock.patch.object(_lines, "decode_text", decode):
        again = call(read, path="a.txt", offset=500, limit=2)
        window = call(read, path="a.txt", offset=700, limit=2)  # kept again: from the index
    assert decodes == ["a.txt"]
    assert again.content.startswith("   500\ta.txt 500\n   501\ta.txt 501\n")
    assert window.content.startswith("   700\ta.txt 700\n   701\ta.txt 701\n")
    edited = call(workspace_tools["edit_file"], path="a.txt", old_text="a.txt 701\n", new_text="")
    assert edited.error is None, edited.error
    assert edited.details.diff.splitlines()[3] == "@@ -698,7 +698,6 @@"
