"""Finding ``old_text`` in a file and splicing in ``new_text``: the edit matcher.

Order of attempts:

1. ``exact``: the literal text, or the literal text with its line breaks written in the
   file's newline style (a model reads lines without their CR, so this is still literal).
   When ``old_text`` has one non-blank line, its first, and a match begins after
   indentation on its line (``"y = 1"`` or ``"  y = 1"`` in ``"    y = 1"``), the model
   copied it with less indentation than the file has: the line is replaced whole, with
   ``new_text`` shifted by the rule below (reported as ``indentation`` when that changed the
   result), so ``new_text``'s further lines are not written too shallow; an empty
   ``new_text`` deleting part of a line deletes only the match (the rest of the line keeps
   its indentation). When ``old_text``
   has more non-blank lines, those matched whole lines at their own indentation, which fixes
   where ``new_text``'s lines go: the splice is literal.
   Occurrences that overlap count as places too: ``foo\nfoo\n`` in three ``foo`` lines
   is ambiguous, never the first taken (``replace_all`` replaces them left to right
   without overlap, as ``str.replace`` does). An occurrence that would cut a CRLF in two
   (``old_text`` starting with an LF that is a CRLF's, or ending with its CR) is no place:
   the text with the file's breaks is the one that matches there, so that no lone CR is
   left and no LF written into a CRLF line (``"\ndef f():"`` deleting the blank line
   before ``def f():`` takes the CRLF whole).
2. Fallbacks, each only when the exact text is absent and only when exactly one range of
   whole lines matches; each tolerates more than the one before:
   ``line_endings`` (CR before LF), ``trailing_whitespace``, ``indentation`` (leading spaces
   and tabs), ``quotes`` (typographic quotes as straight ones, indentation as before).
   Nothing else may differ, so an identifier or any other word never matches a different one.

A fallback never changes the code's structure. Its range matches only when every non-blank
line keeps its depth relative to the others: with the *base* of a set of lines the longest
common prefix of their indentation (leading spaces and tabs), each matched file line's
indentation past the file's base equals, as a string, the same line's indentation past
``old_text``'s base. So a uniform shift (``old_text`` dedented to zero, or indented with
four spaces where the file has a tab) matches, while ``if x:`` followed by ``y = 1`` at the
same depth never matches an ``if`` whose body is deeper, and tabs for spaces inside the
relative part are a different structure. Blank lines (whitespace only) match blank lines and
carry no depth. A range that matches only when this rule is broken is ``NO_MATCH``, and the
message shows the file's real indentation.

The replacement is always literal (no regex expansion of ``$&``, ``\\1`` or ``\\g<0>``) and
only the matched range changes. Its line breaks keep the matched range's own endings, in
order (the first break of ``new_text`` ends as the range's first line did, and so on); breaks
past the range's are written in the file's style. In a file of one style that is the file's
style; in a file of mixed LF and CRLF lines a line keeps its ending, as apply_patch keeps it
(an added line takes the ending of the removed line it stands in for). When the
bases differ, ``new_text`` is shifted by the same rule: on each line the file's base
replaces ``old_text``'s base, so the lines keep ``new_text``'s relative depths exactly. A
non-blank line of ``new_text`` that does not start with ``old_text``'s base (indented less,
or with other whitespace) has no place the rule can tell (the model's indent unit need not
be the file's), so the edit is ``NO_MATCH`` asking for the file's exact indentation; empty
lines stay empty, and other whitespace-only lines are shifted when they start with the base
and written as they are otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools.text._decode import convert_newlines
from workspace_tools.text._diff import split_lines
from workspace_tools.text._indentation import INDENT, Shift, indent_of, shift_of
from workspace_tools.text._lines import lines_holding
from workspace_tools.text._match_hint import no_match, structure_mismatch, unplaceable_line
from workspace_tools.text._spans import Span

_QUOTES = str.maketrans(
    {"‘": "'", "’": "'", "‚": "'", "‛": "'", "“": '"', "”": '"', "„": '"', "‟": '"'}
)

_FALLBACKS: tuple[tuple[str, Callable[[str], str]], ...] = (
    ("line_endings", lambda line: line),
    ("trailing_whitespace", str.rstrip),
    ("indentation", lambda line: line.lstrip(INDENT).rstrip()),
    ("quotes", lambda line: line.lstrip(INDENT).rstrip().translate(_QUOTES)),
)


@dataclass(frozen=True)
class EditResult:
    """The text after an edit.

    Attributes:
        text: the whole new text.
        replacements: how many ranges were replaced.
        match: ``exact`` or the fallback that matched (``line_endings``,
            ``trailing_whitespace``, ``indentation``, ``quotes``).
        spans: the ranges the edit replaced and what they became (:mod:`._spans`), so
            that a diff of a large file compares only the lines around them
            (``unified_diff``).
    """

    text: str
    replacements: int
    match: str
    spans: tuple[Span, ...]

    @property
    def unchanged(self) -> tuple[int, int]:
        """``(head, tail)``: characters at the start and at the end of the old text that
        the edit left in place (before its first range, after its last)."""
        return self.spans[0][0], len(self.text) - self.spans[-1][3]


def replace_text(
    text: str, old: str, new: str, *, replace_all: bool, newline: str, path: str
) -> EditResult:
    """Replace ``old`` by ``new`` in ``text`` by the rules in this module's docstring.

    Args:
        text: the file's text with its own line endings.
        old: the text to find (non-empty).
        new: the replacement, written literally.
        replace_all: replace every exact occurrence instead of requiring one.
        newline: the file's newline style (``"\\n"`` or ``"\\r\\n"``) for ``new``'s breaks.
        path: the file's path for messages.

    Raises:
        ToolError: ``NO_MATCH`` when nothing matches, or a fallback range matches only by
            changing the indentation structure, or ``new_text`` cannot be re-indented (the
            message quotes the most similar file lines with invisible characters escaped and
            names such differences); ``AMBIGUOUS_MATCH`` naming the count and line numbers
            when more than one range matches without ``replace_all`` (or more than one
            fallback range matches at all).
    """
    for candidate in dict.fromkeys((old, convert_newlines(old, newline))):
        starts = _find_all(text, candidate)
        if not starts:
            continue
        if len(starts) == 1 and not replace_all:
            # An occurrence overlapping the first (``foo\nfoo\n`` in three ``foo`` lines)
            # is a second place all the same: which one the model meant is unknown. One
            # that does not overlap it was looked for already.
            size = len(candidate)
            second = text.find(candidate, starts[0] + 1, starts[0] + 2 * size - 1)
            while second != -1 and splits_crlf(text, second, second + size):
                second = text.find(candidate, second + 1, starts[0] + 2 * size - 1)
            if second != -1:
                starts.append(second)
        if len(starts) > 1 and not replace_all:
            raise _ambiguous(path, _lines_of(text, starts), fallback=None)
        pieces = [
            (s, s + len(candidate), with_endings(new, text[s : s + len(candidate)], newline))
            for s in starts
        ]
        exact = True
        nonblank = [bool(line.strip()) for line in old.split("\n")]
        if nonblank[0] and not any(nonblank[1:]):
            widened = _whole_lines(text, pieces, old, new, newline, path)
            # Widening only moves a piece's start back: the texts are the same exactly when
            # every widened piece writes what the exact one and the text it skips did.
            exact = all(
                text[wide:begin] + literal == replacement
                for (begin, _, literal), (wide, _, replacement) in zip(pieces, widened, strict=True)
            )
            pieces = widened
        return EditResult(
            _splice(text, pieces), len(starts), "exact" if exact else "indentation", _spans(pieces)
        )
    return _fallback(text, old, new, newline, path)


def with_endings(new: str, matched: str, newline: str) -> str:
    """``new`` with its line breaks written as ``matched``'s, in order: the n-th CRLF or LF
    of ``new`` becomes the n-th line ending of ``matched`` (``"\\r\\n"`` or ``"\\n"``), and
    those past ``matched``'s count become ``newline``; lone CRs are left alone."""
    endings = [
        "\r\n" if line.endswith("\r\n") else "\n"
        for line in split_lines(matched)
        if line.endswith("\n")
    ]
    if not endings or all(ending == newline for ending in endings):
        return convert_newlines(new, newline)
    lines = new.replace("\r\n", "\n").split("\n")
    out = [
        line + (endings[i] if i < len(endings) else newline) for i, line in enumerate(lines[:-1])
    ]
    return "".join(out) + lines[-1]


