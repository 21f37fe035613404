"""Searching file contents for a Python regular expression, line by line.

Speed comes from working on whole file buffers: a file is read in one call, a file without
a match costs one search (or one substring test for a literal pattern) over its bytes, and
line numbers are counted only for files that match. A pure-ASCII file is searched as bytes
with the pattern compiled for bytes, which matches exactly what the ``str`` pattern matches
on ASCII text; any other file is decoded (BOM, then strict UTF-8, else latin-1) and searched
as text.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field
from typing import Any

from ._pattern import (
    LiteralSearch,
    bytes_twin,
    compile_pattern,
    line_counter,
    plain_literal,
    required_literal,
)
from ._reading import PROBE_BUFFER, file_contains, last_lines, read_rest, read_window

# A file whose first 8 KiB hold a NUL byte is binary (unless a BOM says UTF-16/32).
BINARY_PROBE = 8192

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
WIDE_BOMS = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


@dataclass
class LineMatch:
    """A matching line: 1-based ``line``, 1-based ``column`` (in characters) of the first
    match on it, and the line's ``text`` (without its line ending)."""

    line: int
    column: int
    text: str


@dataclass
class FileMatches:
    """Matches in one file: ``count`` counts every matching line (every match in multiline
    mode); ``lines`` holds at most the number asked for, ``context`` maps line numbers to the
    text of context lines around them."""

    count: int = 0
    lines: list[LineMatch] = field(default_factory=list)
    context: dict[int, str] = field(default_factory=dict)


