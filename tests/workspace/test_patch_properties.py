"""Properties of the patch engine, with difflib as the patch writer.

- A patch made from (a, b) turns a's bytes into b's bytes exactly, and so does its diff in
  the details applied by ``git apply``, in every encoding the
  tools keep (UTF-8, UTF-8 with BOM, latin-1, UTF-16 LE/BE with BOM), with LF or CRLF, with
  or without a final newline, tabs and repeated lines included. The writer widens context
  until its chunks are unique (as a model is told to); a whole-file chunk always is.
- A multi-file patch that fails, in planning or in the middle of writing, leaves every
  file's bytes as they were.
"""

from __future__ import annotations

import difflib
import subprocess
import sys
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from tests.file_support import DIFF_CODECS, call, tools
from workspace_tools import ErrorCode
from workspace_tools.text import _diff, _patch_apply
from workspace_tools.text._diff import unified_diff
from workspace_tools.tools import apply_patch

ENCODINGS = {
    "utf-8": lambda t: t.encode("utf-8"),
    "utf-8-bom": lambda t: b"\xef\xbb\xbf" + t.encode("utf-8"),
    "latin-1": lambda t: t.encode("latin-1"),
    "utf-16-le": lambda t: b"\xff\xfe" + t.encode("utf-16-le"),
    "utf-16-be": lambda t: b"\xfe\xff" + t.encode("utf-16-be"),
}
# Few distinct lines, so that chunks often match in more than one place.
LINE = st.one_of(
    st.sampled_from(["a", "b", "  c", "\td", "café", "x y", "", "a ", "    return 0"]),
    st.text(alphabet="abc \té-", max_size=6),
)
LINES = st.lists(LINE, max_size=12)


def v4a_update(path: str, old: list[str], new: list[str], context: int) -> str:
    """An Update File operation turning lines ``old`` into ``new`` with ``context`` lines
    of context around each change."""
    out = [f"*** Update File: {path}"]
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for group in matcher.get_grouped_opcodes(context):
        out.append("@@")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out.extend(" " + line for line in old[i1:i2])
                continue
            out.extend("-" + line for line in old[i1:i2])
            out.extend("+" + line for line in new[j1:j2])
        if group[-1][2] == len(old):
            out.append("*** End of File")
    return "\n".join(out) + "\n"


def envelope(*operations: str) -> str:
    return "*** Begin Patch\n" + "".join(operations) + "*** End Patch\n"


