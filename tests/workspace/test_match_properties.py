"""Properties of the edit fallback: it never changes the code's structure.

Files are generated as nested Python-like blocks (each line at most one level deeper than
the one before) in one indent unit. ``old_text`` is a range of their lines with its
indentation altered: shifted uniformly, dedented to zero, or with one line's relative depth
broken. Whatever ``replace_text`` accepts leaves every line outside the range as it was and
writes ``new_text``'s lines at the file's base plus their own relative indentation; a
broken ``old_text`` is ``NO_MATCH``. Real code is checked with ``compile()`` as the oracle.
"""

from __future__ import annotations

import ast
import sysconfig
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from workspace_tools import ErrorCode, ToolError
from workspace_tools.text import _match
from workspace_tools.text._match import replace_text
from workspace_tools.text._match_hint import describe

UNITS = ["    ", "  ", "\t"]
PREFIXES = ["", "  ", "    ", "\t", "\t  "]
RELATIVE = ["", "  ", "    ", "\t", "        ", "\t\t"]


def _replace(text: str, old: str, new: str) -> str:
    return replace_text(text, old, new, replace_all=False, newline="\n", path="f").text


@dataclass
class Tree:
    """A generated file: per line its depth (``None`` for a blank line) and content."""

    unit: str
    depths: list[int | None]
    contents: list[str]

    def line(self, i: int) -> str:
        depth = self.depths[i]
        return "" if depth is None else self.unit * depth + self.contents[i]

    def text(self) -> str:
        return "".join(self.line(i) + "\n" for i in range(len(self.depths)))


@st.composite
def trees(draw: st.DrawFn, unique: bool) -> Tree:
    """Nested blocks: each non-blank line at most one level deeper than the previous one."""
    size = draw(st.integers(3, 14))
    depths: list[int | None] = []
    depth = 0
    for i in range(size):
        if i and draw(st.integers(0, 6)) == 0:
            depths.append(None)
            continue
        depth = draw(st.integers(0, depth + 1)) if i else 0
        depths.append(depth)
    names = st.sampled_from(["x = 1", "if x:", "return y", "go()"])
    contents = [f"v{i} = {i}" if unique else draw(names) for i in range(size)]
    return Tree(draw(st.sampled_from(UNITS)), depths, contents)


def _range(draw: st.DrawFn, tree: Tree, min_nonblank: int) -> tuple[int, int]:
    a = draw(st.integers(0, len(tree.depths) - 1))
    b = draw(st.integers(a + 1, len(tree.depths)))
    nonblank = [i for i in range(a, b) if tree.depths[i] is not None]
    # A range starts with a line of code: an old_text that starts with a line break is the
    # end of the line before, literally.
    assume(len(nonblank) >= min_nonblank and tree.depths[a] is not None)
    return a, b


def _old_lines(tree: Tree, a: int, b: int, prefix: str, blank: str) -> list[str]:
    base = min(d for d in tree.depths[a:b] if d is not None)
    return [
        blank if d is None else prefix + tree.unit * (d - base) + tree.contents[i]
        for i, d in zip(range(a, b), tree.depths[a:b], strict=True)
    ]


def _expected(tree: Tree, a: int, b: int, new_lines: list[tuple[str, str]]) -> str:
    """The file with lines a..b-1 replaced by ``new_lines`` (relative indent, content) at
    the file's base there."""
    base = tree.unit * min(d for d in tree.depths[a:b] if d is not None)
    before = [tree.line(i) + "\n" for i in range(a)]
    middle = [(base + rel + content if content else "") + "\n" for rel, content in new_lines]
    after = [tree.line(i) + "\n" for i in range(b, len(tree.depths))]
    return "".join(before + middle + after)


# new_text: lines at their own relative depths; the first is not empty (an empty first line
# leaves the indentation before an exact match in place: a blank line either way).
NEW_LINES = st.tuples(
    st.tuples(st.sampled_from(RELATIVE), st.sampled_from(["z = 0", "if z:", "pass"])),
    st.lists(
        st.tuples(st.sampled_from(RELATIVE), st.sampled_from(["z = 0", "if z:", "", "pass"])),
        max_size=4,
    ),
).map(lambda first_and_rest: [first_and_rest[0], *first_and_rest[1]])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), tree=trees(unique=True), new_lines=NEW_LINES)
def test_a_uniform_shift_is_accepted_and_new_text_keeps_its_relative_depths(
    data: st.DataObject, tree: Tree, new_lines: list[tuple[str, str]]
) -> None:
    a, b = _range(data.draw, tree, min_nonblank=1)
    prefix = data.draw(st.sampled_from(PREFIXES), label="prefix")
    blank = data.draw(st.sampled_from(["", "  ", "\t"]), label="blank")
    old = "\n".join(_old_lines(tree, a, b, prefix, blank)) + "\n"
    new = "".join((prefix + rel + c if c else "") + "\n" for rel, c in new_lines)
    assert _replace(tree.text(), old, new) == _expected(tree, a, b, new_lines)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), tree=trees(unique=True))
