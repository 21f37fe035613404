"""Finding ``old_text`` in a file and splicing in ``new_text``: the edit matcher.

Order of attempts:

1. ``exact``: the literal text, or the literal text with its line breaks written in the
   file's newline style (a model reads lines without their CR, so this is still literal).
2. Fallbacks, each only when the exact text is absent and only when exactly one range of
   whole lines matches; each tolerates more than the one before:
   ``line_endings`` (CR before LF), ``trailing_whitespace``, ``indentation`` (leading
   whitespace), ``quotes`` (typographic quotes as straight ones). Nothing else may differ,
   so an identifier or any other word never matches a different one.

The replacement is always literal (no regex expansion of ``$&``, ``\\1`` or ``\\g<0>``), its
line breaks are written in the file's style, and only the matched range changes. When a
fallback matched with different indentation, ``new_text`` is re-indented the same way.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass

from .._errors import ErrorCode, ToolError
from ._diff import split_lines
from ._text import convert_newlines

_QUOTES = str.maketrans(
    {"‘": "'", "’": "'", "‚": "'", "‛": "'", "“": '"', "”": '"', "„": '"', "‟": '"'}
)

_FALLBACKS: tuple[tuple[str, Callable[[str], str]], ...] = (
    ("line_endings", lambda line: line),
    ("trailing_whitespace", str.rstrip),
    ("indentation", str.strip),
    ("quotes", lambda line: line.strip().translate(_QUOTES)),
)

# Most similar lines are looked for (for the NO_MATCH hint) only in files up to this long.
_HINT_MAX_LINES = 20_000


@dataclass(frozen=True)
class EditResult:
    """The text after an edit.

    Attributes:
        text: the whole new text.
        replacements: how many ranges were replaced.
        match: ``exact`` or the fallback that matched (``line_endings``,
            ``trailing_whitespace``, ``indentation``, ``quotes``).
    """

    text: str
    replacements: int
    match: str


def replace_text(
    text: str, old: str, new: str, *, replace_all: bool, newline: str, path: str
) -> EditResult:
    """Replace ``old`` by ``new`` in ``text`` by the rules in this module's docstring.

    Args:
        text: the file's text with its own line endings.
        old: the text to find (non-empty).
        new: the replacement, written literally.
        replace_all: replace every exact occurrence instead of requiring one.
        newline: the file's newline style (``"\\n"`` or ``"\\r\\n"``) for ``new``'s breaks.
        path: the file's path for messages.

    Raises:
        ToolError: ``NO_MATCH`` when nothing matches; ``AMBIGUOUS_MATCH`` naming the count and
            line numbers when more than one range matches without ``replace_all`` (or more
            than one fallback range matches at all).
    """
    replacement = convert_newlines(new, newline)
    for candidate in dict.fromkeys((old, convert_newlines(old, newline))):
        starts = _find_all(text, candidate)
        if not starts:
            continue
        if len(starts) > 1 and not replace_all:
            raise _ambiguous(path, [_line_of(text, s) for s in starts], fallback=None)
        return EditResult(_splice(text, starts, len(candidate), replacement), len(starts), "exact")
    return _fallback(text, old, new, newline, path)


def _find_all(text: str, needle: str) -> list[int]:
    starts: list[int] = []
    at = text.find(needle)
    while at != -1:
        starts.append(at)
        at = text.find(needle, at + len(needle))
    return starts


def _splice(text: str, starts: list[int], length: int, replacement: str) -> str:
    parts: list[str] = []
    previous = 0
    for start in starts:
        parts.append(text[previous:start])
        parts.append(replacement)
        previous = start + length
    parts.append(text[previous:])
    return "".join(parts)


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _ambiguous(path: str, lines: list[int], fallback: str | None) -> ToolError:
    shown = ", ".join(str(n) for n in lines[:20]) + (", ..." if len(lines) > 20 else "")
    if fallback is None:
        message = (
            f"old_text matches {len(lines)} times in {path} (lines {shown}); include more "
            "surrounding lines to make it unique, or set replace_all to replace every one"
        )
    else:
        message = (
            f"old_text is not in {path} exactly, and {len(lines)} places match it when "
            f"{fallback.replace('_', ' ')} is ignored (lines {shown}); copy the exact text "
            "from read_file, with more surrounding lines"
        )
    return ToolError(message, ErrorCode.AMBIGUOUS_MATCH, details={"lines": lines})


def _strip_ending(line: str) -> str:
    line = line.removesuffix("\n")
    return line.removesuffix("\r")


def _fallback(text: str, old: str, new: str, newline: str, path: str) -> EditResult:
    old_unified = old.replace("\r\n", "\n")
    old_ends_with_newline = old_unified.endswith("\n")
    old_lines = [line.removesuffix("\r") for line in old_unified.removesuffix("\n").split("\n")]
    file_lines = split_lines(text)
    bare = [_strip_ending(line) for line in file_lines]
    if not any(line.strip() for line in old_lines):
        raise _no_match(path, old_lines, bare)
    span = len(old_lines)
    for name, normal in _FALLBACKS:
        wanted = [normal(line) for line in old_lines]
        normalised = [normal(line) for line in bare]
        hits = [
            i
            for i in range(len(bare) - span + 1)
            if normalised[i] == wanted[0] and normalised[i : i + span] == wanted
        ]
        if len(hits) > 1:
            raise _ambiguous(path, [i + 1 for i in hits], fallback=name)
        if hits:
            first = hits[0]
            matched = bare[first : first + span]
            body = _reindent(new.replace("\r\n", "\n"), old_lines, matched)
            start = sum(len(line) for line in file_lines[:first])
            last = file_lines[first + span - 1]
            end = start + sum(len(line) for line in file_lines[first : first + span])
            if not old_ends_with_newline:
                end -= len(last) - len(_strip_ending(last))
            elif not last.endswith("\n"):
                body = body.removesuffix("\n")  # the file's last line has no newline: keep it so
            replacement = convert_newlines(body, newline)
            return EditResult(text[:start] + replacement + text[end:], 1, name)
    raise _no_match(path, old_lines, bare)


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _reindent(new: str, old_lines: list[str], matched: list[str]) -> str:
    """``new`` with each line's indentation mapped the way ``old_lines``' maps onto the
    file's ``matched`` lines (an exact indentation string first, else the first line's)."""
    pairs = [(o, m) for o, m in zip(old_lines, matched, strict=True) if o.strip()]
    mapping: dict[str, str] = {}
    for o, m in pairs:
        mapping.setdefault(_indent(o), _indent(m))
    if all(old_indent == file_indent for old_indent, file_indent in mapping.items()):
        return new
    base_old, base_file = _indent(pairs[0][0]), _indent(pairs[0][1])
    out: list[str] = []
    for line in new.split("\n"):
        indent = _indent(line)
        if not line.strip():
            out.append(line)
        elif indent in mapping:
            out.append(mapping[indent] + line[len(indent) :])
        elif indent.startswith(base_old):
            out.append(base_file + line[len(base_old) :])
        else:
            out.append(line)
    return "\n".join(out)


def _no_match(path: str, old_lines: list[str], bare: list[str]) -> ToolError:
    message = (
        f"old_text was not found in {path}. Read the file again with read_file and copy the "
        "text exactly, including whitespace and punctuation"
    )
    probe = next((line.strip() for line in old_lines if line.strip()), "")
    if probe and len(bare) <= _HINT_MAX_LINES:
        stripped = [line.strip() for line in bare]
        close = difflib.get_close_matches(probe, stripped, n=1, cutoff=0.6)
        if close:
            number = stripped.index(close[0]) + 1
            message += f". The most similar line is {number}: {bare[number - 1].strip()!r}"
    return ToolError(message, ErrorCode.NO_MATCH)
