"""One grep call: search the files in order, keep results up to the limit, count the rest.
The model text is made from a run by ``_format``; this module imports no more than the
search needs, so that the searcher process (``_searcher``) starts quickly."""

from __future__ import annotations

import os
from collections.abc import Callable
from operator import itemgetter
from pathlib import Path
from typing import Protocol

from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools.search._matcher import (
    BINARY_PROBE,
    EVERY_BOM,
    WIDE_BOMS,
    FileMatches,
    LineMatch,
    Matcher,
)
from workspace_tools.search._reading import FIRST_READ, WHOLE_READ
from workspace_tools.workspace._files import OUT_OF_FDS, DirFds, open_read

# Lines longer than this are cut in results (a minified file is one huge line).
MAX_LINE = 2000

# The kept matching lines of one file: its path and its LineMatch tuples (line, column,
# text, length), as the matcher made them. Grouped by file, plain tuples: a search may keep
# thousands of lines, each copied or wrapped would cost, and they cross from searcher processes
# as they are.
FileRows = tuple[str, list[LineMatch]]

# Called with each file's path and matching lines as a run keeps them (see GrepRun).
FoundHook = Callable[[str, list[LineMatch]], None]


class KeptFiles(Protocol):
    """The bytes of files kept from earlier searches (the warm index's, see ``_index``):
    ``get`` gives a file's whole bytes while they are known to be its content, and
    ``keep`` offers those of a text file a search read whole."""

    def get(self, rel: str) -> bytes | None:
        """The bytes kept of ``rel``, or ``None``."""

    def keep(self, rel: str, data: bytes) -> None:
        """Offer the whole bytes ``data`` of the text file ``rel``, just read."""


# kept lines by file, files (path, count), context lines by path, and the totals
# (match_count, files_matched, files_searched, binary_skipped).
RunState = tuple[
    list[FileRows],
    list[tuple[str, int]],
    dict[str, dict[int, str]],
    tuple[int, int, int, int],
    list[str],
]