def test_old_text_with_one_line_at_another_relative_depth_is_no_match(
    data: st.DataObject, tree: Tree
) -> None:
    a, b = _range(data.draw, tree, min_nonblank=2)
    prefix = data.draw(st.sampled_from(PREFIXES), label="prefix")
    lines = _old_lines(tree, a, b, prefix, "")
    base = min(d for d in tree.depths[a:b] if d is not None)
    choices = [i for i in range(a, b) if tree.depths[i] is not None]
    i = data.draw(st.sampled_from(choices), label="broken line")
    depth = tree.depths[i]
    assert depth is not None
    other_unit = "    " if tree.unit == "\t" else "\t"
    kinds = ["deeper"] + (["shallower", "other_unit"] if depth > base else [])
    kind = data.draw(st.sampled_from(kinds), label="kind")
    relative = {
        "deeper": tree.unit * (depth - base + 1),
        "shallower": tree.unit * (depth - base - 1),
        "other_unit": other_unit * (depth - base),
    }[kind]
    lines[i - a] = prefix + relative + tree.contents[i]
    # Literally in the file (its first line cut inside the indentation, the others whole):
    # an exact match, whose later lines fix their own depth.
    assume("\n".join(lines) + "\n" not in tree.text())
    with pytest.raises(ToolError) as caught:
        _replace(tree.text(), "\n".join(lines) + "\n", "z = 0\n")
    assert caught.value.code is ErrorCode.NO_MATCH, caught.value.message


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), tree=trees(unique=True))
def test_new_text_left_of_old_texts_base_is_no_match_unless_exact(
    data: st.DataObject, tree: Tree
) -> None:
    a, b = _range(data.draw, tree, min_nonblank=1)
    prefix = data.draw(st.sampled_from([p for p in PREFIXES if p]), label="prefix")
    old = "\n".join(_old_lines(tree, a, b, prefix, "")) + "\n"
    new = prefix + "z = 0\nw = 1\n"  # the second line sits left of old_text's base
    text = tree.text()
    if prefix == tree.unit * min(d for d in tree.depths[a:b] if d is not None):
        assert _replace(text, old, new) == text.replace(old, new)  # the exact text
        return
    with pytest.raises(ToolError) as caught:
        _replace(text, old, new)
    assert caught.value.code is ErrorCode.NO_MATCH
    assert f"new_text's line 2 does not start with {describe(prefix)}," in caught.value.message


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _base(lines: list[str]) -> str:
    """The longest common prefix of the lines' indentation."""
    indents = [_indent(line) for line in lines]
    base = indents[0]
    while not all(indent.startswith(base) for indent in indents):
        base = base[:-1]
    return base


