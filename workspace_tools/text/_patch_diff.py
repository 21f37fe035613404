"""The unified diff of a patched file from the line ranges its chunks covered.

Diffing the whole span between a file's first and last change costs a sequence match of
every line in between; a patch already says where its changes are. Each chunk's range,
widened by the diff's context lines, is diffed alone and its hunks are renumbered to their
place in the file; ranges that touch are diffed together. The result is a unified diff
that ``git apply`` takes, as :func:`~._diff.unified_diff` makes.
"""

from __future__ import annotations

import re

from workspace_tools.text._diff import CONTEXT_LINES, TextDiff, unified_diff
from workspace_tools.text._patch_apply import PatchedText

_HUNK = re.compile(r"@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


def spans_diff(patched: PatchedText, path: str, *, bom: str = "") -> TextDiff:
    """The diff turning the text ``patched`` was made from into ``patched.text`` for the
    file at ``path``, from its ``spans`` (``(old start, old end, new start, new end)``
    0-based line ranges, in order, outside of which the two have the same lines): only
    the lines of each span and its context are cut out of the texts, neither is split
    again. ``bom`` (U+FEFF or ``""``) is put before the first line of both, as the file's
    bytes have it.
    """
    regions: list[list[int]] = []
    for a0, a1, b0, b1 in patched.spans:
        lead = min(CONTEXT_LINES, a0, b0)
        trail = min(CONTEXT_LINES, patched.old_count - a1, patched.new_count - b1)
        region = [a0 - lead, a1 + trail, b0 - lead, b1 + trail]
        if regions and region[0] <= regions[-1][1]:
            regions[-1][1], regions[-1][3] = region[1], region[3]
        else:
            regions.append(region)
    header = ""
    hunks: list[str] = []
    additions = deletions = 0
    for a0, a1, b0, b1 in regions:
        first = bom if a0 == 0 else ""
        part = unified_diff(
            first + patched.old_slice(a0, a1), first + patched.new_slice(b0, b1), path
        )
        if not part.diff:
            continue
        lines = part.diff.splitlines(keepends=True)
        at = next(i for i, line in enumerate(lines) if line.startswith("@@ "))
        header = header or "".join(lines[:at])
        for line in lines[at:]:
            if line.startswith("@@ "):
                line = _shifted(line, a0, b0)
            hunks.append(line)
        additions += part.additions
        deletions += part.deletions
    return TextDiff(header + "".join(hunks), additions, deletions)


def _shifted(line: str, old_offset: int, new_offset: int) -> str:
    """A hunk header ``line`` with its start lines moved by the offsets."""
    match = _HUNK.match(line)
    if match is None:  # unified_diff writes every header in this form
        raise ValueError(f"not a hunk header: {line!r}")
    a, a_count, b, b_count = match.groups()
    start = f"@@ -{int(a) + old_offset}{a_count or ''} +{int(b) + new_offset}{b_count or ''} @@"
    return start + line[match.end() :]