class GrepRun:
    """Results of one search, cut at ``limit`` (matching lines, and files) but counted in
    full. Files must be searched in path order; results keep that order.

    ``kept_before``: matching lines that searches of earlier files (a split search's
    earlier blocks) kept already, so that this run keeps at most ``limit - kept_before``
    (those it keeps are all in :attr:`found`; the files it lists are cut at ``limit``).

    ``on_found``: called with each file's path and kept lines as they are added to
    :attr:`found` (in order, each file once, its lines final), so that what is made of
    them (the model text, result models) is made while a split search is still running
    rather than after it.

    ``kept_files``: bytes kept from earlier searches, used instead of reading those files,
    and offered those of the text files this run reads whole."""

    def __init__(
        self,
        matcher: Matcher,
        *,
        limit: int,
        context: int,
        kept_before: int = 0,
        on_found: FoundHook | None = None,
        kept_files: KeptFiles | None = None,
    ) -> None:
        self.matcher = matcher
        self.limit = limit
        self.context = context
        self.on_found = on_found
        self.kept_files = kept_files
        # Kept matching lines by file, in order, and how many in all (with kept_before).
        self.found: list[FileRows] = []
        self.kept = min(kept_before, limit)
        self.files: list[tuple[str, int]] = []
        self.context_lines: dict[str, dict[int, str]] = {}
        self.match_count = 0
        self.files_matched = 0
        self.files_searched = 0
        self.binary_skipped = 0
        self.ignored = 0
        # Files and directories (ending in "/") this process may not read: not searched.
        self.unreadable: list[str] = []

    @property
    def truncated(self) -> bool:
        """Whether any list was cut at the limit."""
        return self.kept < self.match_count or len(self.files) < self.files_matched

    def search_files(self, root: str, files: list[str], buffer: bytearray | None = None) -> None:
        """Search the walked regular files ``files`` (relative to ``root``), in order;
        ``buffer`` (:data:`WHOLE_READ` bytes) is the read buffer to use, a new one if
        ``None``.

        Files are read into one reused buffer: the first read (64 KiB) is enough to tell a
        binary file, whose rest is never read; a text file up to the buffer's size (1 MiB)
        is read whole by a second read and searched from memory, a bigger one window by
        window. Files are opened relative to their directory's fd (``openat``), each
        directory reached from the root one component at a time (:class:`DirFds`), all with
        ``O_NOFOLLOW``: a file or directory swapped for a symlink since the walk is skipped,
        never followed out of the root. A file without
        the pattern's required literal is counted and left, without a copy or a call into
        the matcher: that is most files of most searches. A file whose bytes
        :attr:`kept_files` holds is not read; with ``kept_files``, those of a text file
        read whole are offered to it.
        """
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
        first, probe, wide = FIRST_READ, BINARY_PROBE, WIDE_BOMS
        if buffer is None:
            buffer = bytearray(WHOLE_READ)
        size = len(buffer)
        view = memoryview(buffer)
        head, tail = [view[:first]], [view[first:]]
        readv = os.readv
        matcher = self.matcher
        find_required = matcher.find_required
        in_buffer = self._in_buffer()
        search_whole = self._search_whole
        kept = self.kept_files
        get_kept = None if kept is None else kept.get
        directory, dir_fd = None, -1
        with DirFds(root) as dirs:
            for rel in files:
                if get_kept is not None:
                    data = get_kept(rel)
                    if data is not None:
                        search_whole(rel, data, len(data))
                        continue
                slash = rel.rfind("/")
                if directory is None or rel[: max(slash, 0)] != directory:
                    directory = rel[: max(slash, 0)]
                    try:
                        dir_fd = dirs.get(directory)
                    except OSError as exc:
                        if exc.errno in OUT_OF_FDS:
                            raise  # a search missing what it could not open is no search
                        dir_fd = -1  # swapped for a link, or gone, since the walk
                if dir_fd < 0:
                    continue
                try:
                    fd = os.open(rel[slash + 1 :], flags, dir_fd=dir_fd)
                except PermissionError:
                    self.unreadable.append(rel)
                    continue
                except OSError as exc:
                    if exc.errno in OUT_OF_FDS:
                        raise OSError(exc.errno, exc.strerror, rel) from None
                    continue  # gone, or swapped for a link, since the walk
                try:
                    # A short read is the end of a regular file.
                    count = readv(fd, head)
                    if buffer.find(b"\0", 0, min(count, probe)) >= 0 and not buffer.startswith(
                        wide, 0, count
                    ):
                        self.binary_skipped += 1
                        continue
                    if count == first:
                        count += readv(fd, tail)
                    if count == size:
                        self.add(rel, view[:first].tobytes(), fd)
                        continue
                    if kept is not None:
                        data = view[:count].tobytes()
                        kept.keep(rel, data)
                        search_whole(rel, data, count)
                        continue
                    # As _search_whole does, inline: this runs for every file of most
                    # searches.
                    at = 0 if find_required is None else find_required(buffer, 0, count)
                    if at < 0 and not buffer.startswith(wide, 0, count):
                        self.files_searched += 1
                    elif in_buffer and not buffer.startswith(EVERY_BOM, 0, count):
                        self.files_searched += 1
                        keep = self.limit - self.kept
                        self._record(rel, matcher.find_plain(buffer, count, at, keep), count)
                    else:
                        self.add(rel, view[:count].tobytes())
                except OSError:
                    continue
                finally:
                    os.close(fd)

    def _in_buffer(self) -> bool:
        """Whether a file is searched in its bytes as read, with no copy: a plain literal
        without context lines."""
        matcher = self.matcher
        return matcher.plain and not self.context and matcher.find_required is not None

    def _search_whole(self, rel: str, data: bytes, count: int) -> None:
        """Search the text file ``rel`` whose whole bytes are ``data`` (``count`` of them),
        as :meth:`search_files` searches a file read whole."""
        matcher = self.matcher
        find_required = matcher.find_required
        at = 0 if find_required is None else find_required(data, 0, count)
        if at < 0 and not data.startswith(WIDE_BOMS):
            self.files_searched += 1
        elif self._in_buffer() and not data.startswith(EVERY_BOM):
            self.files_searched += 1
            keep = self.limit - self.kept
            self._record(rel, matcher.find_plain(data, count, at, keep), count)
        else:
            self.add(rel, data)

    def state(self) -> RunState:
        """What this run found, as plain values (to cross a process boundary)."""
        return (
            self.found,
            self.files,
            self.context_lines,
            (self.match_count, self.files_matched, self.files_searched, self.binary_skipped),
            self.unreadable,
        )

    def merge(self, state: RunState) -> None:
        """Add what a run over the files after this run's found (see :meth:`state`)."""
        found, files, context_lines, counts, unreadable = state
        self.unreadable.extend(unreadable)
        room = self.limit - self.kept
        self.files.extend(files[: self.limit - len(self.files)])
        for rel, rows in found:
            if room <= 0:
                break
            kept = rows[:room]
            room -= len(kept)
            self.found.append((rel, kept))
            self.kept += len(kept)
            if self.on_found is not None:
                self.on_found(rel, kept)
            near_lines = context_lines.get(rel)
            if not near_lines and len(kept) == len(rows):
                continue
            # As if the file had been searched keeping only these matches: the context of
            # the cut ones goes, and a cut match next to a kept one is a context line.
            near = {row[0] + d for row in kept for d in range(-self.context, self.context + 1)}
            lines = {n: t for n, t in (near_lines or {}).items() if n in near}
            cut = {line: text for line, _, text, _ in rows[len(kept) :]}
            lines.update((n, t) for n, t in cut.items() if n in near)
            if lines:
                self.context_lines[rel] = lines
        self.match_count += counts[0]
        self.files_matched += counts[1]
        self.files_searched += counts[2]
        self.binary_skipped += counts[3]

    def search_named_file(self, root: str, real: str, rel: str) -> None:
        """Search one file the caller named (ignore rules do not apply). ``real`` is its real
        path, checked to be inside ``root``; it is opened from the root one component at a
        time without following a symlink, so a directory on its way swapped for a link
        since then is refused, not followed.

        Raises:
            ToolError: ``TOOL_ERROR`` when it is not a regular file; the code of
                :func:`~..workspace._files.os_error` when it cannot be reached.
        """
        try:
            with open_read(Path(root), Path(real), rel) as (handle, _):
                # As for walked files: the first read tells a binary file, whose rest is
                # never read; a big text file is searched window by window, never whole.
                fd = handle.fileno()
                data = os.read(fd, FIRST_READ)
                if len(data) < FIRST_READ:
                    self.add(rel, data)
                else:
                    self.add(rel, data, fd)
        except ToolError as exc:
            if exc.code is ErrorCode.TOOL_ERROR and str(exc).endswith("not a regular file"):
                # Its kind named, as read_file names it.
                raise ToolError(f"{exc.message}; grep searches files and directories") from None
            raise

    def add(self, rel: str, data: bytes, fd: int | None = None) -> None:
        """Search one file and record what it holds: ``data`` is the whole file, or with
        ``fd`` its first read, the rest to be read from ``fd``."""
        if self.matcher.is_binary(data):
            self.binary_skipped += 1
            return
        self.files_searched += 1
        keep = self.limit - self.kept
        if fd is None:
            found = self.matcher.find(data, keep, self.context)
        else:
            found = self.matcher.find_in_file(fd, data, keep, self.context)
        self._record(rel, found, len(data))

    def _record(self, rel: str, found: FileMatches | None, size: int) -> None:
        """Record what the search of one file of ``size`` bytes found."""
        if found is None:
            return
        self.match_count += found.count
        self.files_matched += 1
        if len(self.files) < self.limit:
            self.files.append((rel, found.count))
        rows = found.lines
        if rows:
            # A text of at most MAX_LINE bytes has no line longer than MAX_LINE characters.
            if size > MAX_LINE and max(map(len, map(itemgetter(2), rows))) > MAX_LINE:
                rows = [_clipped(row) for row in rows]
            self.found.append((rel, rows))
            self.kept += len(rows)
            if self.on_found is not None:
                self.on_found(rel, rows)
        if found.context:
            self.context_lines[rel] = {n: clip_head(t) for n, t in found.context.items()}