def _structure_kept_results(tree: Tree, old_lines: list[str], new: str) -> list[str]:
    """Every text an edit may give by the structural rule: one range equal to old_lines
    ignoring indentation, with the same relative indentation, replaced by new's lines with
    the range's base in place of old_text's (none shifted when the bases are equal)."""
    span = len(old_lines)
    results = []
    for start in range(len(tree.depths) - span + 1):
        lines = [tree.line(start + k) for k in range(span)]
        if [s.strip() for s in lines] != [o.strip() for o in old_lines]:
            continue
        pairs = [(f, o) for f, o in zip(lines, old_lines, strict=True) if o.strip()]
        file_base, old_base = _base([f for f, _ in pairs]), _base([o for _, o in pairs])
        if any(_indent(f)[len(file_base) :] != _indent(o)[len(old_base) :] for f, o in pairs):
            continue
        new_lines = new.removesuffix("\n").split("\n")
        if old_base == file_base:  # nothing to shift: new_text is written as it is
            file_base = old_base = ""
        if any(line and not line.startswith(old_base) for line in new_lines):
            continue
        body = "".join((file_base + n[len(old_base) :] if n else "") + "\n" for n in new_lines)
        before = "".join(tree.line(i) + "\n" for i in range(start))
        after = "".join(tree.line(i) + "\n" for i in range(start + span, len(tree.depths)))
        results.append(before + body + after)
    return results


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), tree=trees(unique=False), new_lines=NEW_LINES)
def test_whatever_a_fallback_accepts_keeps_the_structure_around_it(
    data: st.DataObject, tree: Tree, new_lines: list[tuple[str, str]]
) -> None:
    """Repeated lines make other places match, and one line may be a level deeper; any
    accepted edit is still one of the results the structural rule allows."""
    a, b = _range(data.draw, tree, min_nonblank=1)
    prefix = data.draw(st.sampled_from(PREFIXES), label="prefix")
    lines = _old_lines(tree, a, b, prefix, "")
    if data.draw(st.booleans(), label="break one line"):
        i = data.draw(st.integers(0, b - a - 1), label="line")
        lines[i] = lines[i] and prefix + tree.unit + lines[i][len(prefix) :]
    old = "\n".join(lines) + "\n"
    new = "".join((prefix + rel + c if c else "") + "\n" for rel, c in new_lines)
    text = tree.text()
    try:
        result = _replace(text, old, new)
    except ToolError as error:
        assert error.code in (ErrorCode.NO_MATCH, ErrorCode.AMBIGUOUS_MATCH)
        return
    allowed = _structure_kept_results(tree, lines, new)
    if old in text and sum(1 for line in lines if line.strip()) > 1:
        # Literally in the file, the first line cut inside the indentation: the later
        # lines, whole, fix where new_text's lines go (an exact match).
        allowed.append(text.replace(old, new, 1))
    assert result in allowed


# Real code: nested blocks of the standard library, edited through the fallback.
STDLIB = Path(sysconfig.get_paths()["stdlib"])


def _blocks(source: str) -> list[tuple[int, int]]:
    """Line ranges (0-based, end exclusive) of nested compound statements (``if``, ``for``,
    ``while``, ``with``, ``try`` inside something else, 3 to 12 lines) that occur once and
    hold no string or continuation line (their indentation is not structure)."""
    lines = source.splitlines(keepends=True)
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If | ast.For | ast.While | ast.With | ast.Try):
            assert node.end_lineno is not None
            a, b = node.lineno - 1, node.end_lineno
            block = "".join(lines[a:b])
            if (
                node.col_offset > 0
                and not lines[a].lstrip().startswith("elif")  # a branch, not a statement
                and 3 <= b - a <= 12
                and source.count(block) == 1
                and not any(mark in block for mark in ('"""', "'''", "\\\n"))
            ):
                found.append((a, b))
    return sorted(found)[:6]


def _sources() -> list[Path]:
    chosen = []
    for path in sorted(STDLIB.glob("*.py"))[::5]:
        if 2_000 < path.stat().st_size < 80_000 and len(_blocks(path.read_text("utf-8"))) >= 3:
            chosen.append(path)
    return chosen[:12]


SOURCES = _sources()


def test_real_code_sample_is_large_enough() -> None:
    assert len(SOURCES) == 12


@pytest.mark.parametrize("source", SOURCES, ids=[p.name for p in SOURCES])
def test_fallback_edits_of_real_code_still_compile(source: Path) -> None:
    """old_text dedented to zero and a new_text that is valid Python at its own depths
    give valid Python, new_text at the block's indentation; old_text with its nesting
    flattened is refused."""
    text = source.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    for a, b in _blocks(text):
        block = "".join(lines[a:b])
        dedented = textwrap.dedent(block)
        new = "if _edited:\n" + textwrap.indent(dedented, "    ") + "else:\n    pass\n"
        ast.parse(new)  # valid at its own depths (return, break: the file gives context)
        edited = _replace(text, dedented, new)
        compile(edited, str(source), "exec")
        margin = _base([line for line in lines[a:b] if line.strip()])
        assert edited == text.replace(block, textwrap.indent(new, margin))
        flat = "".join(line.lstrip(" \t") for line in lines[a:b])
        with pytest.raises(ToolError) as caught:
            _replace(text, flat, new)
        assert caught.value.code is ErrorCode.NO_MATCH, caught.value.message


QUOTED = st.text(alphabet=" \tab=x'\"\u2018\u2019\u201c\u201d", max_size=8)


