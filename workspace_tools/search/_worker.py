"""Spreading one grep over processes: the same results, sooner on a big tree.

Searching is dominated by system calls (open, read, close per file), which Python threads
cannot overlap well: each call gives up and takes back the GIL. Forked children can. The
file list (already in memory, sorted) is cut into blocks that the processes take one at a
time from a shared queue (a pipe) until none is left, so that they finish together however
the files' costs fall; each child sends what it found in a block, as plain values through
a pipe, as soon as it has it, and the parent merges all blocks in order, so results are
exactly those of one process. Once the queue is empty the parent waits for the blocks
still missing about as long as one of its own blocks took, then searches one itself: a child
that failed, or that the machine's load left without a CPU, costs a block's time or two,
never the whole search.

Linux only: forking a process that runs other threads is unsafe on macOS. The child runs
only system calls, ``re``, RE2, ``marshal`` and ``pickle`` and leaves with ``os._exit``.

A pattern only Python's backtracking engine can run (see ``workspace/_search.py``) may take
exponential time, holding the GIL all along: :func:`search_in_worker` runs such a search
in one forked child that is killed at the call's deadline or when the call is over, while
the calling thread waits on a pipe without holding the GIL.
"""

from __future__ import annotations

import contextlib
import gc
import marshal
import os
import pickle
import resource
import select
import signal
import struct
import sys
import threading
import time
from collections.abc import Callable

from sandbox.layers._syscall import prctl
from sandbox.spawn._forking import fork_in_threaded_process
from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools.search._reading import WHOLE_READ
from workspace_tools.search._runner import GrepRun, RunState

# How long a search on Python's engine may run when the call has no timeout, in seconds.
WORKER_SECONDS = 60.0
# Address space the worker may add to what it inherited: a backtracking search's stack
# grows with the text, and must not take the host's memory.
WORKER_EXTRA_MEMORY = 2 << 30
# How often the waiting thread looks whether the call is over, in seconds.
_POLL_SECONDS = 0.05
_PR_SET_PDEATHSIG = 1

# Below this many files a fork costs about what it saves (measured on 2 CPUs: 2,500 files,
# a third faster on an idle machine, a little slower on a loaded one; 50,000 files, a third
# faster either way).
MIN_FILES_TO_FORK = 1000
# The same on a busy machine (see _worker_count).
MIN_FILES_TO_FORK_BUSY = 10_000
MAX_PROCESSES = 4
BLOCKS_PER_WORKER = 8
# A block's results as children send them: its index and the size of its marshal form.
_HEADER = struct.Struct("<II")


