"""Manifests of a workspace: every entry the one walker lists, with its type, mode, size,
``mtime_ns`` and the SHA-256 of its content, for checkpoints.

Cost is bounded the way git bounds ``git status``: a file's hash is reused while its
``lstat`` (size, mtime, ctime, inode) is unchanged, except for a file modified within
:data:`RACY_NS` of the hashing (the clock may not have ticked since), which is hashed again;
contents go into the :class:`~._store.BlobStore` once per hash. What ignore rules skip (an
ignored directory is one entry, never entered) and files over the size cap are recorded by
their stat only (``tracked`` false): a change to them shows, but their content is not kept.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from typing import Literal, NamedTuple

from workspace_tools.workspace._files import OUT_OF_FDS, DirFds
from workspace_tools.workspace._store import BlobStore
from workspace_tools.workspace._workspace import Workspace

EntryType = Literal["file", "directory", "symlink"]

DEFAULT_MAX_FILE_BYTES = 16 * 1024 * 1024
"""Files larger than this are listed by their stat only, never stored."""

RACY_NS = 2_000_000_000
"""A file modified this close to its hashing is hashed again next time (coarse clocks)."""

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Entry(NamedTuple):
    """One path in a manifest.

    ``digest`` is the hex SHA-256 of a file's bytes or a symlink's target, ``None`` for a
    directory and for an entry recorded by its stat only (``tracked`` false: ignored by
    rules, over the size cap, or unreadable), whose content is not restorable.
    """

    type: EntryType
    mode: int
    size: int
    mtime_ns: int
    digest: str | None
    tracked: bool


Manifest = dict[str, Entry]
Change = tuple[Entry | None, Entry | None]


def same(a: Entry | None, b: Entry | None) -> bool:
    """Whether two manifest entries describe the same content and mode (mtime plays no part
    for tracked entries; untracked ones can only be compared by their stat)."""
    if a is None or b is None:
        return a is b
    if a.type != b.type:
        return False
    if not (a.tracked and b.tracked):
        return (a.mode, a.size, a.mtime_ns, a.tracked) == (b.mode, b.size, b.mtime_ns, b.tracked)
    if a.type == "symlink":
        return a.digest == b.digest
    return a.mode == b.mode and a.digest == b.digest


def diff_manifests(before: Manifest, after: Manifest) -> dict[str, Change]:
    """Every path whose entry differs between two manifests: ``path -> (before, after)``,
    ``None`` for absent; sorted by path."""
    out: dict[str, Change] = {}
    for path in sorted(before.keys() | after.keys()):
        old, new = before.get(path), after.get(path)
        if not same(old, new):
            out[path] = (old, new)
    return out


class Manifests:
    """Takes manifests of one workspace, remembering hashes between them.

    Args:
        workspace: whose tree (``workspace.walker`` lists it).
        store: where :meth:`take` puts contents.
        max_file_bytes: files over this many bytes are recorded by stat only.

    Not thread-safe: its owner serialises :meth:`take`.
    """

    def __init__(self, workspace: Workspace, store: BlobStore, max_file_bytes: int) -> None:
        self.workspace = workspace
        self.store = store
        self.max_file_bytes = max_file_bytes
        self._root = str(workspace.root)
        # rel -> ((size, mtime_ns, ctime_ns, ino), digest): hashes reused while the stat holds.
        self._hashes: dict[str, tuple[tuple[int, int, int, int], str]] = {}
        self._stored: set[str] = set()

    def take(self, *, store: bool) -> Manifest:
        """The workspace as it is now; with ``store``, the content of every tracked file
        is in the store afterwards.

        Raises:
            OSError: the store cannot be written (disk full), or the root is unreadable.
        """
        walk = self.workspace.walker.walk(self._root, "", recursive=True, include_ignored=False)
        now = time.time_ns()
        out: Manifest = {}
        with DirFds(self._root) as dirs:
            for rels, tracked in ((walk.entries, True), (walk.skipped, False)):
                last_head, dir_fd = None, -1
                for rel, _kind in rels:
                    head, _, name = rel.rpartition("/")
                    try:
                        if head != last_head:
                            # Entries come sorted: siblings in a row share their fd.
                            last_head, dir_fd = None, dirs.get(head)
                            last_head = head
                        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                    except OSError as exc:
                        if exc.errno in OUT_OF_FDS:
                            # A checkpoint missing a file could not restore it.
                            raise OSError(exc.errno, exc.strerror, rel) from None
                        continue  # gone since it was listed
                    entry = self._entry(dir_fd, name, rel, st, tracked, store, now)
                    if entry is not None:
                        out[rel] = entry
        return out

    def _entry(
        self,
        dir_fd: int,
        name: str,
        rel: str,
        st: os.stat_result,
        tracked: bool,
        store: bool,
        now: int,
    ) -> Entry | None:
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISDIR(st.st_mode):
            return Entry("directory", mode, st.st_size, st.st_mtime_ns, None, tracked)
        if stat.S_ISLNK(st.st_mode):
            kind: EntryType = "symlink"
        elif stat.S_ISREG(st.st_mode):
            kind = "file"
        else:
            return None  # sockets, FIFOs, devices: never listed by the walker either
        if not tracked or st.st_size > self.max_file_bytes:
            return Entry(kind, mode, st.st_size, st.st_mtime_ns, None, False)
        key = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        cached = self._hashes.get(rel)
        digest = cached[1] if cached is not None and cached[0] == key else None
        if digest is None or (store and digest not in self._stored):
            try:
                data = read_entry(dir_fd, name, kind, st)
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, rel) from None
            if data is None:
                return Entry(kind, mode, st.st_size, st.st_mtime_ns, None, False)
            digest = hashlib.sha256(data).hexdigest()
            if store and digest not in self._stored:
                self.store.put(data)
                self._stored.add(digest)
            if now - st.st_mtime_ns > RACY_NS and now - st.st_ctime_ns > RACY_NS:
                self._hashes[rel] = (key, digest)
            else:
                self._hashes.pop(rel, None)
        return Entry(kind, mode, st.st_size, st.st_mtime_ns, digest, True)


def read_entry(dir_fd: int, name: str, kind: EntryType, st: os.stat_result) -> bytes | None:
    """A file's bytes or a link's target, as ``st`` described it; ``None`` when it is
    unreadable or changed since the stat (then the entry is listed by stat only). At most
    ``st.st_size + 1`` bytes are read: a file a running process keeps appending to never
    holds the read (it changed since the stat)."""
    try:
        if kind == "symlink":
            return os.fsencode(os.readlink(name, dir_fd=dir_fd))
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in OUT_OF_FDS:
            raise  # the file would be kept by stat only: no content to restore
        return None
    try:
        info = os.fstat(fd)
        if (info.st_ino, info.st_dev) != (st.st_ino, st.st_dev):
            return None
        os.set_blocking(fd, True)
        chunks = []
        left = st.st_size + 1
        while left > 0 and (chunk := os.read(fd, min(left, max(st.st_size, 1 << 16)))):
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        return data if len(data) == st.st_size else None
    except OSError:
        return None
    finally:
        os.close(fd)
