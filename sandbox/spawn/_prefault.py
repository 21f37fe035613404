"""Pages a call's child will write, copied before its call comes.

A call's child is a fork of the warm worker, so each page it writes is first copied from
the worker's (a copy-on-write fault: a few microseconds each on a virtual machine, and a
Python call writes hundreds of pages, reference counts and allocations among them). Calls
of the same tools write mostly the same pages. So a child that served a call can list the
private pages it ended with (:func:`learn`: present and exclusively mapped, from
``/proc/self/pagemap``, proc(5)), and the next child, while it waits with no call running,
has them copied in one system call per range (:func:`plan`, in the worker, once per
hint; :func:`populate`:
``madvise(MADV_POPULATE_WRITE)``, Linux 5.14), stopping as soon as a call comes. Contents
never change; only when the copy is made does.

A hint comes from a process that ran a call's code, so it is only a bounded list of
address ranges, parsed with bounds (:func:`parse`); a range outside the private writable
memory of the process that plans it (a worker, whose children have its mappings) is
skipped (:func:`plan`), and the kernel refuses an unmapped one.
"""

from __future__ import annotations

import bisect
import ctypes
import errno
import functools
import os
import re
import select
import struct
import sys

MADV_POPULATE_WRITE = 23
#: A hint is one write to a pipe of at most this many bytes, so it arrives whole (POSIX's
#: PIPE_BUF is at least 512; Linux's is 4096).
HINT_BYTES = 4096
#: Pages made private ahead, at most: a hint asks for no more memory than this.
MAX_PAGES = 8192
#: Pages per ``madvise``: between two, a call that came is not kept waiting (a copy
#: takes microseconds on a virtual machine: 16 of them hold a call up well under 0.1 ms).
CHUNK_PAGES = 16

#: Pages of address space looked at, at most, and at a time (8 bytes of pagemap each).
_MAX_SCAN = 1 << 20
_READ_PAGES = 1 << 15
_ENTRY = struct.Struct("<Q")
_COUNT = struct.Struct("<H")
_MAX_RUNS = (HINT_BYTES - _COUNT.size) // _ENTRY.size
_RUN_BITS = 16
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
#: pagemap's flags in an entry's last byte: bit 56 (exclusively mapped) and 63 (present).
_EXCLUSIVE_PRESENT = bytes(int(b & 0x81 == 0x81) for b in range(256))
#: Private writable mappings in ``/proc/self/maps``.
_PRIVATE_WRITABLE = re.compile(rb"^([0-9a-f]+)-([0-9a-f]+) rw-p ", re.MULTILINE)


def supported() -> bool:
    """Whether this kernel populates pages on request (Linux 5.14 and later)."""
    if not sys.platform.startswith("linux"):
        return False
    page = ctypes.create_string_buffer(_PAGE * 2)
    start = (ctypes.addressof(page) + _PAGE - 1) // _PAGE * _PAGE
    return _madvise(start, _PAGE) == 0