def splits_crlf(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` (not empty) starts on the LF of a CRLF or ends on its
    CR: replacing it would cut that line break in two."""
    return (start > 0 and text.startswith("\r\n", start - 1)) or text.startswith("\r\n", end - 1)


def _find_all(text: str, needle: str) -> list[int]:
    """Where ``needle`` occurs in ``text``, left to right without overlap, leaving out
    the places that would cut a CRLF in two (see :func:`splits_crlf`)."""
    starts: list[int] = []
    size = len(needle)
    # Only a needle starting with an LF or ending with a CR can cut a CRLF.
    check = needle.startswith("\n") or needle.endswith("\r")
    at = text.find(needle)
    while at != -1:
        if check and splits_crlf(text, at, at + size):
            at = text.find(needle, at + 1)
            continue
        starts.append(at)
        at = text.find(needle, at + size)
    return starts


def _whole_lines(
    text: str, pieces: list[tuple[int, int, str]], old: str, new: str, newline: str, path: str
) -> list[tuple[int, int, str]]:
    """``pieces`` (begin, end, replacement) of a one-line ``old`` with each match that begins
    after indentation widened to its line's start and ``new`` shifted (module docstring)."""
    out: list[tuple[int, int, str]] = []
    previous = 0
    old_base = indent_of(old)
    for begin, end, replacement in pieces:
        line_start = text.rfind("\n", 0, begin) + 1
        before = text[line_start:begin]
        # Deleting part of a line keeps the indentation of the rest of it (none is left of
        # a line whose LF the match holds).
        deletes_part = not new and bool(_rest_of_line(text, end).strip())
        if before and not before.lstrip(INDENT) and line_start >= previous and not deletes_part:
            shift = Shift(old_base, before + old_base)
            body = _reindent(new.replace("\r\n", "\n"), shift)
            if isinstance(body, int):
                old_lines = old.replace("\r\n", "\n").removesuffix("\n").split("\n")
                first = _line_of(text, begin) - 1
                shown = _shown_lines(text, newline)
                raise unplaceable_line(
                    path,
                    old_lines,
                    shown,
                    first,
                    body,
                    old_base,
                    shift.file_base,
                    inside_indentation=True,
                )
            begin, replacement = line_start, with_endings(body, text[begin:end], newline)
        out.append((begin, end, replacement))
        previous = end
    return out


def _rest_of_line(text: str, end: int) -> str:
    """What follows ``end`` on its line: nothing when ``end`` follows the line's LF."""
    if end and text[end - 1] == "\n":
        return ""
    stop = text.find("\n", end)
    return text[end : len(text) if stop < 0 else stop]


def _spans(pieces: list[tuple[int, int, str]]) -> tuple[Span, ...]:
    """The spans of ``pieces`` (begin, end, replacement), in order."""
    spans: list[Span] = []
    grown = 0
    for begin, end, replacement in pieces:
        spans.append((begin, end, begin + grown, begin + grown + len(replacement)))
        grown += len(replacement) - (end - begin)
    return tuple(spans)


def _splice(text: str, pieces: list[tuple[int, int, str]]) -> str:
    parts: list[str] = []
    previous = 0
    for begin, end, replacement in pieces:
        parts.append(text[previous:begin])
        parts.append(replacement)
        previous = end
    parts.append(text[previous:])
    return "".join(parts)


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _lines_of(text: str, offsets: list[int]) -> list[int]:
    """The 1-based line of each of ``offsets`` (ascending), in one pass over the text: one
    count from the start for each would take time in their number times the file's size
    (``}`` in a 1 MB file is 30,000 places)."""
    lines: list[int] = []
    line, counted = 1, 0
    for offset in offsets:
        line += text.count("\n", counted, offset)
        counted = offset
        lines.append(line)
    return lines


def _ambiguous(path: str, lines: list[int], fallback: str | None) -> ToolError:
    shown = ", ".join(str(n) for n in lines[:20]) + (", ..." if len(lines) > 20 else "")
    if fallback is None:
        message = (
            f"old_text matches {len(lines)} times in {path} (lines {shown}); include more "
            "surrounding lines to make it unique, or set replace_all to replace every one"
        )
    else:
        message = (
            f"old_text is not in {path} exactly, and {len(lines)} places match it when "
            f"{fallback.replace('_', ' ')} is ignored (lines {shown}); copy the exact text "
            "from read_file, with more surrounding lines"
        )
    return ToolError(message, ErrorCode.AMBIGUOUS_MATCH, details={"lines": lines})


def _strip_ending(line: str) -> str:
    line = line.removesuffix("\n")
    return line.removesuffix("\r")


def _shown_lines(text: str, newline: str) -> list[str]:
    # Messages quote lines without the file's own line break, so a stray CR stays visible.
    shown = text.split("\n")
    if not shown[-1]:
        shown.pop()  # after a last LF: no line (split_lines' lines)
    return [line.removesuffix("\r") for line in shown] if newline == "\r\n" else shown


def _fallback(text: str, old: str, new: str, newline: str, path: str) -> EditResult:
    old_unified = old.replace("\r\n", "\n")
    old_ends_with_newline = old_unified.endswith("\n")
    old_lines = [line.removesuffix("\r") for line in old_unified.removesuffix("\n").split("\n")]
    file_lines = split_lines(text)
    anchor = next((k for k, line in enumerate(old_lines) if line.strip()), None)
    if anchor is None:
        raise no_match(path, old_lines, _shown_lines(text, newline))
    span = len(old_lines)
    starts = _starts(text, len(file_lines) - span + 1, old_lines, anchor)
    misfit: tuple[int, int] | None = None  # (first file line, old line) breaking structure
    # Comparing each candidate's lines costs candidates x span: with many candidates and a
    # long old_text (a file of like lines), the lines are put in each form once and the
    # ranges found in one pass (_occurrences) instead.
    linear = len(starts) * span > _LINE_COMPARISONS
    for name, normal in _FALLBACKS:
        wanted = [normal(line) for line in old_lines]
        fits: list[tuple[int, Shift]] = []
        candidates = starts
        if linear:
            formed = [normal(_strip_ending(line)) for line in file_lines]
            candidates = _occurrences(formed, wanted)
            if len(candidates) > _CHECKED_PLACES:
                # That many ranges match: ambiguous whatever their structure (checking
                # each would cost candidates x span again).
                raise _ambiguous(path, [i + 1 for i in candidates], fallback=name)
        for i in candidates:
            if not linear:
                if normal(_strip_ending(file_lines[i + anchor])) != wanted[anchor]:
                    continue
                bare = [_strip_ending(line) for line in file_lines[i : i + span]]
                if [normal(line) for line in bare] != wanted:
                    continue
            else:
                bare = [_strip_ending(line) for line in file_lines[i : i + span]]
            shift = shift_of(old_lines, bare)
            if isinstance(shift, Shift):
                fits.append((i, shift))
            elif misfit is None:
                misfit = (i, shift)
        if len(fits) > 1:
            raise _ambiguous(path, [i + 1 for i, _ in fits], fallback=name)
        if fits:
            first, shift = fits[0]
            body = _reindent(new.replace("\r\n", "\n"), shift)
            if isinstance(body, int):
                raise unplaceable_line(
                    path,
                    old_lines,
                    _shown_lines(text, newline),
                    first,
                    body,
                    shift.old_base,
                    shift.file_base,
                )
            start = sum(len(line) for line in file_lines[:first])
            last = file_lines[first + span - 1]
            end = start + sum(len(line) for line in file_lines[first : first + span])
            if not old_ends_with_newline:
                end -= len(last) - len(_strip_ending(last))
            elif not last.endswith("\n"):
                body = body.removesuffix("\n")  # the file's last line has no newline: keep it so
            replacement = with_endings(body, text[start:end], newline)
            return EditResult(
                text[:start] + replacement + text[end:],
                1,
                name,
                ((start, end, start, start + len(replacement)),),
            )
    shown = _shown_lines(text, newline)
    if misfit is not None:
        raise structure_mismatch(path, old_lines, shown, *misfit)
    raise no_match(path, old_lines, shown)


#: Line comparisons past which the fallbacks find their ranges in one linear pass.
_LINE_COMPARISONS = 200_000
#: Ranges matching in a form past which a fallback is ambiguous without checking each
#: range's structure.
_CHECKED_PLACES = 64


def _occurrences(lines: list[str], wanted: list[str]) -> list[int]:
    """Every index where ``wanted`` occurs in ``lines`` (overlapping ones too), in order:
    Knuth-Morris-Pratt over lines, at most ``2 * (len(lines) + len(wanted))`` line
    comparisons whatever the lines (Knuth, Morris, Pratt, "Fast pattern matching in
    strings", SIAM J. Comput. 6(2), 1977)."""
    size = len(wanted)
    if not size:
        return []
    border = [0] * size  # longest proper border of wanted[: i + 1]
    k = 0
    for i in range(1, size):
        while k and wanted[i] != wanted[k]:
            k = border[k - 1]
        if wanted[i] == wanted[k]:
            k += 1
        border[i] = k
    found: list[int] = []
    k = 0
    for i, line in enumerate(lines):
        while k and line != wanted[k]:
            k = border[k - 1]
        if line == wanted[k]:
            k += 1
            if k == size:
                found.append(i - size + 1)
                k = border[k - 1]
    return found


def _starts(text: str, count: int, old_lines: list[str], anchor: int) -> list[int]:
    """The lines, of the first ``count`` of ``text``'s, where a range some fallback matches
    with ``old_lines`` may start: those whose line ``anchor`` lines further (``old_lines``'
    first non-blank one there) holds the longest part of that line without a quote, in
    order. Each fallback's form of a line is the line with whitespace stripped from its ends
    and typographic quotes made straight, so such a part stays in the line as it is: one
    search of the text, instead of each line put in each form."""
    wanted = _FALLBACKS[-1][1](old_lines[anchor])
    key = max(wanted.replace('"', "'").split("'"), key=len)
    if not key:
        return list(range(count))
    starts: list[int] = []
    for line in lines_holding(text, key):
        start = line - anchor
        if start >= count:
            break
        if start >= 0:
            starts.append(start)
    return starts


def _reindent(new: str, shift: Shift) -> str | int:
    """``new`` (LF breaks) with the file's base in place of ``old_text``'s on every line
    (module docstring); the 1-based number of the first non-blank line that does not start
    with ``old_text``'s base instead."""
    if shift.old_base == shift.file_base:
        return new
    out: list[str] = []
    for number, line in enumerate(new.split("\n"), 1):
        if line.startswith(shift.old_base) and line:
            out.append(shift.file_base + line[len(shift.old_base) :])
        elif not line.strip():
            out.append(line)
        else:
            return number
    return "\n".join(out)
