"""Applying a file's patch chunks to its text: where each chunk goes, and the new text.

Where a chunk goes. Chunks are placed in order, each after the previous one's lines (a
patch lists its changes from the top of the file down). A chunk's ``@@`` anchors are found
first, in order, each the first line after the one before that equals it; the chunk's
expected lines (context and removed) must then occur after the last anchor. When the last
anchor line occurs more than once, the places after each occurrence count together: lines
found after two ``@@ def __init__`` lines are ambiguous (stack a ``@@ class`` line above
it), never the first method's taken, and a chunk may start at a later occurrence of its
anchor line. An anchor line found only above the previous chunk (each chunk of a function
naming it, as git's hunk headers do) still counts when the lines are found after that
chunk. Among several places, the one place inside the block an anchor line opens
(every non-blank line between them indented deeper than the anchor line: ``@@ def f``
names the lines in ``f``, not the same lines in a later ``g``) is taken; otherwise the chunk
is ambiguous. A chunk of only added lines goes right after its anchor, which must then occur
once. A chunk marked ``*** End of File`` must end at the file's end.

Lines are compared by these levels in turn, the first level with a match deciding:
``exact``, ``trailing_whitespace`` (ignored), ``surrounding_whitespace`` (leading and
trailing ignored), ``unicode_punctuation`` (also typographic dashes, quotes and spaces read
as their ASCII forms). At every level the match must be unique: two places matching at the
level that first matches is ``AMBIGUOUS_MATCH`` naming both, never the first one taken.
Line endings never take part (a line is compared without its LF or CRLF).

The new text. A context line is the file's own line, byte for byte, whatever level matched.
When the match ignored leading whitespace, an added line's indentation is re-based as
``edit_file``'s fallback does: the chunk's base indentation becomes the file's (a patch
written with spaces adds tab-indented lines to a tab-indented file).
An added line takes the line ending of the removed line it stands in for (in order, within
a run of removed then added lines), else the file's newline style. The file's final
newline state is kept: a file that ended without a line break still does, one that ended
with one still does.

Failures say the file, the chunk (its number and patch line), the first line of the chunk
that differs from the nearest place in the file, and those nearest lines; a chunk whose
result is already in the file is reported as already applied.
"""

from __future__ import annotations

import bisect
import difflib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools.text._indentation import Shift, indent_of, shift_of
from workspace_tools.text._match_hint import escape
from workspace_tools.text._patch_parse import Chunk

