"""One text file under change: load it checked (size, binary, staleness), save it atomically.

Callers hold the file's lock (:meth:`FileStates.lock`) around load, change and save, so that
concurrent calls on one file run one after another and none loses another's update.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import stat
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools.text._decode import (
    UTF8,
    TextFormat,
    decode_text,
    dominant_newline,
    encode_text,
)
from workspace_tools.text._diff import TextDiff, unified_diff
from workspace_tools.text._editorconfig import new_file_newline
from workspace_tools.text._line_counts import LineCounts
from workspace_tools.text._spans import Span, shifted, unchanged_ends
from workspace_tools.workspace._files import (
    CommitGuard,
    Content,
    _check_writable,
    _existing,
    _take_owner,
    _write_all,
    atomic_write,
    content_size,
    held_levels,
    libc_function,
    open_parent,
    os_error,
    other_links_note,
    read_bytes,
    swap_in,
)
from workspace_tools.workspace._paths import ResolvedPath
from workspace_tools.workspace._state import PendingDigest
from workspace_tools.workspace._tempfiles import create_temp, remove_stale_temps
from workspace_tools.workspace._workspace import Workspace


@dataclass(frozen=True)
class CurrentText:
    """A file's state before a change.

    Attributes:
        text: its text (``None`` when the file does not exist).
        format: the encoding to write back in (UTF-8 without BOM for a new file).
        newline: the newline style every written line gets: the file's dominant one, or
            for a file without line breaks the one a new file would get.
        lines: counts of ``text``'s lines kept from the change that wrote it (see
            :class:`~workspace_tools.text._line_counts.LineCounts`), ``None`` when none are.
    """

    text: str | None
    format: TextFormat
    newline: str
    lines: LineCounts | None = None


@dataclass(frozen=True)
class ReadFile:
    """A file's bytes read for a change (``None``: no such file), and their hash being
    taken meanwhile when the staleness check will need one
    (:meth:`~._state.FileStates.hash_meanwhile`)."""

    data: bytes | None
    digest: PendingDigest | None = None


def read_for_change(workspace: Workspace, resolved: ResolvedPath) -> ReadFile:
    """Read ``resolved`` whole for a change and start taking its hash if the staleness check
    will need it (:func:`load_text` checks it).

    Raises:
        ToolError: ``FILE_TOO_LARGE`` over ``max_file_bytes``, and the errors of
            :func:`~._files.open_read`.
    """
    limit = workspace.options.max_file_bytes
    data = read_bytes(workspace.root, resolved.real, resolved.rel, limit=limit)
    if data is None:
        return ReadFile(None)
    return ReadFile(data, workspace.file_states.hash_meanwhile(resolved.real, data))


def load_text(
    workspace: Workspace, resolved: ResolvedPath, read: ReadFile | None = None
) -> CurrentText:
    """Read ``resolved`` for a change (or take what :func:`read_for_change` read of it).

    Raises:
        ToolError: ``FILE_TOO_LARGE`` over ``max_file_bytes``, ``BINARY_FILE``,
            ``STALE_FILE`` when it changed since last read or written, and the errors of
            :func:`~._files.open_read`.
    """
    read = read or read_for_change(workspace, resolved)
    data = read.data
    if data is None:
        return CurrentText(None, UTF8, new_file_newline(workspace.root, resolved.real))
    decoded = decode_text(data, resolved.rel)  # beside the hash being taken
    lines = workspace.file_states.check_fresh(resolved.real, data, resolved.rel, read.digest)
    newline = dominant_newline(decoded.text) or new_file_newline(workspace.root, resolved.real)
    return CurrentText(decoded.text, decoded.format, newline, lines)


@dataclass(frozen=True)
class Saved:
    """A text file written: ``size`` in bytes, and ``note``, for the model, when the file
    had other hard links, which keep the old content (``None`` otherwise); ``data``, the
    content written, as the workspace recorded it."""

    size: int
    note: str | None
    data: Content


def save_text(
    workspace: Workspace,
    resolved: ResolvedPath,
    text: str,
    fmt: TextFormat,
    *,
    guard: CommitGuard = nullcontext,
) -> Saved:
    """Write ``text`` in ``fmt`` atomically and remember it as seen (:func:`save_bytes`).

    Raises:
        ToolError: ``ENCODING_ERROR`` when ``fmt`` cannot hold ``text``, and as
            :func:`save_bytes`.
    """
    resolved.refuse_directory_form()
    return save_bytes(workspace, resolved, encode_text(text, fmt, resolved.rel), guard=guard)


def save_bytes(
    workspace: Workspace,
    resolved: ResolvedPath,
    data: Content,
    lines: LineCounts | None = None,
    *,
    guard: CommitGuard = nullcontext,
) -> Saved:
    """Write ``data`` atomically and remember it as seen, with ``lines``, counts of its
    text's lines, when given (:meth:`~._state.FileStates.record`).

    ``guard`` is entered around the commit (see :func:`~._files.atomic_write`): a tool
    passes its context's :meth:`~workspace_tools.ToolContext.committing`, so that nothing
    lands once its call timed out. The workspace's ``write_read_only_files`` option decides
    on files without any write permission bit.

    Raises:
        ToolError: ``INVALID_ARGUMENTS`` for a path written as a directory's (``new/``),
            ``FILE_TOO_LARGE`` over ``max_file_bytes``, and the errors of
            :func:`~._files.atomic_write`.
    """
    resolved.refuse_directory_form()
    size = content_size(data)
    limit = workspace.options.max_file_bytes
    if size > limit:
        raise ToolError(
            f"The new content of {resolved.rel} is {size:,} bytes, over the "
            f"{limit:,}-byte limit; write less",
            ErrorCode.FILE_TOO_LARGE,
        )
    links = atomic_write(
        workspace.root,
        resolved.real,
        resolved.rel,
        data,
        write_read_only=workspace.options.write_read_only_files,
        guard=guard,
        fsync=workspace.options.fsync,
        sweeps=workspace.temp_sweeps,
    )
    workspace.file_states.record(resolved.real, data, lines)
    return Saved(size, other_links_note(resolved.rel, links), data)


def save_change(
    workspace: Workspace,
    resolved: ResolvedPath,
    current: CurrentText,
    new: str,
    *,
    fmt: TextFormat | None = None,
    spans: Sequence[Span] | None = None,
    guard: CommitGuard = nullcontext,
) -> tuple[Saved, TextDiff]:
    """The change's :func:`text_diff`, numbered from the line counts kept with the current
    text (:attr:`CurrentText.lines`), then :func:`save_text` of ``new`` over the file's
    ``current`` text, in ``fmt`` (by default the file's); what the diff counted carries
    over to the counts of ``new``, kept with it for the file's next change
    (:meth:`FileStates.keep_lines`). ``spans``: as :func:`text_diff`'s.

    Raises:
        ToolError: as :func:`save_text`.
    """
    fmt = fmt or current.format
    old = current.text
    # The diff first: nothing is written for a change that could not be described.
    if old is None:
        diff = text_diff(None, new, fmt, resolved.rel)
        return save_text(workspace, resolved, new, fmt, guard=guard), diff
    counts = current.lines or LineCounts()
    diff = text_diff(old, new, fmt, resolved.rel, spans, counts)
    saved = save_text(workspace, resolved, new, fmt, guard=guard)
    unchanged = (0, 0) if spans is None else unchanged_ends(spans, len(old))
    workspace.file_states.keep_lines(resolved.real, saved.data, counts.changed(old, new, unchanged))
    return saved, diff


def text_diff(
    old: str | None,
    new: str,
    fmt: TextFormat,
    path: str,
    spans: Sequence[Span] | None = None,
    lines: LineCounts | None = None,
) -> TextDiff:
    """The unified diff of a change. A UTF-8 BOM is kept in the diff as U+FEFF, so the diff
    encoded in the file's encoding (``utf-8`` or ``latin-1``) applies to the file's bytes;
    a UTF-16/32 file's diff is of its text (git treats such files as binary).
    ``spans``: as ``unified_diff``'s, of ``old`` and ``new`` without the BOM; ``lines``:
    counts of ``old``'s lines to number the hunks from (and to add to)."""
    bom = "\ufeff" if fmt.bom and fmt.codec == "utf-8" else ""
    if old is None:
        return unified_diff(None, bom + new, path)
    if bom:
        lines = None  # its offsets are of the text without the BOM
    if spans is not None:
        spans = shifted(spans, len(bom))
    return unified_diff(bom + old, bom + new, path, spans=spans, lines=lines)


_SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>: start writeback of dirty pages, wait for none


# Linux's sync_file_range(2).
_SYNC_FILE_RANGE: Callable[[int, int, int, int], int] | None = libc_function(
    "sync_file_range", ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint
)


def start_writeback(fd: int) -> None:
    """Ask the kernel to start writing ``fd``'s dirty data to the disk now, without waiting.

    Only a head start for a later ``fsync``, which still makes the data durable: the
    writes of several files then reach the device together, and ext4 and XFS allocate their
    blocks in one journal transaction, so that each file's ``fsync`` after the first finds
    its data written and its transaction committed, where one after another each would
    wait for a commit of its own. A file system that does not support it ignores it.
    """
    if _SYNC_FILE_RANGE is not None:
        _SYNC_FILE_RANGE(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)


@dataclass
class _Staged:
    """A file's new content in its temp file, written, not yet renamed over the target.
    ``fd`` is the temp file's (holding its lock), ``-1`` once let go to bound the fds a
    batch holds (its data then already flushed); ``identity`` is its device and inode."""

    real: Path
    rel: str
    name: str
    temp: str
    fd: int
    identity: tuple[int, int]
    created: bool
    renamed: bool = False


class BatchWrite:
    """Atomic, durable replacement of several files that land together.

    Each file as :func:`~._files.atomic_write` writes it (temp file in its directory,
    owner, group and mode kept, a read-only file refused, stale temps of dead writes
    removed), but in phases so that the durability costs one flush per batch rather than
    two per file: :meth:`stage` writes every file's temp file and starts its writeback
    (:func:`start_writeback`), :meth:`flush` makes their data durable (``fsync`` of each,
    one after another: with the writeback under way they mostly find their data written
    and their journal transaction committed, which measured faster than ``fsync`` from a
    pool of threads made for the batch, and ``fdatasync`` saved nothing), :meth:`replace`
    renames each over its target, and :meth:`sync` makes the renames (and removals noted
    with :meth:`removed`) durable (``fsync`` of each directory once). The caller may do
    other work between :meth:`stage` and :meth:`flush`, while the disk writes. Never
    ``syncfs(2)``, though it is cheaper for many small files: it also waits for every
    other process's dirty data on the file system, so a call's time would depend on what
    others write. A crash before a rename leaves that
    file's old content, after it the new, never a half-written file; :meth:`close` (or
    leaving the ``with`` block) removes every temp file not renamed. A file whose temp
    file cannot take its owner or whose directory is not writable is written by
    :func:`~._files.atomic_write` at :meth:`replace` (in place, as it does). With ``fsync``
    off (the workspace's ``fsync`` option) nothing is flushed: :meth:`flush` and
    :meth:`sync` do nothing, the batch stays all or nothing and each file atomic.

    The fds a batch holds are bounded whatever its number of files and directories
    (:func:`~._files.held_levels` of each kind): past that, the oldest temp file is
    flushed at once and its fd closed (to be renamed, it is opened again, checked to be
    the same file and locked), and the least recently used directory's fd is closed
    (opened again from the root without following a link when needed, and checked to be
    the same directory: one swapped meanwhile fails the file with ``ELOOP``).
    """

    def __init__(self, root: Path, *, write_read_only: bool = False, fsync: bool = True) -> None:
        self._root = root
        self._write_read_only = write_read_only
        self._fsync = fsync
        self._staged: dict[Path, _Staged] = {}
        self._direct: dict[Path, tuple[str, bytes]] = {}
        self._held = held_levels()
        self._holding: list[_Staged] = []  # staged files whose fd is open, oldest first
        # Directories of the staged files and of the removals: the identity of each, and
        # the fds of those used last (closed by close()).
        self._dir_ids: dict[Path, tuple[int, int]] = {}
        self._dir_fds: OrderedDict[Path, int] = OrderedDict()
        self._cleaned: set[tuple[int, int]] = set()  # directories rid of stale temps

    def __enter__(self) -> BatchWrite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stage(self, real: Path, rel: str, data: bytes, *, guard: CommitGuard = nullcontext) -> None:
        """Write ``data`` to a temp file beside ``real`` (making missing parents, each
        ``mkdir`` under ``guard``).

        Raises:
            ToolError: as :func:`~._files.atomic_write`; the target is unchanged.
        """
        if real == self._root:
            raise os_error(IsADirectoryError(), rel)
        old: os.stat_result | None = None
        try:
            dir_fd = self._parent(real, guard)
            name = real.name
            old = _existing(dir_fd, name)
            if old is not None:
                _check_writable(dir_fd, name, old, rel, self._write_read_only)
            self._stage_in(dir_fd, real, rel, name, data, old)
        except OSError as exc:
            error = os_error(exc, rel)
            outcome = "nothing was written" if old is None else "the file was left unchanged"
            raise ToolError(f"{error.message}; {outcome}", error.code) from exc

    def _parent(self, real: Path, guard: CommitGuard = nullcontext, *, create: bool = True) -> int:
        """An fd of ``real``'s directory, reached from the root without following a
        symlink (:func:`~._files.open_parent`) and kept among the ones used last; the
        first time rid of stale temp files (its own temp files are not stale), each time
        after checked to be the directory first found there.

        Raises:
            OSError: as ``open_parent``; ``ELOOP`` for a directory that is no longer the
                one the batch first found there.
        """
        parent = real.parent
        fd = self._dir_fds.get(parent)
        if fd is not None:
            self._dir_fds.move_to_end(parent)
            return fd
        with open_parent(self._root, real, create=create, guard=guard) as (dir_fd, _):
            fd = os.dup(dir_fd)
        info = os.fstat(fd)
        identity = (info.st_dev, info.st_ino)
        if self._dir_ids.setdefault(parent, identity) != identity:
            os.close(fd)
            raise OSError(errno.ELOOP, "the directory changed while the files were written")
        self._dir_fds[parent] = fd
        while len(self._dir_fds) > self._held:
            os.close(self._dir_fds.popitem(last=False)[1])
        if identity not in self._cleaned:
            remove_stale_temps(fd)
            self._cleaned.add(identity)
        return fd

    def _stage_in(
        self, dir_fd: int, real: Path, rel: str, name: str, data: bytes, old: os.stat_result | None
    ) -> None:
        mode = 0o666 if old is None else stat.S_IMODE(old.st_mode)
        try:
            temp, fd = create_temp(dir_fd, name, mode)
        except PermissionError:
            # A directory this process may not write: atomic_write says so for a new
            # file, and rewrites an existing writable one in place.
            self._direct[real] = (rel, data)
            return
        info = os.fstat(fd)
        staged = _Staged(real, rel, name, temp, fd, (info.st_dev, info.st_ino), old is None)
        self._staged[real] = staged
        if old is not None and not _take_owner(fd, old):
            self._discard(staged, dir_fd)
            self._direct[real] = (rel, data)
            return
        _write_all(fd, data)
        if old is not None:
            # After fchown and the writes, which clear setuid/setgid bits; no umask here.
            os.fchmod(fd, stat.S_IMODE(old.st_mode))
        if self._fsync:
            start_writeback(fd)
        self._holding.append(staged)
        if len(self._holding) > self._held:
            self._let_go(self._holding.pop(0))

    def _let_go(self, item: _Staged) -> None:
        """Flush ``item``'s temp file now and close its fd (see the class docstring).

        Raises:
            OSError: the flush failed; no target is changed.
        """
        try:
            if self._fsync:
                os.fsync(item.fd)
        finally:
            os.close(item.fd)
            item.fd = -1

    def flush(self) -> None:
        """Make every staged file's data durable, before any rename (those let go were
        flushed then).

        Raises:
            ToolError: the flush failed (``DISK_FULL``, ...); no target is changed.
        """
        if not self._fsync:
            return
        for item in self._holding:
            try:
                os.fsync(item.fd)
            except OSError as exc:
                error = os_error(exc, item.rel)
                raise ToolError(f"{error.message}; no file was changed", error.code) from exc

    def replace(self, real: Path, *, guard: CommitGuard = nullcontext) -> None:
        """Rename the staged temp file of ``real`` over it (under ``guard``).

        Raises:
            ToolError: the rename failed; ``real`` is unchanged.
        """
        if real in self._direct:
            rel, data = self._direct.pop(real)
            atomic_write(
                self._root,
                real,
                rel,
                data,
                write_read_only=self._write_read_only,
                guard=guard,
                fsync=self._fsync,
            )
            return
        item = self._staged[real]
        try:
            dir_fd = self._parent(real, create=False)
            with self._locked(item, dir_fd), guard():
                if self._fsync or item.created:
                    os.replace(item.temp, item.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                else:
                    swap_in(dir_fd, item.temp, item.name)
        except OSError as exc:
            error = os_error(exc, item.rel)
            outcome = "nothing was written" if item.created else "the file was left unchanged"
            raise ToolError(f"{error.message}; {outcome}", error.code) from exc
        item.renamed = True

    @contextlib.contextmanager
    def _locked(self, item: _Staged, dir_fd: int) -> Iterator[None]:
        """Hold ``item``'s temp file locked (see :mod:`._tempfiles`): by its own fd, or for
        one let go, by the file opened again, checked to be the one written, and locked."""
        if item.fd >= 0:
            yield
            return
        fd = os.open(item.temp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            info = os.fstat(fd)
            if (info.st_dev, info.st_ino) != item.identity:
                raise OSError(errno.ENOENT, "the written copy is gone")
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def removed(self, real: Path) -> None:
        """Note that ``real`` was removed: :meth:`sync` makes its removal durable."""
        with contextlib.suppress(OSError):
            self._parent(real, create=False)

    def sync(self) -> None:
        """Make the renames and noted removals durable.

        Raises:
            ToolError: the flush failed; the files are renamed but maybe not durable.
        """
        if not self._fsync:
            return
        seen: set[tuple[int, int]] = set()
        try:
            for parent, identity in list(self._dir_ids.items()):
                if identity not in seen:
                    seen.add(identity)
                    # _parent takes a path in the directory (its name is not used).
                    os.fsync(self._parent(parent / "_", create=False))
        except OSError as exc:
            raise ToolError(
                f"Cannot make the changes durable: {exc.strerror or exc}", ErrorCode.TOOL_ERROR
            ) from exc

    def close(self) -> None:
        """Remove every temp file not renamed and close the fds; never raises."""
        for item in self._staged.values():
            if not item.renamed:
                with contextlib.suppress(OSError):
                    dir_fd = self._parent(item.real, create=False)
                    with self._locked(item, dir_fd):
                        os.unlink(item.temp, dir_fd=dir_fd)
            if item.fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(item.fd)  # drops the temp file's lock, only now
        self._staged.clear()
        self._holding.clear()
        for fd in self._dir_fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._dir_fds.clear()
        self._dir_ids.clear()

    def _discard(self, item: _Staged, dir_fd: int) -> None:
        del self._staged[item.real]
        with contextlib.suppress(OSError):
            os.unlink(item.temp, dir_fd=dir_fd)
        os.close(item.fd)
