"""Running a grep pattern (Python ``re`` syntax) on RE2, a linear-time engine, when RE2 can
give exactly what Python's engine gives.

Python's backtracking engine can take exponential time (``(a+)+$`` against a line of ``a``
ending in ``!``) and holds the GIL while it runs. RE2 (https://github.com/google/re2, the
``google-re2`` bindings) matches in time linear in the text, releases the GIL, and chooses
the same match as Python's engine (leftmost, then Perl's preference order). Its syntax and
character classes differ, so a pattern is not handed to it as written: it is parsed by
``re``'s own parser and written out again in RE2 syntax, with every class spelled as the
code points Python's engine would accept:

- ``\\w``, ``\\d``, ``\\s`` and their negations are Unicode classes in Python (RE2's are ASCII):
  they become explicit ranges, taken from Python's engine itself (see :func:`_category`).
- Case-insensitive matching follows Python's rules (``k`` also matches the Kelvin sign,
  ``i`` the dotted and dotless i, ``s`` the long s): each cased ASCII literal becomes the
  class of what Python matches. A cased non-ASCII literal under ``ignore_case`` is left to
  Python's engine.
- ``\\b``/``\\B`` are ASCII in RE2 and Unicode in Python: they agree only on ASCII text, so a
  pattern using them has an RE2 form for ASCII text only.
- A search line by line (grep without multiline) takes ``\\A`` and ``\\Z`` as the line's
  ends, as a search of the line alone does.
- Lookarounds, backreferences, conditionals, atomic groups and possessive repeats have no
  RE2 form, nor repeats over 1,000 (RE2's limit), nor a non-multiline ``$`` in a multiline
  search (which also matches before a final newline).

A search here runs over UTF-8 bytes (text of another encoding is re-encoded first), and
positions are byte offsets.
"""

from __future__ import annotations

import _sre
import array
import functools
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import re2
from re2 import _re2

from workspace_tools.search._pattern import Span

try:  # Python 3.11+
    from re import _constants as _sre_constants  # type: ignore[attr-defined]
    from re import _parser as _sre_parse  # type: ignore[attr-defined]
except ImportError:  # Python 3.10
    import sre_constants as _sre_constants  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

_MAXREPEAT = _sre_constants.MAXREPEAT
_MAX_CODE = 0x10FFFF
_SURROGATES = (0xD800, 0xDFFF)
# RE2 refuses counted repeats above this.
_RE2_MAX_REPEAT = 1000
# Memory for one compiled program (RE2's default), which also bounds the compile's time
# (milliseconds; it holds the GIL): a pattern too big for it goes to Python's engine. A
# spelled-out Unicode \w costs about 1,000 instructions of the 130,000 this allows.
_RE2_MAX_MEM = 8 << 20
# Longest RE2 source written: each Unicode class is some 30 KB of ranges, so a pattern
# with hundreds of them would take that many megabytes before RE2 refused it.
_MAX_SOURCE = 1 << 20

# Non-ASCII characters Python's IGNORECASE matches with an ASCII letter: its simple case
# mappings (KELVIN SIGN -> k, LATIN CAPITAL LETTER I WITH DOT ABOVE -> i) and the pairs
# sre_compile adds (_ignorecase_fixes: i and dotless i, s and long s).
_CASE_EXTRA = {"i": (0x130, 0x131), "k": (0x212A,), "s": (0x17F,)}
_CATEGORY_ESCAPES = {"DIGIT": r"\d", "WORD": r"\w", "SPACE": r"\s"}

Ranges = list[tuple[int, int]]


class _Unsupported(Exception):
    """The pattern (for the text asked about) has no RE2 form with the same meaning."""


@dataclass(frozen=True)
class Translation:
    """RE2 sources (UTF-8 bytes) of one pattern: ``ascii`` matches exactly what Python's
    engine matches on ASCII text, ``unicode`` on any text (``None`` when there is no such
    form, e.g. with ``\\b``)."""

    ascii: bytes
    unicode: bytes | None


