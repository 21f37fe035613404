"""What the workspace remembers about files between calls: content hashes and per-file locks."""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path

from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools.text._line_counts import LineCounts
from workspace_tools.workspace._files import Content, content_size


def content_hash(data: Content) -> bytes:
    """SHA-256 digest of a file's bytes (or of its pieces, one after another); staleness
    compares these, never mtimes."""
    if isinstance(data, bytes):
        return hashlib.sha256(data).digest()
    hasher = hashlib.sha256()
    for piece in data:
        hasher.update(piece)
    return hasher.digest()


class PendingDigest:
    """A :func:`content_hash` of ``data`` being taken by a thread of its own while the
    caller goes on: hashlib lets go of the GIL while it hashes a buffer over 2 KiB, so the
    hash of a large file (60 ms for 100 MB) runs on another CPU beside a decode, a write or
    its flush, or the model's next turn. :meth:`result` waits for it."""

    def __init__(self, data: Content) -> None:
        # Which object it hashes: two objects alive at once never share an id, and the
        # caller that asks (is_of) holds its own.
        self._source = id(data)
        self._data: Content | None = data
        self._digest: bytes | None = None
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._take, name="content-hash", daemon=True)
        self._thread.start()

    def _take(self) -> None:
        self._digest = content_hash(self._data or b"")
        self._data = None  # after the digest: a fork's copy has one or the other

    def is_of(self, data: Content) -> bool:
        """Whether this is the hash of the very object ``data`` (alive while asked)."""
        return self._source == id(data)

    def result(self) -> bytes:
        """The digest, once taken (in a fork of the process that started it, taken there:
        the thread is not in the fork)."""
        if os.getpid() == self._pid:
            self._thread.join()
        digest = self._digest
        if digest is None:
            digest = self._digest = content_hash(self._data or b"")
        return digest


def digest_of(known: bytes | PendingDigest) -> bytes:
    """``known`` as a digest, waiting for it if it is being taken."""
    return known.result() if isinstance(known, PendingDigest) else known


# The content of a file recorded whole is kept, within these bounds, so that the staleness
# check of the next change compares bytes instead of hashing the file: an edit of a 2 MB
# file hashed it twice (check, then record), which took longer than its durable write.
# A larger file's hash is taken by a thread meanwhile (PendingDigest).
KEPT_FILE_BYTES = 8 << 20
KEPT_TOTAL_BYTES = 64 << 20


