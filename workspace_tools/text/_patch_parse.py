"""Parsing the patch envelope (``*** Begin Patch`` … ``*** End Patch``) and V4A file diffs.

The grammar (the format OpenAI's models write for ``apply_patch``)::

    patch   := "*** Begin Patch" NL op+ "*** End Patch" NL?
    op      := "*** Add File: " PATH NL ("+" TEXT NL)*
             | "*** Delete File: " PATH NL
             | "*** Update File: " PATH NL ("*** Move to: " PATH NL)? chunk*
    chunk   := anchor* line+ ("*** End of File" NL)?
    anchor  := "@@" NL | "@@ " TEXT NL
    line    := (" " | "-" | "+") TEXT NL

Stacked anchors (``@@ class A`` then ``@@ def f``) narrow where the chunk is; the first chunk
of an update may start without one. A chunk's context (`` ``) and removed (``-``) lines are
the lines it expects in the file; its context and added (``+``) lines are what it leaves.

Leniency, each for a way models are known to send patches: CRLF line breaks in the patch
are read as LF; a whole-patch heredoc wrapper (``<<'EOF'`` … ``EOF``, with or without a
leading command such as ``apply_patch``) is removed; an empty line inside a chunk is an
empty context line; blank lines around the envelope and between operations are skipped;
the envelope's markers and the operation headers may be padded with spaces; the end marker
may be repeated (an ``update_file`` diff that ends with its own ``*** End Patch``).
Errors are :class:`PatchSyntaxError` naming the patch's line number and what was expected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from workspace_tools._errors import clipped

BEGIN = "*** Begin Patch"
END = "*** End Patch"
ADD = "*** Add File: "
DELETE = "*** Delete File: "
UPDATE = "*** Update File: "
MOVE = "*** Move to: "
END_OF_FILE = "*** End of File"
_QUOTE_LIMIT = 80
"""Characters of a wrong first or last line a syntax error quotes."""


def _quoted(line: str, limit: int | None = None) -> str:
    """``line`` in quotes for a syntax error, its invisible characters escaped (a BOM, a
    zero-width space or a control character would be quoted as nothing, and the line
    would look right); tabs are kept, as the code they indent shows them."""
    if not line.replace("\t", " ").isprintable():
        line = "".join(
            c if c.isprintable() or c == "\t" else c.encode("unicode_escape").decode("ascii")
            for c in line
        )
    return f"'{line if limit is None else clipped(line, limit)}'"


_BODY = frozenset(" -+")
_UNIFIED_RANGE = re.compile(r"-\d+(?:,\d+)? \+\d+(?:,\d+)? @@")
_HEREDOC_START = re.compile(r"""^(?:[\w./-]+\s+)?<<-?\s*(['"]?)(\w+)\1\s*$""")


class PatchSyntaxError(ValueError):
    """A patch that does not follow the grammar.

    Attributes:
        message: what is wrong, naming the patch's 1-based line number where there is one.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Chunk:
    """One change inside an updated file.

    Attributes:
        anchors: the ``@@`` lines' texts in order (empty: none, or only a bare ``@@``).
        lines: ``(kind, text)`` with kind ``" "`` (context), ``"-"`` or ``"+"``; texts have
            no line break.
        end_of_file: the chunk's expected lines end the file (``*** End of File``).
        line: the 1-based patch line where the chunk starts, for messages.
    """

    anchors: tuple[str, ...]
    lines: tuple[tuple[str, str], ...]
    end_of_file: bool = False
    line: int = 0

    @property
    def old(self) -> list[str]:
        """The lines the chunk expects in the file (context and removed)."""
        return [text for kind, text in self.lines if kind != "+"]

    @property
    def new(self) -> list[str]:
        """The lines the chunk leaves (context and added)."""
        return [text for kind, text in self.lines if kind != "-"]


@dataclass(frozen=True)
class FileOp:
    """One operation of a patch.

    Attributes:
        kind: ``add``, ``delete`` or ``update``.
        path: the file's path as the patch names it.
        move_to: for an update, the new path (``None``: stays).
        content: for an add, the new file's text (each line ends with LF).
        chunks: for an update, its chunks in order.
    """

    kind: Literal["add", "delete", "update"]
    path: str
    move_to: str | None = None
    content: str = ""
    chunks: tuple[Chunk, ...] = field(default_factory=tuple)


def strip_heredoc(text: str) -> str:
    """``text`` without a heredoc wrapper around the whole patch (``<<'EOF'`` … ``EOF``, with
    an optional command word before ``<<``), else unchanged."""
    body = text.strip()
    # Only the first and the last line decide: the text is not split for them.
    first_end, last_start = body.find("\n"), body.rfind("\n")
    if first_end == -1 or first_end == last_start:  # fewer than three lines
        return text
    opening = _HEREDOC_START.match(body[:first_end].strip())
    if opening is None or body[last_start + 1 :].strip() != opening.group(2):
        return text
    return body[first_end + 1 : last_start] + "\n"


def _lines(text: str) -> list[str]:
    lines = text.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def parse_patch(text: str) -> list[FileOp]:
    """The operations of an envelope patch, in order.

    Raises:
        PatchSyntaxError: the patch breaks the grammar in the module docstring; the message
            names the line and what was expected there.
    """
    lines = _lines(strip_heredoc(text))
    start = 0
    while start < len(lines) and not lines[start].strip():
        start += 1
    end = len(lines)
    while end > start and not lines[end - 1].strip():
        end -= 1
    if start == end or lines[start].strip() != BEGIN:
        # Quoting the line shows what was sent instead (a Markdown fence, text before the
        # patch, literal \n escapes on one line).
        found = f", not {_quoted(lines[start].strip(), _QUOTE_LIMIT)}" if start < end else ""
        raise PatchSyntaxError(
            f"invalid patch: the first line of the patch must be '{BEGIN}'{found}"
        )
    if end - 1 == start or lines[end - 1].strip() != END:
        found = f", not {_quoted(lines[end - 1].strip(), _QUOTE_LIMIT)}"
        raise PatchSyntaxError(f"invalid patch: the last line of the patch must be '{END}'{found}")
    while end - 2 > start and lines[end - 2].strip() == END:
        end -= 1  # the end marker repeated (a V4A diff that ends with its own)
    ops: list[FileOp] = []
    i = start + 1
    stop = end - 1
    while i < stop:
        line = lines[i].strip()
        if not line:
            i += 1
            continue
        if line.startswith(ADD.rstrip()):
            path = _path(line, ADD, i)
            i += 1
            content: list[str] = []
            while i < stop and lines[i].startswith("+"):
                content.append(lines[i][1:] + "\n")
                i += 1
            ops.append(FileOp("add", path, content="".join(content)))
        elif line.startswith(DELETE.rstrip()):
            ops.append(FileOp("delete", _path(line, DELETE, i)))
            i += 1
        elif line.startswith(UPDATE.rstrip()):
            path = _path(line, UPDATE, i)
            i += 1
            move_to = None
            if i < stop and lines[i].strip().startswith(MOVE.rstrip()):
                move_to = _path(lines[i].strip(), MOVE, i)
                i += 1
            body_start = i
            while i < stop and not _is_header(lines[i]):
                i += 1
            chunks = parse_chunks(lines[body_start:i], path, first_line=body_start + 1)
            if not chunks and move_to is None:
                raise PatchSyntaxError(
                    f"invalid patch: the update of '{path}' at line {body_start} has no "
                    "changes; give @@ chunks with ' ', '-' and '+' lines"
                )
            ops.append(FileOp("update", path, move_to=move_to, chunks=tuple(chunks)))
        else:
            raise PatchSyntaxError(
                f"invalid patch: line {i + 1}, {_quoted(line)}, is not an operation header; each "
                f"operation starts with '{ADD}<path>', '{DELETE}<path>' or '{UPDATE}<path>'"
            )
    if not ops:
        raise PatchSyntaxError("invalid patch: it holds no operation (Add, Delete or Update)")
    return ops


_HEADERS = (ADD.rstrip(), DELETE.rstrip(), UPDATE.rstrip())


def _is_header(line: str) -> bool:
    # Headers may come padded with spaces (as models send them); no code line starts so.
    # Most lines hold no "***" at all: that one search settles them.
    return "***" in line and line.strip().startswith(_HEADERS)


def _path(line: str, prefix: str, index: int) -> str:
    path = line[len(prefix.rstrip()) :].strip()
    if not path:
        raise PatchSyntaxError(f"invalid patch: line {index + 1} names no path after '{prefix}'")
    return path


def parse_chunks(lines: list[str], path: str, *, first_line: int = 1) -> list[Chunk]:
    """The chunks of one file's V4A diff (``lines`` without breaks; ``first_line`` is the
    1-based patch line of ``lines[0]``, for messages).

    Raises:
        PatchSyntaxError: a line that is none of ``@@``, `` ``, ``-``, ``+``, an empty line
            or ``*** End of File``, or a chunk with anchors but no lines.
    """
    chunks: list[Chunk] = []
    anchors: list[str] = []
    body: list[tuple[str, str]] = []
    begun = first_line

    headed = False  # an @@ line opened the chunk being read

    def close(end_of_file: bool, at: int) -> None:
        nonlocal anchors, body, headed
        if not body:
            raise PatchSyntaxError(
                f"invalid patch: the chunk of '{path}' at line {at} has no lines; after its "
                "@@ line give the context (' '), removed ('-') and added ('+') lines"
            )
        chunks.append(Chunk(tuple(anchors), tuple(body), end_of_file, begun))
        anchors, body, headed = [], [], False

    for offset, line in enumerate(lines):
        if line[:1] in _BODY and "***" not in line:
            # The common case first: a context, removed or added line that cannot be the
            # end-of-file marker, however padded.
            if not body and not anchors:
                begun = first_line + offset
            body.append((line[0], line[1:]))
            continue
        number = first_line + offset
        if line.startswith("@@"):
            if body:
                close(False, begun)
            if not anchors:
                begun = number
            headed = True
            anchor = _anchor(line)
            if anchor:
                anchors.append(anchor)
        elif line.strip() == END_OF_FILE:
            close(True, begun)
        elif line == "" or line[0] in " -+":
            if not body and not anchors:
                begun = number
            body.append((" ", "") if line == "" else (line[0], line[1:]))
        else:
            raise PatchSyntaxError(
                f"invalid patch: line {number} of the update of '{path}', {_quoted(line)}, starts "
                "with none of ' ' (context), '-' (removed), '+' (added) or '@@' (anchor)"
            )
    if body or headed:
        close(False, begun)  # a last @@ line with no lines after it is refused
    return chunks


def _anchor(line: str) -> str:
    """The text an ``@@`` line names: what follows ``"@@ "``, its indentation kept (``@@
    def run():`` indented names the method, not a function of that name at the top), or
    ``""`` for a bare ``@@``. A unified-diff range (``@@ -1,3 +1,4 @@ def f``) is dropped,
    keeping the section text; ``@@def`` without the space is read as ``@@ def``."""
    rest = line[2:]
    numbered = _UNIFIED_RANGE.match(rest.strip())
    if numbered is not None:
        rest = rest.strip()[numbered.end() :]
    return rest.removeprefix(" ") if rest.strip() else ""


def parse_v4a_create(diff: str, path: str) -> str:
    """The text of a file a V4A ``create_file`` diff makes (every line ``+``; each ends with
    LF).

    Raises:
        PatchSyntaxError: a line that does not start with ``+``.
    """
    out: list[str] = []
    for number, line in enumerate(_lines(diff), 1):
        if not line.startswith("+"):
            raise PatchSyntaxError(
                f"invalid diff for creating '{path}': line {number}, {_quoted(line)}, does not "
                "start with '+'; every line of a new file is written as '+' and its text"
            )
        out.append(line[1:] + "\n")
    return "".join(out)
