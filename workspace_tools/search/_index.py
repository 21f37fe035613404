"""A warm index for repeated searches of one workspace: which files may hold a literal.

Agents grep the same tree dozens of times a task; on a big tree each search re-reads every
file. This index is sparse: not every trigram of every file but its words (runs of
``[A-Za-z0-9_]`` of at least three characters), the tree's distinct words in one byte
string and, per word, the files holding it. A pattern's required literal (see
``_pattern.required_literal``) can only be in a file holding each of the literal's words
inside one of its words, so a ``bytes.find`` over the distinct words and their files give
the candidates; only they are read and searched, by the normal matcher. A file the index does
not know, or knows to have changed, is always a candidate: the index only ever leaves out
files it knows cannot match.

Freshness. Checking every file's stat on each search costs about what reading it does for
small files (200,000 files: 0.45 s of ``lstat`` against 0.33 s for a whole search), so the
index learns of changes from the kernel instead: before it reads anything it puts an
inotify watch on every directory of the walk, and before each search it drains the queue.
inotify queues an event before the ``write``, ``rename``, ``truncate`` or ``unlink`` that
caused it returns, so every change finished before a search is known to it: a file named
in an event is a candidate from then on, a directory created, moved or removed makes all
files below it candidates, and a lost event (queue overflow) drops the index. Files with
more than one link are never indexed (a write through a link in an unwatched directory
reports nothing here); a file given another name in the tree after the build (a write
through it is reported under that name only) is found by the new name's link count and
is a candidate from then on (a directory that appears is watched and its files' link
counts read; a name that appeared and was unlinked again before the search, which may
have been such a link, drops the index). What inotify cannot see, it cannot report: a
file changed only through a shared memory map, by another host on a network file system,
or through a hard link made after the build from a directory outside the tree or not
watched (ignored); the walk (the file set) is
validated by stat as before.

Kept bytes. The whole bytes of small text files that searches read (:class:`KeptBytes`)
are kept with the build for the searches that read them again, under the same rule: only
files it indexed and has heard of no change to; the drain that hears of one drops them.

The index is built after a search of a big tree (:data:`MIN_FILES`), by a child of a spawn
server (``Sandbox.call``, no layers) that reads the files while the calls go on; until it
is ready searches read every file as before. Linux only (inotify); elsewhere there is no
index.

Many workspaces. Each index holds one inotify instance and a watch per directory, counted
against the user's limits (``fs.inotify.max_user_instances``, 128 by default, and
``max_user_watches``, shared by every process of the user). A build that finds none left
(``EMFILE``, ``ENOSPC``) makes no index: the searches read every file, with the same
results, and a build is tried again after :data:`RETRY_SECONDS` (by then another
workspace may have closed its index).
"""

from __future__ import annotations

import errno
import os
import re
import stat
import sys
import threading
import time
import weakref
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import anyio

from sandbox import Sandbox, SandboxLimits
from workspace_tools.search._matcher import BINARY_PROBE, WIDE_BOMS
from workspace_tools.search._reading import FIRST_READ, WHOLE_READ
from workspace_tools.workspace._files import DirFds
from workspace_tools.workspace._walk import DIRECTORY, Walker

try:  # Linux only
    from inotify_simple import INotify
    from inotify_simple import flags as in_flags
except (ImportError, OSError):  # pragma: no cover - not Linux
    INotify = None  # type: ignore[assignment,misc]

