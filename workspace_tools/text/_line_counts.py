"""Line numbers of a text's offsets, counted once: what a file's later edits reuse.

A diff's hunk header needs the number of the line where the change starts, which is the
count of LFs before it: for an edit in the middle of a 2 MB file, half a millisecond of
counting, as long as the rest of the edit's own work. :class:`LineCounts` keeps the counts
found at offsets along the way, so that the next count starts from the nearest one, and
carries them across a change of the text (those past the change shift by what it added),
so that a file's later edits count only from the nearest known offset to their change.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from typing import AnyStr

from workspace_tools.text._decode import lf_of

#: Counting from a known offset keeps one every this many characters it passes: a later
#: count starts at most this far from one.
STEP = 1 << 16

#: A count that passed more characters than this is kept at the offset asked for too (the
#: next edit is often near the last); nearer ones are not, which bounds how many are kept.
NEAR = 1 << 12


class LineCounts:
    """LFs before some offsets of one text: ``(offset, count)`` pairs, sorted, always
    holding ``(0, 0)``. Offsets are of the text given to :meth:`before`, which must be the
    text the counts were found in (the caller keeps the pair together).

    Safe to share between threads: each pair is added by one list operation, and any pair
    found is true of the text.
    """

    __slots__ = ("_known",)

    def __init__(self, known: list[tuple[int, int]] | None = None) -> None:
        self._known = known if known is not None else [(0, 0)]

    def __len__(self) -> int:
        """How many offsets' counts are known (one at least: the start's)."""
        return len(self._known)

    def before(self, text: AnyStr, offset: int) -> int:
        """The number of LFs in ``text[:offset]``, counted from the nearest known offset
        (backwards when the next known one is nearer), keeping one count every
        :data:`STEP` characters passed, and the answer when it passed over :data:`NEAR`."""
        lf = lf_of(text)
        known = self._known
        at = bisect_right(known, (offset, math.inf)) - 1  # (0, 0) is first: never -1
        start, count = known[at]
        if start == offset:
            return count
        if at + 1 < len(known) and known[at + 1][0] - offset < offset - start:
            stop, count = known[at + 1]
            count -= text.count(lf, offset, stop)
            passed = stop - offset
        else:
            passed = offset - start
            while offset - start > STEP:
                count += text.count(lf, start, start + STEP)
                start += STEP
                known.insert(bisect_right(known, (start, -1)), (start, count))
            count += text.count(lf, start, offset)
        if passed > NEAR:
            known.insert(bisect_right(known, (offset, -1)), (offset, count))
        return count

    def changed(self, old: str, new: str, unchanged: tuple[int, int], at: int = 0) -> LineCounts:
        """The counts of ``new``, the text ``old`` became, whose first and last characters
        ``unchanged = (head, tail)`` are ``old``'s: those before the change as they are,
        those after it moved by the characters and LFs it added (unless the change spans
        more than :data:`STEP` characters: those are left to a later count that needs
        them). ``old`` and ``new`` may be a window of the two texts, the lines around the
        change, starting at the offset ``at`` of both."""
        head = min(unchanged[0], len(old), len(new))
        tail = min(unchanged[1], len(old) - head, len(new) - head)
        old_stop, new_stop = len(old) - tail, len(new) - tail
        added = new.count("\n", head, new_stop) - old.count("\n", head, old_stop)
        head, old_stop, new_stop = head + at, old_stop + at, new_stop + at
        known = list(self._known)  # one copy: another thread may add to it meanwhile
        kept = [pair for pair in known if pair[0] <= head]
        if (old_stop - head) + (new_stop - head) > STEP:
            return LineCounts(kept)
        shift = new_stop - old_stop
        kept.extend(
            (offset + shift, count + added)
            for offset, count in known
            if offset >= old_stop and offset > head
        )
        return LineCounts(kept)
