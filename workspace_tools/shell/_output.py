"""Output of shell commands and background processes: head and tail in memory, the whole
of it (up to a cap) in a file of the session's output area, and new output since a read."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

from sandbox import CapturedOutput
from sandbox.spawn._capture import OutputBuffer
from workspace_tools.shell._area import open_output


@dataclass(frozen=True)
class StreamView:
    """What was kept of one stream of a command.

    Attributes:
        captured: head and tail (the whole stream when it fits), with the byte count.
        lines: newline characters the stream carried (a last line without one counts too).
        file: the file that holds the whole stream, when it did not fit in ``captured``;
            ``None`` otherwise.
        file_bytes: bytes of the stream in ``file`` (less than the total when the file's
            cap was reached).
    """

    captured: CapturedOutput
    lines: int
    file: Path | None
    file_bytes: int


class StreamCapture:
    """One stream of one command, kept whole in memory while it is short; once it outgrows
    ``memory_bytes`` it goes on in a file (up to ``file_bytes``) while memory keeps only its
    head and tail.

    Args:
        memory_bytes: bytes kept in memory (head and tail once the stream is longer).
        file: where the whole stream goes once it outgrows memory (its area made again if
            it is gone); ``None``, or a file that cannot be created: nowhere.
        file_bytes: most bytes written to ``file``; later output is counted, not written
            (so is output the file takes no more of: a full disk).

    Not thread-safe: one writer feeds it, and :meth:`view` is read after it stopped.
    """

    def __init__(self, memory_bytes: int, file: Path | None, file_bytes: int) -> None:
        self._buffer = OutputBuffer(memory_bytes)
        self._memory = memory_bytes
        self._early: bytearray | None = bytearray()  # the stream while it fits in memory
        self._file_path = file
        self._file_cap = file_bytes
        self._fd: int | None = None
        self._written = 0
        self._lines = 0
        self._last = b"\n"

    def feed(self, chunk: bytes) -> None:
        """Account for ``chunk``."""
        if not chunk:
            return
        self._buffer.feed(chunk)
        self._lines += chunk.count(b"\n")
        self._last = chunk[-1:]
        if self._early is not None:
            self._early += chunk
            if len(self._early) <= self._memory:
                return
            chunk, self._early = bytes(self._early), None
            if self._file_path is None:
                return
            try:
                self._fd = open_output(self._file_path)
            except OSError:  # no file to be had: the stream is kept head and tail only
                self._file_path = None
                return
        if self._fd is not None and self._written < self._file_cap:
            part = chunk[: self._file_cap - self._written]
            count, whole = _write(self._fd, part)
            self._written += count
            if not whole:  # the file takes no more: later output is counted, not written
                self._file_cap = self._written

    def close(self) -> StreamView:
        """Close the file, if one was started, and return what was kept."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        captured = self._buffer.snapshot()
        lines = self._lines + (0 if self._last == b"\n" else 1)
        file = self._file_path if self._written else None
        return StreamView(captured, lines, file, self._written)


@dataclass(frozen=True)
class NewOutput:
    """Output of a background process since the previous read.

    Attributes:
        captured: head and tail of the new output (stdout and stderr interleaved as they
            arrived), with its byte count.
        offset: where the new output starts in the process's whole output, in bytes.
        total_bytes: bytes the process has printed so far.
        total_lines: lines it has printed so far.
    """

    captured: CapturedOutput
    offset: int
    total_bytes: int
    total_lines: int


class OutputLog:
    """The output of one background process: a log file of the whole output (up to a cap),
    and the output not yet read, head and tail, in bounded memory.

    ``feed`` runs in the process's own thread; :meth:`read` and :meth:`wait` in a caller's.

    Args:
        file: the log file (created here, its area made again if it is gone).
        file_bytes: most bytes written to it; later output is counted, not written (so is
            output the file takes no more of: a full disk).
        unread_bytes: memory kept for output not yet read (its head and tail).

    Raises:
        OSError: the log file cannot be created.
    """

    def __init__(self, file: Path, file_bytes: int, unread_bytes: int) -> None:
        self.file = file
        self._cap = file_bytes
        self._unread_cap = unread_bytes
        self._fd = open_output(file)
        self._written = 0
        self._unread = OutputBuffer(unread_bytes)
        self._read_to = 0
        self._total = 0
        self._lines = 0
        self._changed = threading.Condition()
        self._ended = False

    @property
    def file_bytes(self) -> int:
        """Bytes in the log file."""
        return self._written

    def feed(self, chunk: bytes) -> None:
        """Account for ``chunk`` and wake a waiting reader."""
        with self._changed:
            if self._fd is not None and self._written < self._cap:
                part = chunk[: self._cap - self._written]
                count, whole = _write(self._fd, part)
                self._written += count
                if not whole:  # the file takes no more: later output is counted only
                    self._cap = self._written
            self._unread.feed(chunk)
            self._total += len(chunk)
            self._lines += chunk.count(b"\n")
            self._changed.notify_all()

    def end(self) -> None:
        """The process is gone: close the file and wake a waiting reader."""
        with self._changed:
            self._ended = True
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self._changed.notify_all()

    def wait(self, timeout: float) -> bool:
        """Block until there is unread output or the process ended, at most ``timeout``
        seconds; whether either holds."""
        with self._changed:
            return self._changed.wait_for(
                lambda: self._total > self._read_to or self._ended, timeout
            )

    def read(self) -> NewOutput:
        """The output since the previous read; the next read starts after it."""
        with self._changed:
            captured = self._unread.snapshot()
            offset = self._read_to
            self._read_to = self._total
            self._unread = OutputBuffer(self._unread_cap)
            return NewOutput(captured, offset, self._total, self._lines)

    def totals(self) -> tuple[int, int, int]:
        """``(bytes printed, lines printed, bytes not yet read)``."""
        with self._changed:
            return self._total, self._lines, self._total - self._read_to


def _write(fd: int, data: bytes) -> tuple[int, bool]:
    """Write ``data`` to ``fd``: the bytes written, and whether that is all of them (not
    when the file takes no more: a full disk, a quota, a file size limit)."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except OSError:
            return len(data) - len(view), False
    return len(data), True