def _clipped(row: LineMatch) -> LineMatch:
    line, column, text, length = row
    if len(text) <= MAX_LINE:
        return row
    first, *rest = text.split("\n")
    shown = [clip_around(first, column - 1, length), *map(clip_head, rest)]
    return line, column, "\n".join(shown), length


def clip_head(text: str) -> str:
    """A line cut to its first :data:`MAX_LINE` characters, with a marker saying how many
    were cut."""
    if len(text) <= MAX_LINE:
        return text
    return text[:MAX_LINE] + _cut_marker(len(text) - MAX_LINE, after=True)


def clip_around(text: str, start: int, length: int) -> str:
    """A line cut to :data:`MAX_LINE` characters around its match (``length`` characters at
    ``start``, 0-based), with markers saying how many were cut on each side: the match of a
    minified file's only line is shown, wherever it lies."""
    if len(text) <= MAX_LINE:
        return text
    shown = min(length, MAX_LINE)
    lo = max(0, min(start - (MAX_LINE - shown) // 2, len(text) - MAX_LINE))
    hi = lo + MAX_LINE
    before = _cut_marker(lo, after=False) if lo else ""
    after = _cut_marker(len(text) - hi, after=True) if hi < len(text) else ""
    return before + text[lo:hi] + after


def _cut_marker(count: int, *, after: bool) -> str:
    marker = f"[{count:,} characters cut]"
    return f" … {marker}" if after else f"{marker} … "
