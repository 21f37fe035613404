"""Reading a window of lines from a text file without holding the file in memory.

A file is fed through :class:`LineWindow` in chunks; it keeps only the wanted lines (each cut
to a bounded length) and counts the rest. UTF-8 and latin-1 files are scanned as bytes (LF is
the byte 0x0A and no multi-byte character contains it), so lines outside the window are never
decoded; UTF-16/32 files are decoded chunk by chunk first.

A streamed file (one larger than the workspace's ``max_file_bytes``) is judged on part of
it: its newline style on the first MiB, UTF-8 versus latin-1 on the lines shown. Smaller
files are decoded whole, exactly as an edit would decode them.
"""

from __future__ import annotations

import codecs
import re
from array import array
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, replace
from itertools import accumulate
from typing import AnyStr, BinaryIO, Generic

from workspace_tools._errors import ErrorCode, ToolError, clipped
from workspace_tools.text._decode import (
    LATIN1,
    UTF8,
    TextFormat,
    decode_text,
    lf_of,
    sniff_format,
)
from workspace_tools.text._line_counts import LineCounts

CHUNK_BYTES = 1 << 20
#: A streamed file's :class:`LineIndex` knows the LFs before every this many bytes of it,
#: so that a later window reads from at most this far before its first line.
BLOCK_BYTES = 1 << 16
# A UTF-8 character is at most 4 bytes; keeping this many bytes of a long line is enough to
# show its first ``max_chars`` characters.
_BYTES_PER_CHAR = 4


