"""The one walk behind ``list_files``, ``glob`` and ``grep``: same tree, same file set.

What a walk yields, as git and ripgrep do it:

- every entry below the start directory except ``.git`` and the temp files of this
  package's writes (:mod:`._tempfiles`); hidden files are included;
- entries an ignore rule matches are skipped and counted, and an ignored directory is not
  entered, unless it holds files git tracks (then only those are yielded, as
  ``git ls-files --cached --others --exclude-standard`` lists them);
- a symlink is an entry of type ``symlink`` and is never followed, so a link loop or a link
  out of the root cannot lead the walk anywhere; sockets, FIFOs and devices are left out.

The walk goes by directory fd, never by path: the start directory is opened from the root
one component at a time and each subdirectory relative to its parent's fd, all with
``O_NOFOLLOW | O_DIRECTORY``, and entries are typed by ``fstatat`` relative to that fd. A
directory swapped for a link to outside during the walk fails to open and is skipped: no
outside name is ever listed. The fds are :class:`~._files.DirFds`'s: a bounded number of
levels, however deep and branching the tree (a tree whose levels outnumber the fd limit is
walked whole); a walk that runs out of fds anyway raises rather than leave entries out.

Each :class:`~._workspace.Workspace` owns one :class:`Walker` (``workspace.walker``), which
list_files, glob, grep and the session's fingerprints share. Walks are cached per walker. A
cached walk is reused only while every directory it listed and every ignore file and index
it read keeps its stat, and while the root belongs to the same repository (a stat of
``.git`` in each directory from the root up to the repository's top, or to ``/``); a
directory whose timestamp is too close to the walk (the file system's clock may not have
ticked since) makes the walk uncacheable, so a cache hit never returns a stale file set.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property
from time import time_ns
from typing import Literal, NamedTuple

from workspace_tools.workspace._files import OUT_OF_FDS, DirFds
from workspace_tools.workspace._git import (
    GitRepo,
    GlobalExcludes,
    TrackedFiles,
    TrackedSet,
    find_repo,
)
from workspace_tools.workspace._gitignore import GitignoreRule, parse_gitignore
from workspace_tools.workspace._ignore import (
    IGNORE_FILE_NAMES,
    FileStamp,
    IgnoreRules,
    ranked,
    read_ignore_file,
    rules_in_directory,
    stat_at,
)
from workspace_tools.workspace._tempfiles import is_temp_name

EntryType = Literal["file", "directory", "symlink"]
FILE: EntryType = "file"
DIRECTORY: EntryType = "directory"
SYMLINK: EntryType = "symlink"

# Timestamps this close to the walk's start may not yet have ticked for a change made just
# after the listing (coarse file-system clocks); such a walk is not reused.
_RACY_NS = 2_000_000_000
# One walker serves the three discovery tools and the fingerprints (eight walks each before).
_CACHE_SIZE = 24


class Entry(NamedTuple):
    """One walked entry: ``rel`` (relative to the workspace root, ``/``-separated) and its
    ``type`` (a symlink is never reported as what it points to)."""

    rel: str
    type: EntryType


class Walk:
    """The result of one walk.

    Attributes:
        entries: every entry yielded, sorted by ``rel`` (plain string order).
        ignored: how many entries ignore rules skipped (an ignored directory counts once).
        unreadable: directories below the start that this process may not read (their
            entries are missing from ``entries``), sorted.
        skipped: the entries ignore rules skipped (an ignored directory once, not what is
            in it), sorted: what a checkpoint lists by its stat without storing it.
        cut_ignore_files: ignore files too big to apply whole (relative to the root, or
            absolute outside it), sorted: only their head was applied
            (:func:`~._ignore.read_ignore_file`).
    """

    def __init__(
        self,
        entries: list[Entry],
        ignored: int,
        unreadable: list[str],
        skipped: list[Entry] | None = None,
        cut_ignore_files: list[str] | None = None,
    ) -> None:
        self.entries = entries
        self.ignored = ignored
        self.unreadable = unreadable
        self.skipped = skipped or []
        self.cut_ignore_files = cut_ignore_files or []

    @cached_property
    def files(self) -> list[str]:
        """Paths of the regular files among the entries (no symlinks), sorted."""
        return [rel for rel, kind in self.entries if kind is FILE]

    @cached_property
    def non_directories(self) -> list[str]:
        """Paths of the files and symlinks (what git lists), sorted."""
        return [rel for rel, kind in self.entries if kind is not DIRECTORY]


_Stamp = tuple[int, int, int, int] | None
_PATH_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _ancestors(
    top: str, parts: tuple[str, ...], rules: list[GitignoreRule] | None, cut: list[str]
) -> tuple[_Stamp, ...]:
    """Stamps of the directories ``top``, ``top/parts[0]``, ... down to the parent of
    ``top/parts`` and of the ignore files in each (three a level), walked from ``top`` by
    fd one name at a time (never by a whole path, which the kernel would walk again from
    ``/`` for each level: a start directory ``n`` levels deep would cost ``n²`` lookups);
    with ``rules``, the rules of those ignore files are appended to it (files not applied
    whole to ``cut``). A directory that cannot be opened ends the list."""
    members: list[_Stamp] = []
    try:
        fd = os.open(top, _PATH_FLAGS)
    except OSError:
        return ()
    try:
        for depth in range(len(parts)):
            members.append(stat_at(fd, None))
            for name in IGNORE_FILE_NAMES:
                stamp = stat_at(fd, name)
                members.append(stamp)
                if stamp is None or rules is None:
                    continue
                read = read_ignore_file(name, dir_fd=fd)
                if read is not None:
                    rules.extend(ranked(name, parse_gitignore(read[0], "/".join(parts[:depth]))))
                    if read[1]:
                        cut.append(os.path.join(top, *parts[:depth], name))
            if depth + 1 == len(parts):
                break
            try:
                child = os.open(parts[depth], _PATH_FLAGS, dir_fd=fd)
            except OSError:
                break
            os.close(fd)
            fd = child
    finally:
        os.close(fd)
    return tuple(members)


@dataclass(frozen=True)
class _AncestorStamp:
    """The stamps of the start directory's ancestors and their ignore files
    (:func:`_ancestors`), validated by one walk down from ``top``."""

    top: str
    parts: tuple[str, ...]
    members: tuple[_Stamp, ...]

    @property
    def changed_ns(self) -> int | None:
        """When a member last changed (its newest mtime or ctime), what decides whether a
        walk is cacheable; ``None`` when none is there."""
        return max((_changed_ns(m) for m in self.members if m is not None), default=None)

    def current(self) -> bool:
        """Whether every member still has its stamp."""
        return _ancestors(self.top, self.parts, None, []) == self.members


def _dot_git_stamps(levels: tuple[str, ...]) -> tuple[tuple[int, ...] | None, ...]:
    """The stat (followed, as discovery's ``isdir``/``isfile`` follow it) of ``.git`` in
    each of ``levels``, ``None`` where there is none: a ``.git`` made, removed, replaced,
    or turned from a directory into a gitdir file (or its text changed) moves its stamp."""
    stamps: list[tuple[int, ...] | None] = []
    for level in levels:
        try:
            st = os.stat(os.path.join(level, ".git"))
        except OSError:
            stamps.append(None)
            continue
        stamps.append(
            (st.st_mode, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        )
    return tuple(stamps)


@dataclass(frozen=True)
class _RepoStamp:
    """Which repository the root belongs to (:func:`~._git.find_repo`), validated by a
    stat of ``.git`` in each directory discovery looks in: from the root up to the top of
    the repository found, or up to ``/`` when none was. A ``git init`` in a parent, a
    parent's ``.git`` removed or turned into a gitdir file (a worktree's) moves one of
    them; what lies above the repository found cannot change which one it is."""

    levels: tuple[str, ...]
    members: tuple[tuple[int, ...] | None, ...]

    @classmethod
    def take(cls, root: str, repo: GitRepo | None) -> _RepoStamp:
        levels = [root]
        while repo is None or levels[-1] != repo.top:
            parent = os.path.dirname(levels[-1])
            if parent == levels[-1]:
                break
            levels.append(parent)
        found = tuple(levels)
        return cls(found, _dot_git_stamps(found))

    @property
    def changed_ns(self) -> int | None:
        """When a ``.git`` found last changed (for :meth:`_Scan.cacheable`)."""
        return max((max(m[4], m[5]) for m in self.members if m is not None), default=None)

    def current(self) -> bool:
        """Whether each ``.git`` is as it was (or still absent)."""
        return _dot_git_stamps(self.levels) == self.members


@dataclass
class _Cached:
    walk: Walk
    stamps: list[FileStamp | _AncestorStamp | _RepoStamp]

    def current(self) -> bool:
        # Each stamp's file looked up by name in an fd of its directory, those of the last
        # directory's ancestors kept (the stamps come in walk order): lstat of whole paths
        # would make the kernel walk every component again, n² lookups for a chain n deep.
        with DirFds("/", search_only=True) as dirs:
            for stamp in self.stamps:
                if isinstance(stamp, FileStamp) and not stamp.follow and stamp.path[:1] == "/":
                    directory, _, name = stamp.path.rpartition("/")
                    try:
                        found = stat_at(dirs.get(directory[1:]), name)
                    except OSError:
                        found = None
                    if found != stamp.stamp:
                        return False
                elif not stamp.current():
                    return False
        return True


class _Scan:
    """State of one uncached walk."""

    def __init__(
        self,
        root: str,
        repo: GitRepo | None,
        tracked: TrackedSet,
        excludes: GlobalExcludes | None,
    ) -> None:
        self.root = root
        self.repo = repo
        self.tracked = tracked
        self.excludes = excludes
        top = repo.top if repo is not None else root
        rel_root = os.path.relpath(root, top).replace(os.sep, "/")
        # Ignore rules and tracked paths are relative to the repository top.
        self.prefix = "" if rel_root == "." else rel_root + "/"
        self.top = top
        self.stamps: list[FileStamp | _AncestorStamp | _RepoStamp] = []
        self.entries: list[Entry] = []
        self.ignored = 0
        self.skipped: list[Entry] = []
        self.unreadable: list[str] = []
        self.cut: list[str] = []  # absolute paths of ignore files applied in part

    def base_rules(self, start_abs: str) -> IgnoreRules:
        """Rules in force in ``start_abs``'s parent: the global excludes file, info/exclude
        and the ancestors' ignore files."""
        rules = IgnoreRules()
        if self.repo is not None and self.excludes is not None:
            # Lowest first: the global excludes file, then the repository's own. The config
            # files that name the global one are stamped too.
            global_path, config_stamps = self.excludes.get()
            self.stamps.extend(config_stamps)
            for exclude in (global_path, self.repo.exclude_path):
                self.stamps.append(FileStamp.take(exclude, follow=True))
                read = read_ignore_file(exclude, follow=True)
                if read is not None:
                    rules = rules.extend(parse_gitignore(read[0], ""))
                    if read[1]:
                        self.cut.append(exclude)
        rel = os.path.relpath(start_abs, self.top)
        parts = () if rel == "." else tuple(rel.split(os.sep))
        found: list[GitignoreRule] = []
        members = _ancestors(self.top, parts, found, self.cut)
        self.stamps.append(_AncestorStamp(self.top, parts, members))
        return rules.extend(found)

    def _dir_rules(self, abs_dir: str, base: str, dir_fd: int) -> list[GitignoreRule]:
        found, stamps = rules_in_directory(abs_dir, base, self.cut, dir_fd=dir_fd)
        self.stamps.extend(s for s in stamps if s.stamp is not None)
        return found

    def run(self, start_abs: str, start_rel: str, recursive: bool, include_ignored: bool) -> None:
        rules = IgnoreRules() if include_ignored else self.base_rules(start_abs)
        # Depth first, each directory reached by its parent's fd (never by a path) through
        # one DirFds: a directory swapped for a symlink during the walk fails to open
        # (ELOOP/ENOTDIR) and is skipped, so nothing outside the root is listed, and the
        # fds held stay bounded (DirFds: its nearest levels, fewer under a low fd limit)
        # however deep and branching the tree; a task is a path, not an fd, so the
        # directories waiting on the stack hold none.
        stack: list[tuple[str, str, IgnoreRules, bool]] = [(start_abs, start_rel, rules, False)]
        # Tasks still on the stack below each level's directory on the current path (the
        # stack holds only children of that path's directories): a level with none left
        # is never come back to, and its fd is released once its last child is opened.
        pending: dict[int, int] = {}
        start_level = start_rel.count("/") + 1 if start_rel else 0
        tracked, prefix = self.tracked, self.prefix
        fsencode = os.fsencode
        with DirFds(self.root) as dirs:
            # The start directory's failure is the caller's to report.
            dirs.get(start_rel)
            while stack:
                d_abs, d_rel, d_rules, tracked_only = stack.pop()
                level = d_rel.count("/") + 1 if d_rel else 0
                try:
                    fd = dirs.get(d_rel)
                except PermissionError:
                    self.unreadable.append(d_rel)
                    self.stamps.append(FileStamp(d_abs, None))
                    continue
                except OSError as exc:
                    if exc.errno in OUT_OF_FDS:
                        raise  # a walk missing what it could not open is no walk
                    # Swapped for a link or file, removed, or unreadable since listed.
                    self.stamps.append(FileStamp(d_abs, None))
                    continue
                finally:
                    if level > start_level:
                        pending[level - 1] -= 1
                        if not pending[level - 1]:
                            dirs.release(level - 1)
                self.stamps.append(_fd_stamp(d_abs, fd))
                listing = _list_dir(fd)
                if listing is None:
                    self.unreadable.append(d_rel)
                    listing = []
                has_rules = any(name in IGNORE_FILE_NAMES for name, _ in listing)
                if has_rules and not include_ignored and not tracked_only:
                    d_rules = d_rules.extend(self._dir_rules(d_abs, prefix + d_rel, fd))
                lead = d_rel + "/" if d_rel else ""
                for name, kind in listing:
                    rel = lead + name
                    is_dir = kind is DIRECTORY
                    child_tracked_only = tracked_only
                    if tracked_only:
                        full = prefix + rel
                        if full not in (tracked.dirs if is_dir else tracked.files):
                            self.ignored += 1
                            self.skipped.append(Entry(rel, kind))
                            continue
                    elif d_rules and d_rules.ignored(fsencode(prefix + rel), is_dir):
                        # git lists a tracked file whatever the rules say, and the
                        # tracked files inside an ignored directory.
                        full = prefix + rel
                        if full not in tracked.files:
                            if not (is_dir and full in tracked.dirs):
                                self.ignored += 1
                                self.skipped.append(Entry(rel, kind))
                                continue
                            child_tracked_only = True
                    self.entries.append(Entry(rel, kind))
                    if is_dir and recursive:
                        stack.append((d_abs + "/" + name, rel, d_rules, child_tracked_only))
                        pending[level] = pending.get(level, 0) + 1

    def cacheable(self, started_ns: int) -> bool:
        # Modifying a directory or file sets its mtime and ctime to "now"; a stamp whose
        # both are safely before the walk therefore moves with any later change. ctime
        # counts as mtime does: a change whose mtime was then set back (tar x, rsync -a,
        # cp -p, touch -d) is as recent, and a second one within the clock's tick would
        # keep every field, the mtime set back again and the ctime of the same tick.
        limit = started_ns - _RACY_NS
        for s in self.stamps:
            changed = s.changed_ns if not isinstance(s, FileStamp) else _changed_ns(s.stamp)
            if changed is not None and changed >= limit:
                return False
        return True