def as_text(lines: list[str], newline: str, final: bool) -> str:
    if not lines:
        return ""
    return newline.join(lines) + (newline if final else "")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    old=LINES,
    new=LINES,
    encoding=st.sampled_from(sorted(ENCODINGS)),
    newline=st.sampled_from(["\n", "\r\n"]),
    final=st.booleans(),
)
def test_a_difflib_patch_turns_a_into_b_byte_exactly(
    old: list[str], new: list[str], encoding: str, newline: str, final: bool
) -> None:
    if encoding == "latin-1":
        # A byte that is no UTF-8 makes the file latin-1 (ASCII-only text would be UTF-8).
        old, new = ["# caf\xe9", *old], ["# caf\xe9", *new]
    # Without a final newline a last empty line is no line at all: the lines would not be
    # the file's.
    assume(final or (not (old and old[-1] == "") and not (new and new[-1] == "")))
    assume(old != new)
    before_text = as_text(old, newline, final)
    before = ENCODINGS[encoding](before_text)
    if "\n" not in before_text:
        newline = "\n"  # a file without a line break has no style: new lines get LF
    # The final newline state is kept; lines added to an empty file each end in a newline.
    after = ENCODINGS[encoding](as_text(new, newline, final if old else True))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        target = root / "f.txt"
        context = 3
        while True:
            target.write_bytes(before)
            tool = tools(root)["apply_patch"]
            result = call(tool, patch=envelope(v4a_update("f.txt", old, new, context)))
            if result.error_code != ErrorCode.AMBIGUOUS_MATCH or context > len(old):
                break
            assert target.read_bytes() == before
            context *= 2
        assert result.error is None, (result.error, context)
        assert target.read_bytes() == after, (before, after, result.details)
        [entry] = result.details.files
        if entry.encoding in DIFF_CODECS:  # git reads UTF-16 files as binary
            scratch = root / "git"
            scratch.mkdir()
            (scratch / "f.txt").write_bytes(before)
            subprocess.run(
                ["git", "apply", "--whitespace=nowarn", "-"],
                input=entry.diff.encode(DIFF_CODECS[entry.encoding]),
                cwd=scratch,
                check=True,
                capture_output=True,
            )
            assert (scratch / "f.txt").read_bytes() == after, entry.diff


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    contents=st.lists(LINES.filter(any), min_size=2, max_size=4),
    fail_at=st.integers(min_value=0, max_value=4),
    in_plan=st.booleans(),
)
def test_a_failed_multi_file_patch_leaves_every_file_unchanged(
    contents: list[list[str]], fail_at: int, in_plan: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        before = {}
        operations = []
        for index, lines in enumerate(contents):
            path = f"d{index}/f{index}.txt"
            (root / path).parent.mkdir()
            (root / path).write_bytes(as_text(lines, "\n", True).encode("utf-8"))
            before[path] = (root / path).read_bytes()
            changed = [*lines[: len(lines) // 2], "NEW LINE", *lines[len(lines) // 2 :]]
            operations.append(v4a_update(path, lines, changed, len(lines)))
        operations.append("*** Add File: added/new.txt\n+created\n")
        operations.append("*** Delete File: d0/f0.txt\n")
        if in_plan:
            bad = "*** Update File: absent.txt\n@@\n-x\n+y\n"
            operations.insert(min(fail_at, len(operations)), bad)
        # Otherwise the write after ``failing`` writes fails (one write a changed file but
        # d0, which is deleted); rollback writes are let through.
        failing = fail_at % len(contents)
        tool = tools(root)["apply_patch"]
        writes = 0
        real_put = apply_patch._put

        def flaky(*args: object) -> None:
            nonlocal writes
            writes += 1
            if writes == failing + 1 and not in_plan:
                raise apply_patch.ToolError("disk on fire", ErrorCode.DISK_FULL)
            real_put(*args)  # type: ignore[arg-type]

        apply_patch._put = flaky  # type: ignore[assignment]
        try:
            result = call(tool, patch=envelope(*operations))
        finally:
            apply_patch._put = real_put  # type: ignore[assignment]
        assert result.is_error, result.content
        assert result.error.endswith(
            "No file was changed: correct this part and send the whole patch again."
        )
        now = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
        assert now == before
        # The directory the Add made is gone again; the others stay.
        folders = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_dir())
        assert folders == [f"d{index}" for index in range(len(contents))]


# Lines for the search and diff shortcuts: few distinct ones, so that places repeat and
# removed lines come back as added ones.
SHORT_LINE = st.sampled_from(["a", "b", "", " a", "a b", "*** a"])


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(SHORT_LINE, max_size=10),
    final=st.booleans(),
    wanted=st.lists(SHORT_LINE, min_size=1, max_size=3),
    low=st.integers(min_value=0, max_value=10),
    high=st.integers(min_value=0, max_value=12),
    end_of_file=st.booleans(),
)
def test_the_text_search_finds_the_places_the_line_search_finds(
    lines: list[str], final: bool, wanted: list[str], low: int, high: int, end_of_file: bool
) -> None:
    # The exact level searches the text itself; the looser levels (and texts with CRs)
    # search its list of lines. Both must give the same places, line and offset.
    assume(final or not (lines and lines[-1] == ""))
    text = as_text(lines, "\n", final)
    found = _patch_apply._Lines(text)
    listed = _patch_apply._Lines(text)
    low = min(low, listed.count)
    expected = [
        (line, listed.offset(line))
        for line in _patch_apply._places(
            listed.normal(0), wanted, low, high, end_of_file=end_of_file
        )
    ]
    start = (low, listed.offset(low))
    assert found.exact_places(wanted, start, high, end_of_file=end_of_file) == expected, text


@settings(max_examples=300, deadline=None)
@given(
    before=st.lists(SHORT_LINE, max_size=3),
    removed=st.lists(st.sampled_from(["a", "b", "", "c"]), max_size=4),
    added=st.lists(st.sampled_from(["X", "Y ", "c\r"]), max_size=4),
    after=st.lists(SHORT_LINE, max_size=3),
    final=st.booleans(),
    first_line=st.integers(0, 5),
    new_first_line=st.integers(0, 5),
)
def test_a_hunk_with_no_line_both_removed_and_added_is_the_matched_one(
    before: list[str],
    removed: list[str],
    added: list[str],
    after: list[str],
    final: bool,
    first_line: int,
    new_first_line: int,
) -> None:
    # Where no line is both removed and added, the hunk is written without a sequence
    # match; it must be the one the match writes.
    assume(removed or added)
    lines = [[line + "\n" for line in part] for part in (before, removed, added, after)]
    if not final:  # each file's last line has no break
        for part in (lines[3] or lines[1] or lines[0], lines[3] or lines[2] or lines[0]):
            if part:
                part[-1] = part[-1].removesuffix("\n")
    numbers = first_line, new_first_line
    assert _diff._hunks(*lines, *numbers) == _diff._matched_hunks(*lines, *numbers)


# Indented lines, blank ones (a lone CR or spaces before the ending included), so that
# blocks open and close at several depths.
BLOCK_LINE = st.sampled_from(["f", "  f", "    f", "\tf", "  g", "", "  ", "\r", "  \r", " x\ry"])


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(BLOCK_LINE, min_size=1, max_size=12),
    endings=st.lists(st.sampled_from(["\n", "\r\n"]), min_size=12, max_size=12),
    final=st.booleans(),
    data=st.data(),
)
def test_the_block_an_anchor_opens_is_read_from_the_text_as_from_its_lines(
    lines: list[str], endings: list[str], final: bool, data: st.DataObject
) -> None:
    # The enclosure rule, on the lines without endings: the places after an anchor line
    # up to the first non-blank line no deeper than it (that line included). Read from the
    # text (CRs before LFs kept), it must pick the same places.
    assume(final or lines[-1] not in ("", "\r"))
    text = "".join(line + ending for line, ending in zip(lines, endings, strict=False))
    if not final:
        text = text[: len(text) - len(endings[len(lines) - 1])]
    found = _patch_apply._Lines(text)
    bare = found.bare
    numbers = st.integers(min_value=0, max_value=len(bare) - 1)
    hits = sorted(data.draw(st.sets(numbers, max_size=3)))
    places = sorted(data.draw(st.sets(numbers, max_size=4)))

    def depth(line: str) -> int:
        return len(line) - len(line.lstrip(" \t"))

    expected: set[int] = set()
    for hit in hits:
        end = hit + 1
        while end < len(bare) and (not bare[end].strip() or depth(bare[end]) > depth(bare[hit])):
            end += 1
        expected.update(p for p in places if hit < p <= end)
    at = [(line, found.offset(line)) for line in range(len(bare))]
    inside = _patch_apply._enclosed(
        _patch_apply._Lines(text), [at[h] for h in hits], [at[p] for p in places]
    )
    assert inside == [at[p] for p in sorted(expected)], (text, hits, places)


