"""The existing path a model most likely meant when the one it named does not exist.

Models name paths the way they saw them elsewhere: quoted, with a ``:line`` suffix from a
compiler message or grep output, as a ``file://`` URL, with Windows separators, or in the
wrong case (a habit of case-insensitive file systems), or with its accents composed where
the name on disk writes them as combining characters (NFD, as macOS does: the two look the
same in a listing). A bare "not found" costs a turn of guessing; the error names the file
instead. A suggestion is only ever an existing path inside the root, found without a walk
of the tree: the cleaned-up path itself, else the one entry per directory level that equals
it ignoring case and Unicode normalization or, where none does, the one entry a single typo
away (a character added, dropped or changed, or two neighbours swapped, ignoring case:
``scr`` for ``src``, ``util.py`` for ``utils.py``). Two candidates at a level, or a name
shorter than :data:`_MIN_TYPO_LENGTH`, give no suggestion.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import unicodedata

from workspace_tools._errors import ToolError
from workspace_tools.workspace._paths import resolve_path

# ``path:12`` and ``path:12:5``, as compilers, linters and grep name a place in a file.
_LINE_SUFFIX = re.compile(r"(?::\d+){1,2}$")

# Directories are listed as os.scandir(path) lists them (links followed: what is suggested
# is checked against the root by resolve_path).
_LIST_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC

# A directory with more entries than this is not scanned for a case-insensitive twin.
_MAX_ENTRIES = 10_000

#: Names shorter than this get no typo suggestion: one edit turns "a" into any letter.
_MIN_TYPO_LENGTH = 3


def near_miss(root: str, path: str) -> str | None:
    """The relative path of an existing file or directory that ``path`` (which does not
    exist) most likely means, or ``None``. ``root`` is the real workspace root."""
    cleaned = path.strip().strip("'\"`").removeprefix("file://").replace("\\", "/")
    for candidate in dict.fromkeys((cleaned, _LINE_SUFFIX.sub("", cleaned))):
        if not candidate:
            continue
        if candidate != path:
            found = _existing(root, candidate)
            if found is not None:
                return found
        found = _respelled(root, candidate)
        if found is not None:
            return found
    return None


def not_found_hint(root: str, path: str) -> str:
    """``"; did you mean 'x'?"`` naming :func:`near_miss`'s path, or ``""``."""
    found = near_miss(root, path)
    return "" if found is None else f"; did you mean {suggested(found)}?"


def suggested(found: str) -> str:
    """``found`` as a suggestion quotes it: ``'src/App.py'``; a name that is not
    NFC-normalized as a JSON string with its combining characters escaped, saying so, since
    quoted as it is it reads as the name the model already sent."""
    if unicodedata.is_normalized("NFC", found):
        return repr(found)
    quoted = "".join(
        f"\\u{ord(c):04x}" if unicodedata.combining(c) else c
        for c in json.dumps(found, ensure_ascii=False)
    )
    return (
        f"{quoted} (a JSON string: the name is NFD-normalized, its accents separate "
        "combining characters)"
    )


def _existing(root: str, candidate: str) -> str | None:
    try:
        resolved = resolve_path(root, candidate)
    except ToolError:
        return None
    return resolved.rel if os.path.exists(resolved.real) else None


def _respelled(root: str, candidate: str) -> str | None:
    try:
        rel = resolve_path(root, candidate).rel
    except ToolError:
        return None
    if rel == ".":
        return None
    parts: list[str] = []
    # Each level listed through an fd of the one above (names looked up one at a time, as
    # the whole path would make the kernel walk every level again: n² for n levels).
    try:
        here = os.open(root, _LIST_FLAGS)
    except OSError:
        return None
    try:
        wanted = rel.split("/")
        for name in wanted:
            try:
                with os.scandir(here) as entries:
                    names = [e.name for e in itertools.islice(entries, _MAX_ENTRIES + 1)]
            except OSError:
                return None
            if name not in names:
                if len(names) > _MAX_ENTRIES:
                    return None
                folded = _fold(name)
                twins = [n for n in names if _fold(n) == folded]
                if not twins and len(name) >= _MIN_TYPO_LENGTH:
                    twins = [n for n in names if _one_typo_apart(folded, _fold(n))]
                if len(twins) != 1:
                    return None
                name = twins[0]
            parts.append(name)
            if len(parts) < len(wanted):
                try:
                    child = os.open(name, _LIST_FLAGS, dir_fd=here)
                except OSError:
                    return None
                os.close(here)
                here = child
    finally:
        os.close(here)
    found = "/".join(parts)
    return _existing(root, found) if found != rel else None


def _fold(name: str) -> str:
    """``name`` as the comparison sees it: case folded, accents composed (NFC)."""
    return unicodedata.normalize("NFC", name.casefold())


def _one_typo_apart(a: str, b: str) -> bool:
    """Whether ``b`` is ``a`` with one character added, dropped or changed, or two
    neighbouring characters swapped (an optimal string alignment distance of 1)."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    if len(a) == len(b):
        if a[start + 1 :] == b[start + 1 :]:
            return True  # one changed
        return (
            a[start : start + 2] == b[start : start + 2][::-1] and a[start + 2 :] == b[start + 2 :]
        )  # two neighbours swapped
    shorter, longer = (a, b) if len(a) < len(b) else (b, a)
    return shorter[start:] == longer[start + 1 :]  # one added or dropped
