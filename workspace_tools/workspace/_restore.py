"""Changing a tree back to manifest entries: files from the content store by temp file and
rename (as every write of this package), links, directories and modes; and the unified diff
of such a change for a dry run.

Every path is reached from the root one component at a time without following a symlink
(:class:`~._files.DirFds`), so a restore never writes outside the root. The fds of the
directory last used and its ancestors are kept through a restore (as a walk keeps them), so
that a change of ``n`` nested directories costs ``n`` opens, not one walk from the root each
(``n²``).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator

from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools.text._diff import GIT_SYMLINK_MODE, Blob, blob_diff
from workspace_tools.workspace._files import DirFds, _write_all, os_error
from workspace_tools.workspace._manifest import Entry, Manifest, read_entry
from workspace_tools.workspace._store import BlobStore, StoreError
from workspace_tools.workspace._tempfiles import TEMP_SUFFIX, create_temp
from workspace_tools.workspace._workspace import Workspace

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SET_ID = stat.S_ISUID | stat.S_ISGID


class TreeRestorer:
    """Applies restore plans (``path -> entry``, ``None``: absent) to one workspace.

    Args:
        workspace: the tree to change; restored files are recorded as seen in its
            ``file_states`` (an edit against them is not stale), removed ones forgotten.
        store: where the entries' contents are.
    """

    def __init__(self, workspace: Workspace, store: BlobStore) -> None:
        self.workspace = workspace
        self.store = store
        self._root = str(workspace.root)

    def diff(self, plan: dict[str, Entry | None], current: Manifest) -> str:
        """The ``git diff`` of applying ``plan`` to the tree ``current`` describes: text
        files' hunks shown in their encodings, binary ones named (:func:`blob_diff`)."""
        parts = []
        with DirFds(self._root) as dirs:
            for path, target in plan.items():
                parts.append(self._path_diff(dirs, path, current.get(path), target))
        return "".join(parts)

    def _path_diff(self, dirs: DirFds, path: str, now: Entry | None, target: Entry | None) -> str:
        """The ``git diff`` turning ``path`` from ``now`` into ``target`` (:func:`blob_diff`);
        git diffs no directories, so a directory on either side is an absence there."""
        old = new = None
        if now is not None and now.type != "directory":
            old = Blob(_git_mode_bits(now), self._read(dirs, path, now))
        if target is not None and target.type != "directory":
            new = Blob(_git_mode_bits(target), self._blob(target))
        return blob_diff(path, old, new)

    def _read(self, dirs: DirFds, path: str, entry: Entry) -> bytes | None:
        """The current bytes of ``path`` (a link: its target); ``None`` when unreadable."""
        head, _, name = path.rpartition("/")
        try:
            fd = dirs.get(head)
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            return read_entry(fd, name, entry.type, st)
        except OSError:
            return None

    def _blob(self, entry: Entry) -> bytes:
        """The stored content of ``entry``, checked against its hash."""
        assert entry.digest is not None
        try:
            return self.store.get(entry.digest)
        except StoreError as exc:
            raise ToolError(f"Cannot restore: {exc}", ErrorCode.TOOL_ERROR) from exc

    def apply(self, plan: dict[str, Entry | None], current: Manifest) -> None:
        """Change the tree ``current`` describes as ``plan`` says: removals deepest first,
        then creations and contents shallowest first, then directory modes deepest first.

        Raises:
            ToolError: ``TOOL_ERROR`` when a content is missing from the store or damaged
                (checked before it is written), and the mapped ``OSError`` of a change that
                failed; the message lists what was restored before it.
        """
        # Every content is read and checked first: a damaged store changes nothing.
        contents = {
            path: self._blob(target)
            for path, target in plan.items()
            if target is not None and target.type != "directory"
        }
        done: list[str] = []
        with DirFds(self._root) as dirs:
            self._apply(plan, current, contents, done, dirs)

    def _apply(
        self,
        plan: dict[str, Entry | None],
        current: Manifest,
        contents: dict[str, bytes],
        done: list[str],
        dirs: DirFds,
    ) -> None:
        try:
            # A directory the steps made read-only must let its entries be changed first.
            for path, target in plan.items():
                now = current.get(path)
                if now is not None and now.type == "directory" and target is not None:
                    self._chmod_dir(dirs, path, now.mode | 0o700)
            for path in sorted(plan, key=_depth, reverse=True):
                now, target = current.get(path), plan[path]
                if now is not None and (target is None or target.type != now.type):
                    self._remove(dirs, path, now)
                    done.append(path)
            for path in sorted(plan, key=_depth):
                now, target = current.get(path), plan[path]
                if target is None:
                    continue
                replaced = now is not None and now.type != target.type
                if target.type == "directory":
                    if now is None or replaced:
                        self._mkdir(dirs, path, target.mode | 0o700)
                else:
                    self._write(dirs, path, target, contents[path])
                done.append(path)
            for path in sorted(plan, key=_depth, reverse=True):
                target = plan[path]
                if target is not None and target.type == "directory":
                    self._chmod_dir(dirs, path, target.mode)
        except OSError as exc:
            error = os_error(exc, getattr(exc, "rel", "?"))
            restored = ", ".join(dict.fromkeys(done)) or "none"
            raise ToolError(
                f"Restore stopped: {error.message}; restored before that: {restored}", error.code
            ) from exc

    def _remove(self, dirs: DirFds, path: str, now: Entry) -> None:
        head, _, name = path.rpartition("/")
        with _at(dirs, head, path) as dir_fd:
            if now.type == "directory":
                os.rmdir(name, dir_fd=dir_fd)
                return  # no content hash is kept of a directory
            os.unlink(name, dir_fd=dir_fd)
        self.workspace.file_states.forget(self.workspace.root / path)

    def _mkdir(self, dirs: DirFds, path: str, mode: int) -> None:
        head, _, name = path.rpartition("/")
        with _at(dirs, head, path) as dir_fd:
            os.mkdir(name, mode, dir_fd=dir_fd)

    def _chmod_dir(self, dirs: DirFds, path: str, mode: int) -> None:
        head, _, name = path.rpartition("/")
        with _at(dirs, head, path) as dir_fd:
            fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            try:
                os.fchmod(fd, mode)
            finally:
                os.close(fd)

    def _write(self, dirs: DirFds, path: str, target: Entry, data: bytes) -> None:
        """Put ``data``, ``target``'s content, at ``path`` by a temp file renamed over it
        (a symlink by a temp link), with its mode but for the set-user-ID and set-group-ID
        bits (the file is this process's now); crash-safe as any atomic write."""
        head, _, name = path.rpartition("/")
        with _at(dirs, head, path) as dir_fd:
            if target.type == "symlink":
                # A temp name of the package's pattern (the walk skips it), as create_temp's.
                kept = os.fsdecode(os.fsencode(name)[:200])
                temp = f".{kept}.{os.urandom(8).hex()}{TEMP_SUFFIX}"
                os.symlink(os.fsdecode(data), temp, dir_fd=dir_fd)
            else:
                temp, fd = create_temp(dir_fd, name, 0o600)
                try:
                    _write_all(fd, data)
                    # Without set-id bits: the new file is the restorer's (root's, as
                    # an agent often runs), not its recorded owner's, whose program
                    # would then run as the restorer for whoever starts it.
                    os.fchmod(fd, target.mode & ~_SET_ID)
                    if self.workspace.options.fsync:
                        os.fsync(fd)
                finally:
                    os.close(fd)
            try:
                os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temp, dir_fd=dir_fd)
                raise
            if self.workspace.options.fsync:
                os.fsync(dir_fd)
        real = self.workspace.root / path
        if target.type == "file":
            self.workspace.file_states.record(real, data)


@contextlib.contextmanager
def _at(dirs: DirFds, head: str, rel: str) -> Iterator[int]:
    """The fd of ``head`` (no symlink followed; ``dirs`` keeps it); an ``OSError`` names
    ``rel``."""
    try:
        yield dirs.get(head)
    except OSError as exc:
        exc.rel = rel  # type: ignore[attr-defined]
        raise


def _depth(path: str) -> tuple[int, str]:
    return path.count("/"), path


def _git_mode_bits(entry: Entry) -> int:
    if entry.type == "symlink":
        return GIT_SYMLINK_MODE
    return 0o100755 if entry.mode & 0o111 else 0o100644