class Matcher:
    """A compiled grep pattern.

    Args:
        pattern: a Python regular expression (``re`` syntax).
        ignore_case: match case-insensitively.
        multiline: let a match span lines (``.`` matches a newline too); otherwise a match
            lies within one line and ``^``/``$`` match at line boundaries.

    Raises:
        ToolError: ``INVALID_ARGUMENTS`` naming the position of the regex error.
    """

    def __init__(self, pattern: str, *, ignore_case: bool = False, multiline: bool = False):
        flags = re.MULTILINE | (re.IGNORECASE if ignore_case else 0)
        if multiline:
            flags |= re.DOTALL
        self.text_rx = compile_pattern(pattern, flags)
        self.multiline = multiline
        self.bytes_rx = bytes_twin(pattern, self.text_rx.flags)
        self.required = required_literal(pattern, flags)
        self._probe = bytearray(PROBE_BUFFER)
        # Counting matching lines past the kept ones, in one C call per file.
        self.text_counter: Any = None if multiline else line_counter(self.text_rx)
        self.bytes_counter: Any = (
            None if multiline or not self.bytes_rx else line_counter(self.bytes_rx)
        )
        # What _scan searches with: the regexes, or for a plain literal a substring search
        # that finds the same matches (and counts the same lines) several times faster.
        self._text_search: Any = self.text_rx
        self._bytes_search: Any = self.bytes_rx
        literal = None if multiline else plain_literal(pattern, flags)
        self._literal = literal is not None
        if literal is not None:
            self._text_search = self.text_counter = LiteralSearch(literal)
            if self.bytes_rx is not None:
                self._bytes_search = self.bytes_counter = LiteralSearch(literal.encode("ascii"))

    @staticmethod
    def is_binary(data: bytes) -> bool:
        """A NUL byte in the first 8 KiB, and no BOM saying UTF-16/32."""
        return data.find(b"\0", 0, BINARY_PROBE) >= 0 and not data.startswith(WIDE_BOMS)

    def find(self, data: bytes, keep: int, context: int) -> FileMatches | None:
        """Search one text file's bytes; ``None`` when nothing matches.

        Args:
            data: the whole file.
            keep: how many matching lines to keep (all are counted).
            context: lines of context to collect around kept matches.
        """
        if data.startswith(WIDE_BOMS):
            text = _decode(data)
            return _scan(
                text,
                self._text_search,
                self.text_counter,
                "\n",
                self.multiline,
                keep,
                context,
                _same,
            )
        return self._find_in(data, keep, context)

    def find_in_file(self, fd: int, head: bytes, keep: int, context: int) -> FileMatches | None:
        """Search an open file whose first bytes ``head`` filled a whole first read.

        The file is read in windows of whole lines (about 1 MB, each decoded on its own), so
        memory stays bounded whatever its size, and no window is mapped (a file truncated
        under a map would kill the process with SIGBUS). Multiline patterns and UTF-16/32
        files need the whole text and are read whole.
        """
        if self.multiline or head.startswith(WIDE_BOMS):
            return self.find(head + read_rest(fd, len(head)), keep, context)
        if self.required is not None and not file_contains(fd, self.required, self._probe):
            return None  # no line counting for a file that cannot match
        total = FileMatches()
        before = b""  # up to `context` whole lines preceding the window
        offset, line = 0, 1
        while True:
            chunk, end = read_window(fd, offset, context)
            if not chunk:
                break
            buf = before + chunk if before else chunk
            lo, hi = len(before), len(before) + end
            found = self._find_in(
                buf, keep - len(total.lines), context, lo, hi, line - before.count(b"\n")
            )
            if found is not None:
                total.count += found.count
                total.lines.extend(found.lines)
                total.context.update(found.context)
            line += buf.count(b"\n", lo, hi)
            before = last_lines(buf, hi, context)
            offset += end
        if total.context:
            # A window's context line may be a match of the next window.
            matched = {m.line for m in total.lines}
            total.context = {n: t for n, t in total.context.items() if n not in matched}
        return total if total.count else None

    def _find_in(
        self,
        data: bytes,
        keep: int,
        context: int,
        lo: int = 0,
        hi: int | None = None,
        line: int = 1,
    ) -> FileMatches | None:
        # The required literal is ASCII, so its bytes mean the same in UTF-8 and latin-1.
        if self.required is not None and data.find(self.required, lo, hi) < 0:
            return None
        # Only counting, a plain literal (ASCII, no newline) matches the same lines in the
        # bytes as in the text they decode to (UTF-8 or latin-1): no decoding needed.
        if self._bytes_search is not None and ((not keep and self._literal) or data.isascii()):
            return _scan(
                data,
                self._bytes_search,
                self.bytes_counter,
                b"\n",
                self.multiline,
                keep,
                context,
                _ascii,
                lo,
                hi,
                line,
            )
        codec, text = _decode_text(data)
        lo_text = len(data[:lo].decode(codec)) if lo else 0
        hi_text = None if hi is None else lo_text + len(data[lo:hi].decode(codec))
        return _scan(
            text,
            self._text_search,
            self.text_counter,
            "\n",
            self.multiline,
            keep,
            context,
            _same,
            lo_text,
            hi_text,
            line,
        )


def _bom_encoding(data: bytes) -> str | None:
    if data[:1] not in (b"\xef", b"\xff", b"\xfe", b"\x00"):
        return None
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return encoding
    return None


def _decode(data: bytes) -> str:
    bom = _bom_encoding(data)
    return data.decode(bom, "replace") if bom is not None else _decode_text(data)[1]


def _decode_text(data: bytes) -> tuple[str, str]:
    """The codec and text of BOM-less or UTF-8-BOM bytes: ``utf-8-sig``/``utf-8`` when the
    bytes are valid UTF-8, else ``latin-1`` (which decodes any bytes, one character each)."""
    codec = "utf-8-sig" if data.startswith(codecs.BOM_UTF8) else "utf-8"
    try:
        return codec, data.decode(codec)
    except UnicodeDecodeError:
        return "latin-1", data.decode("latin-1")


def _ascii(value: bytes) -> str:
    return value.decode("ascii")


def _same(value: str) -> str:
    return value


