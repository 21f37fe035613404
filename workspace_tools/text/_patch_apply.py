"""Applying a file's patch chunks to its text: where each chunk goes, and the new text.

Where a chunk goes. Chunks are placed in order, each after the previous one's lines (a
patch lists its changes from the top of the file down). A chunk's ``@@`` anchors are found
first, in order, each the first line after the one before that equals it (inside the block
the one before opens, when it occurs there: ``@@ class A`` then ``@@ def f`` is A's ``f``);
the chunk's expected lines (context and removed) must then occur after the last anchor.
When the last anchor line occurs more than once, the places after each occurrence count
together: lines found after two ``@@ def __init__`` lines are ambiguous (stack a ``@@
class`` line above it), never the first method's taken, and a chunk may start at a later
occurrence of its anchor line. An anchor line found only above the previous chunk (each
chunk of a function naming it, as git's hunk headers do) still counts when the lines are
found after that chunk. Among several places, the one place inside the block an anchor line
opens (every non-blank line between them indented deeper than the anchor line: ``@@ def f``
names the lines in ``f``, not the same lines in a later ``g``) is taken; otherwise the
chunk is ambiguous. A chunk of only added lines goes right after its anchor, which must
then occur once. A chunk marked ``*** End of File`` must end at the file's end; a chunk
whose last lines are blank context lines the file does not hold is placed without them at
the file's end (a blank line after the last one stands for the end, as both OpenAI
executors read it).

Lines are compared by these levels in turn, the first level with a match deciding:
``exact``, ``trailing_whitespace`` (ignored), ``surrounding_whitespace`` (leading and
trailing ignored), ``unicode_punctuation`` (also typographic dashes, quotes and spaces read
as their ASCII forms). At every level the match must be unique: two places matching at the
level that first matches is ``AMBIGUOUS_MATCH`` naming both, never the first one taken.
Line endings never take part (a line is compared without its LF or CRLF).

The new text. A context line is the file's own line, byte for byte, whatever level matched.
When the match ignored leading whitespace, an added line's indentation is re-based as
``edit_file``'s fallback does: the chunk's base indentation becomes the file's (a patch
written with spaces adds tab-indented lines to a tab-indented file); where the chunk's
relative depths are not the file's, an added line goes where the file has the chunk's lines
of its indentation, and a chunk adding a line at an indentation none of its ``' '`` and
``'-'`` lines has is refused (no rule tells its depth).
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
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import accumulate

from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools.text._indentation import Shift, common_indent, indent_of, shift_of
from workspace_tools.text._lines import lines_holding
from workspace_tools.text._match_hint import HINT_MAX_LINES, describe, escape
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
# A chunk line shorter than this found inside a line of the file is not named as part of
# it: "x = 1" is in many lines without being taken from one.
_MIN_PART = 10


@dataclass(frozen=True)
class PatchedText:
    """A file's text after its chunks.

    Attributes:
        text: the new text, line endings as described in the module docstring.
        match: the loosest level any chunk needed (``exact`` when every one matched as is).
        spans: per chunk, ``(old start, old end, new start, new end)``: the 0-based line
            ranges it covered in the old text and in the new, in order and disjoint; every
            line outside them is the same in both. Lines after the last one are not
            counted: a file's lines are counted only as far as its last change.
    """

    text: str
    match: str
    spans: tuple[tuple[int, int, int, int], ...] = ()
    # The old text, where each span starts and ends in it (character offsets), and the
    # pieces of the new text each span wrote: a span's region of either text is cut out of
    # these, neither text being split into lines.
    old: str = field(default="", repr=False)
    span_offsets: tuple[tuple[int, int], ...] = field(default=(), repr=False)
    pieces: tuple[str, ...] = field(default=(), repr=False)
    piece_spans: tuple[tuple[int, int], ...] = field(default=(), repr=False)

    def written(self, index: int) -> str:
        """The new text of span ``index``: the lines its chunk left, with their endings."""
        first, last = self.piece_spans[index]
        return "".join(self.pieces[first:last])


class _Lines:
    """A file's lines, split only on need.

    The exact level is searched in the text itself (``str.find`` of the wanted lines
    joined, at line starts) when the text has no CR, which is the common case and costs no
    split; a line number found so is counted from a known place before it. The lines with
    endings, without, each level's normal forms and every line's offset are made the first
    time a looser level, a text with CRs or a message needs them."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.final_break = not text or text.endswith("\n")
        # A CR is part of the line ending only before an LF; without any, a line compared
        # at the exact level is the text between two LFs.
        self.searchable = "\r" not in text
        self._raw: list[str] | None = None
        self._normal: dict[int, list[str]] = {}
        self._offsets: list[int] | None = None
        self._count: int | None = None
        self._foldable: bool | None = None
        # Offsets whose line number is known, in order, and those numbers: a new one is
        # counted from the nearest known offset before it, so that the matches of a file's
        # chunks, found in order, count its lines about once in all.
        self._known_at = [0]
        self._known_line = [0]

    @property
    def count(self) -> int:
        """The number of lines."""
        if self._count is None:
            self._count = self.line_at(len(self.text)) + (0 if self.final_break else 1)
        return self._count

    def line_at(self, offset: int) -> int:
        """The number of the line that starts at ``offset`` (the LFs before it)."""
        k = bisect.bisect_right(self._known_at, offset) - 1
        at, line = self._known_at[k], self._known_line[k]
        if at != offset:
            line += self.text.count("\n", at, offset)
            self._known_at.insert(k + 1, offset)
            self._known_line.insert(k + 1, line)
        return line

    @property
    def foldable(self) -> bool:
        """Whether the text holds a character the ``unicode_punctuation`` level folds."""
        if self._foldable is None:
            self._foldable = any(chr(c) in self.text for c in _FOLD)
        return self._foldable

    @property
    def raw(self) -> list[str]:
        """The lines without their LF (a CR before it kept)."""
        if self._raw is None:
            raw = self.text.split("\n")
            if self.final_break:
                raw.pop()
            self._raw = raw
        return self._raw

    @property
    def bare(self) -> list[str]:
        """The lines without their endings."""
        return self.normal(0)

    def normal(self, level: int) -> list[str]:
        if level not in self._normal:
            if level == 0:
                raw = self.raw
                if self.searchable:
                    bare = raw
                else:
                    last = self.count - 1 if not self.final_break else self.count
                    bare = [line.removesuffix("\r") for line in raw[:last]]
                    bare.extend(raw[last:])
                self._normal[0] = bare
            else:
                normalise = LEVELS[level][1]
                self._normal[level] = [normalise(line) for line in self.bare]
        return self._normal[level]

    def offset(self, i: int) -> int:
        """Where line ``i`` starts in the text (``i`` may be the line count)."""
        if self._offsets is None:
            self._offsets = list(accumulate((len(line) + 1 for line in self.raw), initial=0))
        return min(self._offsets[i], len(self.text))

    def last_line_offset(self) -> int:
        """Where the last line starts."""
        return self.text.rfind("\n", 0, len(self.text) - self.final_break) + 1

    def full_lines(self, offset: int, count: int) -> list[str]:
        """``count`` lines with their endings from the line starting at ``offset``."""
        text, out = self.text, []
        for _ in range(count):
            found = text.find("\n", offset)
            end = len(text) if found == -1 else found + 1
            out.append(text[offset:end])
            offset = end
        return out

    def exact_places(
        self, wanted: list[str], low: Position, high: int, *, end_of_file: bool
    ) -> list[Position]:
        """As :func:`_places` at the exact level, by searching the text: the places
        starting in ``[low, high)``, for a text that is :attr:`searchable`."""
        text = self.text
        body = "\n".join(wanted)
        # Every line ends with LF but a last line without one, which only a match that
        # runs to the end of the text can hold.
        tail = body if not self.final_break else body + "\n"
        if end_of_file:
            at = len(text) - len(tail)
            if not (text.endswith(tail) and (at == 0 or (at > 0 and text[at - 1] == "\n"))):
                return []
            start = self.line_at(at)
            return [(start, at)] if low[0] <= start < max(high, low[0] + 1) else []
        places: list[Position] = []
        needle = "\n" + body + "\n"
        if low == (0, 0) and high > 0 and text.startswith(needle[1:]):
            places.append((0, 0))
        # A hit at ``found`` is the LF that ends the line before the match.
        found = text.find(needle, max(low[1] - 1, 0))
        while found != -1:
            line = self.line_at(found + 1)
            if line >= high:
                return places
            places.append((line, found + 1))
            found = text.find(needle, found + 1)
        at = len(text) - len(body)
        if (
            not self.final_break
            and text.endswith(body)
            and (at == 0 or (at > 0 and text[at - 1] == "\n"))
            and at >= low[1]
        ):
            # The match holding the last line, which has no LF, comes after all others.
            start = self.line_at(at)
            if start < high:
                places.append((start, at))
        return places


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
    # ``out`` holds pieces: unchanged runs of lines as one slice of ``text`` each, and each
    # line a chunk wrote; ``made`` counts the new text's lines so far. Positions in the old
    # text go as line number and character offset together.
    out: list[str] = []
    made = 0
    cursor, cursor_at = 0, 0
    loosest = 0
    spans: list[tuple[int, int, int, int]] = []
    offsets: list[tuple[int, int]] = []
    pieces: list[tuple[int, int]] = []
    for number, given in enumerate(chunks, 1):
        chunk, start, start_at, level = _locate_chunk(
            lines, given, (cursor, cursor_at), number, path
        )
        loosest = max(loosest, level)
        # Lines added after a last line without a break give that line one: it changes
        # too, so it is a piece of its own, in the chunk's span.
        widen = not lines.final_break and start_at == len(text)
        last_at = lines.last_line_offset() if widen else start_at
        if start > cursor + widen:
            out.append(text[cursor_at:last_at])
            made += start - widen - cursor
        if widen and start > cursor:
            out.append(text[last_at:])
            made += 1
        begun, first = made, len(out)
        if widen and start > cursor:
            begun, first = made - 1, first - 1
        expected = lines.full_lines(start_at, len(chunk.old))
        removed: list[str] = []
        k = 0
        rebase = (
            _rebase(expected, chunk, start, f"{path}: chunk {number} (patch line {chunk.line})")
            if level >= _LEADING_IGNORED
            else None
        )
        for kind, body in chunk.lines:
            if kind == " ":
                out.append(expected[k])
                made += 1
                removed.clear()
                k += 1
            elif kind == "-":
                removed.append(_ending(expected[k]))
                k += 1
            else:
                ending = removed.pop(0) if removed else newline
                if rebase:
                    body = rebase(body)
                out.append(body + (ending or newline))
                made += 1
        at, at_offset = start + k, start_at + sum(map(len, expected))
        a0, a0_at = (start - 1, last_at) if widen and start > cursor else (start, start_at)
        if widen and start == cursor and spans:
            # The last line is the previous chunk's: both chunks are one span.
            a0, begun = spans[-1][0], spans[-1][2]
            a0_at = offsets[-1][0]
            first = pieces[-1][0]
            spans.pop()
            offsets.pop()
            pieces.pop()
        spans.append((a0, at, begun, made))
        offsets.append((a0_at, at_offset))
        pieces.append((first, len(out)))
        cursor, cursor_at = at, at_offset
    if cursor_at < len(text):
        out.append(text[cursor_at:])
    new = _keep_final_newline(text, out, newline)  # fixes ``out`` in place too
    return PatchedText(
        new,
        LEVELS[loosest][0],
        tuple(spans),
        text,
        tuple(offsets),
        tuple(out),
        tuple(pieces),
    )


