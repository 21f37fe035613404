"""Fingerprints of what a read-only call saw, so a session knows when a cached result is stale;
the workspace tools that read build their :attr:`Tool.cache_key` from them.

Two kinds, chosen for being exact where it is cheap and cheap where exact would cost as much
as the call itself:

- A file: the BLAKE2b hash of its bytes (symlinks followed). Exact: any change of content
  changes the hash; mtime plays no part (the SPEC judges staleness by content).
- A directory tree: one ``lstat`` per entry, no reads: path, type, size, inode, mtime and
  ctime (nanoseconds) of every entry below the directory, not descending into symlinked
  directories, skipping ``.git`` (never discovered) but including the files that decide
  ignore rules: ``.gitignore``/``.ignore`` of every ancestor, the git index and
  ``info/exclude`` (worktrees included), and in a repository the global excludes file
  and the config files that may name it (``core.excludesFile``). ctime is set by the
  kernel on every write, rename and chmod and cannot be set back by ``touch -r``; an
  atomic write (temp file and rename) gets a new inode. A file system's clock is coarse
  (a kernel tick, a few milliseconds; seconds on some): an in-place rewrite keeping the
  size within the same tick as the previous change would keep every field. So, as git
  treats "racily clean" entries, a tree with an entry changed within :data:`RACY_NS` of
  the fingerprint has none (``None``: the call is not cached); once the clock has moved
  on, any change shows. Hashing every file
  instead would cost what ``grep`` costs, which would make the cache pointless.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from time import time_ns

from workspace_tools._errors import ToolError
from workspace_tools.workspace import Workspace
from workspace_tools.workspace._files import DirFds, open_parent, stat_below
from workspace_tools.workspace._walk import Walker

_CHUNK = 1 << 20
#: A change this close to a tree's fingerprint may not have moved the clock yet; such a
#: tree gets no fingerprint (the walker's rule for reusing a walk, too).
RACY_NS = 2_000_000_000
_IGNORE_FILES = (".gitignore", ".ignore")


def file_fingerprint(workspace: Workspace, path: str) -> str | None:
    """``file:<blake2b hex>`` of a regular file's bytes, ``dir:<tree>`` for a directory,
    ``missing`` when nothing is there; ``None`` when the path is refused (outside the root)
    or names a special file (a FIFO, a socket, a device: never opened, so never a hang)."""
    try:
        real = workspace.resolve(path).real
    except ToolError:
        return None
    try:
        # From the parent's fd, as the tools reach the file: a path past PATH_MAX too.
        mode = stat_below(workspace.root, real).st_mode
    except FileNotFoundError:
        return "missing"
    except OSError:
        return None
    if stat.S_ISDIR(mode):
        return tree_fingerprint(workspace, path)
    if not stat.S_ISREG(mode):
        # A FIFO would block the read, a device never end it: such a file is its stat.
        return None
    digest = hashlib.blake2b()
    try:
        with open_parent(workspace.root, real) as (dir_fd, name):
            fd = os.open(
                name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd
            )
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return None  # swapped for a special file since the stat
            os.set_blocking(fd, True)
            # As far as the size at open: a file a process keeps appending to would hold
            # the read for as long as it grows (its next size gives another fingerprint).
            left = info.st_size
            while left > 0 and (chunk := handle.read(min(_CHUNK, left))):
                digest.update(chunk)
                left -= len(chunk)
    except OSError:
        return None
    return f"file:{digest.hexdigest()}"


def tree_fingerprint(workspace: Workspace, path: str = ".", recursive: bool = True) -> str | None:
    """``dir:<blake2b hex>`` of the ``lstat`` of every entry below ``path`` (one level when
    not ``recursive``) and of the ignore-rule files that apply; a file's
    :func:`file_fingerprint` when ``path`` is a file; ``None`` when the path is refused or
    an entry changed within :data:`RACY_NS` (its change may not show in its stat yet)."""
    try:
        real = workspace.resolve(path).real
    except ToolError:
        return None
    try:
        is_dir = stat.S_ISDIR(stat_below(workspace.root, real).st_mode)
    except OSError:
        is_dir = False
    if not is_dir:
        return file_fingerprint(workspace, path)
    digest = hashlib.blake2b()
    recent = time_ns() - RACY_NS
    try:
        for line in _ignore_context(real, workspace.root, workspace.walker, recent):
            digest.update(line.encode("utf-8", "surrogateescape"))
        for line in _walk_stats(workspace, str(real), recursive, recent):
            digest.update(line.encode("utf-8", "surrogateescape"))
    except _TooRecent:
        return None
    return f"dir:{digest.hexdigest()}"


class _TooRecent(Exception):
    """An entry changed too recently for its stat to vouch for its content."""


def _stat_line(
    path: str, name: str, recent: int, dir_fd: int | None = None, *, follow: bool = False
) -> str:
    try:
        st = os.stat(path, dir_fd=dir_fd, follow_symlinks=follow)
    except OSError:
        return f"{name}\0-\n"
    if st.st_mtime_ns >= recent or st.st_ctime_ns >= recent:
        raise _TooRecent
    kind = "d" if stat.S_ISDIR(st.st_mode) else "l" if stat.S_ISLNK(st.st_mode) else "f"
    return (
        f"{name}\0{kind}\0{st.st_size}\0{st.st_ino}\0{st.st_mtime_ns}\0{st.st_ctime_ns}"
        f"\0{st.st_mode}\n"
    )


def _walk_stats(workspace: Workspace, top: str, recursive: bool, recent: int) -> Iterator[str]:
    """Stat lines of every entry below ``top`` as the workspace's walker lists them (ignored
    ones too; ``.git`` and write temp files never), each taken relative to its directory's
    fd reached without following a link."""
    rel = workspace.rel(top)
    rel = "" if rel == "." else rel
    try:
        walk = workspace.walker.walk(top, rel, recursive=recursive, include_ignored=True)
    except OSError:
        yield f"{rel}\0unreadable\n"  # swapped for a link or removed since resolved
        return
    with DirFds(str(workspace.root)) as dirs:
        for entry_rel, _kind in walk.entries:
            head, _, name = entry_rel.rpartition("/")
            try:
                dir_fd = dirs.get(head)
            except OSError:
                yield f"{entry_rel}\0-\n"
                continue
            yield _stat_line(name, entry_rel, recent, dir_fd)


def _ignore_context(directory: Path, root: Path, walker: Walker, recent: int) -> Iterator[str]:
    """Stat lines of the ignore files above ``directory``, of the git index and exclude,
    and of the global excludes file and the config files naming it (``walker``'s).

    Each ancestor's files are looked up by name in an fd of it, walked from ``/`` by name
    (:class:`~._files.DirFds`), and named in the lines by their level: by whole paths, a
    directory ``n`` levels deep would cost ``n²`` lookups and bytes."""
    names = str(directory).strip("/").split("/") if str(directory) != "/" else []
    with DirFds("/", search_only=True) as dirs:
        for level in range(len(names), -1, -1):
            try:
                dir_fd: int | None = dirs.get("/".join(names[:level]) if level else "")
            except OSError:
                dir_fd = None
            for name in _IGNORE_FILES:
                label = f"{level}/{name}"
                if dir_fd is None:
                    yield f"{label}\0-\n"
                else:
                    yield _stat_line(name, label, recent, dir_fd)
    for git_dir in _git_dirs(root):
        for name in ("index", os.path.join("info", "exclude")):
            candidate = git_dir / name
            yield _stat_line(str(candidate), str(candidate), recent)
    # The global excludes file and the config files that name it, read by the walk in a
    # repository as git reads them: through a symlink.
    for path in walker.global_ignore_files():
        yield _stat_line(path, path, recent, follow=True)


def _git_dirs(root: Path) -> list[Path]:
    """The git directory of the repository holding ``root`` and, for a linked worktree,
    its common directory (where ``info/exclude`` lives); empty outside a repository."""
    for ancestor in (root, *root.parents):
        dot_git = ancestor / ".git"
        if dot_git.is_dir():
            return [dot_git]
        if dot_git.is_file():
            return _linked_git_dirs(dot_git)
    return []


def _linked_git_dirs(dot_git: Path) -> list[Path]:
    try:
        text = dot_git.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return []
    if not text.startswith("gitdir:"):
        return []
    git_dir = (dot_git.parent / text.removeprefix("gitdir:").strip()).resolve()
    dirs = [git_dir]
    try:
        common = (git_dir / (git_dir / "commondir").read_text(encoding="utf-8").strip()).resolve()
        dirs.append(common)
    except OSError:
        pass
    return dirs