def _scan(  # type: ignore[no-untyped-def]
    buf,
    rx,
    counter,
    nl,
    multiline: bool,
    keep: int,
    context: int,
    to_str,
    lo=0,
    hi=None,
    first_line=1,
) -> FileMatches | None:
    """Find matching lines in ``buf`` (bytes or str, with ``rx`` and ``nl`` of its type).

    Only matches starting in ``[lo, hi)`` count (both at line starts); the rest of ``buf``
    serves as context. ``first_line`` is the number of the line at offset 0. Past ``keep``
    lines the rest are only counted, with ``counter`` (see ``line_counter``) when given.
    """
    search = rx.search
    n = len(buf)
    hi = n if hi is None else hi
    if search(buf, lo) is None:
        return None
    result = FileMatches()
    pos = lo
    line_no = first_line
    counted_to = 0
    cr = "\r" if isinstance(nl, str) else b"\r"
    while pos < hi:
        if len(result.lines) >= keep:
            # Nothing more to keep: only count, without line numbers.
            if counter is not None:
                result.count += _count_by_line(counter, buf, nl, pos, hi)
            else:
                result.count += _count_lines(buf, search, nl, multiline, pos, hi)
            break
        m = search(buf, pos)
        if m is None:
            break
        start = m.start()
        # A match at the very end belongs to the last line only if that line has no newline.
        if start >= hi and (hi < n or not n or buf[n - 1 : n] == nl):
            break
        back = buf.rfind(nl, pos, start)
        line_start = pos if back < 0 else back + 1
        line_end = buf.find(nl, start)
        if line_end < 0:
            line_end = n
        if not multiline and m.end() > line_end:
            # The match ran past the line; a grep match must lie within one line.
            m = search(buf, line_start, line_end)
            if m is None:
                pos = line_end + 1
                continue
            start = m.start()
        line_no += buf.count(nl, counted_to, line_start)
        counted_to = line_start
        result.count += 1
        if len(result.lines) < keep:
            text = buf[line_start:line_end]
            column = len(to_str(buf[line_start:start])) + 1
            if multiline and m.end() > line_end:
                text = buf[line_start : _line_end(buf, nl, m.end())]
            result.lines.append(LineMatch(line_no, column, to_str(text.rstrip(cr))))
        pos = max(m.end(), start + 1) if multiline else line_end + 1
    if context and result.lines:
        _add_context(buf, nl, cr, result, context, to_str, first_line)
    return result if result.count else None


def _count_by_line(counter, buf, nl, pos: int, hi: int) -> int:  # type: ignore[no-untyped-def]
    found = len(counter.findall(buf, pos, hi))
    # An empty match right at ``hi``, after a newline, is no line of this range.
    if found and buf[hi - 1 : hi] == nl and counter.fullmatch(buf, hi, hi) is not None:
        found -= 1
    return found


def _count_lines(buf, search, nl, multiline: bool, pos: int, hi: int) -> int:  # type: ignore[no-untyped-def]
    """Matching lines (matches, in multiline mode) starting in ``[pos, hi)``, as ``_scan``
    counts them."""
    n = len(buf)
    count = 0
    while pos < hi:
        m = search(buf, pos)
        if m is None:
            break
        start = m.start()
        if start >= hi and (hi < n or not n or buf[n - 1 : n] == nl):
            break
        if multiline:
            count += 1
            pos = max(m.end(), start + 1)
            continue
        line_end = buf.find(nl, start)
        if line_end < 0:
            line_end = n
        if m.end() > line_end:
            back = buf.rfind(nl, pos, start)
            if search(buf, pos if back < 0 else back + 1, line_end) is None:
                pos = line_end + 1
                continue
        count += 1
        pos = line_end + 1
    return count


def _line_end(buf, nl, index: int) -> int:  # type: ignore[no-untyped-def]
    # The end of the line holding the last character before ``index``.
    end = buf.find(nl, max(index - 1, 0))
    return len(buf) if end < 0 else end


def _add_context(  # type: ignore[no-untyped-def]
    buf, nl, cr, result: FileMatches, context: int, to_str, first_line: int
) -> None:
    lines = buf.split(nl)
    if lines and not lines[-1]:
        lines.pop()
    last_line = first_line + len(lines) - 1
    spans = [(m.line, m.line + m.text.count("\n")) for m in result.lines]
    matched = {number for first, last in spans for number in range(first, last + 1)}
    for first, last in spans:
        for number in range(first - context, last + context + 1):
            if first_line <= number <= last_line and number not in matched:
                result.context[number] = to_str(lines[number - first_line].rstrip(cr))