class LineWindow(Generic[AnyStr]):
    """Keep lines ``offset`` .. ``offset + limit - 1`` (1-based) of a stream of chunks.

    Each kept line is held to ``max_chars * 4`` units (characters or bytes) however long it
    is; ``capped`` says which lines lost units that way. Line breaks are LF; the CR of a
    CRLF is dropped from a kept line.
    """

    def __init__(
        self,
        offset: int,
        limit: int,
        max_chars: int,
        lf: AnyStr,
        cr: AnyStr,
        newline_sample: int | None = None,
    ) -> None:
        self.offset, self.stop, self.cap = offset, offset + limit, max_chars * _BYTES_PER_CHAR
        self._lf, self._cr = lf, cr
        self.lines: list[AnyStr] = []
        self.capped: list[bool] = []
        self.newlines = 0
        # Line endings are judged on the first ``newline_sample`` units (all when ``None``).
        self._sample = newline_sample
        self.sample_lf = 0
        self.sample_crlf = 0
        self._line = 1
        self._piece: list[AnyStr] = []
        self._kept = 0
        self._length = 0
        self._open = False
        self._last: AnyStr = lf[:0]
        #: ``(position, LFs before it)`` where the window knew both: where its first line
        #: starts, where its lines end, the end. Positions are in the chunk each was found
        #: in: of the text when it came whole, as one chunk.
        self.marks: list[tuple[int, int]] = []

    def start_after(self, newlines: int) -> None:
        """The next chunk comes after ``newlines`` LFs of the file (maybe mid-line)."""
        self.newlines = newlines
        self._line = newlines + 1

    @property
    def done(self) -> bool:
        """Whether every wanted line is complete (the rest only counts lines)."""
        return self._line >= self.stop

    @property
    def total_lines(self) -> int:
        """Lines seen: LFs, plus one for a last line without one."""
        return self.newlines + (1 if self._last and self._last != self._lf else 0)

    def feed(self, chunk: AnyStr, lfs: int | None = None) -> None:
        """Take the next chunk of the file; ``lfs``, the LFs in it when the caller counted
        them, lets a chunk wholly before or after the wanted lines pass uncounted again (a
        chunk the newline sample takes is counted there)."""
        if not chunk:
            return
        lf, cr = self._lf, self._cr
        if self._sample is None or self._sample > 0:
            if lfs is None:
                lfs = chunk.count(lf)
            self.sample_lf += lfs
            # Counting is a pass over the chunk; a chunk without CR has no CRLF to count.
            if cr in chunk:
                self.sample_crlf += chunk.count(cr + lf)
            self.sample_crlf += self._last == cr and chunk[:1] == lf
            if self._sample is not None:
                self._sample -= len(chunk)
        self._last = chunk[-1:]
        before = self.newlines
        if lfs is not None and not self._open:
            # Line `offset` starts after offset - 1 LFs: not in a chunk that ends before.
            if self.newlines + lfs < self.offset - 1:
                self.newlines += lfs
                self._line += lfs
                return
            if self._line >= self.stop:
                self.newlines += lfs
                return
        pos, size = 0, len(chunk)
        while pos < size:
            if self._line < self.offset:
                need = self.offset - self._line
                pos, missing = _after_lfs(chunk, pos, need)
                self._line += need - missing
                self.newlines += need - missing
                if missing:
                    return
                self.marks.append((pos, self.newlines))
            elif self._open:
                # The first line continues one the previous chunk began.
                end = chunk.find(lf, pos)
                self._take(chunk, pos, size if end < 0 else end)
                if end < 0:
                    return
                self._finish()
                pos = end + 1
            elif self._line < self.stop:
                pos = self._take_lines(chunk, pos)
                self.marks.append((pos, self.newlines))
            else:
                # Past the wanted lines: the chunk's LFs, counted once.
                self.newlines = (
                    before + lfs if lfs is not None else self.newlines + chunk.count(lf, pos)
                )
                self.marks.append((size, self.newlines))
                return

    def _take_lines(self, chunk: AnyStr, pos: int) -> int:
        """Keep the whole lines of ``chunk`` from ``pos`` up to the window's end, and open
        a last line the chunk does not end; return where the window's lines stopped."""
        lf, cr, cap = self._lf, self._cr, self.cap
        want = self.stop - self._line
        end, missing = _after_lfs(chunk, pos, want)
        if missing:
            end = len(chunk)  # the window goes on in the next chunk
        parts = chunk[pos:end].split(lf)
        rest = parts.pop()  # after the last LF: empty, or a line the next chunk goes on with
        for part in parts:
            if len(part) > cap:
                self.lines.append(part[:cap])
                self.capped.append(True)
            else:
                self.lines.append(part[:-1] if part.endswith(cr) else part)
                self.capped.append(False)
        self.newlines += len(parts)
        self._line += len(parts)
        if rest:
            self._take(chunk, end - len(rest), end)
        return end

    def close(self) -> None:
        """End of file: keep a last line that has no LF."""
        if self._open:
            self._finish(terminated=False)

    def _take(self, chunk: AnyStr, start: int, end: int) -> None:
        self._open = True
        self._length += end - start
        room = self.cap - self._kept
        if room > 0:
            piece = chunk[start : min(end, start + room)]
            self._piece.append(piece)
            self._kept += len(piece)

    def _finish(self, terminated: bool = True) -> None:
        line = self._lf[:0].join(self._piece)
        capped = self._kept < self._length
        if terminated and not capped and line.endswith(self._cr):
            line = line[:-1]
        self.lines.append(line)
        self.capped.append(capped)
        self._piece, self._kept, self._length, self._open = [], 0, 0, False
        if terminated:
            self.newlines += 1
            self._line += 1


# Patterns that pass over many lines at once: finding the n-th LF is then a few regex
# matches run in C instead of n calls of ``find`` from Python.
_LINE_BLOCKS = (4096, 256, 16, 1)
_TEXT_BLOCKS = tuple(re.compile(rf"(?:[^\n]*\n){{{n}}}") for n in _LINE_BLOCKS)
_BYTE_BLOCKS = tuple(re.compile(rf"(?:[^\n]*\n){{{n}}}".encode()) for n in _LINE_BLOCKS)