class FileStates:
    """Content hashes of files as last read or written through a workspace, and a lock per
    file so that concurrent calls on one file run one after another.

    Keys are real paths. Thread-safe: tools run in worker threads. A call run in another
    process (a sandbox child) is given the hashes of the files it names (:meth:`snapshot`
    of those paths, :meth:`restore` into the fresh table of the workspace's copy there)
    and hands back what it changed (:meth:`changes`, :meth:`apply`).

    The last contents recorded whole (:data:`KEPT_FILE_BYTES` each, :data:`KEPT_TOTAL_BYTES`
    in all, the least recently recorded dropped first) are kept instead of their hashes,
    which are taken only when needed (a snapshot, or the content dropped); a larger one's
    hash is taken by a thread of its own meanwhile (:class:`PendingDigest`), waited for
    by the next check or snapshot. With the content last seen (kept, or known by its hash)
    its :class:`LineCounts` may be kept too, so that the next edit of the file numbers its
    lines from them.
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        # Keyed by the path's text: it pickles an order of magnitude faster than a Path.
        # None: the hash of the content in _kept, not taken yet; a PendingDigest: being
        # taken (of a content too large to keep).
        self._hashes: dict[str, bytes | PendingDigest | None] = {}
        self._kept: OrderedDict[str, bytes] = OrderedDict()
        self._kept_bytes = 0
        # Of the contents last seen: kept in _kept, or known by their hash.
        self._lines: dict[str, LineCounts] = {}
        self._locks: dict[str, threading.Lock] = {}
        #: In a sandbox child given only some paths' hashes: those paths. A staleness
        #: check of another path cannot be judged there (see :meth:`restore`).
        self._scope: frozenset[str] | None = None

    def lock(self, real: Path) -> threading.Lock:
        """The lock serialising calls that change ``real`` (one per path, kept for the
        workspace's lifetime)."""
        with self._guard:
            return self._locks.setdefault(str(real), threading.Lock())

    def record(self, real: Path, data: Content, lines: LineCounts | None = None) -> None:
        """Remember ``data`` as the content a caller last saw at ``real``, and ``lines``,
        counts of its text's lines, with it (while it is what was last seen: kept whole,
        or known by its hash)."""
        if content_size(data) > KEPT_FILE_BYTES:
            # Waited for only when the next staleness check or snapshot needs it.
            self.record_digest(real, PendingDigest(data), lines)
            return
        if not isinstance(data, bytes):
            data = b"".join(data)
        key = str(real)
        with self._guard:
            self._drop_kept(key)
            self._hashes[key] = None
            self._kept[key] = data
            self._kept_bytes += len(data)
            if lines is not None:
                self._lines[key] = lines
            while self._kept_bytes > KEPT_TOTAL_BYTES:
                old_key, old_data = self._kept.popitem(last=False)
                self._kept_bytes -= len(old_data)
                self._lines.pop(old_key, None)
                if self._hashes.get(old_key, b"") is None:
                    self._hashes[old_key] = content_hash(old_data)

    def keep_lines(self, real: Path, data: Content, lines: LineCounts) -> None:
        """Keep ``lines``, counts of the text of ``data``, with the content recorded for
        ``real`` if it is still that very ``data`` (kept whole, or its hash being taken):
        the counts a change found after recording what it wrote."""
        key = str(real)
        with self._guard:
            known = self._hashes.get(key)
            if self._kept.get(key) is data or (
                isinstance(known, PendingDigest) and known.is_of(data)
            ):
                self._lines[key] = lines

    def still_kept(self, real: Path, lines: LineCounts) -> bool:
        """Whether the content recorded for ``real`` is still the one kept whole with these
        very ``lines`` (not recorded again, changed or let go since)."""
        key = str(real)
        with self._guard:
            return self._lines.get(key) is lines and key in self._kept

    def record_digest(
        self, real: Path, digest: bytes | PendingDigest, lines: LineCounts | None = None
    ) -> None:
        """Remember a :func:`content_hash` of the content a caller last saw at ``real``
        (or the one being taken), and ``lines``, counts of its text's lines, with it."""
        key = str(real)
        with self._guard:
            self._drop_kept(key)
            self._hashes[key] = digest
            if lines is not None:
                self._lines[key] = lines

    def forget(self, real: Path) -> None:
        """Drop what is known about ``real`` (seen, but too large to hash)."""
        key = str(real)
        with self._guard:
            self._drop_kept(key)
            self._hashes.pop(key, None)

    def hash_meanwhile(self, real: Path, data: bytes) -> PendingDigest | None:
        """The hash of ``data``, the content now at ``real``, taken by a thread while the
        caller goes on (:class:`PendingDigest`, for :meth:`check_fresh`), when the check
        will hash it: a large content, and what was last seen of the file known by its
        hash alone; else ``None``."""
        if len(data) <= KEPT_FILE_BYTES:
            return None
        key = str(real)
        with self._guard:
            if key not in self._hashes or key in self._kept:
                return None
        return PendingDigest(data)

    def check_fresh(
        self,
        real: Path,
        current: bytes | None,
        rel: str,
        digest: PendingDigest | None = None,
    ) -> LineCounts | None:
        """Refuse a change to ``real`` whose content differs from what was last seen.

        A file never read or written through the workspace, or one deleted since, is fresh.
        Returns the :class:`LineCounts` recorded with the content when ``current`` is that
        content (else ``None``). ``digest``: ``current``'s hash, being taken
        (used if the check needs a hash).

        Raises:
            ToolError: ``STALE_FILE`` asking for a fresh read; also, in a sandbox child
                given some paths' hashes (:meth:`restore`), for a path outside them.
        """
        key = str(real)
        with self._guard:
            known = key in self._hashes
            seen = self._hashes.get(key)
            kept = self._kept.get(key)
            lines = self._lines.get(key)
            unjudged = self._scope is not None and key not in self._scope
        if current is None:
            return None
        if unjudged and not known:
            # The path resolved to another file here than where the call was prepared (a
            # link or directory swapped meanwhile): whether it was seen is not known here.
            raise ToolError(
                f"{rel} changed on disk while the call was starting (it now leads to another "
                "file); read it again with read_file, then repeat the change",
                ErrorCode.STALE_FILE,
            )
        if not known:
            return None
        if kept is not None:
            if kept == current:
                return lines
        elif seen is not None and digest_of(digest or content_hash(current)) == digest_of(seen):
            return lines
        raise ToolError(
            f"{rel} changed on disk since it was last read or written; read it again with "
            "read_file, then repeat the change against its current content",
            ErrorCode.STALE_FILE,
        )

    def snapshot(self, reals: Iterable[Path] | None = None) -> dict[str, bytes]:
        """The hashes as they are now: real path -> :func:`content_hash`; of the paths
        ``reals`` only (those known) when given, so that only they are hashed and shipped."""
        keys = None if reals is None else [str(real) for real in reals]
        self._settle(keys)
        with self._guard:
            if keys is None:
                return self._digests()
            found = {}
            for key in keys:
                if key in self._hashes:
                    found[key] = self._digest(key)
            return found

    def restore(self, hashes: dict[str, bytes], scope: Iterable[Path | str] | None = None) -> None:
        """In a sandbox child, before its call: take the hashes of a :meth:`snapshot`, and
        fresh locks. The locks a fork copied may be held by threads that do not exist in
        the child (the caller holds the file's lock around the call).

        ``scope``: the paths the snapshot was taken of, when not of all. A staleness check
        of a path outside it and not recorded since (one that resolved to another file in
        the child) raises ``STALE_FILE``: the caller's table was not shipped to judge it.
        """
        self._guard = threading.Lock()
        self._locks = {}
        self._hashes = dict(hashes)
        self._kept = OrderedDict()
        self._kept_bytes = 0
        self._lines = {}
        self._scope = None if scope is None else frozenset(map(str, scope))

    def changes(self, since: dict[str, bytes]) -> tuple[dict[str, bytes], list[str]]:
        """What changed after the snapshot ``since``: ``(recorded, forgotten)``."""
        self._settle()
        with self._guard:
            hashes = self._digests()
            recorded = {k: v for k, v in hashes.items() if since.get(k) != v}
            forgotten = [k for k in since if k not in hashes]
        return recorded, forgotten

    def apply(self, changes: tuple[dict[str, bytes], list[str]]) -> None:
        """Take over :meth:`changes` made elsewhere (by a call in a sandbox child)."""
        recorded, forgotten = changes
        with self._guard:
            for key, digest in recorded.items():
                self._drop_kept(key)
                self._hashes[key] = digest
            for key in forgotten:
                self._drop_kept(key)
                self._hashes.pop(key, None)

    def _settle(self, keys: list[str] | None = None) -> None:
        """Wait for the hashes being taken, of ``keys`` (default: all), without holding the
        guard (a 1 GiB file's takes 0.6 s, which no other call on the table should wait
        for), and put them in."""
        with self._guard:
            known = self._hashes
            pending = [
                (key, digest)
                for key in (known if keys is None else keys)
                if isinstance(digest := known.get(key), PendingDigest)
            ]
        for key, digest in pending:
            taken = digest.result()
            with self._guard:
                if self._hashes.get(key) is digest:  # else recorded again meanwhile
                    self._hashes[key] = taken

    def _digests(self) -> dict[str, bytes]:
        # Called with the guard held: the hashes not taken yet are taken now (once).
        return {key: self._digest(key) for key in self._hashes}

    def _digest(self, key: str) -> bytes:
        # Called with the guard held, for a known key.
        digest = self._hashes[key]
        if digest is None:
            digest = self._hashes[key] = content_hash(self._kept[key])
        elif isinstance(digest, PendingDigest):
            digest = self._hashes[key] = digest.result()
        return digest

    def _drop_kept(self, key: str) -> None:
        self._lines.pop(key, None)
        data = self._kept.pop(key, None)
        if data is not None:
            self._kept_bytes -= len(data)
