"""Reading files for search: one read for a small file, windows of whole lines for a big
one, and a cheap probe for a literal. Positional reads only: a mapped file that is truncated
meanwhile would kill the process with SIGBUS.
"""

from __future__ import annotations

import os
from collections.abc import Callable

# Most source files fit in the first read, and it is enough to tell a binary file.
FIRST_READ = 64 * 1024
# Files up to this size are searched from one buffer, bigger ones window by window.
WHOLE_READ = 1024 * 1024
# Big files are searched a window of whole lines at a time.
WINDOW = 1024 * 1024
# Reused buffer for probing a big file for a literal (small enough to stay in cache).
PROBE_BUFFER = 256 * 1024


def read_window(fd: int, offset: int, context: int) -> tuple[bytes, int]:
    """Bytes from ``offset``: a window ending at a line end (its length is returned too),
    followed by ``context`` more whole lines where the file has them."""
    want = WINDOW
    while True:
        extra = WINDOW if context else 0
        chunk = os.pread(fd, want + extra, offset)
        at_eof = len(chunk) < want + extra
        cut = chunk.rfind(b"\n", 0, want)
        if cut < 0 and not at_eof:
            want *= 2  # one line longer than the window
            continue
        end = len(chunk) if cut < 0 or (at_eof and len(chunk) <= want) else cut + 1
        if at_eof:
            return chunk, end
        # Keep whole lines only: a cut UTF-8 sequence would change how the window decodes.
        stop = end
        for _ in range(context):
            stop = chunk.find(b"\n", stop) + 1
            if not stop:
                break
        if stop:
            return (chunk if stop == len(chunk) else chunk[:stop]), end
        want *= 2


def file_contains(
    fd: int, find: Callable[[bytearray, int, int], int], length: int, buffer: bytearray
) -> bool:
    """Whether the file holds a literal of ``length`` bytes that ``find(buffer, start,
    end)`` finds (its offset, or -1), read into ``buffer`` piece by piece (pieces overlap
    by ``length - 1`` bytes so that no occurrence is split). Reusing one small buffer keeps
    the copy in cache and spares fresh memory its page faults."""
    if len(buffer) < 2 * length:
        buffer.extend(bytes(2 * length - len(buffer)))
    view = memoryview(buffer)
    size, offset, overlap = len(buffer), 0, length - 1
    while True:
        count = _read_into(fd, view, offset)
        if find(buffer, 0, count) >= 0:
            return True
        if count < size:
            return False
        offset += count - overlap


def _read_into(fd: int, view: memoryview, offset: int) -> int:
    if hasattr(os, "preadv"):  # not on every macOS Python
        return os.preadv(fd, [view], offset)
    os.lseek(fd, offset, os.SEEK_SET)
    return os.readv(fd, [view])


def last_lines(buf: bytes, end: int, count: int) -> bytes:
    start = end
    for _ in range(count):
        if start <= 0:
            break
        start = buf.rfind(b"\n", 0, start - 1) + 1
    return buf[start:end]


def read_rest(fd: int, offset: int) -> bytes:
    chunks = []
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)
