"""A content-addressed store of file contents, outside the workspace, for checkpoints.

Layout (git's loose objects, without compression): ``objects/<2 hex>/<62 hex>`` holds the
bytes whose SHA-256 is the 64 hex digits. A blob is written to a temp file in the store and
renamed to its name, so a name only ever holds a whole blob: a crashed process leaves at
most an unnamed temp file. A blob read back is checked against its name
(:meth:`BlobStore.get`), so a blob cut short by a power loss or damaged by something else is
reported, never restored. (No ``fsync``: it would cost a disk flush per blob — most of a
checkpoint's time — for a store that lives as long as its session.)

The store never lives in the workspace nor in a ``.git`` directory: a checkpoint must not
show up in the tree it describes, nor touch the user's repository.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import weakref
from pathlib import Path

from workspace_tools.workspace._files import _write_all

_HEX_LENGTH = 64


class StoreError(Exception):
    """The store cannot give back a blob (missing, or its bytes no longer match its name)."""


class BlobStore:
    """Blobs by SHA-256, in ``directory`` (made if missing).

    Args:
        directory: where the store lives; a new temporary directory when ``None``.
        workspace_root: the root the store must stay out of.
        keep: keep the directory when the store is closed (or collected); a temporary
            directory made here is otherwise removed then, a given one never is.

    Raises:
        ValueError: ``directory`` is inside ``workspace_root`` or inside a ``.git``; or,
            without one, neither the temp directory nor ``~/.cache`` is outside the root.

    Thread-safe: writes of the same blob by two threads both land whole (rename replaces).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None,
        workspace_root: str | os.PathLike[str],
        *,
        keep: bool = False,
    ) -> None:
        made = directory is None
        root = Path(os.path.realpath(os.fspath(workspace_root)))
        if directory is None:
            directory = tempfile.mkdtemp(prefix="workspace-tools-checkpoints-", dir=_parent(root))
        path = Path(os.path.realpath(os.fspath(directory)))
        if _inside(path, root):
            raise ValueError(f"the checkpoint store {path} must be outside the workspace {root}")
        if ".git" in path.parts:
            raise ValueError(f"the checkpoint store {path} must not be inside a .git directory")
        self.directory = path
        self._objects = path / "objects"
        self._objects.mkdir(parents=True, exist_ok=True)
        remove = made and not keep
        self._finalizer = (
            weakref.finalize(self, shutil.rmtree, str(path), ignore_errors=True) if remove else None
        )

    def _path(self, digest: str) -> Path:
        return self._objects / digest[:2] / digest[2:]

    def has(self, digest: str) -> bool:
        """Whether the blob ``digest`` (64 hex digits) is stored."""
        return self._path(digest).is_file()

    def put(self, data: bytes) -> str:
        """Store ``data`` unless a blob with its hash is there; return its hex SHA-256.

        Raises:
            OSError: the store cannot be written (``ENOSPC`` and the like); nothing
                half-written is left under a blob's name.
        """
        digest = hashlib.sha256(data).hexdigest()
        target = self._path(digest)
        if target.is_file():
            return digest
        target.parent.mkdir(exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        try:
            _write_all(fd, data)
            os.close(fd)
            fd = -1
            os.replace(temp, target)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        return digest

    def get(self, digest: str) -> bytes:
        """The bytes of the blob ``digest``.

        Raises:
            StoreError: no such blob, or its bytes do not hash to ``digest``.
        """
        if len(digest) != _HEX_LENGTH:
            raise StoreError(f"not a blob name: {digest!r}")
        try:
            data = self._path(digest).read_bytes()
        except OSError as exc:
            raise StoreError(f"blob {digest} cannot be read: {exc.strerror or exc}") from exc
        if hashlib.sha256(data).hexdigest() != digest:
            raise StoreError(f"blob {digest} is damaged: its bytes no longer match its hash")
        return data

    def write_record(self, name: str, data: bytes) -> None:
        """Replace the file ``name`` at the top of the store with ``data`` (temp file and
        rename: a reader sees the old record or the new one, never a mix).

        Raises:
            OSError: the store cannot be written.
        """
        fd, temp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(temp, self.directory / name)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise

    def size(self) -> tuple[int, int]:
        """``(blobs, bytes)`` stored."""
        count = total = 0
        for folder in self._objects.iterdir():
            for blob in folder.iterdir():
                if not blob.name.startswith("."):
                    count += 1
                    total += blob.stat().st_size
        return count, total

    def close(self) -> None:
        """Remove the store's directory, unless it was given or kept."""
        if self._finalizer is not None:
            self._finalizer()

    @property
    def removed(self) -> bool:
        """The store's directory was removed by :meth:`close` (or collection)."""
        return self._finalizer is not None and not self._finalizer.alive


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _parent(root: Path) -> str:
    """Where a new store goes: the temp directory, else ``$XDG_CACHE_HOME`` or
    ``~/.cache``, whichever is outside ``root`` first.

    Raises:
        ValueError: each is inside ``root`` (a workspace at ``/``, say).
    """
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    for candidate in (tempfile.gettempdir(), cache):
        if not _inside(Path(os.path.realpath(candidate)), root):
            os.makedirs(candidate, exist_ok=True)
            return candidate
    raise ValueError(
        f"no place outside the workspace {root} for the checkpoint store (the temp directory "
        "and ~/.cache are inside it); give one, or turn checkpoints off"
    )