def _after_lfs(chunk: AnyStr, pos: int, count: int) -> tuple[int, int]:
    """Pass ``count`` LFs of ``chunk`` from ``pos``: ``(position after the last LF passed,
    LFs not found)``; when some were not found, no LF follows that position."""
    lf = lf_of(chunk)
    # Blocks without the last LF to pass go by a count of theirs, several times faster
    # than the patterns below; those find the position in the last block.
    while count and pos + BLOCK_BYTES < len(chunk):
        passed = chunk.count(lf, pos, pos + BLOCK_BYTES)
        if passed >= count:
            break
        count -= passed
        pos += BLOCK_BYTES
    blocks = _TEXT_BLOCKS if isinstance(chunk, str) else _BYTE_BLOCKS
    for size, block in zip(_LINE_BLOCKS, blocks, strict=True):
        while count >= size:
            found = block.match(chunk, pos)  # type: ignore[arg-type]
            if found is None:
                break  # fewer than ``size`` LFs follow: try the smaller blocks
            pos = found.end()
            count -= size
    return pos, count


def lines_holding(text: str, part: str, line: int = 0, offset: int = 0) -> Iterator[int]:
    """The numbers (0-based) of the lines of ``text`` that hold ``part`` (which holds no
    LF), in order, from line ``line``, which starts at ``offset``: one search of the text,
    each line found once, its number counted by the LFs passed since the last."""
    last = offset
    at = text.find(part, offset)
    while at != -1:
        line += text.count("\n", last, at)
        yield line
        last = text.find("\n", at)
        if last == -1:
            return
        at = text.find(part, last)  # on from the next line


@dataclass(frozen=True)
class LineSlice:
    """Lines read from a file.

    Attributes:
        lines: the wanted lines without line endings, each cut to ``max_chars``.
        cut: for each line, whether it was longer than ``max_chars``.
        total_lines: lines in the whole file.
        newline: the dominant line ending (``"\\n"``, ``"\\r\\n"``) or ``None`` without LF.
        format: the file's encoding.
        content: the whole file's bytes when it was read whole, else ``None``.
        line_counts: with ``content``, what the read learnt of its text's lines (where the
            window starts and ends, and the end, with the LFs before each).
    """

    lines: list[str]
    cut: list[bool]
    total_lines: int
    newline: str | None
    format: TextFormat
    content: bytes | None
    line_index: LineIndex | None = None
    line_counts: LineCounts | None = None


@dataclass(frozen=True)
class LineIndex:
    """What one full pass over a streamed UTF-8 or latin-1 file learnt, so that a later
    window of the same unchanged file reads only from the chunk holding its first line.

    Attributes:
        format: the format sniffed from the first chunk (the lines shown still decide
            UTF-8 versus latin-1).
        block_starts: file offsets every :data:`BLOCK_BYTES` (the first after the BOM).
        lf_before: how many LFs come before each of those offsets.
        total_lines: lines in the whole file.
        sample_lf, sample_crlf: LFs and CRLFs in the first chunk (the newline style).
    """

    format: TextFormat
    block_starts: array[int]
    lf_before: array[int]
    total_lines: int
    sample_lf: int
    sample_crlf: int