_FOLD = str.maketrans(
    {
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
        **dict.fromkeys("\u2018\u2019\u201a\u201b", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f", '"'),
        **dict.fromkeys(
            "\u00a0\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f\u3000",
            " ",
        ),
    }
)

LEVELS: tuple[tuple[str, Callable[[str], str]], ...] = (
    ("exact", lambda line: line),
    ("trailing_whitespace", str.rstrip),
    ("surrounding_whitespace", str.strip),
    ("unicode_punctuation", lambda line: line.strip().translate(_FOLD)),
)
"""The match levels in order: name and the normal form lines are compared in."""

LEVEL_NAMES = tuple(name for name, _ in LEVELS)

# From this level on leading whitespace is ignored, so added lines are re-based onto the
# file's indentation (tabs stay tabs).
_LEADING_IGNORED = LEVEL_NAMES.index("surrounding_whitespace")

_SHOWN_LINES = 6
_SHOWN_PLACES = 10


@dataclass(frozen=True)
class PatchedText:
    """A file's text after its chunks.

    Attributes:
        text: the new text, line endings as described in the module docstring.
        match: the loosest level any chunk needed (``exact`` when every one matched as is).
        spans: per chunk, ``(old start, old end, new start, new end)``: the 0-based line
            ranges it covered in the old text and in the new, in order and disjoint; every
            line outside them is the same in both.
        old_count, new_count: the number of lines of each text (split after each LF, as
            ``split_lines`` does).
    """

    text: str
    match: str
    spans: tuple[tuple[int, int, int, int], ...] = ()
    old_count: int = 0
    new_count: int = 0
    # The old text's lines and the new text's pieces, out of which ``old_slice`` and
    # ``new_slice`` cut line ranges without splitting either text again.
    _old: _Lines | None = field(default=None, repr=False)
    _pieces: tuple[str, ...] = field(default=(), repr=False)
    _piece_spans: tuple[tuple[int, int], ...] = field(default=(), repr=False)

    def old_slice(self, start: int, end: int) -> str:
        """The old text's lines ``[start, end)`` (0-based), joined with their endings."""
        return "" if self._old is None else self._old.slice(start, end)

    def new_slice(self, start: int, end: int) -> str:
        """The new text's lines ``[start, end)`` (0-based), joined with their endings;
        each span lies wholly inside the range or wholly outside it."""
        parts: list[str] = []
        at, shift = start, 0  # shift: new line number less old line number, before ``at``
        for (_, a1, b0, b1), (p0, p1) in zip(self.spans, self._piece_spans, strict=True):
            if b1 <= at:
                shift = b1 - a1
                continue
            if b0 >= end:
                break
            if at < b0:
                parts.append(self.old_slice(at - shift, b0 - shift))
            parts.append("".join(self._pieces[p0:p1]))
            at, shift = b1, b1 - a1
        if at < end:
            parts.append(self.old_slice(at - shift, end - shift))
        return "".join(parts)


class _Lines:
    """A file's lines: with endings, without, and each level's normal forms (made on need).

    The text is split once, at LF; a line's ending and its offset in the text are derived
    from that split when asked, so a large file with a few chunks costs one split."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.raw = text.split("\n")
        self.final_break = self.raw[-1] == ""
        if self.final_break:
            self.raw.pop()
        self.count = len(self.raw)
        if "\r" in text:
            # A CR is part of the line ending only before an LF; a lone CR is content.
            last = self.count - 1 if not self.final_break else self.count
            self.bare = [line.removesuffix("\r") for line in self.raw[:last]]
            self.bare.extend(self.raw[last:])
        else:
            self.bare = self.raw
        self._normal: dict[int, list[str]] = {0: self.bare}
        # Line numbers whose offsets are known, in order, and those offsets: a new one is
        # counted on from the nearest known line before it.
        self._known = [0]
        self._offsets = [0]

    def normal(self, level: int) -> list[str]:
        if level not in self._normal:
            normalise = LEVELS[level][1]
            self._normal[level] = [normalise(line) for line in self.bare]
        return self._normal[level]

    def full(self, i: int) -> str:
        """Line ``i`` with its ending."""
        return self.raw[i] + ("\n" if i < self.count - 1 or self.final_break else "")

    def ending(self, i: int) -> str:
        """Line ``i``'s ending: ``"\\r\\n"``, ``"\\n"`` or ``""`` (a last line without one)."""
        return self.full(i)[len(self.bare[i]) :]

    def offset(self, i: int) -> int:
        """Where line ``i`` starts in the text (``i`` may be the line count)."""
        k = bisect.bisect_right(self._known, i) - 1
        known, at = self._known[k], self._offsets[k]
        if known != i:
            at += sum(map(len, self.raw[known:i])) + (i - known)
            self._known.insert(k + 1, i)
            self._offsets.insert(k + 1, at)
        return min(at, len(self.text))

    def slice(self, start: int, end: int) -> str:
        """Lines ``[start, end)`` with their endings."""
        if start >= end:
            return ""
        low = self.offset(start)
        return self.text[low : self.offset(end)]


def apply_chunks(text: str, chunks: tuple[Chunk, ...], *, newline: str, path: str) -> PatchedText:
    """``text`` with ``chunks`` applied by the rules in this module's docstring.

    Args:
        text: the file's text with its own line endings.
        chunks: the file's chunks, in order.
        newline: the file's newline style (``"\\n"`` or ``"\\r\\n"``) for added lines that
            replace none.
        path: the file's path for messages.

    Raises:
        ToolError: ``NO_MATCH`` when a chunk's anchor or lines are not in the file (or its
            result already is), ``AMBIGUOUS_MATCH`` when they match more than one place,
            ``INVALID_ARGUMENTS`` for a chunk that only adds lines and says nowhere where.
    """
    lines = _Lines(text)
    count = lines.count
    # ``out`` holds pieces: unchanged runs of lines as one slice of ``text`` each, and each
    # line a chunk wrote; ``made`` counts the new text's lines so far.
    out: list[str] = []
    made = 0
    cursor = 0
    loosest = 0
    spans: list[tuple[int, int, int, int]] = []
    pieces: list[tuple[int, int]] = []
    for number, chunk in enumerate(chunks, 1):
        start, level = _locate(lines, chunk, cursor, number, path)
        loosest = max(loosest, level)
        # Lines added after a last line without a break give that line one: it changes
        # too, so it is a piece of its own, in the chunk's span.
        widen = start == count and count > 0 and not lines.final_break
        if start > cursor + widen:
            out.append(lines.slice(cursor, start - widen))
            made += start - widen - cursor
        if widen and start > cursor:
            out.append(lines.full(count - 1))
            made += 1
        begun, first = made, len(out)
        if widen and start > cursor:
            begun, first = made - 1, first - 1
        removed: list[str] = []
        at = start
        rebase = _rebase(lines, chunk, start) if level >= _LEADING_IGNORED else None
        for kind, body in chunk.lines:
            if kind == " ":
                out.append(lines.full(at))
                made += 1
                removed.clear()
                at += 1
            elif kind == "-":
                removed.append(lines.ending(at))
                at += 1
            else:
                ending = removed.pop(0) if removed else newline
                if rebase:
                    body = rebase(body)
                out.append(body + (ending or newline))
                made += 1
        a0 = start - 1 if widen and start > cursor else start
        if widen and start == cursor and spans:
            # The last line is the previous chunk's: both chunks are one span.
            a0, begun = spans[-1][0], spans[-1][2]
            first = pieces[-1][0]
            spans.pop()
            pieces.pop()
        spans.append((a0, at, begun, made))
        pieces.append((first, len(out)))
        cursor = at
    if cursor < count:
        out.append(lines.slice(cursor, count))
        made += count - cursor
    new = _keep_final_newline(text, out, newline)  # fixes ``out`` in place too
    return PatchedText(
        new, LEVELS[loosest][0], tuple(spans), count, made, lines, tuple(out), tuple(pieces)
    )


def _rebase(lines: _Lines, chunk: Chunk, start: int) -> Callable[[str], str] | None:
    """How a chunk matched with leading whitespace ignored maps its indentation onto the
    file's, applied to each added line; ``None`` when it needs no mapping or none is clear.

    Either the chunk's base indentation becomes the file's (the relative indentation of
    its lines is the file's), or the chunk indents by ``w`` spaces where the file has a tab
    (every paired line says so, for one ``w``): then an added line's run of spaces becomes
    tabs, as many as it holds ``w``'s.
    """
    old = chunk.old
    found = lines.bare[start : start + len(old)]
    shift = shift_of(old, found)
    if isinstance(shift, Shift):
        if shift.old_base == shift.file_base:
            return None
        base, into = shift.old_base, shift.file_base

        def rebased(line: str) -> str:
            if line.strip() and line.startswith(base):
                return into + line[len(base) :]
            return line

        return rebased
    widths: set[int] = set()
    for o, f in zip(old, found, strict=True):
        ours, theirs = indent_of(o), indent_of(f)
        if not o.strip() or ours == theirs:
            continue
        if set(ours) != {" "} or set(theirs) != {"\t"} or len(ours) % len(theirs):
            return None
        widths.add(len(ours) // len(theirs))
    if len(widths) != 1:
        return None
    width = widths.pop()

    def tabs(line: str) -> str:
        ours = indent_of(line)
        if set(ours) != {" "} or len(ours) % width:
            return line
        return "\t" * (len(ours) // width) + line[len(ours) :]

    return tabs


def _keep_final_newline(text: str, out: list[str], newline: str) -> str:
    """Join ``out`` (pieces of whole lines) with every line but the last ending in a break,
    and the last ending as the file's last line did (with a break or without)."""
    if not out:
        return ""
    if text and not text.endswith("\n"):
        # Added lines all end in a break; the file's last line is the one line that may
        # not, and only lines added after it can follow it, so it is found from the end.
        i = len(out) - 1
        while i >= 0 and out[i].endswith("\n"):
            i -= 1
        if 0 <= i < len(out) - 1:
            out[i] += newline
        if out[-1].endswith("\n"):
            out[-1] = _bare(out[-1])
    elif not out[-1].endswith("\n"):
        out[-1] += newline
    return "".join(out)


def _bare(line: str) -> str:
    # A CR is part of the line ending only before an LF; a lone CR is content.
    return line[:-2] if line.endswith("\r\n") else line.removesuffix("\n")


def _locate(lines: _Lines, chunk: Chunk, cursor: int, number: int, path: str) -> tuple[int, int]:
    """``(first file line, level)`` of ``chunk``'s expected lines (0-based)."""
    where = f"{path}: chunk {number} (patch line {chunk.line})"
    try:
        return _place(lines, chunk, cursor, cursor, where)
    except ToolError as exc:
        if not (chunk.anchors and chunk.old and cursor) or exc.code is not ErrorCode.NO_MATCH:
            raise
        # The @@ line may name the block the previous chunk was in too, as git's hunk
        # headers do: found above the cursor, it still orders the lines after the cursor.
        try:
            _anchor_hits(lines, chunk.anchors, 0, where)
        except ToolError:
            raise exc from None
        # The anchors are in the file: what fails now (the lines, or their several
        # places) is what the model must fix.
        return _place(lines, chunk, 0, cursor, where)


def _place(
    lines: _Lines, chunk: Chunk, anchors_from: int, cursor: int, where: str
) -> tuple[int, int]:
    """``_locate`` with the anchors sought from line ``anchors_from`` and the chunk's lines
    from ``cursor`` on (and after the anchors)."""
    low = cursor
    old = chunk.old
    hits: list[int] = []
    if chunk.anchors:
        hits = _anchor_hits(lines, chunk.anchors, anchors_from, where)
        if not old and len(hits) > 1:
            raise _ambiguous_anchor(where, chunk.anchors[-1], hits)
        low = max(cursor, hits[0] + 1)
    if not old:
        if chunk.anchors:
            return low, 0
        if chunk.end_of_file or not lines.bare:
            return len(lines.bare), 0
        raise ToolError(
            f"{where} only adds lines and does not say where: give the lines before them as "
            "context (' ' lines) or an @@ line naming the place",
            ErrorCode.INVALID_ARGUMENTS,
        )
    for level, (name, normalise) in enumerate(LEVELS):
        wanted = [normalise(line) for line in old]
        places = _places(
            lines.normal(level), wanted, low, len(lines.bare), end_of_file=chunk.end_of_file
        )
        if len(places) > 1:
            inside = _enclosed(lines, hits, places)
            if len(inside) != 1:
                raise _ambiguous(where, places, name)
            places = inside
        if places:
            return places[0], level
    raise _not_found(lines, chunk, cursor, where)


def _enclosed(lines: _Lines, hits: list[int], places: list[int]) -> list[int]:
    """The ``places`` inside the block an anchor occurrence opens: every non-blank line
    between the anchor line and the place is indented deeper than it (the place itself may
    be the line that closes the block, as ``}`` or the next ``def`` at its depth)."""
    inside: list[int] = []
    bare = lines.bare
    for hit in hits:
        depth = _depth(bare[hit])
        end = hit + 1
        while end < len(bare) and (not bare[end].strip() or _depth(bare[end]) > depth):
            end += 1
        inside.extend(p for p in places if hit < p <= end)
    return sorted(set(inside))


def _depth(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _places(
    found: list[str], wanted: list[str], low: int, high: int, *, end_of_file: bool
) -> list[int]:
    """Starts in ``[low, high)`` where ``wanted`` matches ``found`` (at the end only, when
    ``end_of_file``)."""
    span = len(wanted)
    if end_of_file:
        start = len(found) - span
        hit = low <= start < max(high, low + 1) and found[start:] == wanted
        return [start] if hit else []
    head = wanted[0]
    places = []
    stop = min(high, len(found) - span + 1)
    i = low
    while i < stop:
        try:
            i = found.index(head, i, stop)  # the first line, found in C
        except ValueError:
            break
        if found[i : i + span] == wanted:
            places.append(i)
        i += 1
    return places


def _anchor_hits(lines: _Lines, anchors: tuple[str, ...], cursor: int, where: str) -> list[int]:
    """The lines (0-based) where the last anchor occurs after the ones before it."""
    low = cursor
    for k, anchor in enumerate(anchors):
        last = k == len(anchors) - 1
        for level, (_, normalise) in enumerate(LEVELS):
            wanted = normalise(anchor)
            found = lines.normal(level)
            hits = [i for i in range(low, len(found)) if found[i] == wanted]
            if hits:
                break
        else:
            raise ToolError(
                f"{where}: its @@ line '{escape(anchor)}' is not in the file"
                + (" after the previous chunk" if cursor else "")
                + _closest_single(lines, anchor, cursor),
                ErrorCode.NO_MATCH,
            )
        if last:
            return hits
        low = hits[0] + 1
    return []  # no anchors: the caller does not ask


def _ambiguous_anchor(where: str, anchor: str, hits: list[int]) -> ToolError:
    shown = ", ".join(str(h + 1) for h in hits[:_SHOWN_PLACES])
    more = ", ..." if len(hits) > _SHOWN_PLACES else ""
    return ToolError(
        f"{where} only adds lines, right after its @@ line '{escape(anchor)}', which occurs "
        f"{len(hits)} times, at lines {shown}{more}; give the lines before the new ones as "
        "context (' ' lines) or stack an @@ line above it (the enclosing class) so that it "
        "names one place",
        ErrorCode.AMBIGUOUS_MATCH,
        details={"lines": [h + 1 for h in hits]},
    )


def _ambiguous(where: str, places: list[int], level: str) -> ToolError:
    shown = ", ".join(str(p + 1) for p in places[:_SHOWN_PLACES])
    more = ", ..." if len(places) > _SHOWN_PLACES else ""
    how = "" if level == "exact" else f" when {level.replace('_', ' ')} is ignored"
    return ToolError(
        f"{where} matches {len(places)} places{how}, starting at lines {shown}{more}; add "
        "context lines or an @@ line (the enclosing function or class) so that it matches "
        "one place",
        ErrorCode.AMBIGUOUS_MATCH,
        details={"lines": [p + 1 for p in places]},
    )


def _not_found(lines: _Lines, chunk: Chunk, cursor: int, where: str) -> ToolError:
    new = chunk.new
    for level in (0, 1):
        normalise = LEVELS[level][1]
        wanted = [normalise(line) for line in new]
        places = _places(lines.normal(level), wanted, 0, len(lines.bare), end_of_file=False)
        if places and new != chunk.old:
            first = places[0] + 1
            return ToolError(
                f"{where} is already applied: its resulting lines are in the file at line "
                f"{first}; do not send this change again",
                ErrorCode.NO_MATCH,
                details={"already_applied": True, "line": first},
            )
    old = chunk.old
    message = f"{where}: its expected lines (the ' ' and '-' lines) are not in the file"
    if chunk.end_of_file:
        message += " at its end (the chunk is marked '*** End of File')"
    elif cursor:
        message += f" after line {cursor}, where the previous chunk ended"
    start = _nearest(lines, old, cursor)
    if start is None:
        hint = _closest_single(lines, old[0], cursor) or (
            ". None of its lines is in the file: read the file again and copy its lines exactly"
        )
        return ToolError(message + hint, ErrorCode.NO_MATCH)
    loose = LEVELS[-1][1]
    if lines.normal(3)[start : start + len(old)] == [loose(x) for x in old]:
        if start < cursor:
            why = "above the previous chunk: give the chunks of a file in the order of its lines"
        elif chunk.end_of_file:
            why = "not at its end: leave out '*** End of File'"
        else:
            why = "not after its @@ line: correct the @@ line or leave it out"
        return ToolError(
            f"{message}; they are at line {start + 1}, {why}",
            ErrorCode.NO_MATCH,
            details={"nearest_line": start + 1},
        )
    differs = next(
        (
            k
            for k, line in enumerate(old)
            if start + k >= len(lines.bare) or lines.normal(3)[start + k] != LEVELS[3][1](line)
        ),
        None,
    )
    if differs is not None:
        has = lines.bare[start + differs] if start + differs < len(lines.bare) else None
        message += (
            f". Its line {differs + 1}, '{escape(old[differs])}', differs from the file's line "
            + (f"{start + differs + 1}, '{escape(has)}'" if has is not None else "(end of file)")
        )
    last = min(start + max(len(old), 1), len(lines.bare), start + _SHOWN_LINES)
    block = "\n".join(f"{i + 1:6}\t{escape(lines.bare[i])}" for i in range(start, last))
    message += f". The nearest lines in the file are {start + 1}-{last}:\n{block}"
    return ToolError(message, ErrorCode.NO_MATCH, details={"nearest_line": start + 1})


def _nearest(lines: _Lines, old: list[str], cursor: int) -> int | None:
    """The start whose lines agree with most of ``old`` (loosest level), at or after
    ``cursor`` when any does; ``None`` when no line agrees."""
    found = lines.normal(3)
    wanted = [LEVELS[3][1](line) for line in old]
    where: dict[str, list[int]] = {}
    for i, line in enumerate(found):
        if line:
            where.setdefault(line, []).append(i)
    votes: Counter[int] = Counter()
    for k, line in enumerate(wanted):
        for i in where.get(line, ()):
            if i - k >= 0:
                votes[i - k] += 1
    if not votes:
        return None
    after = {s: n for s, n in votes.items() if s >= cursor} or dict(votes)
    return max(after, key=lambda s: (after[s], -s))


def _closest_single(lines: _Lines, line: str, cursor: int) -> str:
    near = difflib.get_close_matches(line.strip(), [b.strip() for b in lines.bare], n=1, cutoff=0.6)
    if not near:
        return ""
    index = next(i for i, b in enumerate(lines.bare) if b.strip() == near[0])
    return f". The most similar line is {index + 1}: '{escape(lines.bare[index])}'"