def _changed_ns(stamp: _Stamp) -> int | None:
    """The newer of a stamp's mtime and ctime (see :class:`~._ignore.FileStamp`)."""
    return None if stamp is None else max(stamp[0], stamp[3])


def _fd_stamp(path: str, fd: int) -> FileStamp:
    """The stamp of the directory open as ``fd`` (what was listed), under its path (what a
    later walk validates: a swap of the path changes its stamp)."""
    st = os.fstat(fd)
    return FileStamp(path, (st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns))


def _list_dir(fd: int) -> list[tuple[str, EntryType]] | None:
    """Names and types in the directory open as ``fd``, without ``.git``, temp files of
    writes and special files; ``None`` if this process may not read it, ``[]`` if it is
    gone. Types come from the directory entry or
    ``fstatat`` relative to ``fd``, never following a symlink."""
    out: list[tuple[str, EntryType]] = []
    try:
        with os.scandir(fd) as it:
            for entry in it:
                name = entry.name
                if name == ".git" or is_temp_name(name):
                    continue
                try:
                    if entry.is_symlink():
                        out.append((name, SYMLINK))
                    elif entry.is_dir(follow_symlinks=False):
                        out.append((name, DIRECTORY))
                    elif entry.is_file(follow_symlinks=False):
                        out.append((name, FILE))
                except OSError:
                    continue
    except PermissionError:
        return None
    except OSError as exc:
        if exc.errno in OUT_OF_FDS:
            raise  # listed as empty, the walk would silently miss what is there
        return []
    return out


