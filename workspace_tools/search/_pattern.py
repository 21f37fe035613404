"""What a grep pattern allows: a bytes twin, a required literal, a line counter.

Each is derived from the pattern (its source, or its parse by ``re``'s own parser) and is
used only where it gives exactly the result of the ``str`` pattern searched line by line.
"""

from __future__ import annotations

import re
from typing import Any, AnyStr

try:  # Python 3.11+
    from re import _parser as _sre_parse  # type: ignore[attr-defined]
except ImportError:  # Python 3.10
    import sre_parse as _sre_parse  # type: ignore[no-redef]

from workspace_tools._errors import ErrorCode, ToolError

# What str \s matches among ASCII characters, as the body of a bytes character class.
_STR_SPACE = r"\t\n\x0b\x0c\r\x1c-\x20"


def compile_pattern(pattern: str, flags: int) -> re.Pattern[str]:
    """Compile a grep pattern.

    Raises:
        ToolError: ``INVALID_ARGUMENTS`` naming the position of the regex error.
    """
    try:
        return re.compile(pattern, flags)
    except re.error as exc:
        raise _regex_error(pattern, exc) from None
    except RecursionError:
        raise ToolError(
            "Invalid regular expression: its groups are nested too deeply for Python's "
            "regex compiler; flatten the pattern.",
            ErrorCode.INVALID_ARGUMENTS,
        ) from None


def _regex_error(pattern: str, exc: re.error) -> ToolError:
    pos = exc.pos if exc.pos is not None else 0
    # A caret under the position lines up only under a pattern that prints on one line.
    pointer = f"\n  {pattern}\n  {' ' * pos}^" if pattern.isprintable() else ""
    return ToolError(
        f"Invalid regular expression at position {pos}: {exc.msg}.{pointer}\n"
        "The pattern is a Python regex; escape special characters such as ( [ { . * + ? "
        "with a backslash to match them literally.",
        ErrorCode.INVALID_ARGUMENTS,
    )


def bytes_twin(pattern: str, flags: int) -> re.Pattern[bytes] | None:
    """The pattern compiled for bytes, matching on ASCII text exactly what the ``str``
    pattern matches there; ``None`` when that cannot be had. Verbose patterns are left
    alone (a ``[`` in a comment would mislead the character-class tracking)."""
    verbose = flags & re.VERBOSE or re.search(r"\(\?[aiLmsux-]*x", pattern)
    source = _bytes_source(pattern) if pattern.isascii() and not verbose else None
    if source is None:
        return None
    try:
        return re.compile(source.encode("ascii"), flags & ~re.UNICODE)
    except (re.error, ValueError):
        return None


def _bytes_source(pattern: str) -> str | None:
    # The one difference on ASCII text: str \s also matches \x1c-\x1f. Spell it out.
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = class_first = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            escaped = pattern[i + 1 : i + 2]
            if escaped == "s":
                out.append(_STR_SPACE if in_class else f"[{_STR_SPACE}]")
            elif escaped == "S":
                if in_class:
                    return None
                out.append(f"[^{_STR_SPACE}]")
            else:
                out.append(pattern[i : i + 2])
            i += 2
            class_first = False
            continue
        if in_class:
            if c == "]" and not class_first:
                in_class = False
            class_first = class_first and c == "^" and pattern[i - 1] == "["
        elif c == "[":
            in_class = class_first = True
        out.append(c)
        i += 1
    return "".join(out)


def _case_sensitive_parse(pattern: str, flags: int) -> Any:
    # None when it does not parse or is case-insensitive as a whole (flags or ``(?i)``).
    if flags & re.IGNORECASE:
        return None
    try:
        parsed = _sre_parse.parse(pattern, flags)
    except Exception:
        return None
    return None if parsed.state.flags & re.IGNORECASE else parsed


def required_literal(pattern: str, flags: int) -> bytes | None:
    """The longest ASCII literal without CR or LF every match of ``pattern`` contains, or
    ``None``.

    Read from the parsed pattern: runs of literal characters in the top-level sequence, in
    groups, and in repeats of at least one. Case-insensitive parts contribute nothing.
    """
    parsed = _case_sensitive_parse(pattern, flags)
    if parsed is None:
        return None
    best = b""

    def visit(items: Any) -> None:
        nonlocal best
        run = bytearray()
        for op, av in items:
            name = op.name
            # CR and LF break a run: a CRLF is searched as an LF, so a literal holding
            # either might not be in the bytes read from disk.
            if name == "LITERAL" and av < 128 and av not in (10, 13):
                run.append(av)
                continue
            if len(run) > len(best):
                best = bytes(run)
            run.clear()
            if name == "SUBPATTERN" and not av[1] & re.IGNORECASE:
                visit(av[3])
            elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") and av[0] >= 1:
                visit(av[2])
            elif name == "ATOMIC_GROUP":
                visit(av)
        if len(run) > len(best):
            best = bytes(run)

    visit(parsed)
    return best or None