# Below this many files reading them all takes a few milliseconds: the index would save
# little for its watches and its build. (mypy's 1,873 files: a selective literal 4.9 ms
# with the index, 14 ms without, rg 16.6 ms; the index 4 MiB, built in 1 s.)
MIN_FILES = 1000
# More directories than this would take too many of the user's inotify watches.
MAX_WATCHES = 50_000
# A tree whose files hold more (file, word) pairs than this gets no index (4 bytes each).
MAX_POSTINGS = 50_000_000
# A word shorter than this matches too many words to narrow anything.
MIN_WORD = 3
# What the index costs and saves, in microseconds of CPU, measured over mypy's 1,873 files
# (2 CPUs, Python 3.11): a file left out saves its open, read and close (12.4 ms for all
# of them); finding the files holding a word costs a pass over the distinct words (0.4 ms
# for 78,650, paid by any word, and repaid by a word no file holds), then, per distinct
# word holding it, a lookup of its files, and per file found a set insertion (TypeVar:
# 516 words, 1,210 files found, 1.3 ms; def: 945 and 4,809, 1.9 ms; Type: 3,613 and
# 7,106, 4.3 ms). The search of a word whose files cost more to find than leaving the
# others out saves gives up on the index and reads every file.
READ_COST_US = 6.6
WORD_COST_US = 1.0
FOUND_COST_US = 0.1
# A selection leaving out fewer than this fraction of the files saves too little to
# take another path than the full search (mypy: under 0.8 ms).
MIN_SKIPPED_FRACTION = 1 / 16
# The files holding each of the last words searched for are kept with the index (it does
# not change; files changed since the build are candidates besides): at most KEPT_WORDS
# words, holding at most KEPT_IDS_PER_FILE file ids a file of the tree in all (4 bytes
# each: 6.4 MB for 200,000 files, beside the index's 45).
KEPT_WORDS = 64
KEPT_IDS_PER_FILE = 8
# The bytes of text files searches read whole are kept with the index for the searches
# that read them again, while the index knows them unchanged: a file of at most
# KEPT_FILE_BYTES, at most KEPT_BYTES in all. (mypy's 445 files holding TypeVar, 11.9 MB:
# 7.3 ms of CPU to open, read and close, of 56 for their search.) Per index, so per big
# workspace: a harness runs hundreds, and the index itself is 4 MiB for mypy's 1,900 files.
KEPT_FILE_BYTES = 256 << 10
KEPT_BYTES = 16 << 20
# Seconds before a build that found the user's inotify instances or watches used up is
# tried again (a try costs the walk, cached, and a failed system call or a few watches).
RETRY_SECONDS = 30.0
# Longest the interpreter's exit waits for a build's thread to end (see _BuildControl):
# with its child let go, what is left is at most one walk of the tree.
EXIT_WAIT_SECONDS = 30.0
# What the kernel says when the user's inotify instances (EMFILE), watches (ENOSPC) or
# this process's descriptors (EMFILE, ENFILE) or memory (ENOMEM) are used up: none of it
# is the tree's fault, and may be there later.
_SHORT_OF = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOSPC, errno.ENOMEM})

_WORDS = re.compile(rb"[A-Za-z0-9_]{%d,}" % MIN_WORD)

_FILE_EVENTS = 0
if INotify is not None:
    _FILE_EVENTS = (
        in_flags.MODIFY
        | in_flags.ATTRIB
        | in_flags.CLOSE_WRITE
        | in_flags.MOVED_FROM
        | in_flags.MOVED_TO
        | in_flags.CREATE
        | in_flags.DELETE
        | in_flags.DELETE_SELF
        | in_flags.MOVE_SELF
    )
    _WATCH_MASK = _FILE_EVENTS | in_flags.ONLYDIR | in_flags.DONT_FOLLOW
    _SELF_GONE = in_flags.DELETE_SELF | in_flags.MOVE_SELF | in_flags.IGNORED | in_flags.UNMOUNT
    _APPEARED = in_flags.CREATE | in_flags.MOVED_TO


@dataclass
class Selection:
    """The files a search must read (``files``, in the order given), and how many files
    it may count without reading: text files that cannot match (``skipped_text``) and
    binary files (``skipped_binary``), as a full search would have counted them.
    ``size``: about how many bytes the files to read hold (their sizes at the build; a
    file the index does not know counted at the tree's mean), to tell whether their
    search is worth splitting between processes."""

    files: list[str]
    skipped_text: int
    skipped_binary: int
    size: int
    kept: KeptBytes | None = None


class KeptBytes:
    """The bytes of text files that searches read whole, kept with one build for the
    searches that read them again (see ``_runner.KeptFiles``), within
    :data:`KEPT_FILE_BYTES` a file and :data:`KEPT_BYTES` in all.

    Only files the build indexed (one link, in a watched directory) and has heard of no
    change to are kept; the drain that learns of a change to a file, or to a directory
    above it, drops its bytes before any later search can use them. A change made while
    a search read the file is in the queue by then too, so bytes read before or during a
    change never outlive the next drain."""

    def __init__(self, built: _Built) -> None:
        self._built = built
        self._lock = threading.Lock()
        self._bytes: dict[str, bytes] = {}
        self.size = 0
        self.get = self._bytes.get

    def keep(self, rel: str, data: bytes) -> None:
        """Keep ``data``, the whole bytes of the text file ``rel`` read just now, when the
        build indexed it and knows of no change to it, and they fit the budget."""
        size = len(data)
        if size > KEPT_FILE_BYTES or self.size + size > KEPT_BYTES:
            return
        built = self._built
        # Under the lock that drop_changed takes once the drain marked what changed:
        # either the change is marked by now and the file is not kept, or it is kept
        # and dropped then.
        with self._lock:
            if rel in self._bytes or rel not in built.ids or _changed(built, rel):
                return
            self._bytes[rel] = data
            self.size += size

    def drop_changed(self) -> None:
        """Drop the bytes of the files the build knows changed."""
        built = self._built
        with self._lock:
            for rel in [rel for rel in self._bytes if _changed(built, rel)]:
                self.size -= len(self._bytes.pop(rel))