@st.composite
def fallback_cases(draw: st.DrawFn) -> tuple[str, str]:
    """A text of lines with quotes, indentation and trailing whitespace, and an
    ``old_text`` of some of its lines as a model may copy them: dedented, trailing
    whitespace dropped, typographic quotes straightened, or as they are."""
    lines = draw(st.lists(QUOTED, min_size=1, max_size=12))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    text = "".join(line + newline for line in lines)
    first = draw(st.integers(0, len(lines) - 1))
    taken = lines[first : first + draw(st.integers(1, 3))]
    how = draw(st.sampled_from(["dedent", "rstrip", "quotes", "as is"]))
    if how == "dedent":
        taken = [line.lstrip(" \t") for line in taken]
    elif how == "rstrip":
        taken = [line.rstrip() for line in taken]
    elif how == "quotes":
        straight = str.maketrans("\u2018\u2019\u201c\u201d", "''\"\"")
        taken = [line.translate(straight) for line in taken]
    old = "\n".join(taken)
    assume(old)  # old_text is never empty (its argument's minimum length)
    return text, old


def _outcome(text: str, old: str) -> tuple[str, ...]:
    try:
        done = replace_text(text, old, "z\n  y", replace_all=False, newline="\n", path="f")
    except ToolError as exc:
        return (exc.code.value, exc.message)
    return (done.text, done.match, str(done.unchanged))


@settings(
    max_examples=600,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=fallback_cases())
def test_the_fallbacks_look_only_at_lines_holding_old_texts_longest_unquoted_part(
    case: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    text, old = case
    searched = _outcome(text, old)
    # The oracle: every line a possible start, each put in each fallback's form.
    with monkeypatch.context() as patch:
        patch.setattr(_match, "_starts", lambda text, count, *_: list(range(count)))
        assert searched == _outcome(text, old)


@settings(max_examples=500, deadline=None)
@given(
    lines=st.lists(st.sampled_from(["a", "b", ""]), max_size=30),
    wanted=st.lists(st.sampled_from(["a", "b", ""]), min_size=1, max_size=5),
)
def test_occurrences_are_every_place_the_lines_occur(lines: list[str], wanted: list[str]) -> None:
    naive = [i for i in range(len(lines) - len(wanted) + 1) if lines[i : i + len(wanted)] == wanted]
    assert _match._occurrences(lines, wanted) == naive


file_lines = st.lists(
    st.tuples(st.sampled_from(["", "  ", "\t", "    "]), st.sampled_from(["x = 1", "y", "", "z "])),
    min_size=1,
    max_size=25,
)


@settings(max_examples=400, deadline=None)
@given(
    lines=file_lines,
    old=st.lists(
        st.tuples(st.sampled_from(["", " ", "\t"]), st.sampled_from(["x = 1", "y", "", "z"])),
        min_size=1,
        max_size=6,
    ),
    ending=st.sampled_from(["\n", ""]),
)
def test_the_fallbacks_linear_pass_finds_what_comparing_each_candidate_finds(
    lines: list[tuple[str, str]], old: list[tuple[str, str]], ending: str
) -> None:
    # Files of like lines, where the linear pass serves long old_texts: forced here on
    # every call, it gives the same text, or the same error, as comparing each candidate.
    text = "".join(indent + body + "\n" for indent, body in lines)
    old_text = "\n".join(indent + body for indent, body in old) + ending
    assume(old_text)  # edit_file refuses an empty old_text before matching

    def outcome() -> object:
        try:
            result = replace_text(text, old_text, "w", replace_all=False, newline="\n", path="f")
        except ToolError as exc:
            return (exc.code, exc.message, exc.details)
        return (result.text, result.match, result.spans)

    compared = outcome()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_match, "_LINE_COMPARISONS", -1)
        assert outcome() == compared


def test_a_long_old_text_over_like_lines_is_matched_in_linear_time() -> None:
    # 16,000 like lines and an old_text of 8,001 that never matches: comparing each of the
    # 8,000 candidates took 64 million line comparisons (the call timed out, its thread
    # going on for minutes, the file's lock held).
    text = "    a\n" * 16_000
    old = "a\n" * 8_000 + "b\n"
    calls = 0
    real = _match._occurrences

    def counted(lines: list[str], wanted: list[str]) -> list[int]:
        nonlocal calls
        calls += 1
        return real(lines, wanted)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_match, "_occurrences", counted)
        with pytest.raises(ToolError) as raised:
            replace_text(text, old, "x", replace_all=False, newline="\n", path="f")
    assert raised.value.code is ErrorCode.NO_MATCH
    assert calls == len(_match._FALLBACKS)
    many = replace_text  # a file of like lines and a short old_text: ambiguous at once
    with pytest.raises(ToolError) as raised:
        many(text, "a\n" * 2_000, "x", replace_all=False, newline="\n", path="f")
    assert raised.value.code is ErrorCode.AMBIGUOUS_MATCH
    assert raised.value.details["lines"][:3] == [1, 2, 3]
    assert len(raised.value.details["lines"]) == 14_001
