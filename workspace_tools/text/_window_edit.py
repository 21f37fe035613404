"""Exact edits of a UTF-8 text made on the lines around them, so that a large file is
neither decoded nor copied whole: what an edit of a big file costs beside its read and write
is one search of its bytes per edit.

UTF-8 is self-synchronising (no character's bytes occur inside another's, and LF is one
byte no other character holds), so ``old_text``'s bytes occur in the text's bytes exactly
where ``old_text`` occurs in the text, and a line starts after each LF byte. An ``edits``
list is made in turn on one *window*: the lines from the first edit's place on, grown to
hold each later edit's place (and, when places are apart, the lines between them), while
the text before and after it stays the original bytes. Each edit searches the whole text as
the edits before it left it (those bytes, the window's new text between them, and the
places that cross from one into the other), so that its one place is found, or a second one
anywhere sends the list to the whole text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from workspace_tools._errors import ToolError
from workspace_tools.text._decode import convert_newlines
from workspace_tools.text._diff import CONTEXT_LINES, lines_after, lines_before, spans_fit_window
from workspace_tools.text._match import EditResult, replace_text
from workspace_tools.text._spans import Span, compose, shifted, unchanged_ends


@dataclass(frozen=True)
class Replacement:
    """One edit of a list: ``old`` becomes ``new``, every place when ``replace_all``."""

    old: str
    new: str
    replace_all: bool = False


@dataclass(frozen=True)
class WindowEdit:
    """Edits of a UTF-8 text made on the lines around them (:func:`replace_in_window`).

    Attributes:
        start, stop: the window's offsets in the text's bytes (its characters' too when
            the text is ASCII): whole lines, those the edits change (and those between
            them) and, on each side, one more than a diff shows as context (as far as the
            text goes).
        old: the window's text.
        new: its text after the edits; the bytes around the window are unchanged.
        spans: where ``old`` became ``new`` (:mod:`._spans`): the edits' spans, composed.
        results: each edit's :func:`replace_text` result at its turn, on the lines the
            window then held: its ``replacements`` and ``match`` are the edit's.
    """

    start: int
    stop: int
    old: str
    new: str
    spans: tuple[Span, ...]
    results: tuple[EditResult, ...]

    @property
    def unchanged(self) -> tuple[int, int]:
        """``(head, tail)``: characters at the start and the end of ``old`` that every edit
        left in place."""
        return unchanged_ends(self.spans, len(self.old))


def replace_in_window(
    data: bytes, edits: Sequence[Replacement], *, newline: str, path: str
) -> WindowEdit | None:
    """:func:`replace_text` of each of ``edits`` in turn, the first on the text whose UTF-8
    bytes are ``data``, each later one on the text the edits before it left, made on the
    lines around them; ``None`` when an edit needs the whole text, which
    :func:`replace_text` then takes: its ``old`` (or it with ``newline`` breaks, as there)
    is nowhere, so a fallback may match, or is in more than one place (overlapping ones
    too); :func:`replace_text` refuses it on the lines around it, where its message would
    number those lines; or its result holds a lone surrogate, which no UTF-8 holds.

    The results are :func:`replace_text`'s on the whole texts (the module docstring says
    why): an edit's window holds the one place of the first form of ``old`` found in the
    whole text (the forms before it are nowhere in the text, so nowhere in the window) and
    starts at a line's start, as the edit's line context needs; the window returned ends
    past the lines a diff of the change shows.

    Args:
        data: the text's bytes: strict UTF-8 without a BOM (the caller checks).
        edits: the edits, in order (one at least).
        newline, path: as :func:`replace_text`'s.
    """
    text = _Spliced(data)
    results: list[EditResult] = []
    # Where the middle's original text became its text now.
    spans: list[Span] = []
    for edit in edits:
        place = text.only_place(edit.old, newline)
        if place is None:
            return None
        prepended = text.cover(*place)
        try:
            result = replace_text(
                text.middle,
                edit.old,
                edit.new,
                replace_all=edit.replace_all,
                newline=newline,
                path=path,
            )
            text.replace_middle(result.text)
        except (ToolError, UnicodeEncodeError):
            return None
        spans = compose(shifted(spans, prepended), result.spans)
        results.append(result)
    # One line more on each side than a diff's context (a change ending in an LF can move
    # the diff's span a line down); and more while the change slides on across repeated
    # lines past them (deleting one of many blank lines changes the last of them).
    lines = CONTEXT_LINES + 1
    while True:
        start = lines_before(data, text.start, lines)
        stop = lines_after(data, text.stop, lines)
        above = data[start : text.start].decode("utf-8")
        below = data[text.stop : stop].decode("utf-8")
        window = WindowEdit(
            start,
            stop,
            data[start:stop].decode("utf-8"),
            above + text.middle + below,
            tuple(shifted(spans, len(above))),
            tuple(results),
        )
        if spans_fit_window(
            window.old, window.new, window.spans, at_start=start == 0, at_end=stop == len(data)
        ):
            return window
        lines *= 2


class _Spliced:
    """A text as edits leave it: ``data[:start]``, ``middle`` (its UTF-8 bytes
    ``middle_bytes``), ``data[stop:]``. ``start`` is always a line's start; before the first
    :meth:`cover`, the middle is empty and stands nowhere in particular."""

    __slots__ = ("covered", "data", "middle", "middle_bytes", "start", "stop")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.start = self.stop = 0
        self.middle = ""
        self.middle_bytes = b""
        self.covered = False

    def only_place(self, old: str, newline: str) -> tuple[int, int] | None:
        """``(offset, end)`` in the text's bytes of the one place of the first form of
        ``old`` (as it is, then with ``newline`` breaks) that occurs at all; ``None`` when
        none does or it occurs twice (overlapping occurrences too)."""
        for candidate in dict.fromkeys((old, convert_newlines(old, newline))):
            try:
                needle = candidate.encode("utf-8")
            except UnicodeEncodeError:
                continue  # a lone surrogate: no decoded text holds one
            places = self._places(needle)
            if places:
                return (places[0], places[0] + len(needle)) if len(places) == 1 else None
        return None

    def _places(self, needle: bytes) -> list[int]:
        """Offsets of ``needle`` in the text's bytes, overlapping ones too, up to two;
        not those that would cut a CRLF in two (see ``replace_text``)."""
        data, start, stop, middle = self.data, self.start, self.stop, self.middle_bytes
        found: list[int] = []
        check = needle.startswith(b"\n") or needle.endswith(b"\r")
        size = len(needle)
        # Wholly before the middle.
        at = data.find(needle, 0, start)
        while at != -1 and len(found) < 2:
            if not (check and self._splits_crlf(at, size)):
                found.append(at)
            at = data.find(needle, at + 1, start)
        # Touching the middle, or across where it meets the bytes around it: searched in
        # the middle and the bytes short of the needle's length on each side of it, where
        # no place is wholly outside it.
        reach = size - 1
        low = max(0, start - reach)
        joined = data[low:start] + middle + data[stop : stop + reach]
        at = joined.find(needle)
        while at != -1 and len(found) < 2:
            if not (check and self._splits_crlf(low + at, size)):
                found.append(low + at)
            at = joined.find(needle, at + 1)
        # Wholly after it.
        shift = start + len(middle) - stop
        at = data.find(needle, stop)
        while at != -1 and len(found) < 2:
            if not (check and self._splits_crlf(at + shift, size)):
                found.append(at + shift)
            at = data.find(needle, at + 1)
        return found

    def _splits_crlf(self, offset: int, size: int) -> bool:
        """``replace_text``'s ``splits_crlf`` of the text's bytes ``offset:offset + size``
        (the text being the bytes before the middle, the middle and the bytes after it)."""
        return (offset > 0 and self._bytes_at(offset - 1, 2) == b"\r\n") or (
            self._bytes_at(offset + size - 1, 2) == b"\r\n"
        )

    def _bytes_at(self, offset: int, count: int) -> bytes:
        """The text's ``count`` bytes from ``offset`` (fewer at its end)."""
        data, start, middle = self.data, self.start, self.middle_bytes
        end, middle_end = offset + count, start + len(middle)
        out = data[offset : min(end, start)] if offset < start else b""
        if offset < middle_end and end > start:
            out += middle[max(offset, start) - start : min(end, middle_end) - start]
        if end > middle_end:
            shift = self.stop - middle_end
            out += data[max(offset, middle_end) + shift : end + shift]
        return out

    def cover(self, offset: int, end: int) -> int:
        """Grow the middle to hold the text's bytes ``offset:end``, the start of the line
        ``offset`` is on and the rest of the line ``end`` is on (and what lies between them
        and the middle), as the edit's one-line rule reads them. Returns how many characters
        it gained at its start."""
        end = self._line_end(end)
        data = self.data
        if not self.covered:  # the text is ``data`` still
            self.covered = True
            self.start = self.stop = data.rfind(b"\n", 0, offset) + 1
        start, stop = self.start, self.stop
        # The middle starts a line, so a place from there on has its line's start in it;
        # one before it is in ``data``'s bytes before it.
        new_start = data.rfind(b"\n", 0, offset) + 1 if offset < start else start
        new_stop = stop + max(0, end - start - len(self.middle_bytes))
        before, after = data[new_start:start], data[stop:new_stop]
        gained = before.decode("utf-8"), after.decode("utf-8")
        self.middle_bytes = before + self.middle_bytes + after
        self.middle = gained[0] + self.middle + gained[1]
        self.start, self.stop = new_start, new_stop
        return len(gained[0])

    def _line_end(self, end: int) -> int:
        """Where the line the text's byte ``end`` is on ends (at its LF, or the text's end),
        or ``end`` when the middle holds, or grows to reach, the rest of that line: the
        edit's one-line rule reads it."""
        data, start, middle = self.data, self.start, self.middle_bytes
        if end <= start or middle.find(b"\n", end - start) != -1:
            return end
        middle_end = start + len(middle)
        found = data.find(b"\n", max(end - middle_end, 0) + self.stop)
        return (len(data) if found == -1 else found) - self.stop + middle_end

    def replace_middle(self, text: str) -> None:
        """Make ``text`` the middle.

        Raises:
            UnicodeEncodeError: ``text`` holds a lone surrogate.
        """
        self.middle_bytes = text.encode("utf-8")
        self.middle = text