def _changed(built: _Built, rel: str) -> bool:
    """Whether the build heard of a change to ``rel`` or a directory above it."""
    return rel in built.dirty or any(rel.startswith(prefix) for prefix in built.dirty_dirs)


class _Built:
    """One build: the files it read, the words they hold, and the watches keeping it
    fresh."""

    def __init__(
        self, root: str, files: list[str], state: tuple[Any, ...], notify: Any, wds: dict
    ) -> None:
        positions, binary, sizes, words, word_ends, postings, posting_ends, inodes = state
        self.root = root
        self.rels: list[str] = [files[p] for p in positions]
        self.inodes: array[int] = inodes  # of each file at the build
        self.ids = {rel: i for i, rel in enumerate(self.rels)}
        self.binary: bytes = binary
        self.sizes: array[int] = sizes  # bytes of each file at the build
        self.mean_size = sum(sizes) // max(len(sizes), 1)
        # Distinct words, each followed by LF; word k ends at word_ends[k] and its files
        # (ids, ascending) are postings[posting_ends[k - 1]:posting_ends[k]].
        self.words: bytes = words
        self.word_ends = word_ends
        self.postings = postings
        self.posting_ends = posting_ends
        self.notify = notify
        self.wds: dict[int, str] = wds
        self.dirty: set[str] = set()
        self.dirty_dirs: set[str] = set()  # "dir/" prefixes: every file below is a candidate
        self.lost = False
        self.layout: tuple[list[str], Any] | None = None
        # The files holding each of the last words searched for (None: too common to
        # narrow the search), oldest first (see KEPT_WORDS).
        self.holders: dict[bytes, array[int] | None] = {}
        self.kept = KeptBytes(self)

    @property
    def memory(self) -> int:
        """Bytes held: the word sets, offsets, flags, sizes, the path table and the files
        of the last words searched for (an estimate)."""
        paths = sum(len(r) + 49 for r in self.rels) + 48 * len(self.rels)
        arrays = (self.word_ends, self.postings, self.posting_ends, self.sizes, self.inodes)
        # A copy first: a search may change the kept words meanwhile (this is read
        # without the index's lock).
        kept = [a for a in list(self.holders.values()) if a is not None]
        held = sum(a.itemsize * len(a) for a in (*arrays, *kept))
        return held + len(self.words) + len(self.binary) + paths + self.kept.size

    def holding(self, word: bytes) -> set[int] | None:
        """Ids of the files holding ``word`` inside one of their words at the build;
        ``None`` when finding them would cost more than leaving the others out saves (see
        :data:`READ_COST_US`). Kept for the next searches of the same word."""
        if word in self.holders:
            kept = self.holders.pop(word)
            self.holders[word] = kept  # now the newest
            return None if kept is None else set(kept)
        found = _holders(self, word)
        kept = None if found is None else array("I", found)
        self.holders[word] = kept
        budget = KEPT_IDS_PER_FILE * len(self.rels)
        while len(self.holders) > KEPT_WORDS or (
            sum(len(a) for a in self.holders.values() if a is not None) > budget
        ):
            del self.holders[next(iter(self.holders))]
        return found

    def drain(self) -> None:
        """Apply the changes the kernel reported since the last drain."""
        # Names that appeared (created, linked or moved in), and those unlinked since.
        appeared: set[str] = set()
        new_dirs: set[str] = set()
        deleted: set[str] = set()
        # Directories renamed: (cookie, old name) as they left, cookies as they arrived.
        left: set[tuple[int, str]] = set()
        arrived: set[int] = set()
        heard = False
        while True:
            try:
                events = self.notify.read(timeout=0)
            except OSError:
                self.lost = True
                return
            if not events:
                break
            heard = True
            for event in events:
                mask = event.mask
                if mask & in_flags.Q_OVERFLOW:
                    self.lost = True
                    return
                where = self.wds.get(event.wd)
                if where is None:
                    continue
                if mask & _SELF_GONE or not event.name:
                    self.dirty_dirs.add(where + "/" if where else "")
                    continue
                rel = f"{where}/{event.name}" if where else event.name
                if mask & in_flags.ISDIR:
                    self.dirty_dirs.add(rel + "/")
                    if mask & _APPEARED:
                        new_dirs.add(rel)
                    if mask & in_flags.MOVED_FROM:
                        left.add((event.cookie, rel))
                    elif mask & in_flags.MOVED_TO:
                        arrived.add(event.cookie)
                else:
                    self.dirty.add(rel)
                    if mask & _APPEARED:
                        appeared.add(rel)
                    elif mask & in_flags.DELETE:
                        deleted.add(rel)
        if heard:
            moved_within = {rel for cookie, rel in left if cookie in arrived}
            self._find_links(appeared, deleted, new_dirs - moved_within)
            self.kept.drop_changed()

    def _find_links(self, appeared: set[str], deleted: set[str], new_dirs: set[str]) -> None:
        """An indexed file given another name since the build (``ln``, ``cp -l``) may be
        written through that name, and the kernel reports such a write only under the
        name used: the file itself is a candidate from then on. Such a name is found by
        its link count: among the names that appeared (a name gone again that was
        unlinked may have been one, written through: the index is then dropped), and in
        the directories that appeared, which are watched from now on (their files are
        always read: the index does not know them). A directory that appeared and is gone
        again (removed, or moved out of the tree; ``new_dirs`` leaves out those renamed
        within it, found under their new names) may have held such a name, unseen: the
        index is dropped too."""
        for rel in appeared:
            try:
                info = os.lstat(os.path.join(self.root, rel))
            except OSError:
                if rel in deleted:
                    self.lost = True
                    return
                continue  # moved on: its new name appeared too, or it left the tree
            if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
                self._mark_inode(info.st_ino)
        for rel in sorted(new_dirs):
            top = os.path.join(self.root, rel)
            # By fds, following no link, the top one included (fwalk checks it is what
            # lstat saw): a directory swapped for a link to / since its event must not
            # have this walk, and its watches, go through the host's tree.
            failed: list[OSError] = []
            walked = False
            try:
                for directory, _dirs, names, dir_fd in os.fwalk(
                    top, follow_symlinks=False, onerror=failed.append
                ):
                    walked = True
                    if len(self.wds) >= MAX_WATCHES:
                        self.lost = True
                        return
                    try:
                        # The watch first: a link made after the listing below is reported.
                        wd = self.notify.add_watch(directory, _WATCH_MASK)
                    except OSError:
                        continue  # gone since, or no watch to be had: its files are unknown
                    self.wds[wd] = os.path.relpath(directory, self.root).replace(os.sep, "/")
                    for name in names:
                        try:
                            info = os.lstat(name, dir_fd=dir_fd)
                        except OSError:
                            continue
                        if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
                            self._mark_inode(info.st_ino)
            except OSError as exc:  # the top's own stat or open
                failed.append(exc)
            if failed or not walked:
                # Gone again (or no directory any more, or a part of it unreadable): what
                # it held cannot be told.
                self.lost = True
                return

    def _mark_inode(self, inode: int) -> None:
        """Every indexed file with this inode is a candidate from now on."""
        inodes = self.inodes
        at = 0
        while True:
            try:
                at = inodes.index(inode, at)
            except ValueError:
                return
            self.dirty.add(self.rels[at])
            at += 1

    def stale(self) -> bool:
        """Whether so much changed that a new build pays."""
        return len(self.dirty) + 64 * len(self.dirty_dirs) > max(256, len(self.rels) // 64)

    def close(self) -> None:
        self.notify.close()


class SearchIndex:
    """The warm index of one workspace (see the module docstring). Thread-safe; used only
    by the process that made it (a forked or sandboxed copy reads every file).

    Args:
        root: the workspace root (a real path).
        min_files: build only for a tree of at least this many files.
    """

    def __init__(self, root: str, *, min_files: int = MIN_FILES) -> None:
        self._root = root
        self._min_files = min_files
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._built: _Built | None = None
        self._building: threading.Thread | None = None
        self._control = _BuildControl()
        # At the interpreter's exit (or this index's collection) a build under way stops.
        weakref.finalize(self, self._control.stop, True)
        self._failed = INotify is None or not sys.platform.startswith("linux")
        # No build before this time (time.monotonic()): the last one found no inotify
        # instance or watch to be had.
        self._retry_at = 0.0

    @property
    def memory(self) -> int:
        """Bytes the index holds (0 while there is none)."""
        built = self._built
        return built.memory if built is not None else 0

    def ready(self) -> bool:
        """Whether searches use the index now."""
        return self._built is not None

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for a build under way; whether the index is ready."""
        thread = self._building
        if thread is not None:
            thread.join(timeout)
        return self.ready()

    def select(self, files: list[str], required: bytes) -> Selection | None:
        """The files among ``files`` (sorted paths of regular files from the workspace's
        walk) that may hold ``required`` (ASCII bytes without CR or LF), or ``None`` when
        the index cannot narrow the search: none is ready, the literal has no word of
        :data:`MIN_WORD` characters, or its words are too common."""
        if os.getpid() != self._pid:
            return None
        words = sorted({w for w in _WORDS.findall(required)}, key=len, reverse=True)
        if not words:
            return None
        with self._lock:
            built = self._built
            if built is None:
                return None
            built.drain()
            if built.lost:
                self._built = None
                built.close()
                return None
            return _select(built, files, words)

    def after_search(self, walker: Walker, recursive_files: int) -> None:
        """Start a build (in the background) if the index pays and none is under way:
        called after a search of a directory walk of ``recursive_files`` files."""
        if self._failed or os.getpid() != self._pid or recursive_files < self._min_files:
            return
        if time.monotonic() < self._retry_at:
            return
        with self._lock:
            if self._building is not None:
                return
            built = self._built
            if built is not None and not built.stale() and not built.lost:
                return
            self._building = threading.Thread(target=self._build, args=(walker,), daemon=True)
            self._control.thread = self._building
            self._building.start()

    def close(self) -> None:
        """Drop the index and its watches; a build under way stops (its child is let
        go) and is dropped."""
        with self._lock:
            built, self._built = self._built, None
            self._failed = True
        self._control.stop(wait=False)
        if built is not None:
            built.close()

    def _build(self, walker: Walker) -> None:
        short = False
        with _BUILD_SLOTS:
            built = None
            try:
                if not self._failed:  # else closed while it waited for a slot
                    built = _build(self._root, walker, self._control)
            except OSError as exc:
                short = exc.errno in _SHORT_OF
        with self._lock:
            self._building = None
            if built is None and short:
                # No inotify instance or watch to be had now (the user's limits, shared by
                # every index of every process of the user): searches read every file
                # until a later build finds one.
                self._retry_at = time.monotonic() + RETRY_SECONDS
                return
            if built is None:
                # A tree too big to watch, or no child to read it: no index.
                self._failed = True
                return
            if self._failed:
                built.close()
                return
            old, self._built = self._built, built
        if old is not None:
            old.close()


class _BuildControl:
    """How a build is stopped from another thread: at the interpreter's exit, or when its
    index closes.

    The exit waits for the build's thread (:data:`EXIT_WAIT_SECONDS` at most): a daemon
    thread still running at the interpreter's finalization ends when it next takes the
    GIL, by ``pthread_exit``, whose unwinding aborts the process ("terminate called
    without an active exception", exit status 134) when it crosses C++ frames, as a
    walk's ignore rules matched by RE2 (``google-re2``, which lets go of the GIL while it
    matches) are. So the build's child (the long part: reading the tree) is let go, and
    the walk it may be in is let finish."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self.stopping = False
        self.thread: threading.Thread | None = None
        self._box: Sandbox | None = None

    def stop(self, wait: bool) -> None:
        """Stop the build under way, if any, and any later one; ``wait``: for its thread."""
        if os.getpid() != self._pid:
            return  # a fork's copy: the build and its child are the parent's
        with self._lock:
            self.stopping = True
            box, thread = self._box, self.thread
        if box is not None:
            box.close()  # its call raises, and the build makes no index
        if wait and thread is not None and thread is not threading.current_thread():
            thread.join(EXIT_WAIT_SECONDS)

    def start(self, box: Sandbox) -> bool:
        """Whether a build may start its child in ``box`` (not when stopping); it is
        :meth:`stop`'s to close until :meth:`done`."""
        with self._lock:
            if self.stopping:
                return False
            self._box = box
            return True

    def done(self, box: Sandbox) -> None:
        """The build's child in ``box`` ended."""
        with self._lock:
            if self._box is box:
                self._box = None


def _build(root: str, walker: Walker, control: _BuildControl) -> _Built | None:
    walk = walker.walk(root, "", recursive=True, include_ignored=False)
    files = walk.files
    dirs = [""] + [rel for rel, kind in walk.entries if kind is DIRECTORY]
    if len(dirs) > MAX_WATCHES or control.stopping:
        return None
    notify = INotify(nonblocking=True)
    try:
        wds: dict[int, str] = {}
        # Watches first: every change after this point is reported, so the files read
        # next are either what the index holds or reported as changed.
        for rel in dirs:
            try:
                wds[notify.add_watch(os.path.join(root, rel) if rel else root, _WATCH_MASK)] = rel
            except FileNotFoundError:
                continue  # gone since the walk: its files are not read either
            except NotADirectoryError:
                continue
        watched = set(wds.values())
        # The limit as this process has it: the child imports the module afresh.
        state = _in_child(control, _read_tree, root, files, watched, MAX_POSTINGS)
        if state is None:
            notify.close()
            return None
        return _Built(root, files, state, notify, wds)
    except BaseException:
        notify.close()
        raise


def _read_tree(
    root: str, files: list[str], watched: set[str], max_postings: int
) -> tuple[Any, ...]:
    """What the index holds of ``files``: positions (in ``files``) of the files read, a
    binary flag for each, the distinct words and the files holding each (see
    :class:`_Built`), and each file's inode. Files in a directory not ``watched`` are
    left out (always read). Raises MemoryError past ``max_postings`` (file, word) pairs."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    positions = array("I")
    binary = bytearray()
    sizes = array("I")
    inodes = array("Q")
    vocabulary: dict[bytes, int] = {}
    holders: list[array[int]] = []
    findall = _WORDS.findall
    pairs = 0
    directory, dir_fd = None, -1
    with DirFds(root) as dirs:
        for position, rel in enumerate(files):
            slash = rel.rfind("/")
            if directory is None or rel[: max(slash, 0)] != directory:
                directory = rel[: max(slash, 0)]
                try:
                    dir_fd = dirs.get(directory) if directory in watched else -1
                except OSError:
                    dir_fd = -1
            if dir_fd < 0:
                continue
            try:
                fd = os.open(rel[slash + 1 :], flags, dir_fd=dir_fd)
            except OSError:
                continue  # unknown to the index: always read
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                    continue
                data = os.read(fd, FIRST_READ)
                is_binary = data.find(b"\0", 0, BINARY_PROBE) >= 0
                if data.startswith(WIDE_BOMS):
                    continue  # UTF-16/32: its bytes are not the literal's
                if not is_binary and len(data) == FIRST_READ:
                    data += os.read(fd, WHOLE_READ)
                    if len(data) > WHOLE_READ:
                        continue  # too big to hold: always read
            except OSError:
                continue
            finally:
                os.close(fd)
            file_id = len(positions)
            positions.append(position)
            binary.append(is_binary)
            sizes.append(len(data))
            inodes.append(st.st_ino)
            if is_binary:
                continue
            found = set(findall(data))
            pairs += len(found)
            if pairs > max_postings:
                raise MemoryError("too many words to index")
            for word in found:
                k = vocabulary.get(word)
                if k is None:
                    k = vocabulary[word] = len(holders)
                    holders.append(array("I"))
                holders[k].append(file_id)
    words = b"".join(w + b"\n" for w in vocabulary)
    word_ends = array("Q", accumulate(len(w) + 1 for w in vocabulary))
    postings = array("I")
    posting_ends = array("Q")
    for ids in holders:
        postings.extend(ids)
        posting_ends.append(len(postings))
    return positions, bytes(binary), sizes, words, word_ends, postings, posting_ends, inodes


def _holders(built: _Built, word: bytes) -> set[int] | None:
    """Ids of the files holding ``word`` inside one of their words; ``None`` once finding
    them has cost more than leaving out the files not found yet can save (see
    :data:`READ_COST_US`)."""
    words, word_ends, postings, posting_ends = (
        built.words, built.word_ends, built.postings, built.posting_ends,
    )  # fmt: skip
    files = len(built.rels)
    found: set[int] = set()
    find = words.find
    at = find(word)
    cost = 0.0
    while at >= 0:
        k = bisect_right(word_ends, at)
        start = posting_ends[k - 1] if k else 0
        found.update(postings[start : posting_ends[k]])
        cost += WORD_COST_US + FOUND_COST_US * (posting_ends[k] - start)
        if cost > READ_COST_US * (files - len(found)):
            return None
        at = find(word, word_ends[k])
    return found


def _select(built: _Built, files: list[str], words: list[bytes]) -> Selection | None:
    holding: set[int] | None = None
    for word in words:
        found = built.holding(word)
        if found is None:
            continue
        holding = found if holding is None else holding & found
    if holding is None:
        return None  # every word too common
    position_of, unknown, known_text, known_binary = _layout(built, files)
    chosen: set[int] = set(unknown)
    for file_id in holding:
        position = position_of[file_id]
        if position >= 0:
            chosen.add(position)
    ids = built.ids
    for rel in built.dirty:
        file_id = ids.get(rel)
        if file_id is not None and position_of[file_id] >= 0:
            chosen.add(position_of[file_id])
    for prefix in built.dirty_dirs:
        # Sorted paths: those below a directory are one run.
        lo = bisect_left(files, prefix)
        hi = bisect_left(files, prefix[:-1] + "0") if prefix else len(files)
        chosen.update(range(lo, hi))
    if len(files) - len(chosen) < MIN_SKIPPED_FRACTION * len(files):
        # Nearly all candidates (a common word, or files changed or unknown since the
        # build): the full search costs about the same.
        return None
    binary, sizes = built.binary, built.sizes
    read_text = read_binary = 0
    size = 0
    for position in chosen:
        file_id = ids.get(files[position])
        if file_id is not None and position_of[file_id] == position:
            size += sizes[file_id]
            if binary[file_id]:
                read_binary += 1
            else:
                read_text += 1
        else:
            size += built.mean_size
    return Selection(
        [files[p] for p in sorted(chosen)],
        known_text - read_text,
        known_binary - read_binary,
        size,
        built.kept,
    )


def _layout(built: _Built, files: list[str]) -> tuple[Any, list[int], int, int]:
    """For ``files``: the position of each indexed file in it (-1: not in it), the
    positions of files the index does not know, and how many known text and binary
    files it holds. Kept for the list last asked about (a cached walk's list is the same
    object from call to call)."""
    layout = built.layout
    if layout is not None and layout[0] is files:
        return layout[1]  # type: ignore[no-any-return]
    ids, binary = built.ids, built.binary
    position_of = array("q", [-1]) * len(built.rels)
    unknown = []
    known_binary = 0
    for position, rel in enumerate(files):
        file_id = ids.get(rel)
        if file_id is None:
            unknown.append(position)
        else:
            position_of[file_id] = position
            known_binary += binary[file_id]
    known_text = len(files) - len(unknown) - known_binary
    result = (position_of, unknown, known_text, known_binary)
    built.layout = (files, result)
    return result


def _in_child(control: _BuildControl, work: Callable[..., Any], *args: Any) -> Any:
    """``work(*args)`` run in a child of a spawn server of its own (a clean interpreter:
    none of this process's memory, no lock another thread holds), its result pickled
    back; ``None`` when it failed, no child could be started, or ``control`` stopped
    it."""
    box = Sandbox(layers=False, env_allowlist=(), limits=_BUILD_LIMITS)
    try:
        if not control.start(box):
            return None
        return anyio.run(box.call, work, *args)
    except Exception:
        return None
    finally:
        control.done(box)
        box.close()


#: Builds under way at once in this process, whatever the workspace: each reads a whole
#: tree in a child of its own, and hundreds of workspaces whose first big searches came
#: together would read all their trees at once (2 CPUs, 200 workspaces of 1,000 files: 133
#: children, 3.9 GiB between them). The slots are the process's, as its CPUs are; a build
#: waits for one in its own thread, and searches read every file meanwhile, as before.
_BUILD_SLOTS = threading.BoundedSemaphore(max(1, (os.cpu_count() or 1) // 2))

#: The build reads the tree once: no CPU, size or time limit of its own.
_BUILD_LIMITS = SandboxLimits(cpu_seconds=None, file_size_bytes=None, open_files=None)
