"""The unified diff of a patched file from the line ranges its chunks covered.

Diffing the whole span between a file's first and last change costs a sequence match of
every line in between; a patch already says where its changes are. Each chunk's range,
widened by the diff's context lines, is diffed alone and its hunks are renumbered to their
place in the file; ranges that touch are diffed together, and a range grows while its
change slides past its context across repeated lines. The result is a unified diff that
``git apply`` takes, as :func:`~._diff.unified_diff` makes.
"""

from __future__ import annotations

import re

from workspace_tools.text._diff import (
    CONTEXT_LINES,
    TextDiff,
    _hunks,
    _quote,
    _window_change,
    diff_fits_window,
    lines_after,
    lines_before,
)
from workspace_tools.text._patch_apply import PatchedText

_HUNK = re.compile(r"@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


def spans_diff(patched: PatchedText, path: str, *, bom: str = "") -> TextDiff:
    """The diff turning the text ``patched`` was made from into ``patched.text`` for the
    file at ``path``, from its ``spans`` (``(old start, old end, new start, new end)``
    0-based line ranges, in order, outside of which the two have the same lines): only
    the lines of each span and its context are cut out of the texts, neither is split
    into lines. ``bom`` (U+FEFF or ``""``) is put before the first line of both, as the
    file's bytes have it.
    """
    old = patched.old
    # Each region: old and new line ranges, where its old lines start and end in the old
    # text, and the spans it holds.
    regions: list[tuple[list[int], list[int], list[int]]] = []
    for index, (a0, a1, b0, b1) in enumerate(patched.spans):
        lead = min(CONTEXT_LINES, a0, b0)
        # The lines after a span are the same in both texts as far as the next span,
        # and a next span that close merges the two regions: the old text's say.
        trail = _lines_left(old, patched.span_offsets[index][1], CONTEXT_LINES)
        start, end = patched.span_offsets[index]
        lines = [a0 - lead, a1 + trail, b0 - lead, b1 + trail]
        if regions and lines[0] <= regions[-1][0][1]:
            merged, at, held = regions[-1]
            merged[1], merged[3] = lines[1], lines[3]
            at[1] = lines_after(old, end, trail)
            held.append(index)
        else:
            regions.append(
                (lines, [lines_before(old, start, lead), lines_after(old, end, trail)], [index])
            )
    hunks: list[str] = []
    additions = deletions = 0
    while regions:
        (a0, _, b0, _), bounds, held = regions.pop(0)
        first = bom if a0 == 0 else ""
        more = CONTEXT_LINES
        while True:
            region_old = first + old[bounds[0] : bounds[1]]
            region_new = first + _written(patched, bounds, held)
            # A change slides across repeated lines (deleting one of ten blank lines
            # changes, as the diff sees it, the last of them), maybe past the context
            # after its span: the region grows until the hunk's trailing context is in
            # it, which git apply needs (a hunk without it must match at the file's end),
            # taking in the regions it reaches.
            if diff_fits_window(
                region_old, region_new, (0, 0), at_start=True, at_end=bounds[1] == len(old)
            ):
                break
            more *= 2
            bounds[1] = lines_after(old, bounds[1], more)
            while regions and regions[0][1][0] <= bounds[1]:
                _, (_, high), later = regions.pop(0)
                bounds[1] = max(bounds[1], high)
                held.extend(later)
        part, added, removed = _region_hunks(region_old, region_new)
        for line in part:
            hunks.append(_shifted(line, a0, b0) if line.startswith("@@ ") else line)
        additions += added
        deletions += removed
    if not hunks:
        return TextDiff("", 0, 0)
    quoted_a, quoted_b = _quote(f"a/{path}"), _quote(f"b/{path}")
    header = f"diff --git {quoted_a} {quoted_b}\n--- {quoted_a}\n+++ {quoted_b}\n"
    return TextDiff(header + "".join(hunks), additions, deletions)


def _written(patched: PatchedText, bounds: list[int], held: list[int]) -> str:
    """The new text of the old text's ``bounds`` (offsets), which hold the spans ``held``."""
    old = patched.old
    new = []
    at = bounds[0]
    for index in held:
        start, end = patched.span_offsets[index]
        new.append(old[at:start])
        new.append(patched.written(index))
        at = end
    new.append(old[at : bounds[1]])
    return "".join(new)


def _lines_left(text: str, offset: int, most: int) -> int:
    """How many lines start at or after ``offset`` (a line start), counted up to ``most``."""
    count = 0
    while count < most and offset < len(text):
        offset = text.find("\n", offset) + 1 or len(text)
        count += 1
    return count


def _region_hunks(old: str, new: str) -> tuple[list[str], int, int]:
    """The hunks of :func:`~._diff.unified_diff` of ``old`` and ``new`` (numbered from
    their first line), its additions and deletions: the same lines without the header."""
    if old == new:
        return [], 0, 0
    before, change = _window_change(old, new, (0, 0))
    return _hunks(*change, old.count("\n", 0, before))


def _shifted(line: str, old_offset: int, new_offset: int) -> str:
    """A hunk header ``line`` with its start lines moved by the offsets."""
    match = _HUNK.match(line)
    if match is None:  # unified_diff writes every header in this form
        raise ValueError(f"not a hunk header: {line!r}")
    a, a_count, b, b_count = match.groups()
    start = f"@@ -{int(a) + old_offset}{a_count or ''} +{int(b) + new_offset}{b_count or ''} @@"
    return start + line[match.end() :]