def search_files(
    run: GrepRun,
    root: str,
    files: list[str],
    *,
    min_files: int = MIN_FILES_TO_FORK,
    processes: int | None = None,
) -> None:
    """Search ``files`` (relative to ``root``, in order) into ``run``, across ``processes``
    (default: one per CPU, at most 4, on Linux) when there are at least ``min_files``."""
    # Multiline matches span lines that a merge would have to split; they stay in one process.
    big_enough = len(files) >= min_files and not run.matcher.multiline
    workers = (processes or _worker_count(len(files))) if big_enough else 1
    if workers <= 1:
        run.search_files(root, files)
        return
    # The blocks wait in a queue that every process takes from until it is empty (a
    # pipe: each read of one index is atomic), so a process that drew cheap blocks takes
    # more: the costs of files vary too much for any fixed deal. Children send each block's
    # results as soon as it is searched; once the queue is empty, this process waits for
    # them about as long as one of its own blocks took, and when nothing came, searches a
    # missing block itself (the last first) rather than wait on for a child that the
    # machine's load may have left without a CPU: whichever result comes first is kept.
    # Results are merged back block by block, in path order.
    run.matcher.prepare()
    count = workers * BLOCKS_PER_WORKER
    size = -(-len(files) // count)
    blocks = [files[i : i + size] for i in range(0, len(files), size)]
    queue = _block_queue(len(blocks))
    if queue is None:
        run.search_files(root, files)
        return
    states: dict[int, RunState] = {}
    children: list[_Child] = []
    try:
        children = [c for c in (_fork(run, root, blocks, queue) for _ in range(1, workers)) if c]
        buffer = bytearray(WHOLE_READ)  # one for all blocks: fresh memory costs page faults
        started, searched = time.monotonic(), 0
        while len(item := os.read(queue, 2)) == 2:
            index = int.from_bytes(item, "big")
            states[index] = _search_block(run, root, blocks[index], buffer)
            searched += 1
            _receive(children, states)
        # A child searching its last block normally sends it within about a block's time.
        patience = (time.monotonic() - started) / max(searched, 1)
        while True:
            _receive(children, states)
            missing = [i for i in range(len(blocks)) if i not in states]
            if not missing:
                break
            if not _wait_for_any(children, patience):
                states[missing[-1]] = _search_block(run, root, blocks[missing[-1]], buffer)
    finally:
        # Done, or the search failed here (e.g. NeedsWorker): children still searching go.
        os.close(queue)
        for child in children:
            child.stop()
    for index in range(len(blocks)):
        run.merge(states[index])


class _Child:
    """A forked searcher: its pid, the read end of the pipe it sends each block's results
    on (``index``, ``size``, then ``size`` bytes of :mod:`marshal`), and what arrived so far."""

    def __init__(self, pid: int, read_end: int) -> None:
        self.pid = pid
        self.read_end = read_end
        self.pending = bytearray()
        self.open = True

    def receive(self, states: dict[int, RunState]) -> None:
        """Read what the child sent without blocking, adding each whole block's state
        to ``states`` unless this process searched that block already."""
        while self.open:
            try:
                chunk = os.read(self.read_end, 1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                self.open = False  # the child is done, or died
                break
            self.pending += chunk
        pending = self.pending
        while len(pending) >= _HEADER.size:
            index, size = _HEADER.unpack_from(pending)
            end = _HEADER.size + size
            if len(pending) < end:
                break
            if index not in states:
                states[index] = marshal.loads(pending[_HEADER.size : end])
            del pending[:end]

    def stop(self) -> None:
        """Kill the child if it still runs, close the pipe and reap it."""
        if self.open:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        os.close(self.read_end)
        _reap(self.pid)


def _receive(children: list[_Child], states: dict[int, RunState]) -> None:
    for child in children:
        child.receive(states)


def _wait_for_any(children: list[_Child], seconds: float) -> bool:
    """Whether a child still sending had something to read within ``seconds``."""
    sending = [child.read_end for child in children if child.open]
    if not sending:
        return False
    poller = select.poll()
    for read_end in sending:
        poller.register(read_end, select.POLLIN | select.POLLHUP)
    return bool(poller.poll(seconds * 1000))


def _search_block(run: GrepRun, root: str, block: list[str], buffer: bytearray) -> RunState:
    sub = GrepRun(run.matcher, limit=run.limit, context=run.context)
    sub.search_files(root, block, buffer)
    return sub.state()


def _block_queue(count: int) -> int | None:
    """The read end of a pipe holding the block indices ``0 .. count - 1`` (two bytes
    each, far below a pipe's buffer), its write end closed: a read past the last index is
    the end of file. ``None`` when no pipe can be made."""
    try:
        read_end, write_end = os.pipe()
    except OSError:
        return None
    try:
        os.write(write_end, b"".join(i.to_bytes(2, "big") for i in range(count)))
    except OSError:
        os.close(read_end)
        return None
    finally:
        os.close(write_end)
    return read_end


def _worker_count(files: int) -> int:
    """How many processes search ``files`` files: one per CPU (at most
    :data:`MAX_PROCESSES`), as ripgrep runs one thread per CPU; but below
    :data:`MIN_FILES_TO_FORK_BUSY` files, one while the machine is busy (its load average
    over a minute at or above its CPU count), and no more than the CPUs that no other task
    is running on at this instant (:func:`_running_now`).

    On a busy machine a fork's fixed costs (copying the page tables, the parent's pages
    copied on write, a child waiting for a CPU) weigh more, and so does the larger share of
    the CPUs that two processes win over one. Measured on 2 CPUs, median ms in one process
    against two: mypy's 1,873 files at load 1, a quarter to a third faster; at load 1.5-3
    about as fast (a literal 16 against 17, a regex 30 against 37, TypeVar's 8,103 matches
    39 against 38); at load 4 a third to a half slower (a literal 20 against 28, TypeVar 63
    against 90). Generated files at load 4.7: 2,000 a literal 7.9 against 10.5; 5,000 20.8
    against 25.1 (a regex 53.5 against 40.7); 25,000 127 against 105 (a regex 480 against
    433); 50,000 at load 6-7, a literal 580-760 against 343-483.

    The minute's average misses what runs now: on 2 CPUs shared with other work at load
    0.9-1.0, TypeVar's 8,103 matches over mypy took 34 ms in one process whatever ran
    besides, and 27 ms in two when no other task was running at the call but 53 ms when one
    was (the child had no CPU of its own: the two ran one after the other, with the fork's
    costs on top; 30 calls each)."""
    if not sys.platform.startswith("linux"):
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except OSError:
        cpus = os.cpu_count() or 1
    every_cpu = min(cpus, MAX_PROCESSES)
    if files >= MIN_FILES_TO_FORK_BUSY:
        return every_cpu
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = 0.0
    if load >= cpus:
        return 1
    running = _running_now()
    if running is None:
        return every_cpu
    return max(1, min(every_cpu, cpus - running))


def _running_now() -> int | None:
    """How many tasks besides the calling thread are running or waiting for a CPU at this
    instant, machine-wide (the fourth field of ``/proc/loadavg``, ``running/total``); ``None``
    when it cannot be read. Costs an open and a read of a few dozen bytes."""
    try:
        fd = os.open("/proc/loadavg", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        running = os.read(fd, 256).split()[3].split(b"/")[0]
        return max(int(running) - 1, 0)  # the calling thread is running: it reads this
    except (OSError, IndexError, ValueError):
        return None
    finally:
        os.close(fd)


def _fork(run: GrepRun, root: str, blocks: list[list[str]], queue: int) -> _Child | None:
    """A child searching the blocks it takes from ``queue`` and sending each one's results
    as soon as it has them, or ``None`` when it cannot start."""
    try:
        read_end, write_end = os.pipe()
    except OSError:
        return None
    parent = os.getpid()
    try:
        pid = fork_in_threaded_process()  # the child touches no lock
    except OSError:
        os.close(read_end)
        os.close(write_end)
        return None
    if pid == 0:  # the child
        status = 1
        try:
            os.close(read_end)
            # Killing a worker running Python's engine (search_in_worker) kills this too.
            _die_with_parent(parent)
            # A short-lived copy: a collection would only touch (and so copy) pages it
            # shares with the parent, and os._exit frees everything at once.
            gc.disable()
            buffer = bytearray(WHOLE_READ)
            # Readers of a pipe take turns, and a read of the two bytes of an index gets both.
            while len(item := os.read(queue, 2)) == 2:
                index = int.from_bytes(item, "big")
                state = _search_block(run, root, blocks[index], buffer)
                # Plain tuples, lists, dicts, str and int: marshal writes them about
                # twice as fast as pickle (0.3 against 0.8 ms for 6,300 matching lines).
                payload = marshal.dumps(state)
                _write_all(write_end, _HEADER.pack(index, len(payload)) + payload)
            # The parent sees the end of file now, not once this process is torn down.
            os.close(write_end)
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    os.set_blocking(read_end, False)
    return _Child(pid, read_end)


def _reap(pid: int) -> None:
    # The child's exit (tearing down its copy of this process's memory) takes a
    # millisecond or two that the search need not wait for: a thread reaps it.
    try:
        threading.Thread(target=_wait, args=(pid,), daemon=True).start()
    except RuntimeError:
        _wait(pid)


def _wait(pid: int) -> None:
    # ChildProcessError: already reaped, because this process ignores SIGCHLD.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def search_in_worker(
    run: GrepRun,
    search: Callable[[GrepRun], None],
    *,
    deadline: float | None,
    stopped: Callable[[], bool],
    seconds: float | None = None,
) -> None:
    """Run ``search`` on a fresh run in a forked child and merge what it found into ``run``
    (which holds nothing yet).

    The child is killed (SIGKILL) at ``deadline`` (``time.monotonic()`` seconds; ``None``:
    :data:`WORKER_SECONDS` from now) or as soon as ``stopped()`` says the call is over; it
    also dies with the thread that forked it, and its address space is capped. Where
    there is no fork (not Linux) the search runs in this thread. ``seconds``: the timeout
    the message of a timeout names (the call's); by default the time left to ``deadline``.

    Raises:
        ToolError: ``TOOL_TIMEOUT`` at the deadline; what the search raised in the child;
            ``TOOL_ERROR`` when the child died without an answer (e.g. out of memory).
    """
    run.matcher.in_process = False
    if not sys.platform.startswith("linux"):
        search(run)
        return
    run.matcher.prepare()
    if deadline is None:
        deadline = time.monotonic() + WORKER_SECONDS
    if seconds is None:
        seconds = round(max(0.0, deadline - time.monotonic()), 1)
    read_end, write_end = os.pipe()
    parent = os.getpid()
    try:
        pid = fork_in_threaded_process()  # the child touches no lock
    except OSError as exc:
        os.close(read_end)
        os.close(write_end)
        raise ToolError(f"grep could not start its search process: {exc.strerror}") from None
    if pid == 0:  # the child
        os.close(read_end)
        _work_in_child(run, search, write_end, parent)
    os.close(write_end)
    try:
        payload = _read_until(read_end, pid, deadline, stopped)
    finally:
        os.close(read_end)
    if payload is None:
        raise worker_timeout(seconds)
    try:
        answer = pickle.loads(payload)
    except Exception:
        raise ToolError(
            "grep's search process died without an answer (out of memory?); narrow the "
            "pattern or the path"
        ) from None
    if answer[0] == "error":
        raise ToolError(answer[1], ErrorCode(answer[2]))
    run.merge(answer[1])


def worker_timeout(seconds: float) -> ToolError:
    """``TOOL_TIMEOUT`` of a search on Python's engine that ran ``seconds``: why it can take
    that long, and what to do."""
    return ToolError(
        f"grep timed out after {seconds:g} s: this pattern needs Python's backtracking "
        "regex engine (lookaround, backreference, or \\b on non-ASCII text), on which "
        "nested repeats such as (a+)+ can take exponential time. Simplify the pattern "
        "or narrow the path.",
        ErrorCode.TOOL_TIMEOUT,
    )


def _work_in_child(
    run: GrepRun, search: Callable[[GrepRun], None], write_end: int, parent: int
) -> None:
    status = 1
    try:
        _tie_to_parent(parent)
        sub = GrepRun(run.matcher, limit=run.limit, context=run.context)
        try:
            search(sub)
            answer: tuple[object, ...] = ("ok", sub.state())
        except ToolError as exc:
            answer = ("error", exc.message, exc.code.value)
        send_pickled(write_end, answer)
        os.close(write_end)
        status = 0
    finally:
        os._exit(status)


def _tie_to_parent(parent: int) -> None:
    """Die with the thread (of process ``parent``) that forked this process, and cap the
    address space."""
    _die_with_parent(parent)
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/statm", "rb") as statm:
            size = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        limit = size + WORKER_EXTRA_MEMORY
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _die_with_parent(parent: int) -> None:
    # SIGKILL when the forking thread (of process `parent`) ends; exit now if it is gone.
    with contextlib.suppress(OSError):
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def _read_until(
    read_end: int, pid: int, deadline: float, stopped: Callable[[], bool]
) -> bytes | None:
    """All the child writes; ``None`` when the deadline passed or the call is over first,
    the child then killed. The child is reaped either way."""
    chunks = []
    poller = select.poll()
    poller.register(read_end, select.POLLIN | select.POLLHUP)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or stopped():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                return None
            if not poller.poll(min(left, _POLL_SECONDS) * 1000):
                continue
            chunk = os.read(read_end, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        _wait(pid)


def read_to_end(fd: int) -> bytes:
    """What the pipe ``fd`` carries until its writer closes it (the caller closes ``fd``)."""
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def send_pickled(fd: int, value: object) -> None:
    """Write ``value`` pickled to the pipe ``fd`` (the parent reads to end of file, see
    :func:`read_to_end`)."""
    _write_all(fd, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
