"""gitignore patterns compiled to regular expressions, with git's exact semantics.

The rules are git's (``gitignore(5)``, ``dir.c`` and ``wildmatch.c`` in git): blank lines
and ``#`` comments are skipped, a trailing CR and unescaped trailing spaces are dropped, ``!``
negates, a trailing ``/`` matches directories only, a pattern with a ``/`` anywhere else is
anchored to the directory of its file and otherwise matches a name at any depth below it,
``*``/``?``/``[...]`` never match ``/``, ``**`` matches across directories only next to a
slash, and a backslash escapes the next character. Matching is on bytes, as git does it
(``?`` is one byte, not one character), and case-sensitive.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SPECIAL = b"*?[\\"
_SLASH = 0x2F

# POSIX classes as git's wildmatch defines them: ASCII only (git's own ctype table).
_POSIX_CLASSES: dict[bytes, frozenset[int]] = {
    b"alnum": frozenset(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"),
    b"alpha": frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"),
    b"blank": frozenset(b" \t"),
    b"cntrl": frozenset([*range(0x20), 0x7F]),
    b"digit": frozenset(b"0123456789"),
    b"graph": frozenset(range(0x21, 0x7F)),
    b"lower": frozenset(b"abcdefghijklmnopqrstuvwxyz"),
    b"print": frozenset(range(0x20, 0x7F)),
    b"punct": frozenset(b"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
    b"space": frozenset(b" \t\n\r"),
    b"upper": frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
    b"xdigit": frozenset(b"0123456789ABCDEFabcdef"),
}

# An empty byte class: matches nothing, in RE2 (which has no lookahead) as in ``re``.
_NEVER = "[^\\x00-\\xff]"


class _Unmatchable(Exception):
    """The pattern can never match (git's wildmatch aborts on it)."""


@dataclass(frozen=True)
class GitignoreRule:
    """One pattern line of an ignore file.

    Attributes:
        regex: a ``bytes`` regular expression source matching the whole path relative to
            the repository (or walk) top, ``/``-separated, without a trailing slash.
        negated: the line began with ``!`` (a match re-includes the path).
        dir_only: the line ended with ``/`` (only directories match).
        source: the pattern line as written, for messages.
        ranked: the line is an ``.ignore`` file's: it ranks above every ``.gitignore``
            rule, at any depth, as ripgrep ranks them (see ``_ignore.IgnoreRules``).
    """

    regex: str
    negated: bool
    dir_only: bool
    source: str
    ranked: bool = False


def parse_gitignore(data: bytes, base: str) -> list[GitignoreRule]:
    """The rules of one ignore file, in file order.

    Args:
        data: the file's bytes (a UTF-8 BOM is skipped, as git does).
        base: the file's directory relative to the top the matched paths are relative to,
            ``/``-separated, ``""`` for the top itself.

    Returns:
        One rule per pattern line; a pattern that can never match (an unclosed ``[``, a
        trailing backslash) is left out, as it never matches in git either.
    """
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    prefix = re.escape(base.encode("utf-8", "surrogateescape") + b"/").decode("latin-1")
    rules = []
    for raw in data.split(b"\n"):
        rule = _parse_line(raw, prefix if base else "")
        if rule is not None:
            rules.append(rule)
    return rules


def _parse_line(line: bytes, prefix: str) -> GitignoreRule | None:
    source = line.decode("utf-8", "replace")
    if line.endswith(b"\r"):
        line = line[:-1]
    if not line or line.startswith(b"#"):
        return None
    line = _trim_trailing_spaces(line)
    negated = line.startswith(b"!")
    if negated:
        line = line[1:]
    dir_only = line.endswith(b"/")
    if dir_only:
        line = line[:-1]
    if not line:
        return None
    anchored = b"/" in line
    if line.startswith(b"/"):
        line = line[1:]
    try:
        body = _translate(line, pathname=anchored)
    except _Unmatchable:
        return None
    regex = prefix + body if anchored else prefix + "(?:.*/)?" + body
    return GitignoreRule(regex=regex, negated=negated, dir_only=dir_only, source=source)


def _trim_trailing_spaces(line: bytes) -> bytes:
    # Spaces at the end go unless escaped with a backslash (git's trim_trailing_spaces).
    last_space = None
    i = 0
    while i < len(line):
        c = line[i]
        if c == 0x20:
            if last_space is None:
                last_space = i
        elif c == 0x5C:
            i += 1
            if i >= len(line):
                return line
            last_space = None
        else:
            last_space = None
        i += 1
    return line if last_space is None else line[:last_space]


def _translate(pat: bytes, *, pathname: bool) -> str:
    """Regex source (for a latin-1 view of bytes) matching what wildmatch matches."""
    out: list[str] = []
    n = len(pat)
    # git compares the literal prefix before the first special character itself and hands
    # only the rest to wildmatch, so a ``**`` right after that prefix counts as leading.
    first_special = next((i for i, c in enumerate(pat) if c in _SPECIAL), n)
    i = 0
    while i < n:
        c = pat[i]
        if c == 0x2A:  # '*'
            j = i
            while j < n and pat[j] == 0x2A:
                j += 1
            if j - i >= 2 and _starstar_spans_dirs(pat, i, j, pathname, first_special):
                if j == n:
                    out.append(".*")
                elif pat[j] == _SLASH:
                    out.append("(?:.*/)?")
                    j += 1
                else:  # followed by an escaped slash: no zero-directory shortcut
                    out.append(".*")
            else:
                out.append("[^/]*")
            i = j
        elif c == 0x3F:  # '?'
            out.append("[^/]")
            i += 1
        elif c == 0x5B:  # '['
            cls, i = _translate_class(pat, i)
            out.append(cls)
        elif c == 0x5C:  # '\\'
            if i + 1 >= n:
                raise _Unmatchable
            out.append(re.escape(chr(pat[i + 1])))
            i += 2
        else:
            out.append(re.escape(chr(c)))
            i += 1
    return "".join(out)


def _starstar_spans_dirs(pat: bytes, i: int, j: int, pathname: bool, first_special: int) -> bool:
    if not pathname:
        return False
    before_ok = i == 0 or pat[i - 1] == _SLASH or i == first_special
    after_ok = j == len(pat) or pat[j] == _SLASH or pat[j : j + 2] == b"\\/"
    return before_ok and after_ok


def _translate_class(pat: bytes, start: int) -> tuple[str, int]:
    """Translate ``[...]`` at ``start``; returns the regex and the index after ``]``."""
    n = len(pat)
    i = start + 1
    if i >= n:
        raise _Unmatchable
    negated = pat[i] in (0x21, 0x5E)  # '!' or '^'
    if negated:
        i += 1
    members: set[int] = set()
    prev: int | None = None
    first = True
    while True:
        if i >= n:
            raise _Unmatchable
        c = pat[i]
        if c == 0x5D and not first:  # ']'
            break
        first = False
        if c == 0x5C:  # escaped member
            i += 1
            if i >= n:
                raise _Unmatchable
            c = pat[i]
            members.add(c)
            prev = c
        elif c == 0x2D and prev is not None and i + 1 < n and pat[i + 1] != 0x5D:  # range
            i += 1
            hi = pat[i]
            if hi == 0x5C:
                i += 1
                if i >= n:
                    raise _Unmatchable
                hi = pat[i]
            members.update(range(prev, hi + 1))
            prev = None
        elif c == 0x5B and i + 1 < n and pat[i + 1] == 0x3A:  # '[:'
            end = pat.find(b"]", i + 2)
            if end < 0:
                raise _Unmatchable
            if end - 1 < i + 2 or pat[end - 1] != 0x3A:
                # No ':]': the '[' is an ordinary member.
                members.add(c)
                prev = c
            else:
                name = pat[i + 2 : end - 1]
                if name not in _POSIX_CLASSES:
                    raise _Unmatchable
                members.update(_POSIX_CLASSES[name])
                prev = None
                i = end
        else:
            members.add(c)
            prev = c
        i += 1
    allowed = (set(range(256)) - members) if negated else members
    allowed.discard(_SLASH)
    return _byte_class(allowed), i + 1


def _byte_class(allowed: set[int]) -> str:
    if not allowed:
        return _NEVER
    parts = []
    values = sorted(allowed)
    run_start = prev = values[0]
    for v in [*values[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        lo, hi = f"\\x{run_start:02x}", f"\\x{prev:02x}"
        parts.append(lo if run_start == prev else f"{lo}-{hi}")
        if v is not None:
            run_start = prev = v
    return "[" + "".join(parts) + "]"