def read_lines(
    handle: BinaryIO,
    offset: int,
    limit: int,
    max_chars: int,
    *,
    whole: bool,
    name: str,
    known: LineIndex | None = None,
    index: bool = False,
) -> LineSlice:
    """Read lines ``offset`` .. ``offset + limit - 1`` of the open file ``handle``.

    Args:
        whole: decode the whole file at once (as an edit would), deciding UTF-8 versus
            latin-1 on all of it and keeping its bytes; otherwise stream it, deciding on the lines
            shown. A streamed UTF-8 or latin-1 file's slice carries its
            :class:`LineIndex`.
        known: the :class:`LineIndex` of this very file content (the caller vouches that
            the file is unchanged since it was made): a read that is not ``whole`` then
            starts at the block holding line ``offset`` and stops after the window, instead
            of reading the whole file.
        index: with ``whole``, the slice of a UTF-8 or latin-1 file carries its
            :class:`LineIndex` too, its ``format`` the one the whole file decided.
        name: the file's path as the model wrote it, which an error names.

    Raises:
        ToolError: ``BINARY_FILE`` for a binary file.
    """
    if known is not None and known.block_starts and not whole:
        return _window_from_index(handle, known, offset, limit, max_chars, name)
    if whole:
        data = handle.read()
        decoded = decode_text(data, name)
        window: LineWindow[str] = LineWindow(offset, limit, max_chars, "\n", "\r")
        fmt = decoded.format
        made = _index_of(data, fmt) if index and fmt.byte_newlines else None
        # The LF count the index made is the text's (an LF is one byte in either codec).
        window.feed(decoded.text, None if made is None else made[0])
        window.close()
        lines, cut = _cut(window.lines, window.capped, max_chars)
        # With what the window learnt of the text's lines, for the file's next edit.
        counts = LineCounts(sorted({(0, 0), *window.marks}))
        line_index = None
        if made is not None:
            _, starts, before = made
            line_index = LineIndex(
                fmt, starts, before, window.total_lines, window.sample_lf, window.sample_crlf
            )
        sliced = _slice(window, lines, cut, fmt, data)
        return replace(sliced, line_counts=counts, line_index=line_index)
    head = handle.read(CHUNK_BYTES)
    fmt = sniff_format(head)
    if fmt is None:
        raise ToolError(
            f"{clipped(name)} is binary (it contains NUL bytes); read_file shows text and "
            "images only",
            ErrorCode.BINARY_FILE,
        )
    if fmt.byte_newlines:
        return _stream_bytes(handle, head[len(fmt.bom) :], fmt, offset, limit, max_chars, name)
    return _stream_text(handle, head[len(fmt.bom) :], fmt, offset, limit, max_chars, name)


def _stream_bytes(
    handle: BinaryIO,
    first: bytes,
    fmt: TextFormat,
    offset: int,
    limit: int,
    max_chars: int,
    name: str,
) -> LineSlice:
    window: LineWindow[bytes] = LineWindow(
        offset, limit, max_chars, b"\n", b"\r", newline_sample=CHUNK_BYTES
    )
    block_starts, lf_before = array("Q"), array("Q")
    position = len(fmt.bom)
    chunk = first
    while chunk:
        lfs = _index_blocks(chunk, 0, position, window.newlines, block_starts, lf_before)
        window.feed(chunk, lfs)
        position += len(chunk)
        chunk = handle.read(CHUNK_BYTES)
    window.close()
    index = LineIndex(
        fmt, block_starts, lf_before, window.total_lines, window.sample_lf, window.sample_crlf
    )
    return _decoded_slice(window, fmt, max_chars, index, name)


def _index_of(data: bytes, fmt: TextFormat) -> tuple[int, array[int], array[int]]:
    """The LFs of the text ``data`` holds in ``fmt`` (a codec whose LF is one byte), and
    its :class:`LineIndex`'s block starts and the LFs before each."""
    block_starts, lf_before = array("Q"), array("Q")
    lfs = _index_blocks(data, len(fmt.bom), 0, 0, block_starts, lf_before)
    return lfs, block_starts, lf_before


def _index_blocks(
    data: bytes,
    first: int,
    position: int,
    lfs_before: int,
    block_starts: array[int],
    lf_before: array[int],
) -> int:
    """Add the :data:`BLOCK_BYTES` blocks of ``data[first:]`` (at least one), which is at
    file offset ``position`` with ``lfs_before`` LFs before it, to a :class:`LineIndex`'s
    ``block_starts`` and ``lf_before``; the LFs in them."""
    starts = range(first, max(len(data), first + 1), BLOCK_BYTES)
    counts = [data.count(b"\n", at, at + BLOCK_BYTES) for at in starts]
    block_starts.extend(position + at for at in starts)
    lf_before.extend(accumulate(counts[:-1], initial=lfs_before))
    return sum(counts)