def translate(pattern: str, flags: int, *, per_line: bool) -> Translation | None:
    """The RE2 forms of the Python pattern ``pattern`` compiled with ``flags``, or ``None``
    when it has none.

    Args:
        per_line: the pattern is searched line by line (grep without multiline): ``\\A``
            and ``\\Z`` then mean the line's start and end, as they do for a search of the
            line alone.
    """
    try:
        parsed = _sre_parse.parse(pattern, flags)
    except Exception:
        return None
    start_flags = parsed.state.flags
    try:
        ascii_source = _Writer(ascii_text=True, per_line=per_line).sequence(parsed, start_flags)
    except (_Unsupported, RecursionError):
        return None
    try:
        unicode_source: str | None = _Writer(ascii_text=False, per_line=per_line).sequence(
            parsed, start_flags
        )
    except (_Unsupported, RecursionError):
        unicode_source = None
    return Translation(
        ascii_source.encode("utf-8"),
        None if unicode_source is None else unicode_source.encode("utf-8"),
    )


class _Writer:
    """Writes a parsed pattern in RE2 syntax; raises :class:`_Unsupported` where it cannot."""

    def __init__(self, *, ascii_text: bool, per_line: bool) -> None:
        self.ascii_text = ascii_text
        self.per_line = per_line
        self.written = 0  # characters written, counting nested items again in their parent

    def sequence(self, items: Iterable[tuple[Any, Any]], flags: int) -> str:
        out = []
        for op, av in items:
            out.append(self.item(op.name, av, flags))
            self.written += len(out[-1])
            if self.written > _MAX_SOURCE:
                raise _Unsupported
        return "".join(out)

    def item(self, name: str, av: Any, flags: int) -> str:
        if name == "LITERAL":
            return _class(self._literal(av, flags), negate=False)
        if name == "NOT_LITERAL":
            return _class(self._literal(av, flags), negate=True)
        if name == "ANY":
            return r"(?s:.)" if flags & re.DOTALL else r"[^\n]"
        if name == "IN":
            return self._in(av, flags)
        if name == "BRANCH":
            return "(?:" + "|".join(self.sequence(branch, flags) for branch in av[1]) + ")"
        if name == "SUBPATTERN":
            _group, add, remove, body = av
            return "(?:" + self.sequence(body, (flags | add) & ~remove) + ")"
        if name in ("MAX_REPEAT", "MIN_REPEAT"):
            low, high, body = av
            if low > _RE2_MAX_REPEAT or (high != _MAXREPEAT and high > _RE2_MAX_REPEAT):
                raise _Unsupported
            bound = f"{{{low},}}" if high == _MAXREPEAT else f"{{{low},{high}}}"
            lazy = "?" if name == "MIN_REPEAT" else ""
            return "(?:" + self.sequence(body, flags) + ")" + bound + lazy
        if name == "AT":
            return self._at(av.name, flags)
        # Lookarounds, backreferences, conditionals, atomic groups, possessive repeats.
        raise _Unsupported

    def _at(self, at: str, flags: int) -> str:
        line_start, line_end = r"(?m:^)", r"(?m:$)"
        if at == "AT_BEGINNING":
            return line_start if flags & re.MULTILINE or self.per_line else r"\A"
        if at == "AT_BEGINNING_STRING":
            return line_start if self.per_line else r"\A"
        if at == "AT_END":
            if flags & re.MULTILINE or self.per_line:
                return line_end
            raise _Unsupported  # Python's $ also matches before a final newline
        if at == "AT_END_STRING":
            return line_end if self.per_line else r"\z"
        if at in ("AT_BOUNDARY", "AT_NON_BOUNDARY"):
            if not (self.ascii_text or flags & re.ASCII):
                raise _Unsupported  # RE2's word boundary is ASCII, Python's Unicode
            return r"\b" if at == "AT_BOUNDARY" else r"\B"
        raise _Unsupported

    def _literal(self, code: int, flags: int) -> Ranges:
        if not flags & re.IGNORECASE:
            return [(code, code)]
        char = chr(code)
        if code < 128:
            if not char.isalpha():
                return [(code, code)]
            low = char.lower()
            extra = () if flags & re.ASCII else _CASE_EXTRA.get(low, ())
            return [(c, c) for c in (ord(low), ord(low.upper()), *extra)]
        # No character lower-cases to an uncased one (the tests check every code point),
        # and re.ASCII folds ASCII letters only: then a character matches only itself.
        if flags & re.ASCII or not _sre.unicode_iscased(code):
            return [(code, code)]
        raise _Unsupported  # a cased non-ASCII letter: Python's case rules are its own

    def _in(self, items: Any, flags: int) -> str:
        negate = False
        ranges: Ranges = []
        for op, av in items:
            name = op.name
            if name == "NEGATE":
                negate = True
            elif name == "LITERAL":
                ranges += self._literal(av, flags)
            elif name == "RANGE":
                low, high = av
                if flags & re.IGNORECASE and high >= 128:
                    raise _Unsupported
                if flags & re.IGNORECASE:
                    for code in range(low, high + 1):
                        ranges += self._literal(code, flags)
                else:
                    ranges.append((low, high))
            elif name == "CATEGORY":
                ranges += self._category(av.name, flags)
            else:
                raise _Unsupported
        return _class(ranges, negate=negate)

    def _category(self, category: str, flags: int) -> Ranges:
        # CATEGORY_DIGIT, CATEGORY_NOT_DIGIT, CATEGORY_WORD, CATEGORY_SPACE, ...
        kind = category.removeprefix("CATEGORY_")
        negated = kind.startswith("NOT_")
        kind = kind.removeprefix("NOT_")
        if kind not in _CATEGORY_ESCAPES:
            raise _Unsupported
        # On ASCII text only the ASCII part of a class counts (Python's str \s holds
        # \x1c-\x1f there, which re.ASCII's does not).
        ranges = _category(kind, ascii_flag=bool(flags & re.ASCII), ascii_text=self.ascii_text)
        return _complement(ranges) if negated else list(ranges)


