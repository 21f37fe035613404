"""Exact edits of a UTF-8 file made on its bytes, so that a large file's edit costs its
read, one search per edit and its write.

The text path decodes the whole file, builds the new text from the old one's slices and
encodes it: three copies of the file, each a fresh allocation the kernel must fault in (150
ms of an edit of a 100 MB file, beside the 60 ms of its read). UTF-8 is self-synchronising,
so each edit's place is found by a search of the bytes; the edits themselves are made by
:func:`~workspace_tools.text._window_edit.replace_in_window` on the lines around them, and
the new file is written as the old bytes before that window, the window's new text and the
old bytes after it, without copying them. An ASCII file (a character a byte) is taken as it
is, and its kept line counts are used and carried; a file with other characters is first
checked to be strict UTF-8 (a decode, whose text is dropped), and its lines are counted in
its bytes, the kept counts being of characters. Every other edit (a fallback match, several
places, a file in another encoding or with a BOM) takes the text path, whose results this
path gives exactly (``tests/workspace/test_byte_edit.py`` checks both against each other).
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass

from workspace_tools.text._decode import BINARY_SNIFF_BYTES, UTF8, dominant_newline
from workspace_tools.text._diff import TextDiff, unified_diff
from workspace_tools.text._editorconfig import new_file_newline
from workspace_tools.text._line_counts import LineCounts
from workspace_tools.text._match import EditResult
from workspace_tools.text._window_edit import Replacement, replace_in_window
from workspace_tools.workspace._files import CommitGuard
from workspace_tools.workspace._paths import ResolvedPath
from workspace_tools.workspace._textfile import ReadFile, Saved, save_bytes
from workspace_tools.workspace._workspace import Workspace


@dataclass(frozen=True)
class ByteEdit:
    """Edits :func:`edit_bytes` made: the file written, the change's diff, and each edit's
    :func:`~workspace_tools.text._match.replace_text` result on the lines around it (its
    ``replacements`` and ``match`` are the whole edit's)."""

    saved: Saved
    diff: TextDiff
    results: tuple[EditResult, ...]


def edit_bytes(
    workspace: Workspace,
    resolved: ResolvedPath,
    read: ReadFile,
    edits: Sequence[Replacement],
    *,
    guard: CommitGuard = nullcontext,
) -> ByteEdit | None:
    """Make ``edits`` in turn in the file ``read`` holds (``read_for_change`` of
    ``resolved``) as :func:`~workspace_tools.text._match.replace_text` would in its text,
    check that the file is as last seen, write it and remember it, when the file is UTF-8
    without a BOM and each edit's ``old`` is in exactly one place of the text the edits
    before it left; ``None``, with nothing checked or written, when the edits need the text
    path (module docstring). The caller holds the file's lock.

    Raises:
        ToolError: ``STALE_FILE`` when it changed since last read or written, and as
            :func:`~._textfile.save_bytes`.
    """
    data = read.data
    if data is None or b"\0" in data[:BINARY_SNIFF_BYTES]:
        return None
    ascii_text = data.isascii()
    if not ascii_text and not _strict_utf8(data):
        return None
    newline = dominant_newline(data) or new_file_newline(workspace.root, resolved.real)
    window = replace_in_window(data, edits, newline=newline, path=resolved.rel)
    if window is None:
        return None
    replacement = window.new.encode(UTF8.codec)
    lines = workspace.file_states.check_fresh(resolved.real, data, resolved.rel, read.digest)
    carried: LineCounts | None = None
    if ascii_text:
        counts = lines or LineCounts()
        above = counts.before(data, window.start)
        carried = counts.changed(window.old, window.new, window.unchanged, at=window.start)
    else:
        above = data.count(b"\n", 0, window.start)  # kept counts are of characters
    diff = unified_diff(window.old, window.new, resolved.rel, spans=window.spans, lines_above=above)
    view = memoryview(data)
    pieces = (view[: window.start], replacement, view[window.stop :])
    saved = save_bytes(workspace, resolved, pieces, carried, guard=guard)
    return ByteEdit(saved, diff, window.results)


def _strict_utf8(data: bytes) -> bool:
    """Whether ``data`` is what :func:`~workspace_tools.text._decode.decode_text` reads as
    UTF-8 without a BOM: strict UTF-8 not starting with one."""
    if data.startswith(codecs.BOM_UTF8):
        return False
    try:
        data.decode(UTF8.codec)
    except UnicodeDecodeError:
        return False
    return True
