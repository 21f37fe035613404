"""The unified diff of a patched file from the ranges its chunks covered.

A patch already says where its changes are: each chunk's range of the old text and the
lines it wrote are a span (:mod:`._spans`), so :func:`~._diff.unified_diff` compares only
the lines around each chunk, and the line each chunk starts on, which the engine counted,
numbers its hunks without the text's LFs counted again.
"""

from __future__ import annotations

from workspace_tools.text._diff import TextDiff, unified_diff
from workspace_tools.text._line_counts import LineCounts
from workspace_tools.text._patch_apply import PatchedText
from workspace_tools.text._spans import Span


def spans_diff(patched: PatchedText, path: str, *, bom: str = "") -> TextDiff:
    """The diff turning the text ``patched`` was made from into ``patched.text`` for the
    file at ``path``, from its chunks' ranges (:attr:`PatchedText.spans`, outside of which
    the two have the same lines). ``bom`` (U+FEFF or ``""``) is put before the first line
    of both, as the file's bytes have it.
    """
    spans: list[Span] = []
    known = [(0, 0)]
    grown = 0
    for index, (start, end) in enumerate(patched.span_offsets):
        start, end = start + len(bom), end + len(bom)
        written = len(patched.written(index))
        spans.append((start, end, start + grown, start + grown + written))
        grown += written - (end - start)
        if start > known[-1][0]:
            known.append((start, patched.spans[index][0]))
    return unified_diff(
        bom + patched.old, bom + patched.text, path, spans=spans, lines=LineCounts(known)
    )