@functools.cache
def _category(kind: str, *, ascii_flag: bool, ascii_text: bool) -> tuple[tuple[int, int], ...]:
    """The code point ranges Python's engine matches with ``\\d``, ``\\w`` or ``\\s`` (its
    str semantics, or ``re.ASCII``'s), among ASCII characters or all of them: found by
    running that engine over the code points, so that they are its definition, for its
    Unicode version."""
    chars = "".join(map(chr, range(128))) if ascii_text else _all_code_points()
    rx = re.compile(_CATEGORY_ESCAPES[kind] + "+", re.ASCII if ascii_flag else 0)
    return tuple((m.start(), m.end() - 1) for m in rx.finditer(chars))


@functools.cache
def _all_code_points() -> str:
    codes = array.array("L" if array.array("I").itemsize < 4 else "I", range(_MAX_CODE + 1))
    return codes.tobytes().decode(f"utf-{codes.itemsize * 8}-{sys.byteorder[0]}e", "surrogatepass")


def _normalize(ranges: Iterable[tuple[int, int]]) -> Ranges:
    merged: Ranges = []
    for low, high in sorted(ranges):
        if merged and low <= merged[-1][1] + 1:
            if high > merged[-1][1]:
                merged[-1] = (merged[-1][0], high)
        else:
            merged.append((low, high))
    return merged


def _complement(ranges: Iterable[tuple[int, int]]) -> Ranges:
    out: Ranges = []
    next_low = 0
    for low, high in _normalize(ranges):
        if low > next_low:
            out.append((next_low, low - 1))
        next_low = high + 1
    if next_low <= _MAX_CODE:
        out.append((next_low, _MAX_CODE))
    return out


def _class(ranges: Ranges, *, negate: bool) -> str:
    """An RE2 class of ``ranges`` (or of all other characters), without the surrogates that
    UTF-8 text cannot hold."""
    wanted = _complement(ranges) if negate else _normalize(ranges)
    surrogates = [_SURROGATES]
    wanted = _complement(_complement(wanted) + surrogates)
    if not wanted:
        raise _Unsupported  # a class that matches nothing; RE2 has no spelling for it
    if len(wanted) == 1 and wanted[0][0] == wanted[0][1]:
        return _char(wanted[0][0])
    body = "".join(
        _char(low) if low == high else f"{_char(low)}-{_char(high)}" for low, high in wanted
    )
    return f"[{body}]"


def _char(code: int) -> str:
    if code < 128 and chr(code).isalnum():
        return chr(code)
    return f"\\x{{{code:X}}}"


