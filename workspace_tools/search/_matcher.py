"""Searching file contents for a Python regular expression, line by line.

Lines are the lines ``read_file`` shows: a line ends at LF, and the CR of a CRLF is part of
the line ending (a lone CR is text). So a CRLF is read as an LF before searching: ``$``
matches where the shown line ends and no match or shown text holds that CR.

Patterns run on RE2, a linear-time engine, wherever it gives exactly the matches of
Python's engine (see ``_re2``); a plain literal is searched with ``bytes.find``, and a
file is first tested for the pattern's required literal (``_re2.literal_finder``). Python's
own engine serves the rest (lookarounds, backreferences, ``\\b`` on non-ASCII text): it may
take exponential time, so such a matcher says so (:attr:`Matcher.needs_worker`) and its
caller runs the search in a process it can kill.

Speed comes from working on whole file buffers: a file is read in one call, a file without
a match costs one search (or one substring test for a literal pattern) over its bytes, and
line numbers are counted only for files that match. A plain literal is searched in the
bytes of any BOM-less or UTF-8-BOM file, and only the lines it keeps are decoded. RE2
searches UTF-8 bytes: a pure-ASCII or UTF-8 file as it is, any other one decoded (BOM,
then strict UTF-8, else latin-1) and encoded again. Python's engine searches an ASCII file
as bytes, with the pattern compiled for bytes, which matches exactly what the ``str``
pattern matches on ASCII text, and any other file as decoded text.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import accumulate, islice, repeat
from operator import sub
from typing import Any

from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools.search._pattern import (
    LineSlices,
    LiteralSearch,
    bytes_twin,
    compile_pattern,
    line_counter,
    line_counter_shape,
    plain_literal,
    required_literal,
    searched_line_by_line,
)
from workspace_tools.search._re2 import (
    Re2LineCounter,
    Re2Search,
    compile_counter,
    compile_re2,
    literal_finder,
    translate,
)
from workspace_tools.search._reading import (
    PROBE_BUFFER,
    file_contains,
    last_lines,
    read_rest,
    read_window,
)

# A file whose first 8 KiB hold a NUL byte is binary (unless a BOM says UTF-16/32).
BINARY_PROBE = 8192
# Longest pattern accepted, in characters: far above any pattern written by hand or by a
# model, and small enough that compiling one costs milliseconds and megabytes.
MAX_PATTERN = 10_000

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
WIDE_BOMS = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
EVERY_BOM = (codecs.BOM_UTF8, *WIDE_BOMS)


# A matching line: 1-based line number, 1-based column (in characters) of the first match
# on it, the line's text (without its line ending; the lines a multiline match spans,
# joined by LF) and the length in characters of the match within its first line. A plain
# tuple: a search may find thousands, and each object or attribute costs.
LineMatch = tuple[int, int, str, int]


@dataclass
class FileMatches:
    """Matches in one file: ``count`` counts every matching line (in multiline mode, each
    line a match starts on that no earlier match's lines hold, as ripgrep shows them once:
    the lines ``lines`` would hold without a limit); ``lines`` holds at most the number
    asked for (as :data:`LineMatch` tuples), ``context`` maps line numbers to the text of
    context lines around them."""

    count: int = 0
    lines: list[LineMatch] = field(default_factory=list)
    context: dict[int, str] = field(default_factory=dict)


class NeedsWorker(Exception):
    """Raised by a matcher that found text only Python's engine can search, when it was
    built to search in process (``in_process=True``)."""


class Matcher:
    """A compiled grep pattern.

    Args:
        pattern: a Python regular expression (``re`` syntax), at most :data:`MAX_PATTERN`
            characters.
        ignore_case: match case-insensitively.
        multiline: let a match span lines (``.`` matches a newline too); otherwise a match
            lies within one line and ``^``/``$`` match at line boundaries.
        in_process: refuse to run Python's engine: text that needs it raises
            :class:`NeedsWorker`.

    Attributes:
        key: ``(pattern, ignore_case, multiline)``.
        plain: the pattern is a plain literal (see ``plain_literal``), which
            :meth:`find_plain` searches.
        needs_worker: the pattern needs Python's engine for some text (always, or for
            non-ASCII text), so the search should run where it can be killed.

    Raises:
        ToolError: ``INVALID_ARGUMENTS`` for a pattern too long, or naming the position of
            the regex error.
    """

    def __init__(
        self,
        pattern: str,
        *,
        ignore_case: bool = False,
        multiline: bool = False,
        in_process: bool = False,
    ):
        if len(pattern) > MAX_PATTERN:
            raise ToolError(
                f"The pattern is {len(pattern):,} characters long; grep takes patterns of at "
                f"most {MAX_PATTERN:,} characters. Search for a shorter, distinctive part.",
                ErrorCode.INVALID_ARGUMENTS,
            )
        self.key = (pattern, ignore_case, multiline)
        flags = re.MULTILINE | (re.IGNORECASE if ignore_case else 0)
        if multiline:
            flags |= re.DOTALL
        self.text_rx = compile_pattern(pattern, flags)
        self.multiline = multiline
        self.in_process = in_process
        literal = None if multiline else plain_literal(pattern, flags)
        self.plain = literal is not None
        # A plain literal is its own required literal: find_required finds its first
        # occurrence, where find_plain starts.
        self.required = (
            required_literal(pattern, flags) if literal is None else literal.encode("ascii")
        )
        # How to find it: a first offset, or -1 (see literal_finder).
        self.find_required = None if self.required is None else literal_finder(self.required)
        self._probe = bytearray(PROBE_BUFFER)
        # What _scan searches (and counts lines past the kept ones) with, by kind of text:
        # ASCII bytes (RE2, a literal, or Python's engine compiled for bytes; False: the
        # text route), UTF-8 bytes (RE2; None: not compiled yet, False: none), and str
        # (Python's engine, or the literal).
        self._ascii: Any = None
        self.bytes_counter: Any = None
        self._utf8: Any = None
        self._utf8_counter: Any = None
        self._unicode_source: bytes | None = None
        self._text_search: Any = self.text_rx
        self.text_counter: Any = None
        self.bytes_rx: Any = None
        self._shape = None if multiline else line_counter_shape(pattern, flags)
        if literal is not None:
            self._text_search = self.text_counter = LiteralSearch(literal)
            self._ascii = self.bytes_counter = LiteralSearch(literal.encode("ascii"))
            self._utf8 = False
            self.needs_worker = False
            return
        translation = translate(pattern, flags, per_line=not multiline)
        if translation is not None:
            self._ascii = compile_re2(translation.ascii)
            if self._ascii is not None:
                self.bytes_counter = compile_counter(translation.ascii, self._shape)
            self._unicode_source = translation.unicode
            if translation.unicode == translation.ascii:
                self._utf8 = self._ascii
                self._utf8_counter = self.bytes_counter
        self.needs_worker = self._ascii is None or self._unicode_source is None
        # Python's engine: by line where a whole buffer would differ or cost more.
        per_line = not multiline and searched_line_by_line(pattern, flags)
        if per_line:
            self._text_search = LineSlices(self.text_rx)
        if self._ascii is None:
            # Python's engine on bytes too, and line counters for it.
            self.bytes_rx = bytes_twin(pattern, self.text_rx.flags)
            self._ascii = self.bytes_rx
            if per_line:
                self._ascii = self.bytes_rx and LineSlices(self.bytes_rx)
            elif not multiline:
                self.text_counter = line_counter(self.text_rx)
                self.bytes_counter = self.bytes_rx and line_counter(self.bytes_rx)
        if self._ascii is None:
            self._ascii = False  # searched as text

    def _utf8_search(self) -> Re2Search | None:
        """RE2 for non-ASCII UTF-8 text (compiled on first use: its Unicode classes make
        it bigger), or ``None`` when only Python's engine can search such text."""
        if self._utf8 is None and self._unicode_source is not None:
            self._utf8 = compile_re2(self._unicode_source) or False
            if self._utf8:
                self._utf8_counter = compile_counter(self._unicode_source, self._shape)
            self._unicode_source = None
        if not self._utf8:
            if self.in_process and not self.plain:
                raise NeedsWorker
            return None
        return self._utf8  # type: ignore[no-any-return]

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

        Raises:
            NeedsWorker: see the class.
        """
        if data.startswith(WIDE_BOMS):
            text = _decode(data)
            if "\r" in text:
                text = text.replace("\r\n", "\n")
            return self._find_text(text, keep, context, 0, None, 1)
        return self._find_in(data, keep, context)

    def find_plain(self, buffer: Any, size: int, first: int, keep: int) -> FileMatches | None:
        """:meth:`find` without context lines for a plain literal (:attr:`plain`) in the
        file held by ``buffer[:size]`` (bytes or a bytearray read into; the rest of it is
        not the file's), which starts with no BOM and holds the literal first at
        ``first``. The buffer is searched as it is, with no copy: its CRLFs are left as
        they are, and only the CR of the kept lines' CRLFs is cut (see ``_scan_literal``).
        """
        literal = self._ascii
        if keep <= 0:
            # A literal holds no LF: there is a matching line from ``first`` on.
            return FileMatches(len(literal.findall(buffer, first, size)))
        return _scan_literal(buffer, literal, b"\n", keep, 0, first, size, 1, size, crlf=True)

    def find_in_file(self, fd: int, head: bytes, keep: int, context: int) -> FileMatches | None:
        """Search an open file whose first bytes ``head`` filled a whole first read.

        The file is read in windows of whole lines (about 1 MB, each decoded on its own), so
        memory stays bounded whatever its size, and no window is mapped (a file truncated
        under a map would kill the process with SIGBUS). Multiline patterns and UTF-16/32
        files need the whole text and are read whole.

        Raises:
            NeedsWorker: see the class.
        """
        if self.multiline or head.startswith(WIDE_BOMS):
            return self.find(head + read_rest(fd, len(head)), keep, context)
        if self.find_required is not None and not file_contains(
            fd, self.find_required, len(self.required or b""), self._probe
        ):
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
            if context or len(total.lines) < keep:
                # Line numbers are needed only for lines still to be kept (or shown).
                line += buf.count(b"\n", lo, hi)
            before = last_lines(buf, hi, context)
            offset += end
        if total.context:
            # A window's context line may be a match of the next window.
            matched = {m[0] for m in total.lines}
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
        # The required literal is ASCII without CR or LF, so its bytes mean the same in
        # UTF-8 and latin-1, with CRLFs or without.
        find = self.find_required
        if find is not None and find(data, lo, len(data) if hi is None else hi) < 0:
            return None
        if data.find(b"\r") >= 0:
            # A CRLF ends a line as an LF does, in the context lines before lo too; lo and
            # hi are line starts, never inside one.
            crlf = b"\r\n"
            hi = None if hi is None else hi - data.count(crlf, 0, hi)
            lo -= data.count(crlf, 0, lo)
            data = data.replace(crlf, b"\n")
        if line == 1 and lo == 0 and data.startswith(codecs.BOM_UTF8):
            data = data[len(codecs.BOM_UTF8) :]
            hi = None if hi is None else hi - len(codecs.BOM_UTF8)
        ascii_search = self._ascii
        # A plain literal (ASCII, no CR or LF) matches the same lines in the bytes as in
        # the text they decode to (UTF-8 or latin-1): it is searched in the bytes, and only
        # the lines it keeps are decoded (see _scan_literal).
        if ascii_search is not False and (self.plain or data.isascii()):
            return _scan(
                data,
                ascii_search,
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
        utf8 = None if self.plain else self._utf8_search()
        if utf8 is not None:
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                # Latin-1, one character per byte: searched as its UTF-8 encoding.
                lo = len(data[:lo].decode("latin-1").encode("utf-8"))
                if hi is not None:
                    hi = len(data[:hi].decode("latin-1").encode("utf-8"))
                data = data.decode("latin-1").encode("utf-8")
            return self._scan_utf8(utf8, data, keep, context, lo, hi, line)
        codec, text = _decode_text(data)
        lo_text = len(data[:lo].decode(codec)) if lo else 0
        hi_text = None if hi is None else lo_text + len(data[lo:hi].decode(codec))
        return self._find_text(text, keep, context, lo_text, hi_text, line)

    def _find_text(
        self, text: str, keep: int, context: int, lo: int, hi: int | None, line: int
    ) -> FileMatches | None:
        """Search decoded text (CRLFs already read as LFs)."""
        if text.isascii() and self._ascii is not False:
            data = text.encode("ascii")
            return _scan(
                data, self._ascii, self.bytes_counter, b"\n", self.multiline, keep, context,
                _ascii, lo, hi, line,
            )  # fmt: skip
        utf8 = None if self.plain else self._utf8_search()
        if utf8 is not None:
            data = text.encode("utf-8")
            lo = len(text[:lo].encode("utf-8"))
            hi = None if hi is None else len(text[:hi].encode("utf-8"))
            return self._scan_utf8(utf8, data, keep, context, lo, hi, line)
        return _scan(
            text, self._text_search, self.text_counter, "\n", self.multiline, keep, context,
            _same, lo, hi, line,
        )  # fmt: skip

    def _scan_utf8(
        self,
        utf8: Re2Search,
        data: bytes,
        keep: int,
        context: int,
        lo: int,
        hi: int | None,
        line: int,
    ) -> FileMatches | None:
        return _scan(
            data, utf8, self._utf8_counter, b"\n", self.multiline, keep, context, _utf8,
            lo, hi, line,
        )  # fmt: skip


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


def _utf8(value: bytes) -> str:
    return value.decode("utf-8")


def _ascii(value: bytes) -> str:
    return value.decode("ascii")


def _latin1(value: bytes) -> str:
    return value.decode("latin-1")


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
    if keep <= 0 and counter is not None:
        # Only counting: the counter's pass is also the test for a match.
        count = _count_by_line(counter, buf, nl, lo, hi) if lo < hi else 0
        return FileMatches(count) if count else None
    if isinstance(rx, LiteralSearch) and not multiline and counter is not None:
        return _scan_literal(buf, rx, nl, keep, context, lo, hi, first_line, n)
    # ASCII bytes and str: a character is one item, so columns need no decoding.
    one_per_char = to_str is _ascii or to_str is _same
    m = search(buf, lo)
    if m is None:
        return None
    result = FileMatches()
    pos = lo
    line_no = first_line
    counted_to = 0
    shown_to = -1  # where the text of the last line kept ends
    while pos < hi:
        if len(result.lines) >= keep and not multiline:
            # Nothing more to keep: only count, without line numbers.
            if counter is not None:
                result.count += _count_by_line(counter, buf, nl, pos, hi)
            else:
                result.count += _count_lines(buf, search, nl, pos, hi)
            break
        if m is None or m.start() < pos:  # the first search's match is used once
            m = search(buf, pos)
            if m is None:
                break
        start = m.start()
        # A match at the very end belongs to the last line only if that line has no newline.
        if start >= hi and (hi < n or not n or buf[n - 1 : n] == nl):
            break
        # In multiline mode ``pos`` may lie within a line (the end of the last match).
        first = lo if multiline else pos
        back = buf.rfind(nl, first, start)
        line_start = first if back < 0 else back + 1
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
        if multiline:
            if line_start < shown_to:
                # Its line is part of an earlier match's lines (rg shows a line once).
                pos = m.end() if m.end() > start else _next_char(buf, start)
                continue
            shown_to = _line_end(buf, nl, m.end()) if m.end() > line_end else line_end
        line_no += buf.count(nl, counted_to, line_start)
        counted_to = line_start
        result.count += 1
        if len(result.lines) < keep:
            text = buf[line_start:line_end]
            if one_per_char:
                column = start - line_start + 1
                length = min(m.end(), line_end) - start
            else:
                column = len(to_str(buf[line_start:start])) + 1
                length = len(to_str(buf[start : min(m.end(), line_end)]))
            if multiline and m.end() > line_end:
                text = buf[line_start:shown_to]
            result.lines.append((line_no, column, to_str(text), length))
        pos = (
            (m.end() if m.end() > start else _next_char(buf, start)) if multiline else line_end + 1
        )
    if context and result.lines:
        _add_context(buf, nl, result, context, to_str, first_line)
    return result if result.count else None


def _scan_literal(  # type: ignore[no-untyped-def]
    buf,
    literal: LiteralSearch,
    nl,
    keep: int,
    context: int,
    lo: int,
    hi: int,
    first_line: int,
    size: int,
    *,
    crlf: bool = False,
) -> FileMatches | None:
    """``_scan`` for a plain literal (see ``plain_literal``) in ``buf[:size]``: str, or
    the bytes of a text read as UTF-8 when they are valid UTF-8, else as latin-1 (an
    ASCII literal holding no LF matches the same lines and places in the bytes as in such
    a text, and no line of the bytes splits a character). With ``crlf`` the bytes' CRLFs
    are not read as LFs yet: a kept line's CR before its LF is cut from its text (no
    count, column or line number changes with it).

    ``literal.lines`` gives each matching line's first occurrence and end; the rest is
    worked out for all kept lines at once by C loops (``map``, ``zip``, ``accumulate``),
    not by Python code per line: the newline before each occurrence (``rfind`` from it, so
    the line's length bounds the cost), the line numbers as running sums of the newlines
    between occurrences, the columns, and the texts, sliced from the newline before each
    line to its end, joined, decoded once and split at those newlines. Only the kept lines
    are decoded, and the file only when one of them is not ASCII (to tell UTF-8 from
    latin-1, and to count a column in characters). At most ``keep`` lines are kept; the
    rest are counted by one ``findall``."""
    lines_rx = literal.lines
    matches = list(islice(lines_rx.finditer(buf, lo, hi), keep))
    if not matches:
        return None
    count = len(matches)
    ends = list(map(_MATCH_END, matches))
    if count == keep:
        count += len(lines_rx.findall(buf, ends[-1], hi))
    starts = list(map(_MATCH_START, matches))
    # The newline before each occurrence, or -1 on the buffer's first line.
    before = list(map(buf.rfind, repeat(nl), repeat(0), starts))
    # Newlines from one matching line's end to the next occurrence.
    steps = list(map(buf.count, repeat(nl), [0, *ends[:-1]], starts))
    steps[0] += first_line
    columns: Any = list(map(sub, starts, before))
    # Each line's slice starts at the newline before it, so that the joined slices split
    # back into the lines; on the buffer's first line (the first match only: a match runs
    # to its line's end) there is none, and no empty text before the first line's.
    leading = before[0] >= 0
    if not leading:
        before[0] = 0
    joined = buf[:0].join(map(buf.__getitem__, map(slice, before, ends)))
    if crlf and joined.find(b"\r") >= 0:
        # A line's CR before its LF ends up before the LF of the next line's slice.
        joined = joined.replace(b"\r\n", b"\n")
        if joined.endswith(b"\r") and ends[-1] < size and buf[ends[-1] : ends[-1] + 1] == b"\n":
            joined = joined[:-1]
    decode = _same
    if not isinstance(joined, str):
        decode = _ascii
        if not joined.isascii():
            decode = _text_decoder(buf, size)
            columns = [
                len(decode(buf[start - column + 1 : start])) + 1
                for start, column in zip(starts, columns, strict=True)
            ]
    texts = decode(joined).split("\n")
    rows = zip(accumulate(steps), columns, islice(texts, leading, None), repeat(literal.size))
    result = FileMatches(count, list(rows))
    if context:
        if decode is _ascii:
            decode = _text_decoder(buf, size)  # the context lines may not be ASCII
        _add_context(buf, nl, result, context, decode, first_line)
    return result


def _text_decoder(data: Any, size: int) -> Callable[[bytes], str]:
    """How the lines of the BOM-less bytes ``data[:size]`` decode: as ASCII, UTF-8 when
    they are valid UTF-8, else as latin-1 (see ``_decode_text``)."""
    if size < len(data):
        data = data[:size]
    if data.isascii():
        return _ascii
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return _latin1
    return _utf8


_MATCH_START = re.Match.start
_MATCH_END = re.Match.end


def _count_by_line(counter, buf, nl, pos: int, hi: int) -> int:  # type: ignore[no-untyped-def]
    if isinstance(counter, Re2LineCounter):
        return counter.count(buf, pos, hi)
    found = len(counter.findall(buf, pos, hi))
    # An empty match right at ``hi``, after a newline, is no line of this range.
    if found and buf[hi - 1 : hi] == nl and counter.fullmatch(buf, hi, hi) is not None:
        found -= 1
    return found


def _count_lines(buf, search, nl, pos: int, hi: int) -> int:  # type: ignore[no-untyped-def]
    """Matching lines starting in ``[pos, hi)`` (no multiline), as ``_scan`` counts them."""
    n = len(buf)
    count = 0
    while pos < hi:
        m = search(buf, pos)
        if m is None:
            break
        start = m.start()
        if start >= hi and (hi < n or not n or buf[n - 1 : n] == nl):
            break
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


def _next_char(buf, index: int) -> int:  # type: ignore[no-untyped-def]
    # Past an empty match: one character on, not into the middle of a UTF-8 sequence.
    index += 1
    if isinstance(buf, bytes):
        while index < len(buf) and buf[index] & 0xC0 == 0x80:
            index += 1
    return index


def _line_end(buf, nl, index: int) -> int:  # type: ignore[no-untyped-def]
    # The end of the line holding the last character before ``index``.
    end = buf.find(nl, max(index - 1, 0))
    return len(buf) if end < 0 else end


def _add_context(  # type: ignore[no-untyped-def]
    buf, nl, result: FileMatches, context: int, to_str, first_line: int
) -> None:
    lines = buf.split(nl)
    if lines and not lines[-1]:
        lines.pop()
    last_line = first_line + len(lines) - 1
    spans = [(line, line + text.count("\n")) for line, _, text, _ in result.lines]
    matched = {number for first, last in spans for number in range(first, last + 1)}
    for first, last in spans:
        for number in range(first - context, last + context + 1):
            if first_line <= number <= last_line and number not in matched:
                result.context[number] = to_str(lines[number - first_line])
