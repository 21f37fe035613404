"""What the workspace remembers about files between calls: content hashes and per-file locks."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from workspace_tools._errors import ErrorCode, ToolError


def content_hash(data: bytes) -> bytes:
    """SHA-256 digest of a file's bytes; staleness compares these, never mtimes."""
    return hashlib.sha256(data).digest()


class FileStates:
    """Content hashes of files as last read or written through a workspace, and a lock per
    file so that concurrent calls on one file run one after another.

    Keys are real paths. Thread-safe: tools run in worker threads. Pickles without its locks
    (a sandbox child gets the hashes and fresh locks). A call run in a sandbox child is
    given the hashes (:meth:`snapshot`, :meth:`restore`) and hands back what it changed
    (:meth:`changes`, :meth:`apply`).
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        # Keyed by the path's text: it pickles an order of magnitude faster than a Path.
        self._hashes: dict[str, bytes] = {}
        self._locks: dict[str, threading.Lock] = {}

    def __getstate__(self) -> dict[str, object]:
        return {"hashes": self.snapshot()}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.restore(state["hashes"])  # type: ignore[arg-type]

    def lock(self, real: Path) -> threading.Lock:
        """The lock serialising calls that change ``real`` (one per path, kept for the
        workspace's lifetime)."""
        with self._guard:
            return self._locks.setdefault(str(real), threading.Lock())

    def record(self, real: Path, data: bytes) -> None:
        """Remember ``data`` as the content a caller last saw at ``real``."""
        self.record_digest(real, content_hash(data))

    def record_digest(self, real: Path, digest: bytes) -> None:
        """Remember a :func:`content_hash` of the content a caller last saw at ``real``."""
        with self._guard:
            self._hashes[str(real)] = digest

    def forget(self, real: Path) -> None:
        """Drop what is known about ``real`` (seen, but too large to hash)."""
        with self._guard:
            self._hashes.pop(str(real), None)

    def check_fresh(self, real: Path, current: bytes | None, rel: str) -> None:
        """Refuse a change to ``real`` whose content differs from what was last seen.

        A file never read or written through the workspace, or one deleted since, is fresh.

        Raises:
            ToolError: ``STALE_FILE`` asking for a fresh read.
        """
        with self._guard:
            seen = self._hashes.get(str(real))
        if seen is None or current is None or content_hash(current) == seen:
            return
        raise ToolError(
            f"{rel} changed on disk since it was last read or written; read it again with "
            "read_file, then repeat the change against its current content",
            ErrorCode.STALE_FILE,
        )

    def snapshot(self) -> dict[str, bytes]:
        """The hashes as they are now: real path -> :func:`content_hash`."""
        with self._guard:
            return dict(self._hashes)

    def restore(self, hashes: dict[str, bytes]) -> None:
        """In a sandbox child, before its call: take the hashes of a :meth:`snapshot`, and
        fresh locks. The locks a fork copied may be held by threads that do not exist in
        the child (the caller holds the file's lock around the call)."""
        self._guard = threading.Lock()
        self._locks = {}
        self._hashes = dict(hashes)

    def changes(self, since: dict[str, bytes]) -> tuple[dict[str, bytes], list[str]]:
        """What changed after the snapshot ``since``: ``(recorded, forgotten)``."""
        with self._guard:
            recorded = {k: v for k, v in self._hashes.items() if since.get(k) != v}
            forgotten = [k for k in since if k not in self._hashes]
        return recorded, forgotten

    def apply(self, changes: tuple[dict[str, bytes], list[str]]) -> None:
        """Take over :meth:`changes` made elsewhere (by a call in a sandbox child)."""
        recorded, forgotten = changes
        with self._guard:
            self._hashes.update(recorded)
            for key in forgotten:
                self._hashes.pop(key, None)