def _ending(line: str) -> str:
    """A line's ending: ``"\\r\\n"``, ``"\\n"`` or ``""`` (a last line without one)."""
    if line.endswith("\r\n"):
        return "\r\n"
    return "\n" if line.endswith("\n") else ""


def _rebase(
    expected: list[str], chunk: Chunk, start: int, where: str
) -> Callable[[str], str] | None:
    """How a chunk matched with leading whitespace ignored (at file line index ``start``)
    maps its indentation onto the file's, applied to each added line; ``None`` when it
    needs no mapping.

    Either the chunk's base indentation becomes the file's (the relative indentation of
    its lines is the file's); or, past the bases, the chunk indents by ``w`` spaces where
    the file has a tab (every paired line says so, for one ``w``): then the base becomes the
    file's and the run of spaces after it tabs, as many as it holds ``w``'s; or else, the
    chunk's depths being other than the file's (its body 4 spaces deeper than its ``if``
    where the file's is 2), an added line goes where the file has the chunk's ``' '`` and
    ``'-'`` lines of its indentation, and stays as it is where those are at several (a
    file that mixes tabs and spaces: nothing is guessed).

    Raises:
        ToolError: ``NO_MATCH`` when, by that last rule, an added line that is not blank
            has an indentation that none of the chunk's ``' '`` and ``'-'`` lines has: its
            depth in the file cannot be told, and written as it is it could land at a
            wrong one.
    """
    old = chunk.old
    found = [_bare(line) for line in expected]
    shift = shift_of(old, found)
    if isinstance(shift, Shift):
        if shift.old_base == shift.file_base:
            return None
        return partial(_rebased, shift.old_base, shift.file_base, 0)
    pairs = [(o, f) for o, f in zip(old, found, strict=True) if o.strip()]
    base = common_indent([o for o, _ in pairs])
    into = common_indent([f for _, f in pairs])
    widths: set[int] = set()
    for o, f in pairs:
        ours, theirs = indent_of(o)[len(base) :], indent_of(f)[len(into) :]
        if ours == theirs:
            continue
        if set(ours) != {" "} or set(theirs) != {"\t"} or len(ours) % len(theirs):
            widths.clear()
            break
        widths.add(len(ours) // len(theirs))
    if len(widths) == 1:
        return partial(_rebased, base, into, widths.pop())
    depths: dict[str, set[str]] = {}
    for o, f in pairs:
        depths.setdefault(indent_of(o), set()).add(indent_of(f))
    for kind, body in chunk.lines:
        if kind == "+" and body.strip() and indent_of(body) not in depths:
            raise _depth_unknown(where, old, found, start, shift, body, base, into)
    return partial(_at_depth, {k: v.pop() for k, v in depths.items() if len(v) == 1})


def _depth_unknown(
    where: str,
    old: list[str],
    found: list[str],
    start: int,
    k: int,
    added: str,
    base: str,
    into: str,
) -> ToolError:
    """``NO_MATCH`` for an added line whose depth in the file no rule tells (see
    :func:`_rebase`): ``old[k]`` is the first line whose relative depth is not the file's."""
    message = (
        f"{where}: its expected lines match the file's at line {start + 1} only with "
        "leading whitespace ignored, and not at the same relative depths (its line "
        f"'{escape(old[k])}' is indented {describe(indent_of(old[k])[len(base) :])} past "
        f"the chunk's shallowest line, where the file's line {start + k + 1} has "
        f"{describe(indent_of(found[k])[len(into) :])}); its added line '{escape(added)}' "
        "is indented as none of its ' ' and '-' lines is, so its depth in the file cannot "
        "be told. Write the ' ', '-' and '+' lines with the file's indentation; the file's "
        f"lines {start + 1}-{start + len(found)} are:\n"
    )
    block = "\n".join(f"{start + i + 1:6}\t{escape(line)}" for i, line in enumerate(found))
    return ToolError(message + block, ErrorCode.NO_MATCH, details={"nearest_line": start + 1})


def _rebased(base: str, into: str, width: int, line: str) -> str:
    """``line`` with its indentation ``base`` written as ``into`` and, with ``width``, the
    spaces after it as tabs (one a ``width``); other lines (blank, or not starting with
    ``base``) as they are."""
    if not line.strip() or not line.startswith(base):
        return line
    rest = line[len(base) :]
    if width:
        spaces = len(rest) - len(rest.lstrip(" "))
        if spaces % width:
            return into + rest
        rest = "\t" * (spaces // width) + rest[spaces:]
    return into + rest


def _at_depth(depths: dict[str, str], line: str) -> str:
    """``line`` with its indentation written as ``depths`` maps it; as it is when blank or
    not mapped."""
    indent = indent_of(line)
    if not line.strip() or indent not in depths:
        return line
    return depths[indent] + line[len(indent) :]


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


Position = tuple[int, int]
"""A line of the old text: its 0-based number and where it starts (a character offset)."""

_END = sys.maxsize
"""The end of a scope that runs to the end of the file."""


def _locate_chunk(
    lines: _Lines, chunk: Chunk, cursor: Position, number: int, path: str
) -> tuple[Chunk, int, int, int]:
    """``chunk`` (or what stands for it) and where it goes, as :func:`_locate`. A chunk
    ending with blank context lines that the file does not hold is tried again without
    them, at the end of the file: a blank line after the last one stands for the file's
    end, as Codex's engine (which drops them) and openai-agents' (which matches them with
    the text's end) read it."""
    try:
        return (chunk, *_locate(lines, chunk, cursor, number, path))
    except ToolError as exc:
        blank = 0
        while blank < len(chunk.lines) and chunk.lines[-1 - blank] == (" ", ""):
            blank += 1
        if exc.code is not ErrorCode.NO_MATCH or not blank or blank == len(chunk.lines):
            raise
        trimmed = replace(chunk, lines=chunk.lines[:-blank], end_of_file=True)
        try:
            return (trimmed, *_locate(lines, trimmed, cursor, number, path))
        except ToolError:
            raise exc from None


def _locate(
    lines: _Lines, chunk: Chunk, cursor: Position, number: int, path: str
) -> tuple[int, int, int]:
    """``(first file line, its offset, level)`` of ``chunk``'s expected lines (0-based)."""
    where = f"{path}: chunk {number} (patch line {chunk.line})"
    placed = _place(lines, chunk, cursor, cursor, where)
    if not callable(placed):
        return placed
    if (
        chunk.anchors
        and chunk.old
        and cursor[0]
        and not callable(_anchor_hits(lines, chunk.anchors, (0, 0), where))
    ):
        # The @@ line may name the block the previous chunk was in too, as git's hunk
        # headers do: found above the cursor, it still orders the lines after the cursor.
        # The anchors are in the file: what fails now (the lines, or their several
        # places) is what the model must fix.
        placed = _place(lines, chunk, (0, 0), cursor, where)
        if not callable(placed):
            return placed
    raise placed()


_Failure = Callable[[], ToolError]
"""A ``NO_MATCH`` not yet told: its message (which reads the file's lines) is made only
when it is the one raised, not when a retry finds the chunk."""


def _place(
    lines: _Lines, chunk: Chunk, anchors_from: Position, cursor: Position, where: str
) -> tuple[int, int, int] | _Failure:
    """``_locate`` with the anchors sought from ``anchors_from`` and the chunk's lines from
    ``cursor`` on (and after the anchors); a ``NO_MATCH`` is returned, other errors raised."""
    low = cursor
    old = chunk.old
    hits: list[Position] = []
    if chunk.anchors:
        anchored = _anchor_hits(lines, chunk.anchors, anchors_from, where)
        if callable(anchored):
            return anchored
        hits = anchored
        if not old and len(hits) > 1:
            raise _ambiguous_anchor(where, chunk.anchors[-1], [line for line, _ in hits])
        low = max(cursor, _next_line(lines, hits[0]))
    if not old:
        if chunk.anchors:
            return (*low, 0)
        if chunk.end_of_file or not lines.text:
            return lines.count, len(lines.text), 0
        raise ToolError(
            f"{where} only adds lines and does not say where: give the lines before them as "
            "context (' ' lines) or an @@ line naming the place",
            ErrorCode.INVALID_ARGUMENTS,
        )
    for level, (name, normalise) in enumerate(LEVELS):
        wanted = [normalise(line) for line in old]
        places = _find(lines, level, wanted, low, _END, end_of_file=chunk.end_of_file)
        if len(places) > 1:
            inside = _enclosed(lines, hits, places)
            if len(inside) != 1:
                raise _ambiguous(where, [line for line, _ in places], name)
            places = inside
        if places:
            return (*places[0], level)
    return partial(_not_found, lines, chunk, cursor[0], where)


def _enclosed(lines: _Lines, hits: list[Position], places: list[Position]) -> list[Position]:
    """The ``places`` inside the block an anchor occurrence opens: every non-blank line
    between the anchor line and the place is indented deeper than it (the place itself may
    be the line that closes the block, as ``}`` or the next ``def`` at its depth).

    Read from the text, a line's CR before its LF kept: a CR neither counts in a line's
    indentation nor makes a blank line non-blank, so the lines need no split."""
    text = lines.text
    size = len(text)
    inside: set[Position] = set()
    for _, hit_at in hits:
        at = _line_end(text, hit_at)
        depth = _depth(text[hit_at:at])
        # ``end``: where the first line that closes the block starts (the text's end
        # when none does).
        end = at + 1
        while end < size:
            stop = _line_end(text, end)
            line = text[end:stop]
            if line.strip() and _depth(line) <= depth:
                break
            end = stop + 1
        inside.update(p for p in places if hit_at < p[1] <= end)
    return sorted(inside)


def _line_end(text: str, at: int) -> int:
    """Where the line starting at ``at`` ends: its LF, or the text's end."""
    found = text.find("\n", at)
    return len(text) if found == -1 else found


def _depth(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _next_line(lines: _Lines, place: Position) -> Position:
    """The line after the one at ``place`` (the text's end after its last line)."""
    line, at = place
    size = len(lines.text)
    return line + 1, min(lines.text.find("\n", at) + 1 or size, size)


def _find(
    lines: _Lines, level: int, wanted: list[str], low: Position, high: int, *, end_of_file: bool
) -> list[Position]:
    """The places of ``wanted`` (lines in ``level``'s normal form) starting in ``[low,
    high)``, as :func:`_places` finds them; the exact level searched in the text when it
    can be."""
    if level == 0 and lines.searchable:
        return lines.exact_places(wanted, low, high, end_of_file=end_of_file)
    if lines.searchable and not lines.foldable:
        # A line matching at a looser level holds its stripped form, which is the wanted
        # line's stripped and folded form when the text has nothing to fold: a form not in
        # the text after ``low`` matches nowhere, and the lines need no split to say so;
        # else only the lines the text's search finds it in are put in the level's form.
        forms = [line.strip().translate(_FOLD) for line in wanted]
        k = max(range(len(forms)), key=lambda j: len(forms[j]))
        if forms[k]:
            if lines.text.find(forms[k], low[1]) == -1:
                return []
            found = _searched_places(lines, level, wanted, k, forms[k], low, high, end_of_file)
            return [(line, lines.offset(line)) for line in found]
    found = _places(lines.normal(level), wanted, low[0], high, end_of_file=end_of_file)
    return [(line, lines.offset(line)) for line in found]


def _searched_places(
    lines: _Lines,
    level: int,
    wanted: list[str],
    k: int,
    key: str,
    low: Position,
    high: int,
    end_of_file: bool,
) -> list[int]:
    """:func:`_places` of ``wanted`` in the lines in ``level``'s form, in a text with
    nothing to fold, whose lines matching ``wanted[k]`` hold ``key`` as it is: only the
    places whose line ``k`` holds it are put in the form."""
    normalise = LEVELS[level][1]
    text, bare, span = lines.text, lines.bare, len(wanted)

    def matches(start: int) -> bool:
        return [normalise(line) for line in bare[start : start + span]] == wanted

    if end_of_file:
        start = len(bare) - span
        return [start] if low[0] <= start < max(high, low[0] + 1) and matches(start) else []
    stop = min(high, len(bare) - span + 1)
    places: list[int] = []
    for line in lines_holding(text, key, *low):
        start = line - k
        if start >= stop:
            break
        if start >= low[0] and matches(start):
            places.append(start)
    return places


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


def _anchor_hits(
    lines: _Lines, anchors: tuple[str, ...], cursor: Position, where: str
) -> list[Position] | _Failure:
    """The lines where the last anchor occurs after the ones before it, or the
    ``NO_MATCH`` of the first anchor not found. A stacked anchor's occurrences inside the
    block the one above it opens are taken when there are any (``@@ class A`` then ``@@
    def f`` names A's ``f``, not a later class's)."""
    low = cursor
    above: list[Position] = []
    for k, anchor in enumerate(anchors):
        last = k == len(anchors) - 1
        for level, (_, normalise) in enumerate(LEVELS):
            wanted = normalise(anchor)
            hits = _find(lines, level, [wanted], low, _END, end_of_file=False)
            if hits:
                break
        else:
            return partial(_anchor_missing, lines, anchor, cursor[0], where)
        if above:
            hits = _enclosed(lines, above, hits) or hits
        if last:
            return hits
        above = hits[:1]
        low = _next_line(lines, hits[0])
    return []  # no anchors: the caller does not ask


def _anchor_missing(lines: _Lines, anchor: str, cursor: int, where: str) -> ToolError:
    return ToolError(
        f"{where}: its @@ line '{escape(anchor)}' is not in the file"
        + (" after the previous chunk" if cursor else "")
        + (_line_starting_with(lines, anchor, cursor) or _closest_single(lines, anchor, cursor)),
        ErrorCode.NO_MATCH,
    )


def _line_starting_with(lines: _Lines, anchor: str, cursor: int) -> str:
    """Names the first line from ``cursor`` on that begins with ``anchor`` (both stripped),
    or ``""``: an @@ line written as the start of a line (``@@ def f`` for ``def f(x):``)
    is matched against whole lines, as Codex's engine does, so the model is told to give all
    of it; a long line is too unlike its start for the most similar line to name it."""
    wanted = anchor.strip()
    if not wanted:
        return ""
    for index in range(cursor, len(lines.bare)):
        if lines.bare[index].strip().startswith(wanted):
            return (
                f". Line {index + 1} starts with it: '{escape(lines.bare[index])}'; an @@ line "
                "is a whole line of the file: give all of it"
            )
    return ""


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
    # A chunk that only removes lines leaves none to look for: its result cannot be told
    # from a file that never had them.
    for level in (0, 1) if new else ():
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
        hint = (
            _closest_single(lines, old[0], cursor)
            or _part_of_a_line(lines, old)
            or ". None of its lines is in the file: read the file again and copy its lines exactly"
        )
        return ToolError(message + hint, ErrorCode.NO_MATCH)
    loose = LEVELS[-1][1]
    # Only these lines in the loosest form: not all of a big file's.
    if [loose(x) for x in lines.bare[start : start + len(old)]] == [loose(x) for x in old]:
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
            if start + k >= len(lines.bare) or loose(lines.bare[start + k]) != loose(line)
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
    loose = LEVELS[3][1]
    votes: Counter[int] = Counter()
    for k, line in enumerate(old):
        wanted = loose(line)
        for i in _lines_as(lines, wanted) if wanted else ():
            if i - k >= 0:
                votes[i - k] += 1
    if not votes:
        return None
    after = {s: n for s, n in votes.items() if s >= cursor} or dict(votes)
    return max(after, key=lambda s: (after[s], -s))


def _lines_as(lines: _Lines, wanted: str) -> list[int]:
    """The lines whose loosest form is ``wanted``, in order. In a text with nothing to
    fold, such a line holds ``wanted`` as it is (the form only strips its ends): those the
    text's search finds are the only ones put in the form."""
    loose = LEVELS[3][1]
    if lines.foldable:
        return [i for i, line in enumerate(lines.normal(3)) if line == wanted]
    bare = lines.bare
    return [
        i for i in lines_holding(lines.text, wanted) if i < len(bare) and loose(bare[i]) == wanted
    ]


def _part_of_a_line(lines: _Lines, old: list[str]) -> str:
    """The first of the chunk's lines (of :data:`_MIN_PART` characters or more) that is a
    part of a longer line of the file, as a line of minified code is, named with that
    line; ``""`` when none is. A patch cannot change part of a line, and a long line
    cannot be copied whole."""
    for k, line in enumerate(old):
        part = line.strip()
        if len(part) < _MIN_PART:
            continue
        # The part holds no LF: the first line holding it is the one the text's search finds.
        at = lines.text.find(part)
        index = None if at == -1 else lines.line_at(at)
        if index is not None:
            return (
                f". Its line {k + 1}, '{escape(line)}', is part of the file's line {index + 1} "
                f"({len(lines.bare[index]):,} characters long), and a patch's lines are whole "
                "lines of the file: change a part of a long line with edit_file where it is "
                "offered"
            )
    return ""


def _closest_single(lines: _Lines, line: str, cursor: int) -> str:
    if lines.count > HINT_MAX_LINES:
        return (
            f". The file has {lines.count:,} lines, too many to look for the most similar one: "
            "grep for a distinctive part of the line to find where it is"
        )
    near = difflib.get_close_matches(line.strip(), [b.strip() for b in lines.bare], n=1, cutoff=0.6)
    if not near:
        return ""
    index = next(i for i, b in enumerate(lines.bare) if b.strip() == near[0])
    return f". The most similar line is {index + 1}: '{escape(lines.bare[index])}'"
