"""Edits of a file's lines, and the patch text a model writes for them: V4A chunks (an
``update_file`` diff, or the body of an envelope's ``*** Update File:``) with context lines,
``@@`` lines (bare or naming a line above the change) and ``*** End of File``.

The truth of an edit is computed here from the lines alone, so a test can tell which of two
executors that disagree did what the patch says."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

#: Line texts files are made of: few, so that lines repeat (ambiguous context), with blank
#: and whitespace-only lines, indentation by spaces and by tabs, trailing spaces, non-ASCII
#: text and typographic punctuation.
VOCABULARY = (
    "a",
    "b",
    "x = 1",
    "    return x",
    "\tindented",
    "",
    "  ",
    "def f():",
    "}",
    "é ü ß",
    "emoji \U0001f389",
    "say \u201chi\u201d",
    "a  ",
    "   a",
)


@dataclass(frozen=True)
class Region:
    """Lines ``[start, end)`` of the file replaced by ``new`` (``start == end``: an insertion
    before line ``start``)."""

    start: int
    end: int
    new: tuple[str, ...]


@dataclass(frozen=True)
class Edit:
    """A file's lines, its line ending, whether its last line ends with one, the regions
    changed (in order, apart), and how the patch is written."""

    lines: tuple[str, ...]
    newline: str
    final_newline: bool
    regions: tuple[Region, ...]
    context: int
    anchors: tuple[bool, ...]
    end_of_file: bool
    stacked: bool = False

    @property
    def data(self) -> bytes:
        """The file's bytes (UTF-8)."""
        return join(self.lines, self.newline, self.final_newline).encode()

    @property
    def result(self) -> bytes:
        """The file's bytes after the edit: each region's lines replaced, every line ending
        the file's, and the final newline state kept."""
        out: list[str] = []
        at = 0
        for region in self.regions:
            out.extend(self.lines[at : region.start])
            out.extend(region.new)
            at = region.end
        out.extend(self.lines[at:])
        return join(tuple(out), self.newline, self.final_newline or not self.lines).encode()


def join(lines: tuple[str, ...], newline: str, final_newline: bool) -> str:
    """``lines`` joined with ``newline``, with one after the last when ``final_newline``."""
    if not lines:
        return ""
    return newline.join(lines) + (newline if final_newline else "")


Chunk = tuple[str | None, list[tuple[str, str]], bool, str | None]


def chunks(edit: Edit) -> list[Chunk]:
    """The chunks a model writes for ``edit``: ``(anchor, lines, end_of_file, outer)`` with
    the anchor ``None`` for a bare ``@@``, ``lines`` as ``(kind, text)``. Regions closer
    than twice the context are one chunk, the lines between them context, as ``diff -u``
    groups hunks; an anchor names the line just above a chunk's first line when there is
    one after the previous chunk; with ``edit.stacked``, ``outer`` names the nearest line
    above that one indented less (its enclosing block, stacked above it)."""
    groups: list[list[Region]] = []
    for region in edit.regions:
        if groups and region.start - groups[-1][-1].end <= 2 * edit.context:
            groups[-1].append(region)
        else:
            groups.append([region])
    out = []
    previous_end = 0
    for number, group in enumerate(groups):
        first, last = group[0], group[-1]
        begin = max(previous_end, first.start - edit.context)
        stop = min(len(edit.lines), last.end + edit.context)
        if number + 1 < len(groups):
            stop = min(stop, groups[number + 1][0].start - edit.context)
        body: list[tuple[str, str]] = [(" ", line) for line in edit.lines[begin : first.start]]
        for k, region in enumerate(group):
            body += [("-", line) for line in edit.lines[region.start : region.end]]
            body += [("+", line) for line in region.new]
            upto = group[k + 1].start if k + 1 < len(group) else stop
            body += [(" ", line) for line in edit.lines[region.end : upto]]
        anchor = None
        wants_anchor = edit.anchors[number % len(edit.anchors)]
        if wants_anchor and begin - 1 >= previous_end and edit.lines[begin - 1].strip():
            anchor = edit.lines[begin - 1]
        eof = edit.end_of_file and stop == len(edit.lines) and number == len(groups) - 1
        outer = None
        if anchor is not None and edit.stacked:
            depth = len(anchor) - len(anchor.lstrip())
            outer = next(
                (
                    line
                    for line in reversed(edit.lines[previous_end : begin - 1])
                    if line.strip() and len(line) - len(line.lstrip()) < depth
                ),
                None,
            )
        out.append((anchor, body, eof, outer))
        previous_end = stop
    return out


def v4a(edit: Edit) -> str:
    """The V4A diff of ``edit``: each chunk opened by an ``@@`` line (the first one too)."""
    text = []
    for anchor, body, eof, outer in chunks(edit):
        if outer is not None:
            text.append(f"@@ {outer}")
        text.append("@@" if anchor is None else f"@@ {anchor}")
        text += [kind + line for kind, line in body]
        if eof:
            text.append("*** End of File")
    return "\n".join(text) + "\n"


def old_lines(body: list[tuple[str, str]]) -> list[str]:
    """The lines a chunk expects in the file (context and removed)."""
    return [line for kind, line in body if kind != "+"]


def occurrences(lines: tuple[str, ...], wanted: list[str]) -> list[int]:
    """Where ``wanted`` occurs in ``lines`` (0-based starts), compared exactly."""
    span = len(wanted)
    return [i for i in range(len(lines) - span + 1) if list(lines[i : i + span]) == wanted]


@st.composite
def edits(draw: st.DrawFn, *, crlf: bool = True, max_lines: int = 12) -> Edit:
    """A file and an edit of it: 1 to 3 regions, each removing 0 to 3 lines and adding 0
    to 3 (never neither), written with 0 to 3 context lines."""
    lines = tuple(draw(st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=max_lines)))
    newline = draw(st.sampled_from(["\n", "\r\n"])) if crlf else "\n"
    final_newline = draw(st.booleans())
    if lines[-1] == "":
        # A last line that is empty and has no break is no line at all.
        final_newline = True
    if len(lines) == 1 and not final_newline:
        newline = "\n"  # a file without a line break has no style of its own: LF's
    cuts = sorted(draw(st.lists(st.integers(0, len(lines)), min_size=2, max_size=6)))
    regions = []
    for start, end in zip(cuts[::2], cuts[1::2], strict=False):
        end = min(end, start + 3)
        if regions and start <= regions[-1].end:
            continue  # regions stay apart: two touching ones are one change
        new = tuple(draw(st.lists(st.sampled_from(VOCABULARY), max_size=3)))
        if start == end and not new:
            continue
        if list(new) == list(lines[start:end]):
            continue
        regions.append(Region(start, end, new))
    if not regions:
        regions = [Region(0, 1, ("inserted",))]
    return Edit(
        lines,
        newline,
        final_newline,
        tuple(regions),
        context=draw(st.integers(0, 3)),
        anchors=tuple(draw(st.lists(st.booleans(), min_size=1, max_size=3))),
        end_of_file=draw(st.booleans()),
        stacked=draw(st.booleans()),
    )