def line_counter(rx: re.Pattern[AnyStr]) -> re.Pattern[AnyStr] | None:
    """A regex with one ``findall`` match per line that ``rx`` matches (searching from a
    line start), or ``None`` when ``rx`` might match across or look past a newline (then
    lines are counted one match at a time).

    ``(?:rx)[^\n]*`` takes the rest of the line after the first match, so the next search
    starts on the next line; it keeps ``re``'s fast search for a literal prefix. A pattern
    that can match empty could match again at the line's end, so it gets
    ``^[^\n]*?(?:rx)[^\n]*`` instead, which matches once per line from its start.
    """
    if _GLOBAL_FLAGS.search(_as_str(rx.pattern)):
        # Wrapped, global inline flags like "(?i)" would stand mid-pattern: an error since
        # Python 3.11, a DeprecationWarning before.
        return None
    empty = line_counter_shape(_as_str(rx.pattern), rx.flags)
    if empty is None:
        return None
    lead = "^[^\n]*?" if empty else ""
    source: Any = f"{lead}(?:{{}})[^\n]*"
    if isinstance(rx.pattern, bytes):
        source = source.encode("ascii").replace(b"{}", rx.pattern)
    else:
        source = source.replace("{}", rx.pattern)
    try:
        return re.compile(source, rx.flags)
    except (re.error, ValueError):
        return None


def line_counter_shape(pattern: str, flags: int) -> bool | None:
    """``None`` when ``pattern`` might match across or look past a newline; else whether
    it can match the empty string (which decides the form of its :func:`line_counter`)."""
    try:
        parsed = _sre_parse.parse(pattern, flags)
    except Exception:
        return None
    dotall = bool((flags | parsed.state.flags) & re.DOTALL)
    try:
        if _items_leave_line(parsed, dotall):
            return None
        return not parsed.getwidth()[0] > 0
    except RecursionError:
        return None


_GLOBAL_FLAGS = re.compile(r"\(\?[aiLmsux]+\)")


def _as_str(pattern: str | bytes) -> str:
    return pattern if isinstance(pattern, str) else pattern.decode("latin-1")


_REPEATS = ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT")


def _items_leave_line(items: Any, dotall: bool) -> bool:
    for op, av in items:
        name = op.name
        if name == "LITERAL":
            if av == 10:
                return True
        elif name == "NOT_LITERAL":
            if av != 10:
                return True
        elif name == "ANY":
            if dotall:
                return True
        elif name == "IN":
            if _class_has_newline(av):
                return True
        elif name in _REPEATS:
            if _items_leave_line(av[2], dotall):
                return True
        elif name == "SUBPATTERN":
            if _items_leave_line(av[3], dotall or bool(av[1] & re.DOTALL)):
                return True
        elif name == "ATOMIC_GROUP":
            if _items_leave_line(av, dotall):
                return True
        elif name == "BRANCH":
            if any(_items_leave_line(branch, dotall) for branch in av[1]):
                return True
        elif name != "AT":
            # Lookarounds, backreferences, conditionals: not judged, so not trusted.
            return True
    return False


def _class_has_newline(items: Any) -> bool:
    negated = False
    has = False
    for op, av in items:
        name = op.name
        if name == "NEGATE":
            negated = True
        elif name == "LITERAL":
            has = has or av == 10
        elif name == "RANGE":
            has = has or av[0] <= 10 <= av[1]
        elif name == "CATEGORY":
            category = av.name
            # Of \w \W \d \D \s \S only \w, \d and \S never match a newline.
            if category not in ("CATEGORY_WORD", "CATEGORY_DIGIT", "CATEGORY_NOT_SPACE"):
                has = True
        else:
            return True
    return has != negated


def plain_literal(pattern: str, flags: int) -> str | None:
    """The text ``pattern`` matches when it is a plain ASCII literal without CR or LF
    (e.g. ``NotImplementedError`` or ``foo\\(``), matched case-sensitively; else ``None``."""
    parsed = _case_sensitive_parse(pattern, flags)
    if parsed is None or not len(parsed):
        return None
    chars = []
    for op, av in parsed:
        if op.name != "LITERAL" or not 0 < av < 128 or av in (10, 13):
            return None
        chars.append(chr(av))
    return "".join(chars)


class Span:
    """Where a match was found, with the two methods of ``re.Match`` a search uses."""

    __slots__ = ("_end", "_start")

    def __init__(self, start: int, end: int) -> None:
        self._start, self._end = start, end

    def start(self) -> int:
        return self._start

    def end(self) -> int:
        return self._end