def mappings() -> list[tuple[int, int]]:
    """This process's private writable mappings as ``(first page, end page)``, in address
    order; none when ``/proc`` cannot tell."""
    try:
        with open("/proc/self/maps", "rb") as f:
            maps = f.read()
    except OSError:
        return []
    return [
        (int(m[1], 16) // _PAGE, int(m[2], 16) // _PAGE) for m in _PRIVATE_WRITABLE.finditer(maps)
    ]


def learn(inherited: list[tuple[int, int]]) -> bytes:
    """The hint of this process's private pages now (a call's child, after its call) in
    the ``inherited`` :func:`mappings` (those it had before its call: memory mapped since
    is new to the next child too): runs of present, exclusively mapped pages, the largest
    when there are more than a hint holds. ``b""`` when ``/proc`` cannot tell."""
    runs: list[tuple[int, int]] = []
    try:
        fd = os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        scanned = 0
        for first, end in inherited:
            for start in range(first, min(end, first + _MAX_SCAN - scanned), _READ_PAGES):
                count = min(_READ_PAGES, end - start)
                entries = os.pread(fd, count * 8, start * 8)
                flags = entries[7::8].translate(_EXCLUSIVE_PRESENT)
                at = flags.find(1)
                while at != -1:
                    stop = flags.find(0, at)
                    stop = len(flags) if stop == -1 else stop
                    runs.extend(_split(start + at, stop - at))
                    at = flags.find(1, stop)
                scanned += count
    except OSError:
        return b""
    finally:
        os.close(fd)
    kept = sorted(sorted(runs, key=lambda run: -run[1])[:_MAX_RUNS])
    return _COUNT.pack(len(kept)) + b"".join(
        _ENTRY.pack(page << _RUN_BITS | count) for page, count in kept
    )


def _split(page: int, count: int) -> list[tuple[int, int]]:
    most = (1 << _RUN_BITS) - 1
    return [(page + at, min(most, count - at)) for at in range(0, count, most)]


def latest(data: bytes) -> bytes | None:
    """The last whole hint in ``data`` (what a pipe of hints held), or ``None``."""
    found = None
    at = 0
    while at + _COUNT.size <= len(data):
        (count,) = _COUNT.unpack_from(data, at)
        end = at + _COUNT.size + count * _ENTRY.size
        if count > _MAX_RUNS or end > len(data):
            break
        found = data[at:end]
        at = end
    return found


def parse(data: bytes) -> list[tuple[int, int]]:
    """The ``(first page, pages)`` runs of the last whole hint in ``data``; none when
    there is no hint."""
    hint = latest(data) or _COUNT.pack(0)
    mask = (1 << _RUN_BITS) - 1
    return [
        (entry >> _RUN_BITS, entry & mask) for (entry,) in _ENTRY.iter_unpack(hint[_COUNT.size :])
    ]


def plan(
    runs: list[tuple[int, int]], mine: list[tuple[int, int]] | None = None
) -> list[tuple[int, int]]:
    """The parts of ``runs`` that lie in the private writable memory ``mine`` (default:
    this process's :func:`mappings`), at most :data:`MAX_PAGES` in all, as ``(first
    page, pages)`` runs for :func:`populate`. A forked child has its parent's mappings, so
    a worker plans a hint once, before it forks the children that populate it."""
    if mine is None:
        mine = mappings()
    firsts = [first for first, _ in mine]
    budget = MAX_PAGES
    planned = []
    for page, count in runs:
        at = bisect.bisect_right(firsts, page) - 1
        if at < 0:
            continue
        size = min(page + count, mine[at][1], page + budget) - page
        if size > 0:
            planned.append((page, size))
            budget -= size
    return planned


def populate(planned: list[tuple[int, int]], sock: int) -> None:
    """Copy the pages of the ``planned`` runs (:func:`plan`); stop when ``sock`` (where
    the call comes) is readable, looked at each :data:`CHUNK_PAGES` pages, or when the
    kernel refuses."""
    since_look = CHUNK_PAGES
    for page, count in planned:
        start, stop = page, page + count
        while start < stop:
            if since_look >= CHUNK_PAGES:
                if select.select([sock], [], [], 0)[0]:
                    return
                since_look = 0
            size = min(CHUNK_PAGES - since_look, stop - start)
            if _madvise(start * _PAGE, size * _PAGE) not in (0, errno.ENOMEM):
                return  # EINVAL: no such advice here; EFAULT, EPERM: not for this range
            since_look += size
            start += size


def _madvise(address: int, length: int) -> int:
    """``madvise(address, length, MADV_POPULATE_WRITE)``: 0, or the errno."""
    done = _libc().madvise(
        ctypes.c_void_p(address), ctypes.c_size_t(length), ctypes.c_int(MADV_POPULATE_WRITE)
    )
    return 0 if done == 0 else ctypes.get_errno()


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    # Loaded once in the worker (by ``supported``), before it forks its children.
    return ctypes.CDLL(None, use_errno=True)
