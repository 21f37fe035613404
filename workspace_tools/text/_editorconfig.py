""".editorconfig ``end_of_line`` for new files (https://spec.editorconfig.org).

``.editorconfig`` files are read from the file's directory up to the workspace root (never
above it), stopping early at one that says ``root = true``. A section glob without ``/``
matches the file name at any depth; one with ``/`` matches the path relative to the
``.editorconfig``'s directory. Later sections override earlier ones, nearer files farther
ones. Glob syntax: ``*``, ``**``, ``?``, ``[seq]``, ``[!seq]``, ``{a,b}``, ``{n1..n2}``.
"""

from __future__ import annotations

import configparser
import os
import re
import stat
from pathlib import Path

_NEWLINES = {"lf": "\n", "crlf": "\r\n"}


def new_file_newline(root: Path, real: Path) -> str:
    """The newline a new file at ``real`` gets: ``.editorconfig``'s ``end_of_line`` when it
    is ``lf`` or ``crlf``, else LF (``cr`` is not supported and falls back to LF)."""
    value = _end_of_line(root, real)
    return _NEWLINES.get(value or "", "\n")


def _end_of_line(root: Path, real: Path) -> str | None:
    root_text, real_text = str(root), str(real)
    prefix = root_text.rstrip("/") + "/"
    if not real_text.startswith(prefix):
        return None
    # The directories from the root down to the file's, walked by fd one name at a time:
    # opening each .editorconfig by its whole path would make the kernel walk every
    # ancestor again for each level (a path n levels deep costing n² lookups).
    names = real_text[len(prefix) :].split("/")[:-1]
    configs: list[tuple[int, configparser.RawConfigParser]] = []  # (where rel starts, parser)
    start = len(prefix)
    fd = os.open(root_text, _DIR_FLAGS)
    try:
        for depth in range(len(names) + 1):
            parser = _load(fd)
            if parser is not None:
                if parser.defaults().get("root", "").lower() == "true":
                    configs.clear()  # nothing above a root = true file applies
                configs.append((start, parser))
            if depth == len(names):
                break
            try:
                child = os.open(names[depth], _DIR_FLAGS, dir_fd=fd)
            except OSError:
                break  # not made yet (or not a directory): no .editorconfig below
            os.close(fd)
            fd = child
            start += len(names[depth]) + 1
    finally:
        os.close(fd)
    # Nearest file wins: applied from the farthest (from the last root=true) to the nearest.
    found: str | None = None
    for start, parser in configs:
        rel = real_text[start:]
        for section in parser.sections():
            if _glob_matches(section, rel):
                value = parser.get(section, "end_of_line", fallback=None)
                if value is not None:
                    found = value.strip().lower()
    return found


_DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

# An .editorconfig is a few lines; a bigger one is read this far (a file a command grows
# without end must not hold up a write).
_MAX_EDITORCONFIG = 1 << 20


def _load(dir_fd: int) -> configparser.RawConfigParser | None:
    """The ``.editorconfig`` in the directory ``dir_fd``, parsed; ``None`` when absent or
    unreadable."""
    try:
        # Non-blocking, and regular files only: a FIFO named .editorconfig would block.
        fd = os.open(".editorconfig", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as handle:
            text = handle.read(_MAX_EDITORCONFIG).decode("utf-8", errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)
    parser = configparser.RawConfigParser(
        delimiters=("=",), comment_prefixes=("#", ";"), inline_comment_prefixes=None, strict=False
    )
    parser.optionxform = str.lower  # type: ignore[assignment,method-assign]
    try:
        # Properties before the first section (``root = true``) go to the defaults section.
        parser.read_string("[DEFAULT]\n" + text)
    except configparser.Error:
        return None
    return parser


def _glob_matches(glob: str, rel: str) -> bool:
    glob = glob.removeprefix("/") if "/" in glob else "**/" + glob
    regex, ranges = _translate(glob)
    match = re.fullmatch(regex, rel)
    return match is not None and all(lo <= int(match.group(g)) <= hi for g, lo, hi in ranges)


def _translate(glob: str) -> tuple[str, list[tuple[str, int, int]]]:
    """A regex for an EditorConfig glob and the numeric ranges to check on its groups."""
    out: list[str] = []
    ranges: list[tuple[str, int, int]] = []
    depth = 0
    i = 0
    while i < len(glob):
        ch = glob[i]
        if ch == "\\" and i + 1 < len(glob):
            out.append(re.escape(glob[i + 1]))
            i += 2
            continue
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            end = glob.find("]", i + 1)
            if end == -1:
                out.append(re.escape(ch))
            else:
                body = glob[i + 1 : end]
                negate = body.startswith("!")
                body = body[1:] if negate else body
                out.append(("[^" if negate else "[") + body.replace("\\", "\\\\") + "]")
                i = end + 1
                continue
        elif ch == "{":
            end = glob.find("}", i + 1)
            inner = glob[i + 1 : end] if end != -1 else ""
            numeric = re.fullmatch(r"([+-]?\d+)\.\.([+-]?\d+)", inner)
            if numeric:
                name = f"n{len(ranges)}"
                lo, hi = sorted((int(numeric.group(1)), int(numeric.group(2))))
                ranges.append((name, lo, hi))
                out.append(f"(?P<{name}>[+-]?\\d+)")
                i = end + 1
                continue
            if end == -1 or "," not in glob[i + 1 : end]:
                out.append(re.escape(ch))
            else:
                out.append("(?:")
                depth += 1
        elif ch == "," and depth:
            out.append("|")
        elif ch == "}" and depth:
            out.append(")")
            depth -= 1
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out), ranges
