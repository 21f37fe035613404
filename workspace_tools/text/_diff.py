"""Unified diffs of a text file's change, in the form ``git apply`` takes from the root.

Format (GNU diff / git): a ``diff --git a/P b/P`` header (``new file mode`` for a created
file, which diffs from ``/dev/null``), ``--- a/P`` and ``+++ b/P``, then hunks with 3 lines
of context: ``@@ -start,count +start,count @@``, lines prefixed ``' '``, ``-``, ``+``. Lines
keep their own endings (a CRLF line carries its CR); a last line without a newline is
followed by ``\\ No newline at end of file``. Lines are split at LF only: a form feed or
U+2028 inside a line is content, as git sees it. Paths that need it are C-quoted as git
quotes them.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import AnyStr

from workspace_tools.text._decode import TextFormat, detect_format, lf_of
from workspace_tools.text._line_counts import LineCounts
from workspace_tools.text._spans import Span

CONTEXT_LINES = 3
NO_NEWLINE = "\\ No newline at end of file\n"

GIT_BINARY_SNIFF_BYTES = 8000
"""git calls a content binary when a NUL byte is in its first this many bytes (xdiff's
``FIRST_FEW_BYTES``), whatever its encoding."""

GIT_SYMLINK_MODE = 0o120000
"""The git mode of a symbolic link, whose content is its target."""

Opcode = tuple[str, int, int, int, int]


@dataclass(frozen=True)
class TextDiff:
    """A unified diff and its counts.

    Attributes:
        diff: the unified diff text (``""`` when nothing changed).
        additions: ``+`` lines, as ``unidiff`` counts ``added``.
        deletions: ``-`` lines, as ``unidiff`` counts ``removed``.
    """

    diff: str
    additions: int
    deletions: int


def split_lines(text: str) -> list[str]:
    """``text`` split after each LF, endings kept; the last piece may lack one."""
    lines = text.split("\n")
    out = [line + "\n" for line in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out


def unified_diff(
    old: str | None,
    new: str,
    path: str,
    *,
    mode: int = 0o100644,
    spans: Sequence[Span] | None = None,
    lines: LineCounts | None = None,
    lines_above: int = 0,
) -> TextDiff:
    """The unified diff turning ``old`` into ``new`` for the file at ``path`` (relative, ``/``).

    Args:
        old: the previous text, ``None`` for a created file.
        new: the new text.
        path: the path relative to the workspace root, as shown in results.
        mode: file mode for a created file's ``new file mode`` line.
        spans: where the caller knows the texts differ (:mod:`._spans`: edits' spans,
            composed), the texts being the same outside them; by default anywhere. Each
            span is diffed in a window of the lines around it, and spans whose windows meet
            in one window (a window grows while a change slides past its context across
            repeated lines: :func:`diff_fits_window`), so that two edits far apart in a
            long file cost two small diffs. One window's diff is the diff of the whole texts.
        lines: counts of ``old``'s lines, to number the hunks from (counting from the
            nearest known one, and keeping what is counted) instead of from the start.
        lines_above: for ``old`` and ``new`` the lines around a change, not the whole
            texts: the lines of the file above them, which number the hunks.
    """
    quoted_a, quoted_b = _quote(f"a/{path}"), _quote(f"b/{path}")
    header = [f"diff --git {quoted_a} {quoted_b}\n"]
    created = old is None
    if old is None:
        header.append(f"new file mode {mode:06o}\n")
        old = ""
    elif old == new:
        return TextDiff("", 0, 0)
    hunks: list[str] = []
    additions = deletions = 0
    counted = above = 0  # LFs of ``old`` before offset ``counted``
    windows = _windows(old, new, spans or [(0, len(old), 0, len(new))])
    assert windows is not None  # the texts' own ends: every window can fit
    for start, stop, new_start, new_stop, unchanged in windows:
        window_old, window_new = old[start:stop], new[new_start:new_stop]
        if window_old == window_new:
            continue  # its edits undid each other, or wrote what was there
        before, change = _window_change(window_old, window_new, unchanged)
        if lines is None:
            above += old.count("\n", counted, start + before)
            counted = start + before
        else:
            above = lines.before(old, start + before)
        # The new file's lines there are further down by what the windows above added.
        first = lines_above + above
        part, added, removed = _hunks(*change, first, first + additions - deletions)
        hunks += part
        additions += added
        deletions += removed
    if hunks:
        header.append(f"--- {'/dev/null' if created else quoted_a}\n")
        header.append(f"+++ {quoted_b}\n")
    return TextDiff("".join(header + hunks), additions, deletions)


@dataclass(frozen=True)
class Blob:
    """One side of a path's change as git sees it.

    Attributes:
        mode: the git mode: ``0o100644``, ``0o100755`` or :data:`GIT_SYMLINK_MODE`.
        data: the file's bytes or the link's target; ``None`` when it could not be read
            (then the change is named as a binary one, its content not shown).
    """

    mode: int
    data: bytes | None


def git_binary(data: bytes) -> bool:
    """Whether git diffs ``data`` as binary: a NUL byte in its first 8,000 bytes."""
    return b"\0" in data[:GIT_BINARY_SNIFF_BYTES]


def blob_diff(path: str, old: Blob | None, new: Blob | None) -> str:
    """The ``git diff`` of ``path`` going from ``old`` to ``new`` (``None``: absent), without
    ``index`` lines.

    git's rules: a change between a link and a file is the old entry deleted and the new one
    created; a mode change is an ``old mode``/``new mode`` pair; a content with a NUL in its
    first 8,000 bytes on either side is binary and only named (``Binary files a/P and b/P
    differ``). A text content is diffed line by line as git does, by bytes, and each line is
    shown decoded as the read path decodes that side (:func:`~._decode.detect_format`: a
    latin-1 file's ``é`` is ``é``, a BOM is U+FEFF); context lines as the old side.
    """
    if old is not None and new is not None:
        if (old.mode == GIT_SYMLINK_MODE) != (new.mode == GIT_SYMLINK_MODE):
            return blob_diff(path, old, None) + blob_diff(path, None, new)
        if old == new:
            return ""
    quoted_a, quoted_b = _quote(f"a/{path}"), _quote(f"b/{path}")
    lines = [f"diff --git {quoted_a} {quoted_b}\n"]
    if old is None and new is None:
        return ""
    if old is None:
        assert new is not None
        lines.append(f"new file mode {new.mode:06o}\n")
        quoted_a, old_data, new_data = "/dev/null", b"", new.data
    elif new is None:
        lines.append(f"deleted file mode {old.mode:06o}\n")
        quoted_b, old_data, new_data = "/dev/null", old.data, b""
    else:
        if old.mode != new.mode:
            lines.append(f"old mode {old.mode:06o}\nnew mode {new.mode:06o}\n")
        old_data, new_data = old.data, new.data
    if old_data is None or new_data is None or git_binary(old_data) or git_binary(new_data):
        lines.append(f"Binary files {quoted_a} and {quoted_b} differ\n")
    elif hunks := _text_hunks(old_data, new_data):
        lines.append(f"--- {quoted_a}\n+++ {quoted_b}\n")
        lines.extend(hunks)
    return "".join(lines)


def _text_hunks(old: bytes, new: bytes) -> list[str]:
    """The hunk lines turning the text ``old`` into ``new``, each shown in its side's format."""
    old_format, new_format = detect_format(old), detect_format(new)
    if not (old_format.byte_newlines and new_format.byte_newlines):
        # UTF-16 or UTF-32 text without a NUL: its LF is not one byte; diff the characters.
        diff = unified_diff(_shown(old, old_format), _shown(new, new_format), "-").diff
        return split_lines(diff)[3:]
    # latin-1 maps each byte to one character and back: the hunks are the bytes' hunks.
    diff = unified_diff(old.decode("latin-1"), new.decode("latin-1"), "-").diff
    out = []
    for line in split_lines(diff)[3:]:
        if line[0] in " -+":
            codec = (new_format if line[0] == "+" else old_format).codec
            line = line[0] + line[1:].encode("latin-1").decode(codec)
        out.append(line)
    return out


def _shown(data: bytes, fmt: TextFormat) -> str:
    """``data`` decoded in ``fmt``, its BOM kept as U+FEFF (git shows a BOM's bytes)."""
    return ("\ufeff" if fmt.bom else "") + data[len(fmt.bom) :].decode(fmt.codec)


def _changed_span(old: str, new: str, head: int = 0, tail: int = 0) -> tuple[int, int, int]:
    """``(start, old_stop, new_stop)``: line-aligned character offsets around everything that
    differs; before ``start`` and after the stops both texts are the same lines. The first
    ``head`` and last ``tail`` characters are known to be the same (``unified_diff``).

    An edit of one line in a long file then costs a few block compares, not a line split
    and a sequence match of the whole file. Only this span is sequence-matched: given the
    context lines too, the matcher may slide a change into them across repeated lines and
    leave a hunk without the trailing context that ``git apply`` needs to place it.
    """
    limit = min(len(old), len(new))
    head = _common_length(old, new, limit, min(head, limit), from_end=False)
    tail = _common_length(old, new, limit - head, min(tail, limit - head), from_end=True)
    start = old.rfind("\n", 0, head) + 1
    # The first LF inside the common tail ends a line both texts share from there on.
    found = old.find("\n", len(old) - tail)
    stop = len(old) if found == -1 else found + 1
    return start, stop, len(new) - (len(old) - stop)


def _window_change(
    old: str, new: str, unchanged: tuple[int, int]
) -> tuple[int, tuple[list[str], list[str], list[str], list[str]]]:
    """Where the hunks of a window's change start in ``old`` (the first line of context),
    and the lines :func:`_hunks` takes: the context before the change, its old lines, its
    new lines and the context after it."""
    start, old_stop, new_stop = _changed_span(old, new, *unchanged)
    before = lines_before(old, start, CONTEXT_LINES)
    after = lines_after(old, old_stop, CONTEXT_LINES)
    return before, (
        split_lines(old[before:start]),
        split_lines(old[start:old_stop]),
        split_lines(new[start:new_stop]),
        split_lines(old[old_stop:after]),
    )


def spans_fit_window(
    old: str, new: str, spans: Sequence[Span], *, at_start: bool, at_end: bool
) -> bool:
    """Whether :func:`unified_diff` of ``old`` and ``new`` told ``spans``, the same window of
    two longer texts that are the same outside it, is their diff: each span's window holds
    its hunk's lines without reaching past the window, except where it starts (``at_start``)
    or ends (``at_end``) with the texts."""
    return _windows(old, new, spans, at_start=at_start, at_end=at_end) is not None


def _windows(
    old: str, new: str, spans: Sequence[Span], *, at_start: bool = True, at_end: bool = True
) -> list[tuple[int, int, int, int, tuple[int, int]]] | None:
    """The windows :func:`unified_diff` diffs ``spans`` in, in order: ``(old start, old
    stop, new start, new stop, unchanged)``, whole lines of each text around one or more
    spans, ``unchanged`` the characters at the window's ends outside them. A span's window
    reaches one line further than a hunk's context on each side (a change ending in an LF
    can move the diff's span a line down), windows that meet are one, and one whose hunk's
    lines are not all in it (:func:`diff_fits_window`) reaches twice as far, until each
    holds its hunks: the windows' diffs are then the diffs of their stretches of the whole
    texts, and the changes of two windows are more than twice a hunk's context apart (no
    hunk of the whole texts' diff would hold both). ``None`` when a window that does not
    hold its hunk's lines reaches a start or an end of ``old`` that is not the text's
    (``at_start``, ``at_end`` false: ``old`` is a window of a longer text, too small)."""
    reach = [CONTEXT_LINES + 1] * len(spans)
    while True:
        windows: list[list[int]] = []  # old start, old stop, first and last span held
        for index, (old_start, old_end, _, _) in enumerate(spans):
            start = lines_before(old, old.rfind("\n", 0, old_start) + 1, reach[index])
            stop = lines_after(old, old_end, reach[index] + 1)
            if windows and start <= windows[-1][1]:
                windows[-1][1:] = [max(stop, windows[-1][1]), windows[-1][2], index]
            else:
                windows.append([start, stop, index, index])
        out = []
        grew = False
        for start, stop, first, last in windows:
            new_start = start + spans[first][2] - spans[first][0]
            new_stop = stop + spans[last][3] - spans[last][1]
            unchanged = (spans[first][0] - start, stop - spans[last][1])
            if not diff_fits_window(
                old[start:stop],
                new[new_start:new_stop],
                unchanged,
                at_start=start == 0 and at_start,
                at_end=stop == len(old) and at_end,
            ):
                if (start == 0 and not at_start) or (stop == len(old) and not at_end):
                    return None
                grew = True
                for index in range(first, last + 1):
                    reach[index] *= 2
            out.append((start, stop, new_start, new_stop, unchanged))
        if not grew:
            return out


def diff_fits_window(
    old: str, new: str, unchanged: tuple[int, int], *, at_start: bool, at_end: bool
) -> bool:
    """Whether :func:`unified_diff` of ``old`` and ``new``, the same window of two longer
    texts that are the same outside it, is their diff: the lines its hunk shows are inside
    the window: the :data:`CONTEXT_LINES` before the change's first line, and the LF that
    ends its last line and the lines after it. (The texts' first difference is then inside
    too: one past the end of the shorter side, where a change slides on across repeated
    text, leaves no LF after the change.) ``at_start`` / ``at_end``: the window starts /
    ends where the texts do. ``unchanged``: ``(head, tail)``, characters at the start and
    the end known to be the same (not compared)."""
    if at_start and at_end:
        return True
    limit = min(len(old), len(new))
    head = _common_length(old, new, limit, min(unchanged[0], limit), from_end=False)
    tail = _common_length(old, new, limit - head, min(unchanged[1], limit - head), from_end=True)
    if not at_start and old.count("\n", 0, head) < CONTEXT_LINES:
        return False
    return at_end or old.count("\n", len(old) - tail) > CONTEXT_LINES


def lines_before(text: AnyStr, offset: int, count: int) -> int:
    """The offset of the line ``count`` lines before the line starting at ``offset`` (of a
    text, or of its bytes in an encoding whose LF is one byte no other character holds)."""
    lf = lf_of(text)
    for _ in range(count):
        if offset:
            offset = text.rfind(lf, 0, offset - 1) + 1
    return offset


def lines_after(text: AnyStr, offset: int, count: int) -> int:
    """The offset just past ``count`` lines from the line starting at ``offset`` (of a text,
    or of its bytes in an encoding whose LF is one byte no other character holds)."""
    lf = lf_of(text)
    for _ in range(count):
        found = text.find(lf, offset)
        offset = len(text) if found == -1 else found + 1
    return offset


def _common_length(a: str, b: str, limit: int, done: int, *, from_end: bool) -> int:
    """Length of the common prefix (or suffix) of ``a`` and ``b``, at most ``limit``, by
    comparing blocks and then halving: each step is one C-level compare. The first (last)
    ``done`` characters are known to be the same."""

    def same(lo: int, hi: int) -> bool:
        if from_end:
            return a[len(a) - hi : len(a) - lo] == b[len(b) - hi : len(b) - lo]
        return a[lo:hi] == b[lo:hi]

    block = 1 << 16
    while done < limit and same(done, min(done + block, limit)):
        done = min(done + block, limit)
    if done == limit:
        return limit
    lo, hi = done, min(done + block, limit) - 1  # the answer is in [lo, hi]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if same(done, mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _hunk_opcodes(before: int, a: list[str], b: list[str], after: int) -> list[list[Opcode]]:
    """The opcodes of each hunk turning ``before + a + after`` lines into ``before + b +
    after``, where ``before`` and ``after`` count the lines around the change that both
    texts share (at most :data:`CONTEXT_LINES` each), indexed from the first of them.

    difflib matches and groups ``a`` and ``b`` alone (given the shared lines too, it may slide
    a change into them across repeated lines and leave a hunk without the trailing context
    ``git apply`` needs); the first hunk's leading context and the last hunk's trailing
    context then go on into the shared lines, up to :data:`CONTEXT_LINES` lines each.
    """
    n = CONTEXT_LINES
    matcher = difflib.SequenceMatcher(None, a, b)
    groups = [
        [(tag, i1 + before, i2 + before, j1 + before, j2 + before) for tag, i1, i2, j1, j2 in group]
        for group in matcher.get_grouped_opcodes(n)
    ]
    first, last = groups[0], groups[-1]
    tag, i1, i2, j1, j2 = first[0]
    if i1 == before:  # the first hunk starts where the change does: context from before it
        take = min(before, n - (i2 - i1 if tag == "equal" else 0))
        if tag == "equal":
            first[0] = (tag, i1 - take, i2, j1 - take, j2)
        elif take:
            first.insert(0, ("equal", i1 - take, i1, j1 - take, j1))
    tag, i1, i2, j1, j2 = last[-1]
    if i2 == before + len(a):  # the last hunk ends where the change does: context after it
        take = min(after, n - (i2 - i1 if tag == "equal" else 0))
        if tag == "equal":
            last[-1] = (tag, i1, i2 + take, j1, j2 + take)
        elif take:
            last.append(("equal", i2, i2 + take, j2, j2 + take))
    return groups


def _hunks(
    before: list[str],
    a: list[str],
    b: list[str],
    after: list[str],
    first_line: int,
    new_first_line: int,
) -> tuple[list[str], int, int]:
    """Hunks turning ``a`` into ``b``, with the lines ``before`` and ``after`` them (the same
    in both files) as context; ``before`` starts at 0-based line ``first_line`` of the old
    file and ``new_first_line`` of the new one (further down by what changes above added)."""
    if not (a or b):  # no line changed: an empty file was created
        return [], 0, 0
    if set(a).isdisjoint(b):
        # No line is both removed and added: the sequence match would find nothing to keep,
        # and the one hunk is the removed lines, then the added, inside their context.
        shared = len(before) + len(after)
        old_range = _range(first_line, shared + len(a))
        out = [f"@@ -{old_range} +{_range(new_first_line, shared + len(b))} @@\n"]
        out.extend(_line(" ", line) for line in before)
        out.extend(_line("-", line) for line in a)
        out.extend(_line("+", line) for line in b)
        out.extend(_line(" ", line) for line in after)
        return out, len(b), len(a)
    return _matched_hunks(before, a, b, after, first_line, new_first_line)


def _matched_hunks(
    before: list[str],
    a: list[str],
    b: list[str],
    after: list[str],
    first_line: int,
    new_first_line: int,
) -> tuple[list[str], int, int]:
    """:func:`_hunks` from a sequence match of ``a`` and ``b``."""
    out: list[str] = []
    additions = deletions = 0
    old, new = before + a + after, before + b + after
    for group in _hunk_opcodes(len(before), a, b, len(after)):
        i1, i2 = group[0][1] + first_line, group[-1][2] + first_line
        j1, j2 = group[0][3] + new_first_line, group[-1][4] + new_first_line
        out.append(f"@@ -{_range(i1, i2 - i1)} +{_range(j1, j2 - j1)} @@\n")
        for tag, ai1, ai2, bj1, bj2 in group:
            if tag == "equal":
                out.extend(_line(" ", line) for line in old[ai1:ai2])
                continue
            for line in old[ai1:ai2]:
                out.append(_line("-", line))
                deletions += 1
            for line in new[bj1:bj2]:
                out.append(_line("+", line))
                additions += 1
    return out, additions, deletions


def _range(start: int, count: int) -> str:
    # GNU form: a 0-length range names the line before it; a 1-line range omits the count.
    if count == 0:
        return f"{start},0"
    return f"{start + 1}" if count == 1 else f"{start + 1},{count}"


def _line(prefix: str, line: str) -> str:
    return prefix + line if line.endswith("\n") else prefix + line + "\n" + NO_NEWLINE


def _quote(path: str) -> str:
    """``path`` as git writes it in a header: C-quoted when it holds a quote, backslash,
    control or non-ASCII character (git's ``core.quotePath``)."""
    if all(0x20 <= ord(ch) < 0x7F and ch not in '"\\' for ch in path):
        return path
    escapes = {'"': '\\"', "\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
    out = []
    for ch in path:
        if ch in escapes:
            out.append(escapes[ch])
        elif 0x20 <= ord(ch) < 0x7F:
            out.append(ch)
        else:
            out.extend(f"\\{byte:03o}" for byte in ch.encode("utf-8", "surrogateescape"))
    return '"' + "".join(out) + '"'
