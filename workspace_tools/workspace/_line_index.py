"""Line indexes of the files read_file read, kept by a workspace for the next window of the
same file."""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from workspace_tools.text._line_counts import LineCounts
from workspace_tools.text._lines import LineIndex
from workspace_tools.workspace._state import PendingDigest

#: Files smaller than this are read whole again rather than indexed: a whole read of one
#: costs about what a window's seek does, and their indexes would push out those of the big
#: files an agent reads window by window.
MIN_INDEXED_BYTES = 256 << 10

#: A file whose timestamps are this close to now may still change without changing them
#: (coarse file-system clocks); its line index is not kept.
RACY_NS = 2_000_000_000


@dataclass(frozen=True)
class IndexedFile:
    """A file's line index, and what its whole read recorded for staleness checks
    (:class:`~._state.FileStates`), which its later windows, reading only their lines,
    record again or leave in place (neither for a file too large for edits, which is never
    hashed).

    Attributes:
        index: its lines' :class:`~workspace_tools.text._lines.LineIndex`.
        digest: the :func:`~._state.content_hash` of a content too large to keep whole,
            being taken.
        counts: the line counts recorded with a content kept whole (see
            :meth:`~._state.FileStates.still_kept`): its later windows may be read from the
            index only while that record is the file's.
    """

    index: LineIndex
    digest: PendingDigest | None = None
    counts: LineCounts | None = None


class LineIndexCache:
    """Line indexes of the last few files read (:data:`MIN_INDEXED_BYTES` or more), each
    kept for its file's stat identity (device, inode, size, mtime and ctime in
    nanoseconds): a later window of the same unchanged file seeks to its lines instead of
    reading the whole file.

    An identity whose timestamps are within :data:`RACY_NS` of now is not kept: the file
    system's clock may not have ticked for a change made just after, which would then
    leave the identity as it was.

    Args:
        size: how many files' indexes are kept (the least recently read goes first).
    """

    def __init__(self, size: int = 16) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[int, ...], IndexedFile] = OrderedDict()

    def fresh_lock(self) -> None:
        """In a forked child that runs no other thread: a new lock (see
        :meth:`~._walk.Walker.fresh_lock`); the indexes stay."""
        self._lock = threading.Lock()

    @staticmethod
    def key(info: os.stat_result) -> tuple[int, ...]:
        """The stat identity of a file's content."""
        return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)

    def get(self, info: os.stat_result) -> IndexedFile | None:
        """The index kept for this identity, if any."""
        with self._lock:
            return self._entries.get(self.key(info))

    def put(self, info: os.stat_result, index: IndexedFile) -> None:
        """Keep ``index`` for the file whose ``fstat`` (taken before reading) is ``info``."""
        settled = time.time_ns() - RACY_NS
        if info.st_mtime_ns >= settled or info.st_ctime_ns >= settled:
            return
        key = self.key(info)
        with self._lock:
            self._entries[key] = index
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