LOOSE_LINE = st.sampled_from(["a", " a", "a ", "a\t", "b", "", "  ", "a-b", "a\u2013b", "\u00a0a"])


@settings(max_examples=300, deadline=None)
@example(["x", "a", "a-b", "y"], True, ["a", "a-b"], 1, 0, sys.maxsize, False)
@example(["a", "b", "a"], True, ["a"], 1, 2, 0, True)
@given(
    lines=st.lists(LOOSE_LINE, max_size=10),
    final=st.booleans(),
    wanted=st.lists(LOOSE_LINE, min_size=1, max_size=3),
    level=st.integers(min_value=1, max_value=len(_patch_apply.LEVELS) - 1),
    low=st.integers(min_value=0, max_value=10),
    high=st.integers(min_value=0, max_value=12) | st.just(sys.maxsize),
    end_of_file=st.booleans(),
)
def test_a_looser_level_finds_the_places_the_line_search_finds(
    lines: list[str],
    final: bool,
    wanted: list[str],
    level: int,
    low: int,
    high: int,
    end_of_file: bool,
) -> None:
    # A looser level may say "nowhere" from the text alone (its form not in it), or put in
    # its form only the lines the text's search finds its longest line in; it must agree
    # with the search of the file's lines.
    assume(final or not (lines and lines[-1] == ""))
    text = as_text(lines, "\n", final)
    listed = _patch_apply._Lines(text)
    low = min(low, listed.count)
    normalise = _patch_apply.LEVELS[level][1]
    forms = [normalise(line) for line in wanted]
    expected = [
        (line, listed.offset(line))
        for line in _patch_apply._places(
            listed.normal(level), forms, low, high, end_of_file=end_of_file
        )
    ]
    start = (low, listed.offset(low))
    found = _patch_apply._find(
        _patch_apply._Lines(text), level, forms, start, high, end_of_file=end_of_file
    )
    assert found == expected, text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    before=st.lists(LINE, max_size=4),
    repeated=LINE,
    run=st.integers(1, 12),
    after=st.lists(LINE, max_size=4),
    at=st.integers(0, 12),
    delete=st.booleans(),
    final=st.booleans(),
)
def test_a_change_inside_a_run_of_one_line_gets_the_whole_files_diff(
    before: list[str],
    repeated: str,
    run: int,
    after: list[str],
    at: int,
    delete: bool,
    final: bool,
) -> None:
    # A line of a run deleted or added where the patch says, as a model writes it: the diff
    # sees the change where the run ends, maybe past the chunk's context.
    old = [*before, *[repeated] * run, *after]
    at = len(before) + min(at, run - 1)
    new = old[:at] + old[at + 1 :] if delete else [*old[:at], repeated, *old[at:]]
    assume(final or (old[-1] != "" and (not new or new[-1] != "")))
    low, high = max(0, at - 3), at + (1 if delete else 0)
    lines = [" " + line for line in old[low:at]]
    lines += ["-" + repeated] if delete else ["+" + repeated]
    lines += [" " + line for line in old[high : high + 3]]
    body = "*** Update File: f.txt\n@@\n" + "\n".join(lines) + "\n"
    if high + 3 >= len(old):
        body += "*** End of File\n"
    before_text, after_text = as_text(old, "\n", final), as_text(new, "\n", final)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "f.txt").write_text(before_text)
        result = call(tools(root)["apply_patch"], patch=envelope(body))
        if result.error_code == ErrorCode.AMBIGUOUS_MATCH:
            return  # the chunk's lines occur twice: the model is asked for more context
        assert result.error is None, (result.error, body)
        assert (root / "f.txt").read_text() == after_text
        [entry] = result.details.files
        assert entry.diff == unified_diff(before_text, after_text, "f.txt").diff
        scratch = root / "git"
        scratch.mkdir()
        (scratch / "f.txt").write_text(before_text)
        subprocess.run(
            ["git", "apply", "--whitespace=nowarn", "-"],
            input=entry.diff.encode(),
            cwd=scratch,
            check=True,
            capture_output=True,
        )
        assert (scratch / "f.txt").read_text() == after_text, entry.diff


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(LOOSE_LINE, max_size=12),
    old=st.lists(LOOSE_LINE, min_size=1, max_size=3),
    cursor=st.integers(min_value=0, max_value=12),
)
def test_the_nearest_place_is_the_one_most_lines_agree_with(
    lines: list[str], old: list[str], cursor: int
) -> None:
    # The oracle: every line put in the loosest form, a vote for each agreeing line.
    text = as_text(lines, "\n", True)
    loose = _patch_apply.LEVELS[-1][1]
    forms = [loose(line) for line in lines]
    votes: dict[int, int] = {}
    for k, line in enumerate(old):
        for i, form in enumerate(forms):
            if form and form == loose(line) and i - k >= 0:
                votes[i - k] = votes.get(i - k, 0) + 1
    after = {s: n for s, n in votes.items() if s >= cursor} or votes
    expected = max(after, key=lambda s: (after[s], -s)) if after else None
    assert _patch_apply._nearest(_patch_apply._Lines(text), old, cursor) == expected, text