class Walker:
    """Walks below one workspace root, with a cache of recent walks.

    Args:
        root: the workspace root (a real, absolute path).

    Thread-safe: concurrent calls may walk at the same time; the cache is shared. A pickled
    copy starts with an empty cache.
    """

    def __init__(self, root: str) -> None:
        self._root = root
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[str, bool, bool], _Cached] = OrderedDict()
        self._repos: dict[GitRepo, tuple[TrackedFiles, GlobalExcludes]] = {}

    def fresh_lock(self) -> None:
        """In a forked child that runs no other thread: a new lock (the fork copied the
        old one in whatever state another thread held it); the cache stays."""
        self._lock = threading.Lock()

    def walk(
        self, start_abs: str, start_rel: str, *, recursive: bool, include_ignored: bool
    ) -> Walk:
        """Walk the directory ``start_abs`` (``start_rel`` relative to the root, ``""`` for
        the root itself), one level or all the way down.

        The start directory is walked even when an ignore rule matches it (it was named);
        rules from its parent directories still apply below it.
        """
        key = (start_rel, recursive, include_ignored)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None and cached.current():
            with self._lock:
                self._cache.move_to_end(key)
            return cached.walk
        started = time_ns()
        repo = find_repo(self._root)
        tracked = TrackedSet(frozenset(), frozenset())
        scan_stamps: list[FileStamp] = []
        excludes = None
        if repo is not None and not include_ignored:
            tracked_files, excludes = self._repo_state(repo)
            tracked, index_stamp = tracked_files.get()
            scan_stamps.append(index_stamp)
            scan_stamps.append(FileStamp.take(os.path.join(repo.top, ".git")))
        scan = _Scan(self._root, repo, tracked, excludes)
        # Which repository holds the root, checked first on a cache hit: a few stats.
        scan.stamps.append(_RepoStamp.take(self._root, repo))
        scan.stamps.extend(scan_stamps)
        scan.run(start_abs, start_rel, recursive, include_ignored)
        scan.entries.sort()
        scan.skipped.sort()
        cut = sorted({_shown(self._root, path) for path in scan.cut})
        result = Walk(scan.entries, scan.ignored, sorted(scan.unreadable), scan.skipped, cut)
        with self._lock:
            if scan.cacheable(started):
                self._cache[key] = _Cached(result, scan.stamps)
                self._cache.move_to_end(key)
                while len(self._cache) > _CACHE_SIZE:
                    self._cache.popitem(last=False)
            else:
                self._cache.pop(key, None)
        return result

    def global_ignore_files(self) -> list[str]:
        """The files outside the tree that decide a walk's ignore rules besides the git
        directory's: the global excludes file (``core.excludesFile`` or git's default)
        and the config files that may name it, as absolute paths (none outside a git
        repository, where the walk reads none of them). For a fingerprint of what a walk
        depends on: their stats, each followed through a symlink as git reads it."""
        repo = find_repo(self._root)
        if repo is None:
            return []
        _, excludes = self._repo_state(repo)
        path, config_stamps = excludes.get()
        return [*(stamp.path for stamp in config_stamps), path]

    def _repo_state(self, repo: GitRepo) -> tuple[TrackedFiles, GlobalExcludes]:
        # Keyed by the whole repository (top and git directory): a top whose .git became
        # a gitdir file (a worktree's) has another index and config.
        with self._lock:
            state = self._repos.get(repo)
            if state is None:
                state = self._repos[repo] = (TrackedFiles(repo), GlobalExcludes(repo))
            return state


def _shown(root: str, path: str) -> str:
    """``path`` relative to ``root`` with ``/`` separators when inside it, else as it is."""
    rel = os.path.relpath(path, root)
    return path if rel == ".." or rel.startswith(".." + os.sep) else rel.replace(os.sep, "/")
