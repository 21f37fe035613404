"""Ignore rules in force in one directory: the stack of ignore files above it.

Precedence is git's, lowest first: ``.git/info/exclude``, then each directory's
``.gitignore`` from the top down (a deeper file beats a shallower one), and within a file the
last matching line wins. ``.ignore`` files (ripgrep's convention, which git does not read)
rank above all of those, among themselves as ``.gitignore`` files do: ripgrep's ``ignore``
crate asks the ``.ignore`` files first, the deepest first, and the ``.gitignore`` files only
when none of them matches (``Ignore::matched_ignore``), so a root ``.ignore``'s ``*.txt``
leaves out ``sub/a.txt`` whatever ``sub/.gitignore`` re-includes.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import re2

from workspace_tools.workspace._gitignore import GitignoreRule, parse_gitignore

IGNORE_FILE_NAMES = (".gitignore", ".ignore")

MAX_IGNORE_BYTES = 1 << 20
"""Most bytes of one ignore file read (git reads up to 100 MB; a real one is kilobytes)."""
MAX_IGNORE_PATTERNS = 10_000
"""Most pattern lines of one ignore file applied: each costs every path a match."""
MAX_PATTERN_BYTES = 4096
"""A pattern line longer than this (``PATH_MAX``) is not applied."""


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

    @classmethod
    def at(cls, path: str, dir_fd: int, name: str | None) -> FileStamp:
        """The stamp of ``path``, found as ``name`` in the directory ``dir_fd`` (never
        following a link), or of that directory itself when ``name`` is ``None``."""
        return cls(path, stat_at(dir_fd, name))

    def current(self) -> bool:
        """Whether the file still has the stamp taken earlier."""
        return FileStamp.take(self.path, follow=self.follow).stamp == self.stamp


def stat_at(dir_fd: int, name: str | None) -> tuple[int, int, int, int] | None:
    """What a :class:`FileStamp` holds of ``name`` in the directory ``dir_fd`` (a link's
    own stat), or of the directory itself when ``name`` is ``None``; ``None`` when absent."""
    try:
        st = (
            os.fstat(dir_fd)
            if name is None
            else os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        )
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)


def read_ignore_file(
    path: str, *, follow: bool = False, dir_fd: int | None = None
) -> tuple[bytes, bool] | None:
    """The bytes of an ignore file that are applied, and whether the file had more: the
    first :data:`MAX_IGNORE_BYTES` at most, cut after the last whole line, and within them
    the first :data:`MAX_IGNORE_PATTERNS` pattern lines, with any line over
    :data:`MAX_PATTERN_BYTES` left out. ``None`` when the file is absent, not a regular
    file or unreadable. Without ``follow`` a symlink counts as absent: git does not follow
    in-tree ignore files, but it does follow its exclude files.

    git itself reads the whole file; a hostile or generated one of megabytes would cost
    every walk seconds and gigabytes (each pattern is matched against each path), so the
    rest is treated as not read and the discovery tools say so (:func:`cut_note`). With
    ``dir_fd``, ``path`` is a name in that directory."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.EMFILE, errno.ENFILE):
            raise  # out of fds says nothing of the file: its rules must not go missing
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks = []
        size = 0
        while size <= MAX_IGNORE_BYTES and (chunk := os.read(fd, MAX_IGNORE_BYTES + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return _applied(b"".join(chunks))


def _applied(data: bytes) -> tuple[bytes, bool]:
    """``data`` cut to what is applied (see :func:`read_ignore_file`), and whether any was
    left out."""
    cut = len(data) > MAX_IGNORE_BYTES
    if cut:
        data = data[: data.rfind(b"\n", 0, MAX_IGNORE_BYTES) + 1]
    lines = data.split(b"\n")
    kept: list[bytes] = []
    patterns = 0
    for line in lines:
        if len(line) > MAX_PATTERN_BYTES:
            cut = True
            continue
        if line.strip() and not line.startswith(b"#"):
            if patterns == MAX_IGNORE_PATTERNS:
                cut = True
                break
            patterns += 1
        kept.append(line)
    if not cut:
        return data, False
    return b"\n".join(kept), True


def cut_note(paths: list[str]) -> str:
    """The note a discovery tool adds when ignore files were too big to apply whole."""
    names = ", ".join(paths[:5]) + (f" and {len(paths) - 5:,} more" if len(paths) > 5 else "")
    return (
        f"(note: {names}: ignore file too big; only its first {MAX_IGNORE_PATTERNS:,} "
        f"patterns within {MAX_IGNORE_BYTES >> 20} MiB were applied, the rest was not read)"
    )


@dataclass(frozen=True)
class IgnoreRules:
    """An ordered stack of gitignore rules, lowest precedence first, compiled for matching.

    Paths given to :meth:`ignored` are bytes, ``/``-separated, relative to the same top the
    rules' bases are relative to, without a trailing slash.

    The rules are matched by RE2, in time linear in the path whatever the patterns: a
    repository's ``.gitignore`` is hostile input, and patterns such as ``**/**/**/…/x`` or
    ``*a*a*a*a*b`` would make a backtracking engine take years over one deep path. Each
    process compiles its own programs (a fork while another thread matched could leave
    the child a program whose cache lock is held).
    """

    rules: tuple[GitignoreRule, ...] = ()
    # [(pid, file matchers, directory matchers)], compiled on first use in each process.
    _compiled: list[tuple[int, list[_Matcher], list[_Matcher]]] = field(
        default_factory=list, init=False, compare=False, repr=False
    )

    def __bool__(self) -> bool:
        return bool(self.rules)

    def extend(self, rules: list[GitignoreRule]) -> IgnoreRules:
        """These rules followed by ``rules`` (which then take precedence), the ``ranked``
        ones (``.ignore`` files') kept above all others."""
        if not rules:
            return self
        ours, theirs = self.rules, tuple(rules)
        return IgnoreRules(
            (
                *(r for r in ours if not r.ranked),
                *(r for r in theirs if not r.ranked),
                *(r for r in ours if r.ranked),
                *(r for r in theirs if r.ranked),
            )
        )

    def ignored(self, path: bytes, is_dir: bool) -> bool:
        """Whether the last rule matching ``path`` ignores it (``False`` if none matches)."""
        compiled = self._compiled
        pid = os.getpid()
        if not compiled or compiled[0][0] != pid:
            file_rules = [r for r in self.rules if not r.dir_only]
            compiled[:] = [(pid, _combine(file_rules), _combine(list(self.rules)))]
        for rx in compiled[0][2 if is_dir else 1]:
            m = rx.fullmatch(path)
            if m is not None:
                group = m.lastgroup
                if isinstance(group, bytes):
                    group = group.decode("ascii")
                return group is None or not group.startswith("n")
        return False


class _Matcher(Protocol):
    def fullmatch(self, path: bytes) -> Any: ...


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.encoding = re2.Options.Encoding.LATIN1  # bytes, as git matches them
_RE2_OPTIONS.dot_nl = True
_RE2_OPTIONS.log_errors = False
_RE2_OPTIONS.max_mem = 64 << 20


def _combine(rules: list[GitignoreRule]) -> list[_Matcher]:
    """Programs for ``rules``, to try in order (the first that matches decides).

    In each, one alternation, highest precedence first: the engine returns the first
    alternative that matches (RE2 keeps Perl's leftmost-first choice), which is then git's
    "last matching pattern". A named group per rule says whether the winner negates
    ("n...") or ignores ("i..."). Rules too many for one program are split over several.
    """
    parts = [
        f"(?P<{'n' if rule.negated else 'i'}{index}>{rule.regex})"
        for index, rule in enumerate(reversed(rules))
    ]
    return _compile(parts)


# Rules per program: RE2 compiles an alternation of thousands slowly (a huge .gitignore).
_RULES_PER_PROGRAM = 256


def _compile(parts: list[str]) -> list[_Matcher]:
    if len(parts) > _RULES_PER_PROGRAM:
        step = _RULES_PER_PROGRAM
        return [m for i in range(0, len(parts), step) for m in _compile(parts[i : i + step])]
    if not parts:
        return []
    source = "|".join(parts).encode("latin-1")
    try:
        return [re2.compile(source, _RE2_OPTIONS)]
    except re2.error:
        if len(parts) == 1:
            # One pattern too big for RE2's memory: Python's engine (a pattern that long
            # is not one git users write).
            return [re.compile(source, re.DOTALL)]
    half = len(parts) // 2
    return _compile(parts[:half]) + _compile(parts[half:])


def ranked(name: str, rules: list[GitignoreRule]) -> list[GitignoreRule]:
    """``rules`` of the ignore file ``name`` (one of :data:`IGNORE_FILE_NAMES`), marked
    ``ranked`` when it is an ``.ignore`` file."""
    if name != ".ignore":
        return rules
    return [replace(rule, ranked=True) for rule in rules]


def rules_in_directory(
    abs_dir: str, base: str, cut: list[str] | None = None, *, dir_fd: int | None = None
) -> tuple[list[GitignoreRule], list[FileStamp]]:
    """The rules of the ignore files directly in ``abs_dir`` (``.gitignore`` then ``.ignore``)
    and stamps of those files (absent ones too), for cache validation. The path of a file
    not applied whole (:func:`read_ignore_file`) is appended to ``cut``.

    Args:
        abs_dir: the directory's absolute path.
        base: the directory relative to the rules' top, ``""`` for the top.
        dir_fd: an fd of that directory: the files are looked up in it by name, not by
            their whole path (which the kernel would walk again from ``/``).
    """
    rules: list[GitignoreRule] = []
    stamps: list[FileStamp] = []
    for name in IGNORE_FILE_NAMES:
        path = os.path.join(abs_dir, name)
        stamp = FileStamp.take(path) if dir_fd is None else FileStamp.at(path, dir_fd, name)
        stamps.append(stamp)
        if stamp.stamp is None:
            continue
        read = read_ignore_file(path) if dir_fd is None else read_ignore_file(name, dir_fd=dir_fd)
        if read is not None:
            rules.extend(ranked(name, parse_gitignore(read[0], base)))
            if read[1] and cut is not None:
                cut.append(path)
    return rules, stamps