@st.composite
def reindented_blocks(draw: st.DrawFn) -> tuple[list[int], list[int], int, str, str, str]:
    """Depths of a nested block's lines (each at most one deeper than the one before),
    the depths of the lines a chunk adds (among those of its other lines), where they
    replace one line, and the indent units and base: the file's unit and base, the
    chunk's unit (its base is none, as a model copying the block writes it)."""
    depths = [0]
    for _ in range(draw(st.integers(1, 6))):
        depths.append(draw(st.integers(0, depths[-1] + 1)))
    added = draw(st.lists(st.sampled_from(sorted(set(depths))), min_size=1, max_size=3))
    at = draw(st.integers(1, len(depths) - 1))
    file_unit = draw(st.sampled_from(["  ", "    ", "\t"]))
    chunk_unit = draw(st.sampled_from(["  ", "    ", "   "]))
    base = draw(st.sampled_from(["", "    ", "\t"]))
    return depths, added, at, file_unit, chunk_unit, base


@settings(max_examples=300, deadline=None)
@given(case=reindented_blocks())
def test_lines_added_at_the_chunks_depths_land_at_the_files(
    case: tuple[list[int], list[int], int, str, str, str],
) -> None:
    """A chunk copied from a block with another indent unit and no base, replacing one line
    by lines at depths its other lines have, writes each added line at the file's
    indentation of that depth, whichever rule (a shift, tabs for spaces, the depths of its
    lines) maps them."""
    depths, added, at, file_unit, chunk_unit, base = case
    body = [f"line{n} = {n}" for n in range(len(depths))]
    extra = [f"new{n} = {n}" for n in range(len(added))]
    in_file = [base + file_unit * d + text for d, text in zip(depths, body, strict=True)]
    copied = [chunk_unit * d + text for d, text in zip(depths, body, strict=True)]
    chunk = [" " + line for line in copied[:at]]
    chunk += [
        "-" + copied[at],
        *("+" + chunk_unit * d + t for d, t in zip(added, extra, strict=True)),
    ]
    chunk += [" " + line for line in copied[at + 1 :]]
    expected = [
        *in_file[:at],
        *(base + file_unit * d + t for d, t in zip(added, extra, strict=True)),
        *in_file[at + 1 :],
    ]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "f.py").write_text("\n".join(in_file) + "\n")
        patch = envelope("*** Update File: f.py\n@@\n" + "\n".join(chunk) + "\n")
        result = call(tools(root)["apply_patch"], patch=patch)
        assert result.error is None, (result.error, patch)
        assert (root / "f.py").read_text() == "\n".join(expected) + "\n", patch
