"""``NO_MATCH`` messages for edit_file that a model can act on.

A refusal quotes the file's lines most similar to ``old_text`` with the characters a reader
cannot see escaped (``\\t``, ``\\r``, ``\\u00a0``, ``\\u200b``; combining marks too in a line
that is not NFC-normalized; a backslash in the file is shown as it is), and names in words
each difference that is invisible: Unicode normalization (NFC against NFD), no-break and other
Unicode spaces, zero-width and other format characters, tabs against spaces, a stray carriage
return, trailing whitespace. When the only obstacle is indentation structure, it says which
line's relative indentation differs and shows the file's real indentation.
"""

from __future__ import annotations

import difflib
import itertools
import re
import unicodedata
from collections import Counter, defaultdict

from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools.text._indentation import INDENT, common_indent, indent_of, shift_of

# Most similar lines are looked for only in files up to this long, and at most this many
# lines of old_text take part in scoring a candidate place and are quoted.
HINT_MAX_LINES = 20_000
_SCORED_LINES = 40
_QUOTED_LINES = 12
_CUTOFF = 0.6
# A differing line is quoted whole up to this many characters, else around the difference.
_WHOLE_LINE = 80
_AROUND = 20
# A start of old_text shorter than this found in a long line names no place: "var a1" is
# in every line of minified code.
_MIN_START = 10

# What Python's str.splitlines counts as a line break besides \n (and \r\n): no line
# break for the tools, which break lines only at \n.
_BREAKS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_INNER_BREAK = re.compile(f"[{_BREAKS}](?=.)", re.S)
_ANY_BREAK = re.compile(f"[{_BREAKS}]")
# read_file's "cat -n" prefix: the line number right-aligned, then a tab.
_LINE_NUMBER = re.compile(r" *\d+\t")

_QUOTES = str.maketrans(
    {"‘": "'", "’": "'", "‚": "'", "‛": "'", "“": '"', "”": '"', "„": '"', "‟": '"'}
)

_NAMES = {
    " ": ("a space", "spaces"),
    "\t": ("a tab (\\t)", "tabs (\\t)"),
    "\r": ("a carriage return (\\r)", "carriage returns (\\r)"),
    "\ufeff": ("a byte order mark (\\ufeff)", "byte order marks (\\ufeff)"),
}


def _invisible(char: str) -> bool:
    # Whitespace, format characters (zero-width space, joiners, BOM, word joiner) and
    # control characters print as nothing or as a plain gap.
    return char.isspace() or unicodedata.category(char) in ("Cc", "Cf", "Zs", "Zl", "Zp")


def _code(char: str) -> str:
    point = ord(char)
    return f"\\u{point:04x}" if point < 0x10000 else f"\\U{point:08x}"


def escape(line: str) -> str:
    """``line`` with tabs as ``\\t``, CRs as ``\\r`` and other invisible characters (and, in
    a line that is not NFC, combining marks) as ``\\uXXXX``; the plain space stays."""
    decomposed = not unicodedata.is_normalized("NFC", line)
    out: list[str] = []
    for char in line:
        if char == "\t":
            out.append("\\t")
        elif char == "\r":
            out.append("\\r")
        elif char != " " and (_invisible(char) or (decomposed and unicodedata.combining(char))):
            out.append(_code(char))
        else:
            out.append(char)
    return "".join(out)


def describe(chars: str) -> str:
    """Invisible characters in words, run by run: ``"a tab (\\t) and 4 spaces"``,
    ``"a no-break space (\\u00a0)"``; ``"nothing"`` for the empty string."""
    if not chars:
        return "nothing"
    runs: list[str] = []
    for char, group in itertools.groupby(chars):
        count = len(list(group))
        if char in _NAMES:
            one, many = _NAMES[char]
        else:
            name = unicodedata.name(char, "character").lower()
            article = "an" if name[0] in "aeiou" else "a"
            one, many = f"{article} {name} ({_code(char)})", f"{name}s ({_code(char)})"
        runs.append(one if count == 1 else f"{count} {many}")
    return " and ".join(runs)


def _decomposed_example(line: str) -> str:
    """The first character ``line`` writes decomposed: ``"é as e + U+0301"``."""
    for i, char in enumerate(line):
        if i and unicodedata.combining(char):
            end = i
            while end < len(line) and unicodedata.combining(line[end]):
                end += 1
            parts = line[i - 1 : end]
            composed = unicodedata.normalize("NFC", parts)
            if composed != parts:
                points = " + ".join(f"U+{ord(c):04X}" for c in parts[1:])
                return f"{composed} as {parts[0]} + {points}"
    return "a character in parts"


