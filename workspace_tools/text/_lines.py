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
import hashlib
from dataclasses import dataclass
from typing import AnyStr, BinaryIO, Generic

from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools.text._decode import LATIN1, UTF8, TextFormat, decode_text, sniff_format

CHUNK_BYTES = 1 << 20
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

    @property
    def total_lines(self) -> int:
        """Lines seen: LFs, plus one for a last line without one."""
        return self.newlines + (1 if self._last and self._last != self._lf else 0)

    def feed(self, chunk: AnyStr) -> None:
        """Take the next chunk of the file."""
        if not chunk:
            return
        lf = self._lf
        if self._sample is None or self._sample > 0:
            self.sample_lf += chunk.count(lf)
            crlf = chunk.count(self._cr + lf) + (self._last == self._cr and chunk[:1] == lf)
            self.sample_crlf += crlf
            if self._sample is not None:
                self._sample -= len(chunk)
        self._last = chunk[-1:]
        pos, size = 0, len(chunk)
        while pos < size:
            if self._line < self.offset:
                need = self.offset - self._line
                count = chunk.count(lf, pos)
                if count < need:
                    self._line += count
                    self.newlines += count
                    return
                for _ in range(need):
                    pos = chunk.index(lf, pos) + 1
                self._line += need
                self.newlines += need
            elif self._line < self.stop:
                end = chunk.find(lf, pos)
                self._take(chunk, pos, size if end < 0 else end)
                if end < 0:
                    return
                self._finish()
                pos = end + 1
            else:
                self.newlines += chunk.count(lf, pos)
                return

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


@dataclass(frozen=True)
class LineSlice:
    """Lines read from a file.

    Attributes:
        lines: the wanted lines without line endings, each cut to ``max_chars``.
        cut: for each line, whether it was longer than ``max_chars``.
        total_lines: lines in the whole file.
        newline: the dominant line ending (``"\\n"``, ``"\\r\\n"``) or ``None`` without LF.
        format: the file's encoding.
        digest: SHA-256 of the whole file when it was read whole, else ``None``.
    """

    lines: list[str]
    cut: list[bool]
    total_lines: int
    newline: str | None
    format: TextFormat
    digest: bytes | None


def read_lines(
    handle: BinaryIO, offset: int, limit: int, max_chars: int, *, whole: bool
) -> LineSlice:
    """Read lines ``offset`` .. ``offset + limit - 1`` of the open file ``handle``.

    Args:
        whole: decode the whole file at once (as an edit would), deciding UTF-8 versus
            latin-1 on all of it and hashing it; otherwise stream it, deciding on the lines
            shown.

    Raises:
        ToolError: ``BINARY_FILE`` for a binary file.
    """
    if whole:
        data = handle.read()
        decoded = decode_text(data)
        window: LineWindow[str] = LineWindow(offset, limit, max_chars, "\n", "\r")
        window.feed(decoded.text)
        window.close()
        lines, cut = _cut(window.lines, window.capped, max_chars)
        return _slice(window, lines, cut, decoded.format, hashlib.sha256(data).digest())
    head = handle.read(CHUNK_BYTES)
    fmt = sniff_format(head)
    if fmt is None:
        raise ToolError(
            "The file is binary (it contains NUL bytes); read_file shows text and images only",
            ErrorCode.BINARY_FILE,
        )
    if fmt.byte_newlines:
        return _stream_bytes(handle, head[len(fmt.bom) :], fmt, offset, limit, max_chars)
    return _stream_text(handle, head[len(fmt.bom) :], fmt, offset, limit, max_chars)


def _stream_bytes(
    handle: BinaryIO, first: bytes, fmt: TextFormat, offset: int, limit: int, max_chars: int
) -> LineSlice:
    window: LineWindow[bytes] = LineWindow(
        offset, limit, max_chars, b"\n", b"\r", newline_sample=CHUNK_BYTES
    )
    chunk = first
    while chunk:
        window.feed(chunk)
        chunk = handle.read(CHUNK_BYTES)
    window.close()
    if fmt is UTF8:
        try:
            pairs = zip(window.lines, window.capped, strict=True)
            texts = [_decode(line, "utf-8", capped) for line, capped in pairs]
        except UnicodeDecodeError:
            fmt = LATIN1
    if fmt is not UTF8:
        texts = [line.decode(fmt.codec) for line in window.lines]
    lines, cut = _cut(texts, window.capped, max_chars)
    return _slice(window, lines, cut, fmt, None)


def _decode(data: bytes, codec: str, capped: bool) -> str:
    # The kept prefix of a long line may end inside a character; drop that partial character.
    return codecs.getincrementaldecoder(codec)().decode(data, final=not capped)


def _stream_text(
    handle: BinaryIO, first: bytes, fmt: TextFormat, offset: int, limit: int, max_chars: int
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
            f"The file starts with a {fmt.label} byte order mark but is not valid {fmt.label}",
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
    digest: bytes | None,
) -> LineSlice:
    newline = None
    if window.sample_lf:
        crlf = window.sample_crlf
        newline = "\r\n" if crlf > window.sample_lf - crlf else "\n"
    return LineSlice(lines, cut, window.total_lines, newline, fmt, digest)
