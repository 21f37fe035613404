"""Where a text changed, as edits made in turn leave it: what a diff of the edits needs to
compare, so that two edits far apart in a long file are diffed as two small windows, not
as the whole stretch between them.

A *span* is ``(old start, old end, new start, new end)``: character offsets of a range of
the old text and of the range of the new text it became. A change's spans are in order
and do not overlap; outside them the texts are the same, one shifted by
what the spans before added, so that any offset outside the spans maps from one text to
the other.
"""

from __future__ import annotations

from collections.abc import Sequence

Span = tuple[int, int, int, int]


def compose(first: Sequence[Span], then: Sequence[Span]) -> list[Span]:
    """The spans turning a text A into C, from ``first`` (A into B) and ``then`` (B into
    C): the ranges of B either touches, joined where they overlap or meet, each mapped back
    to A and on to C.

    >>> compose([(2, 3, 2, 5)], [(4, 6, 4, 4)])  # "ab?de" -> "ab!!!de" -> "ab!!e"
    [(2, 4, 2, 4)]
    """
    ranges = sorted(
        [(s[2], s[3], s[3] - s[2] - (s[1] - s[0]), 0) for s in first]
        + [(s[0], s[1], 0, s[3] - s[2] - (s[1] - s[0])) for s in then]
    )
    out: list[Span] = []
    # What B gained over A (``grown``) and C over B (``then_grown``) before the range at
    # hand: outside every span an offset of B is its offset in A plus the first, and in
    # C plus the second.
    grown = then_grown = 0
    index = 0
    while index < len(ranges):
        start, end, gained, then_gained = ranges[index]
        index += 1
        while index < len(ranges) and ranges[index][0] <= end:
            end = max(end, ranges[index][1])
            gained += ranges[index][2]
            then_gained += ranges[index][3]
            index += 1
        span = (start - grown, end - grown - gained, start + then_grown)
        grown += gained
        then_grown += then_gained
        out.append((*span, end + then_grown))
    return out


def shifted(spans: Sequence[Span], by: int) -> list[Span]:
    """``spans`` of texts that gained ``by`` characters before them (in both)."""
    return [(a + by, b + by, c + by, d + by) for a, b, c, d in spans]


def unchanged_ends(spans: Sequence[Span], old_length: int) -> tuple[int, int]:
    """``(head, tail)``: the characters before the first of ``spans`` and after the last,
    which both texts share; the old text has ``old_length``."""
    return spans[0][0], old_length - spans[-1][1]