def invisible_differences(old: str, found: str) -> tuple[list[str], bool]:
    """How the file's line ``found`` differs from ``old_text``'s line ``old`` in characters a
    reader cannot see, in words (module docstring), and whether they differ in something a
    reader can see as well."""
    phrases: list[str] = []
    visible = False
    old_nfc, found_nfc = (unicodedata.normalize("NFC", s) for s in (old, found))
    if found != found_nfc and old == old_nfc:
        composed = _decomposed_example(found)
        phrases.append(
            f"the file's line is NFD-normalized where old_text's is NFC (the file writes "
            f"{composed}, old_text as one character)"
        )
    elif old != old_nfc and found == found_nfc:
        composed = _decomposed_example(old)
        phrases.append(
            f"old_text's line is NFD-normalized where the file's is NFC (old_text writes "
            f"{composed}, the file as one character)"
        )
    matcher = difflib.SequenceMatcher(None, old_nfc, found_nfc, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        theirs, ours = old_nfc[i1:i2], found_nfc[j1:j2]
        if not all(_invisible(c) for c in theirs + ours):
            visible = True
            continue
        if i1 == 0 and j1 == 0:
            where = "at the start, "
        elif i2 == len(old_nfc) and j2 == len(found_nfc):
            where = "at the end, "
        else:
            where = ""
        if tag == "replace":
            phrases.append(f"{where}the file has {describe(ours)} where old_text has "
                           f"{describe(theirs)}")  # fmt: skip
        elif tag == "insert":
            phrases.append(f"{where}the file has {describe(ours)} that old_text lacks")
        else:
            phrases.append(f"{where}old_text has {describe(theirs)} that the file lacks")
    return phrases, visible


def _key(line: str) -> str:
    # What a reader sees of a line: composed, without format characters, straight quotes,
    # whitespace runs as one space.
    if not line.isascii():
        line = unicodedata.normalize("NFC", line)
        line = "".join(c for c in line if unicodedata.category(c) != "Cf").translate(_QUOTES)
    return " ".join(line.split())


def _closest_start(old_lines: list[str], bare: list[str]) -> tuple[int, float] | None:
    """Where in the file (a line index, possibly before the first line) the range most
    similar to ``old_lines`` begins, and how similar it is (0-1); ``None`` when no range
    is similar enough."""
    if len(bare) > HINT_MAX_LINES:
        return None
    old_keys = [_key(line) for line in old_lines]
    scored = [k for k, key in enumerate(old_keys) if key][:_SCORED_LINES]
    if not scored:
        return None
    file_keys = [_key(line) for line in bare]
    where: defaultdict[str, list[int]] = defaultdict(list)
    for i, key in enumerate(file_keys):
        where[key].append(i)
    votes: Counter[int] = Counter()
    for k in scored:
        for i in where.get(old_keys[k], ()):
            votes[i - k] += 1
    starts = [start for start, _ in votes.most_common(50)]
    probe = scored[0]
    for close in difflib.get_close_matches(old_keys[probe], list(where), n=3, cutoff=_CUTOFF):
        starts.extend(i - probe for i in where[close][:5])

    def score(start: int) -> float:
        total = 0.0
        for k in scored:
            i = start + k
            if 0 <= i < len(bare):
                total += difflib.SequenceMatcher(None, old_keys[k], file_keys[i]).ratio()
        return total / len(scored)

    best = max(starts, key=lambda s: (score(s), -s), default=None)
    if best is None or score(best) < _CUTOFF:
        return None
    return best, score(best)


def _quote_block(bare: list[str], first: int, last: int) -> str:
    """Lines ``first``..``last`` (0-based, inclusive) numbered and quoted, escaped."""
    shown = range(first, min(last, first + _QUOTED_LINES - 1) + 1)
    text = "".join(f"\n{i + 1}: '{escape(bare[i])}'" for i in shown)
    if last >= first + _QUOTED_LINES:
        text += f"\n(and {last - first - _QUOTED_LINES + 1} more lines)"
    return text


def _range(first: int, last: int) -> str:
    return f"line {first + 1}" if first == last else f"lines {first + 1}-{last + 1}"


def _escape_note(lines: list[str]) -> str:
    if all(escape(line) == line for line in lines[:_QUOTED_LINES]):
        return ""
    return "\n(\\t, \\r and \\uXXXX stand for the invisible characters the file holds.)"


def _split_breaks(bare: list[str]) -> tuple[list[str], list[tuple[int, int, int]]]:
    """The file's lines cut where they hold a character Python counts as a line break but
    the tools do not (a lone ``\\r``, ``\\x0c``, ``\\u2028``, ...; one at a line's end
    stays): a model copying text from elsewhere may take each part for a line. Each part
    comes with ``(file line index, part index, parts in that line)``."""
    holds_break = _ANY_BREAK.search
    if not any(map(holds_break, bare)):  # one C loop: most files hold none
        return bare, list(zip(range(len(bare)), itertools.repeat(0), itertools.repeat(1)))
    pieces: list[str] = []
    where: list[tuple[int, int, int]] = []
    for i, line in enumerate(bare):
        parts = _INNER_BREAK.split(line) if holds_break(line) else [line]
        for j, part in enumerate(parts):
            pieces.append(part)
            where.append((i, j, len(parts)))
    return pieces, where


def _shared(a: str, b: str) -> int:
    """How many characters ``a`` and ``b`` share at their start."""
    return next(
        (n for n, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def _visible_change(old: str, found: str) -> str:
    """``the file has 'X' where old_text has 'Y'``: the two lines, escaped, or around
    their differing middle when long."""
    if len(old) > _WHOLE_LINE or len(found) > _WHOLE_LINE:
        head = _shared(old, found)
        tail = _shared(old[head:][::-1], found[head:][::-1])
        start = max(0, head - _AROUND)

        def cut(text: str) -> str:
            end = min(len(text), len(text) - tail + _AROUND)
            lead = "…" if start else ""
            rest = "…" if end < len(text) else ""
            return f"{lead}{escape(text[start:end])}{rest}"

        old, found = cut(old), cut(found)
    else:
        old, found = escape(old), escape(found)
    return f"the file has '{found}' where old_text has '{old}'"


def _part_of(old: str, found: str, index: int, count: int) -> bool:
    """Whether old_text's line ``index`` (of ``count``) is a part of the file's line
    ``found`` it may hold: old_text may begin inside its first line and end inside its last."""
    if count == 1:
        return old in found
    if index == 0:
        return found.endswith(old)
    return index == count - 1 and found.startswith(old)


def no_match(path: str, old_lines: list[str], bare: list[str]) -> ToolError:
    """``NO_MATCH`` for ``old_lines`` in the file's ``bare`` lines (no line endings): the
    most similar lines quoted, every line of them that differs from old_text named (the
    visible difference quoted, the invisible one in words), lines the file joins with a
    character that is no line break for the tools named, and indentation structure."""
    message = (
        f"old_text was not found in {path}. Read the file again with read_file and copy the "
        "text exactly, including whitespace and punctuation"
    )
    whole = _closest_start(old_lines, bare)
    searched = len(bare) <= HINT_MAX_LINES  # with its lines cut, no fewer
    pieces, where = _split_breaks(bare) if searched else (bare, [])
    cut = _closest_start(old_lines, pieces) if len(pieces) > len(bare) else None
    if cut is not None and (whole is None or cut[1] > whole[1]):
        start = cut[0]
    elif whole is not None:
        start = whole[0]
        pieces, where = bare, [(i, 0, 1) for i in range(len(bare))]
    else:
        place = _where_it_stops(old_lines, bare)
        message += place
        if not searched and not place:
            message += (
                f". {path} has {len(bare):,} lines, too many to look for the most similar "
                "ones: grep for a distinctive part of old_text to find where it is"
            )
        return ToolError(message + _numbered(old_lines, bare), ErrorCode.NO_MATCH)
    low, high = max(start, 0), min(start + len(old_lines), len(pieces)) - 1
    first, last = where[low][0], where[high][0]
    if first == last:
        block = f": '{escape(bare[first])}'"
        message += f". The most similar line is {first + 1}{block}"
    else:
        block = _quote_block(bare, first, last)
        message += f". The most similar lines are {first + 1}-{last + 1}:{block}"
    message += _escape_note(bare[first : last + 1])
    named = False
    for i in range(first, min(last, first + _QUOTED_LINES - 1) + 1):
        joined = [k for k in range(low, high + 1) if where[k][0] == i]
        if len(joined) > 1:
            named = True
            breaks = describe("".join(_INNER_BREAK.findall(bare[i])))
            message += (
                f"\nLine {i + 1} holds old_text's lines {joined[0] - start + 1}-"
                f"{joined[-1] - start + 1} as one line: it joins them with {breaks}, which "
                "the tools do not count as a line break (only \\n is one); old_text must "
                "hold the same character there, not a line break."
            )
    for k in range(low, high + 1):
        i, part, parts = where[k]
        if i > first + _QUOTED_LINES - 1:
            break
        old, found = old_lines[k - start].lstrip(INDENT), pieces[k].lstrip(INDENT)
        if old == found:
            continue
        phrases, visible = invisible_differences(old, found)
        # old_text may start or end inside a line: the rest of that line is no difference.
        visible = visible and not _part_of(old, found, k - start, len(old_lines))
        if not (phrases or visible):
            continue
        line = f"Line {i + 1}" if parts == 1 else f"Part {part + 1} of line {i + 1}"
        said = f"{line} differs from old_text's line {k - start + 1}"
        if visible and phrases:
            said += f": {_visible_change(old, found)}; and in characters that are hard to see: "
        elif visible:
            said += f": {_visible_change(old, found)}"
        else:
            said += " only in characters that are hard to see: "
        message += f"\n{said}{'; '.join(phrases)}."
        named = named or bool(phrases)
    if named:
        message += (
            "\nold_text must hold the same characters as the file: write them in the "
            "arguments as the JSON escapes shown (\\t, \\r, \\uXXXX)."
        )
    pairs = [(i, old_lines[i - start]) for i in range(low, high + 1)]
    shift = shift_of([old for _, old in pairs], pieces[low : high + 1])
    if isinstance(shift, int):
        line = low + shift
        message += "\n" + _relative_indent(old_lines, pieces, low, start, line) + "."
    return ToolError(message + _numbered(old_lines, bare), ErrorCode.NO_MATCH)


def _numbered(old_lines: list[str], bare: list[str]) -> str:
    """Words for old_text whose every non-blank line starts as read_file numbers lines
    (``"     2\\t"``) and one of which, without it, is a line of the file (``bare``):
    copied with the numbers, it can match nothing. (A line of tab-separated data that
    starts with a number keeps it: without it, it is no line of the file.)"""
    lines = [line for line in old_lines if line.strip()]
    if not lines or not all(_LINE_NUMBER.match(line) for line in lines):
        return ""
    known = set(bare)
    if not any(_LINE_NUMBER.sub("", line, count=1) in known for line in lines):
        return ""
    return (
        "\nold_text's lines start with the line numbers read_file shows (a number and a "
        "tab): leave them out, they are not in the file."
    )


def _where_it_stops(old_lines: list[str], bare: list[str]) -> str:
    """Where old_text's longest start is found inside a line longer than
    :data:`_WHOLE_LINE` (minified code, data on one line), and what the file has where it
    stops matching; ``""`` when no start of at least :data:`_MIN_START` characters is.

    No line is similar to a fragment of such a line as a whole, and read_file shows only a
    long line's head, so the place is all the model can go on."""
    long = [(i, line) for i, line in enumerate(bare) if len(line) > _WHOLE_LINE]
    old = "\n".join(old_lines)

    def found(size: int) -> tuple[int, int] | None:
        start = old[:size]
        return next(((i, c) for i, line in long if (c := line.find(start)) >= 0), None)

    # A start found means every shorter one is: the longest is found by halving.
    low, high, place = 0, len(old), None
    while low < high:
        size = (low + high + 1) // 2
        hit = found(size)
        if hit is None:
            high = size - 1
        else:
            low, place = size, hit
    if place is None or low < _MIN_START:
        return ""
    i, column = place
    line, stop = bare[i], column + low
    file_part = escape(line[max(column, stop - _AROUND) : stop + _AROUND])
    old_part = escape(old[max(0, low - _AROUND) : low + _AROUND])
    if stop + _AROUND < len(line):
        file_part += "…"
    if low + _AROUND < len(old):
        old_part += "…"
    lead = "…" if low > _AROUND else ""
    then = f"the file has '{lead}{file_part}'" if stop < len(line) else "the line ends"
    return (
        f". Line {i + 1} is {len(line):,} characters long; old_text's first {low:,} "
        f"characters are found in it at column {column + 1:,}, and then {then} where "
        f"old_text has '{lead}{old_part}'. grep shows the text around a match in a long line."
    )


def _relative_indent(
    old_lines: list[str], bare: list[str], first: int, start: int, line: int
) -> str:
    """Words for the file line whose indentation breaks the block's structure, and its
    old_text line, in the range beginning at file line ``first`` (0-based; ``line`` is the
    one the matcher stopped at).

    The file's base is taken where most lines agree with old_text past it, so a line that
    alone differs (a tab among spaces) is the one named, not its well-indented neighbours.
    """
    span = range(first, min(start + len(old_lines), len(bare)))
    pairs = [(i, bare[i], old_lines[i - start]) for i in span if old_lines[i - start].strip()]
    old_base = common_indent([o for _, _, o in pairs])

    def breaks(base: str) -> list[int]:
        return [
            i
            for i, found, old in pairs
            if indent_of(found) != base + indent_of(old)[len(old_base) :]
        ]

    bases = {common_indent([f for _, f, _ in pairs])}
    for _, found, old in pairs:
        own, rel = indent_of(found), indent_of(old)[len(old_base) :]
        if own.endswith(rel):
            bases.add(own[: len(own) - len(rel)])
    # The fewest breaks; on a tie, the base under which the earlier lines hold.
    broken = {base: breaks(base) for base in bases}
    file_base = min(bases, key=lambda base: (len(broken[base]), -min(broken[base], default=0)))
    line = next(iter(broken[file_base]), line)
    found, old = bare[line], old_lines[line - start]
    own = indent_of(found)
    if own.startswith(file_base):
        return (
            f"Past the indentation its lines share, the file indents line {line + 1} by "
            f"{describe(own[len(file_base) :])} where old_text indents its line "
            f"{line - start + 1} by {describe(indent_of(old)[len(old_base) :])}"
        )
    return (
        f"The file indents line {line + 1} by {describe(own)} where the lines around it "
        f"share {describe(file_base)}; old_text indents its line {line - start + 1} by "
        f"{describe(indent_of(old))}"
    )


def structure_mismatch(
    path: str, old_lines: list[str], bare: list[str], first: int, index: int
) -> ToolError:
    """``NO_MATCH`` for a range (file line index ``first``) that matches ``old_lines`` only
    when its indentation structure is changed; ``index`` is the first old line that breaks
    it. The message names the difference and shows the file's real indentation."""
    last = first + len(old_lines) - 1
    block = _quote_block(bare, first, last)
    message = (
        f"old_text was not found in {path} exactly. With indentation ignored it matches "
        f"{_range(first, last)}, but not with the same indentation structure, and an edit "
        "never changes the structure of the code. "
        + _relative_indent(old_lines, bare, first, first, first + index)
        + ". Copy old_text with the file's indentation:"
        + block
        + _escape_note(bare[first : last + 1])
    )
    return ToolError(message, ErrorCode.NO_MATCH)


def unplaceable_line(
    path: str,
    old_lines: list[str],
    bare: list[str],
    first: int,
    number: int,
    old_part: str,
    file_part: str,
    *,
    inside_indentation: bool = False,
) -> ToolError:
    """``NO_MATCH`` for a range (file line index ``first``) that matches only with
    indentation ignored (or, ``inside_indentation``, matches exactly but starts inside its
    line's indentation), where ``new_text``'s line ``number`` (1-based) does not start with
    ``old_part``, the indentation old_text has where the file has ``file_part``, so its depth
    in the file cannot be told. Shows the file's real indentation."""
    last = first + len(old_lines) - 1
    block = _quote_block(bare, first, last)
    found = (
        f"old_text is in {path} at {_range(first, last)}, but it starts inside the line's "
        "indentation"
        if inside_indentation
        else f"old_text was not found in {path} exactly. With indentation ignored it matches "
        f"{_range(first, last)}"
    )
    message = (
        f"{found}, where old_text's lines start with {describe(old_part)} and "
        f"the file's with {describe(file_part)}; new_text's line {number} does not start "
        f"with {describe(old_part)}, so its depth in the file cannot be told. Copy old_text "
        "with the file's indentation and indent new_text to match:"
        + block
        + _escape_note(bare[first : last + 1])
    )
    return ToolError(message, ErrorCode.NO_MATCH)