class LiteralSearch:
    """A plain literal (see :func:`plain_literal`) searched with ``str.find`` or
    ``bytes.find`` instead of ``re``, whose scan for a literal is several times slower.

    ``search`` behaves as ``re.Pattern.search`` for that literal; ``line_counter`` is
    its :func:`line_counter`: ``findall`` gives one item per line holding the literal.
    ``lines`` is ``re``'s ``literal[^\\n]*``: one match per line holding the literal,
    from its first occurrence to the line's end, so that ``finditer`` and ``findall``
    walk a buffer's matching lines with no Python code per line (``re`` finds a literal
    prefix about as fast as ``find`` where lines match often, and the rest of a line
    costs it one step).
    """

    __slots__ = ("lines", "needle", "size")

    def __init__(self, needle: str | bytes) -> None:
        self.needle = needle
        self.size = len(needle)
        tail: Any = "[^\n]*" if isinstance(needle, str) else b"[^\n]*"
        self.lines: re.Pattern[Any] = re.compile(re.escape(needle) + tail)

    def search(self, buf: Any, pos: int = 0, endpos: int | None = None) -> Span | None:
        start = buf.find(self.needle, pos) if endpos is None else buf.find(self.needle, pos, endpos)
        return None if start < 0 else Span(start, start + self.size)

    def findall(self, buf: Any, pos: int, endpos: int) -> list[Any]:
        """One item for each line in ``[pos, endpos)`` holding the literal (the literal
        holds no newline, so a line's first occurrence lies within it)."""
        return self.lines.findall(buf, pos, endpos)

    def fullmatch(self, buf: Any, pos: int, endpos: int) -> None:
        """Never: the literal is not empty (an empty match is what the caller asks for)."""
        return None


def anchors_text_ends(pattern: str, flags: int) -> bool:
    """Whether ``pattern`` holds ``\\A``, ``\\Z``, or ``^``/``$`` in a group that turns
    multiline off: anchors that a search of a whole buffer puts at the buffer's ends, not
    at each line's."""
    try:
        parsed = _sre_parse.parse(pattern, flags)
    except Exception:
        return False

    def visit(items: Any, multiline: bool) -> bool:
        for op, av in items:
            name = op.name
            if name == "AT":
                at = av.name
                if at in ("AT_BEGINNING_STRING", "AT_END_STRING") or (
                    at in ("AT_BEGINNING", "AT_END") and not multiline
                ):
                    return True
                continue
            inner = multiline
            if name == "SUBPATTERN":
                inner = (multiline or bool(av[1] & re.M)) and not av[2] & re.M
                subs = [av[3]]
            elif name == "BRANCH":
                subs = av[1]
            elif name in _REPEATS:
                subs = [av[2]]
            elif name in ("ASSERT", "ASSERT_NOT"):
                subs = [av[1]]
            elif name == "ATOMIC_GROUP":
                subs = [av]
            elif name == "GROUPREF_EXISTS":
                subs = [branch for branch in av[1:] if branch is not None]
            else:
                subs = []
            if any(visit(sub, inner) for sub in subs):
                return True
        return False

    try:
        return visit(parsed, bool((flags | parsed.state.flags) & re.MULTILINE))
    except RecursionError:
        return True  # not judged: searching line by line is right for any pattern


#: A match at least this long (in characters) is longer than nearly every line: searched
#: line by line, re's own length check then skips a line without trying it.
_LONG_MATCH = 256


def searched_line_by_line(pattern: str, flags: int) -> bool:
    """Whether Python's engine should search ``pattern`` (no multiline) in each line alone
    (:class:`LineSlices`) rather than in a whole buffer, where it would differ or cost more:

    - it :func:`anchors_text_ends` (``\\A`` and ``\\Z`` are then a line's ends);
    - it could run past a newline (``\\s``, ``[^x]``, a lookahead for ``\\n``): from
      each line the engine would try as many lines as it can reach before the match is cut
      back to its line (``(?:\\w+\\s){1001}``: 5 s for 10 MB, against 0.2 s);
    - its shortest match is longer than ``_LONG_MATCH``: in a buffer the engine tries it
      from every character (``(?:\\w+ ){1001}``: 1.7 s for 14 MB, against 0.16 s).

    Any other pattern is searched faster in the whole buffer (about twice).
    """
    if line_counter_shape(pattern, flags) is None or anchors_text_ends(pattern, flags):
        return True
    try:
        return bool(_sre_parse.parse(pattern, flags).getwidth()[0] >= _LONG_MATCH)
    except (re.error, RecursionError, OverflowError):
        return True


class LineSlices:
    """A regex searched in each line alone, as ``re.Pattern.search`` of the slice: the
    search for a pattern that :func:`anchors_text_ends`, so that ``\\A`` and ``\\Z`` mean
    the line's ends. Searches start at line starts (as grep's do without multiline)."""

    __slots__ = ("_nl", "_rx")

    def __init__(self, rx: re.Pattern[Any]) -> None:
        self._rx = rx
        self._nl: Any = b"\n" if isinstance(rx.pattern, bytes) else "\n"

    def search(self, buf: Any, pos: int = 0, endpos: int | None = None) -> Span | None:
        end = len(buf) if endpos is None else endpos
        search, nl = self._rx.search, self._nl
        while pos <= end:
            line_end = buf.find(nl, pos, end)
            if line_end < 0:
                line_end = end
            m = search(buf[pos:line_end])
            if m is not None:
                return Span(pos + m.start(), pos + m.end())
            pos = line_end + 1
        return None
