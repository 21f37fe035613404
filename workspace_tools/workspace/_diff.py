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
from dataclasses import dataclass

CONTEXT_LINES = 3
NO_NEWLINE = "\\ No newline at end of file\n"

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


def unified_diff(old: str | None, new: str, path: str, *, mode: int = 0o100644) -> TextDiff:
    """The unified diff turning ``old`` into ``new`` for the file at ``path`` (relative, ``/``).

    Args:
        old: the previous text, ``None`` for a created file.
        new: the new text.
        path: the path relative to the workspace root, as shown in results.
        mode: file mode for a created file's ``new file mode`` line.
    """
    a_lines = [] if old is None else split_lines(old)
    b_lines = split_lines(new)
    quoted_a, quoted_b = _quote(f"a/{path}"), _quote(f"b/{path}")
    header = [f"diff --git {quoted_a} {quoted_b}\n"]
    if old is None:
        header.append(f"new file mode {mode:06o}\n")
    elif old == new:
        return TextDiff("", 0, 0)
    hunks, additions, deletions = _hunks(a_lines, b_lines)
    if hunks:
        header.append(f"--- {'/dev/null' if old is None else quoted_a}\n")
        header.append(f"+++ {quoted_b}\n")
    return TextDiff("".join(header + hunks), additions, deletions)


def _opcodes(a: list[str], b: list[str]) -> list[Opcode]:
    # Common head and tail lines are cut before difflib runs: an edit of one line in a long
    # file costs a scan, not a full sequence match.
    head = 0
    limit = min(len(a), len(b))
    while head < limit and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < limit - head and a[len(a) - 1 - tail] == b[len(b) - 1 - tail]:
        tail += 1
    middle = difflib.SequenceMatcher(None, a[head : len(a) - tail], b[head : len(b) - tail])
    codes: list[Opcode] = []
    if head:
        codes.append(("equal", 0, head, 0, head))
    for tag, i1, i2, j1, j2 in middle.get_opcodes():
        codes.append((tag, i1 + head, i2 + head, j1 + head, j2 + head))
    if tail:
        codes.append(("equal", len(a) - tail, len(a), len(b) - tail, len(b)))
    return codes


def _groups(codes: list[Opcode], n: int) -> list[list[Opcode]]:
    """Changes with up to ``n`` lines of context each side; changes whose contexts would
    touch (at most ``2n`` equal lines apart) share a hunk, as GNU diff groups them."""
    codes = list(codes)
    if codes and codes[0][0] == "equal":
        tag, i1, i2, j1, j2 = codes[0]
        codes[0] = (tag, max(i1, i2 - n), i2, max(j1, j2 - n), j2)
    if codes and codes[-1][0] == "equal":
        tag, i1, i2, j1, j2 = codes[-1]
        codes[-1] = (tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n))
    groups: list[list[Opcode]] = []
    current: list[Opcode] = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal" and i2 - i1 > 2 * n:
            current.append((tag, i1, i1 + n, j1, j1 + n))
            groups.append(current)
            current = []
            i1, j1 = i2 - n, j2 - n
        current.append((tag, i1, i2, j1, j2))
    if any(code[0] != "equal" for code in current):
        groups.append(current)
    return [group for group in groups if any(code[0] != "equal" for code in group)]


def _hunks(a: list[str], b: list[str]) -> tuple[list[str], int, int]:
    out: list[str] = []
    additions = deletions = 0
    for group in _groups(_opcodes(a, b), CONTEXT_LINES):
        i1, i2 = group[0][1], group[-1][2]
        j1, j2 = group[0][3], group[-1][4]
        out.append(f"@@ -{_range(i1, i2 - i1)} +{_range(j1, j2 - j1)} @@\n")
        for tag, ai1, ai2, bj1, bj2 in group:
            if tag == "equal":
                out.extend(_line(" ", line) for line in a[ai1:ai2])
                continue
            for line in a[ai1:ai2]:
                out.append(_line("-", line))
                deletions += 1
            for line in b[bj1:bj2]:
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
