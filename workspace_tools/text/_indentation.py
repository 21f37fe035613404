"""Indentation structure of a range of lines: what an edit fallback must keep.

The *base* of a set of lines is the longest common prefix of their indentation (leading
spaces and tabs); a line's *relative* indentation is what follows the base. Two ranges have
the same structure when every non-blank line's relative indentation is the same string in
both; blank lines (whitespace only) carry no depth.
"""

from __future__ import annotations

from dataclasses import dataclass

# Indentation as editors and Python's tokenizer count it; other leading characters (NBSP,
# form feed) are content and must match.
INDENT = " \t"


@dataclass(frozen=True)
class Shift:
    """How a range's indentation maps: ``old_base`` in ``old_text`` is ``file_base`` in the
    file; everything past the base is equal."""

    old_base: str
    file_base: str


def indent_of(line: str) -> str:
    """The leading spaces and tabs of ``line``."""
    return line[: len(line) - len(line.lstrip(INDENT))]


def common_indent(lines: list[str]) -> str:
    """The base of ``lines``: the longest common prefix of their indentation."""
    indents = [indent_of(line) for line in lines]
    shortest = min(indents, key=len, default="")
    for n, char in enumerate(shortest):
        if any(indent[n] != char for indent in indents):
            return shortest[:n]
    return shortest


def shift_of(old_lines: list[str], matched: list[str]) -> Shift | int:
    """The :class:`Shift` mapping ``old_lines`` onto the file's ``matched`` lines (paired in
    order; equally long) when every non-blank line of ``old_lines`` keeps its
    relative indentation; otherwise the index of the first line whose relative indentation
    differs. With no non-blank line, both bases are empty."""
    paired = enumerate(zip(old_lines, matched, strict=True))
    pairs = [(i, o, m) for i, (o, m) in paired if o.strip()]
    old_base = common_indent([o for _, o, _ in pairs])
    file_base = common_indent([m for _, _, m in pairs])
    for i, o, m in pairs:
        if indent_of(o)[len(old_base) :] != indent_of(m)[len(file_base) :]:
            return i
    return Shift(old_base, file_base)
