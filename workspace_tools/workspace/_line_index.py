"""Line indexes of big files read, kept by a workspace for the next window of the same file."""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from workspace_tools.text._lines import LineIndex
from workspace_tools.workspace._state import PendingDigest

#: A file whose timestamps are this close to now may still change without changing them
#: (coarse file-system clocks); its line index is not kept.
RACY_NS = 2_000_000_000


@dataclass(frozen=True)
class IndexedFile:
    """A file's line index, and the hash of its content when it was read whole (a staleness
    check's record for its later windows, which read only their lines).

    Attributes:
        index: its lines' :class:`~workspace_tools.text._lines.LineIndex`.
        digest: its :func:`~._state.content_hash`, being taken; ``None`` for a file too
            large for edits, which is never hashed.
    """

    index: LineIndex
    digest: PendingDigest | None = None


class LineIndexCache:
    """Line indexes of the last few big files read, each kept for its file's stat identity
    (device, inode, size, mtime and ctime in nanoseconds): a later window of the same
    unchanged file seeks to its lines instead of reading the whole file.

    An identity whose timestamps are within :data:`RACY_NS` of now is not kept: the file
    system's clock may not have ticked for a change made just after, which would then
    leave the identity as it was.

    Args:
        size: how many files' indexes are kept (the least recently read goes first).
    """

    def __init__(self, size: int = 8) -> None:
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
