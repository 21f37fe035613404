"""Ignore rules in force in one directory: the stack of ignore files above it.

Precedence is git's, lowest first: ``.git/info/exclude``, then each directory's
``.gitignore`` from the top down (a deeper file beats a shallower one), and within a file the
last matching line wins. ``.ignore`` files (ripgrep's convention, which git does not read)
rank just above the ``.gitignore`` of the same directory.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field

from workspace_tools.workspace._gitignore import GitignoreRule, parse_gitignore

IGNORE_FILE_NAMES = (".gitignore", ".ignore")

# An ignore file bigger than this is skipped, as git skips one over 100 MB.
_MAX_IGNORE_FILE = 100 * 1024 * 1024


@dataclass(frozen=True)
class FileStamp:
    """What identifies a file's content for cache validation: ``os.stat`` fields, or absent."""

    path: str
    stamp: tuple[int, int, int, int] | None

    follow: bool = False

    @classmethod
    def take(cls, path: str, *, follow: bool = False) -> FileStamp:
        """Stat ``path`` (following a final symlink only with ``follow``); a missing file
        has ``None``."""
        try:
            st = os.stat(path) if follow else os.lstat(path)
        except OSError:
            return cls(path, None, follow)
        return cls(path, (st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns), follow)

    def current(self) -> bool:
        """Whether the file still has the stamp taken earlier."""
        return FileStamp.take(self.path, follow=self.follow).stamp == self.stamp


def read_ignore_file(path: str, *, follow: bool = False) -> bytes | None:
    """The bytes of an ignore file, or ``None`` when it is absent, not a regular file,
    unreadable or over 100 MB. Without ``follow`` a symlink counts as absent: git does not
    follow in-tree ignore files, but it does follow its exclude files."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_IGNORE_FILE:
            return None
        chunks = []
        while chunk := os.read(fd, max(st.st_size, 65536)):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


@dataclass(frozen=True)
class IgnoreRules:
    """An ordered stack of gitignore rules, lowest precedence first, compiled for matching.

    Paths given to :meth:`ignored` are bytes, ``/``-separated, relative to the same top the
    rules' bases are relative to, without a trailing slash.
    """

    rules: tuple[GitignoreRule, ...] = ()
    _file_rx: re.Pattern[bytes] | None = field(default=None, init=False, compare=False)
    _dir_rx: re.Pattern[bytes] | None = field(default=None, init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_file_rx", _combine([r for r in self.rules if not r.dir_only]))
        object.__setattr__(self, "_dir_rx", _combine(list(self.rules)))

    def __bool__(self) -> bool:
        return bool(self.rules)

    def extend(self, rules: list[GitignoreRule]) -> IgnoreRules:
        """These rules followed by ``rules`` (which then take precedence)."""
        return IgnoreRules((*self.rules, *rules)) if rules else self

    def ignored(self, path: bytes, is_dir: bool) -> bool:
        """Whether the last rule matching ``path`` ignores it (``False`` if none matches)."""
        rx = self._dir_rx if is_dir else self._file_rx
        if rx is None:
            return False
        m = rx.fullmatch(path)
        if m is None:
            return False
        return m.lastgroup is None or not m.lastgroup.startswith("n")


def _combine(rules: list[GitignoreRule]) -> re.Pattern[bytes] | None:
    # One alternation, highest precedence first: the regex engine returns the first
    # alternative that matches, which is then git's "last matching pattern". A named group
    # per rule says whether the winner negates ("n...") or ignores ("i...").
    if not rules:
        return None
    parts = [
        f"(?P<{'n' if rule.negated else 'i'}{index}>{rule.regex})"
        for index, rule in enumerate(reversed(rules))
    ]
    return re.compile("|".join(parts).encode("latin-1"), re.DOTALL)


def rules_in_directory(abs_dir: str, base: str) -> tuple[list[GitignoreRule], list[FileStamp]]:
    """The rules of the ignore files directly in ``abs_dir`` (``.gitignore`` then ``.ignore``)
    and stamps of those files (absent ones too), for cache validation.

    Args:
        abs_dir: the directory's absolute path.
        base: the directory relative to the rules' top, ``""`` for the top.
    """
    rules: list[GitignoreRule] = []
    stamps: list[FileStamp] = []
    for name in IGNORE_FILE_NAMES:
        path = os.path.join(abs_dir, name)
        stamp = FileStamp.take(path)
        stamps.append(stamp)
        if stamp.stamp is None:
            continue
        data = read_ignore_file(path)
        if data is not None:
            rules.extend(parse_gitignore(data, base))
    return rules, stamps