def _window_from_index(
    handle: BinaryIO, known: LineIndex, offset: int, limit: int, max_chars: int, name: str
) -> LineSlice:
    # Start at the last block with fewer than offset - 1 LFs before it (the first block for
    # line 1): line `offset` starts inside it or after, never before; the window skips the
    # LFs up to that line, then keeps its lines.
    block = max(bisect_left(known.lf_before, offset - 1) - 1, 0)
    window: LineWindow[bytes] = LineWindow(offset, limit, max_chars, b"\n", b"\r")
    window.start_after(known.lf_before[block])
    handle.seek(known.block_starts[block])
    while not window.done and (data := handle.read(BLOCK_BYTES)):
        window.feed(data)
    if not window.done:
        window.close()  # the end of the file: its last line may have no LF
    window.sample_lf, window.sample_crlf = known.sample_lf, known.sample_crlf
    sliced = _decoded_slice(window, known.format, max_chars, known, name)
    return LineSlice(
        sliced.lines, sliced.cut, known.total_lines, sliced.newline, sliced.format, None, known
    )


def _decoded_slice(
    window: LineWindow[bytes], fmt: TextFormat, max_chars: int, index: LineIndex, name: str
) -> LineSlice:
    if fmt.codec == UTF8.codec:
        try:
            pairs = zip(window.lines, window.capped, strict=True)
            texts = [_decode(line, "utf-8", capped) for line, capped in pairs]
        except UnicodeDecodeError as exc:
            if fmt.bom:
                raise ToolError(
                    f"{clipped(name)} starts with a UTF-8 byte order mark but is not valid UTF-8",
                    ErrorCode.ENCODING_ERROR,
                ) from exc
            fmt = LATIN1
    if fmt.codec != UTF8.codec:
        texts = [line.decode(fmt.codec) for line in window.lines]
    lines, cut = _cut(texts, window.capped, max_chars)
    sliced = _slice(window, lines, cut, fmt, None)
    return LineSlice(sliced.lines, sliced.cut, sliced.total_lines, sliced.newline, fmt, None, index)


def _decode(data: bytes, codec: str, capped: bool) -> str:
    # The kept prefix of a long line may end inside a character; drop that partial character.
    return codecs.getincrementaldecoder(codec)().decode(data, final=not capped)


def _stream_text(
    handle: BinaryIO,
    first: bytes,
    fmt: TextFormat,
    offset: int,
    limit: int,
    max_chars: int,
    name: str,
) -> LineSlice:
    decoder = codecs.getincrementaldecoder(fmt.codec)()
    window: LineWindow[str] = LineWindow(
        offset, limit, max_chars, "\n", "\r", newline_sample=CHUNK_BYTES
    )
    chunk = first
    try:
        while chunk:
            window.feed(decoder.decode(chunk))
            chunk = handle.read(CHUNK_BYTES)
        window.feed(decoder.decode(b"", final=True))
    except UnicodeDecodeError as exc:
        raise ToolError(
            f"{clipped(name)} starts with a {fmt.label} byte order mark but is not valid "
            f"{fmt.label}",
            ErrorCode.ENCODING_ERROR,
        ) from exc
    window.close()
    lines, cut = _cut(window.lines, window.capped, max_chars)
    return _slice(window, lines, cut, fmt, None)


def _cut(texts: list[str], capped: list[bool], max_chars: int) -> tuple[list[str], list[bool]]:
    cut = [
        was_capped or len(text) > max_chars for text, was_capped in zip(texts, capped, strict=True)
    ]
    return [text[:max_chars] for text in texts], cut


def _slice(
    window: LineWindow[AnyStr],
    lines: list[str],
    cut: list[bool],
    fmt: TextFormat,
    content: bytes | None,
) -> LineSlice:
    newline = None
    if window.sample_lf:
        crlf = window.sample_crlf
        newline = "\r\n" if crlf > window.sample_lf - crlf else "\n"
    return LineSlice(lines, cut, window.total_lines, newline, fmt, content)