class Re2Search:
    """A compiled RE2 program searched like ``re.Pattern.search`` over UTF-8 bytes.

    Unlike ``re``, text outside ``[pos, endpos)`` is context for ``^``, ``$`` and ``\\b``
    (it is never part of a match). The program is this object's own (not shared through a
    cache), so a fork while another thread runs it cannot leave the child a locked copy.
    """

    __slots__ = ("_anchor", "_match")

    def __init__(self, source: bytes) -> None:
        """Raises:
        ValueError: RE2 refuses the source (e.g. the program would exceed its memory)."""
        options = re2.Options()
        options.never_capture = True
        options.log_errors = False
        options.max_mem = _RE2_MAX_MEM
        program = _re2.RE2(source, options)
        if not program.ok():
            raise ValueError(program.error())
        self._match = program.Match
        self._anchor = _re2.RE2.Anchor.UNANCHORED

    def search(self, buf: bytes, pos: int = 0, endpos: int | None = None) -> Span | None:
        """The leftmost match starting in ``buf[pos:endpos]``, or ``None``."""
        end = len(buf) if endpos is None else endpos
        if pos > end:
            return None
        start, stop = self._match(self._anchor, buf, pos, end)[0]
        return None if start < 0 else Span(start, stop)


class Re2LineCounter:
    """An RE2 program with one match per line the pattern matches: the pattern's
    :func:`~._pattern.line_counter` form. Counting costs a call (about a microsecond) per
    matching line. (Matching two lines per call, the next one reached lazily, makes
    fewer calls but scans the text between them twice more: slower on sparse matches.)"""

    __slots__ = ("_anchor", "_match")

    def __init__(self, source: bytes, *, can_be_empty: bool) -> None:
        """``source``: the pattern's RE2 form (which never leaves a line).

        Raises:
            ValueError: RE2 refuses the counter's source."""
        lead = rb"(?m:^)[^\n]*?" if can_be_empty else b""
        program = Re2Search(lead + b"(?:" + source + rb")[^\n]*")
        self._match = program._match
        self._anchor = _re2.RE2.Anchor.UNANCHORED

    def count(self, buf: bytes, pos: int, endpos: int) -> int:
        """How many lines of ``buf[pos:endpos]`` (``pos`` a line start) the pattern
        matches; an empty match at ``endpos`` after a newline is not a line of the range."""
        match, anchor = self._match, self._anchor
        found = 0
        ended = endpos > 0 and buf[endpos - 1] == 10
        while pos <= endpos:
            start, end = match(anchor, buf, pos, endpos)[0]
            if start < 0 or (start == endpos and ended):
                break
            found += 1
            pos = end + 1  # past the line's end: the match took the rest of the line
        return found


# A literal's first offset in ``buf[pos:end]`` (``pos <= end <= len(buf)``), or -1.
LiteralFinder = Callable[[Any, int, int], int]


def literal_finder(needle: bytes) -> LiteralFinder:
    """The fastest way to find the ASCII literal ``needle`` (not empty) in a bytes-like
    buffer: RE2, which looks for a literal's first and last bytes together (a vectorized
    scan), for a literal of two bytes or more; ``bytes.find`` (``memchr``) for one byte.

    ``bytes.find`` keys on the last byte and skips little for a short literal. Measured,
    CPU ms to test every file, RE2 against ``bytes.find``: over mypy's sources (20 MB)
    TypeVar 2.7 against 4.6, ValueError 2.3 against 6.7, XXX 2.0 against 11.9, ``zip(`` 2.1
    against 9.8, but nonexistent_name 9.0 against 6.3, self.assert 9.2 against 7.9; over
    the standard library's sources, TypeVar 4.4 against 18.7, nonexistent_name 12.8 against
    13.6, ``return None`` 11.0 against 14.7, self.assert 6.8 against 5.8."""
    program = None if len(needle) < 2 else compile_re2(b"".join(b"\\x%02x" % c for c in needle))
    if program is None:

        def find_bytes(buf: Any, pos: int, end: int) -> int:
            return buf.find(needle, pos, end)  # type: ignore[no-any-return]

        return find_bytes
    match, anchor = program._match, program._anchor

    def find_re2(buf: Any, pos: int, end: int) -> int:
        return match(anchor, buf, pos, end)[0][0]  # type: ignore[no-any-return]

    return find_re2


def compile_re2(source: bytes) -> Re2Search | None:
    """``source`` compiled, or ``None`` when RE2 refuses it."""
    try:
        return Re2Search(source)
    except (ValueError, re2.error):
        return None


def compile_counter(source: bytes, can_be_empty: bool | None) -> Re2LineCounter | None:
    """The line counter of the RE2 form ``source``, or ``None`` when there is none
    (``can_be_empty`` is ``None``: see :func:`~._pattern.line_counter_shape`)."""
    if can_be_empty is None:
        return None
    try:
        return Re2LineCounter(source, can_be_empty=can_be_empty)
    except (ValueError, re2.error):
        return None
