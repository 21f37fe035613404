"""grep's searcher processes, from the caller's side: a big search split between the caller
and its searchers, and patterns only Python's engine runs searched where they can be killed.

Searching is dominated by system calls (open, read, close per file), which Python threads
cannot overlap well: each call gives up and takes back the GIL. Processes can. A workspace
keeps long-lived searcher processes (:class:`Searchers`; the process side is
``_searcher``): fresh interpreters started in the background on the first search big
enough to pay, reused by every later call, so that no call forks. The file list (already
in memory, sorted) goes to them once a call and is cut into blocks that the caller and its
searchers take one at a time from a shared queue (a pipe, passed with the job) until none
is left, so that they finish together however the files' costs fall; each searcher sends
what it found in a block, as plain values (:mod:`marshal`), as soon as it has it, and the
caller merges all blocks in order, so results are exactly those of one process. Once the
queue is empty the caller waits for the blocks still missing about as long as one of its
own blocks took, then searches one itself: a searcher that failed, died, or that the
machine's load left without a CPU, costs a block's time or two, never the whole search.

A pattern only Python's backtracking engine can run (see ``_matcher``) may take
exponential time, holding the GIL all along: :func:`search_in_worker` runs such a search
in a searcher, killed at the call's deadline or when the call is over (and started again
when next needed), while the calling thread waits on its socket without holding the GIL.

A searcher dies with its owner: with the workspace's :meth:`Searchers.close` (its
``close``, or its collection), at the owner's exit, and, should the owner be killed, by
``PR_SET_PDEATHSIG`` (a thread of the owner starts it and waits for it, so the signal comes
when the owner's process ends, not when some worker thread does). Linux only; elsewhere a
search runs in the calling thread.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import select
import signal
import socket
import struct
import sys
import threading
import time
import weakref
from collections.abc import Callable
from itertools import pairwise

from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools.search._reading import WHOLE_READ
from workspace_tools.search._runner import GrepRun, RunState
from workspace_tools.search._searcher import (
    ANSWER_HEADER,
    BOOT,
    FAILED,
    FOUND,
    REFUSED,
    Job,
    encode_job,
)

# How long a search on Python's engine may run when the call has no timeout, in seconds.
WORKER_SECONDS = 60.0
# How often the waiting thread looks whether the call is over, in seconds.
_POLL_SECONDS = 0.05
# How long closing a searcher waits for it to be reaped, in seconds.
_REAP_SECONDS = 1.0

# Below this many files splitting a search costs about what it saves: measured on 2 CPUs
# over mypy's sources, a search of 400 files split with a ready searcher took 2.1-3.6 ms
# against 3.0-5.7 in one process, of 200 files 2.0-2.1 against 1.6-3.4.
MIN_FILES_TO_SPLIT = 500
# A list of fewer files splits when they hold at least this many bytes (when known: the
# warm index's selection, files that each hold the pattern's literal, so each is searched,
# not only read). Over mypy's sources, TypeVar's 445 files (11.9 MB) took 26-30 ms in one
# process against 23-26 split; Optional's 179 (9.0 MB) 21 against 21; mypy.nodes' 156 (6.3
# MB) 7-16 against 8-10, at load average 3 (medians of 15, CPU 4-20% more when split).
MIN_BYTES_TO_SPLIT = 8 << 20
# Processes a search is split between at most (the caller and its searchers), as
# ripgrep runs a thread per CPU.
MAX_PROCESSES = 4
# From this many files a search splits whatever runs besides (see _worker_count).
MIN_FILES_TO_SPLIT_BUSY = 10_000
BLOCKS_PER_WORKER = 8

# The directory holding the workspace_tools package, for the searcher's imports.
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# What the searcher's interpreter may need: it searches, it runs no command.
_ENV_KEPT = (
    *("PATH", "LD_LIBRARY_PATH", "PYTHONHOME", "PYTHONPATH"),
    # Paths are str in both processes: they must encode to the same bytes.
    *("LANG", "LC_ALL", "LC_CTYPE", "PYTHONUTF8", "PYTHONIOENCODING"),
)


class Searcher:
    """One searcher process (see ``_searcher``), started now in the background by a thread
    of its own that then waits for it to end.

    Raises:
        OSError: it could not be started.
    """

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        # Room for a job's file list, so that sending it seldom waits for the searcher.
        with contextlib.suppress(OSError):
            ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        self.channel = ours
        self.owner = os.getpid()
        self.pid = 0
        self.open = True  # no end of file seen
        self.ready = False  # said hello: imports done
        self._pending = bytearray()
        self._jobs = 0
        self._files: list[str] | None = None  # the file list the searcher holds
        self._started = threading.Event()
        self._error: OSError | None = None
        self._closed = False
        self._keeper = threading.Thread(target=self._keep, args=(theirs,), daemon=True)
        try:
            self._keeper.start()
        except RuntimeError as exc:  # no thread to be had (interpreter exiting)
            theirs.close()
            ours.close()
            raise OSError(f"no thread to start grep's searcher: {exc}") from None
        self._started.wait()
        if self._error is not None:
            ours.close()
            raise self._error
        ours.setblocking(False)

    def _keep(self, theirs: socket.socket) -> None:
        # This thread starts the searcher and lives until it ends: PR_SET_PDEATHSIG fires
        # when the thread that started a process ends, and this one ends only with it (or
        # with the whole process).
        fd = 3 if theirs.fileno() != 3 else 4
        try:
            self.pid = os.posix_spawn(
                sys.executable,
                [sys.executable, "-c", BOOT, str(fd), str(os.getpid()), _PACKAGE_PARENT],
                {name: os.environ[name] for name in _ENV_KEPT if name in os.environ},
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                    # A dup2 to another number clears close-on-exec: only this fd crosses.
                    (os.POSIX_SPAWN_DUP2, theirs.fileno(), fd),
                ],
            )
        except OSError as exc:
            self._error = exc
            return
        finally:
            theirs.close()
            self._started.set()
        # ChildProcessError: reaped already (this process ignores SIGCHLD).
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)

    def usable(self) -> bool:
        """Whether this process may send it jobs: it is this process's and still there."""
        return self.open and self.owner == os.getpid()

    def start_job(self, job: Job, queue: int) -> int:
        """Send ``job`` (its number is set here; a file list it has already is not sent
        again) with its queue; the job's number.

        Raises:
            OSError: the searcher is gone.
        """
        self._jobs += 1
        files = job[6]
        # Equal lists of the same walk hold the same strings: compared by pointer, 1,873
        # paths in about 10 us, where sending them costs a millisecond or more.
        same = isinstance(files, list) and files == self._files
        self._files = None  # unknown until the job is sent whole
        self._send(encode_job((self._jobs, *job[1:6], None if same else files, job[7])), queue)
        if isinstance(files, list):
            self._files = list(files)  # a copy: the caller's list may change later
        return self._jobs

    def _send(self, data: bytes, queue: int) -> None:
        # Without blocking: the searcher may itself be sending the answer of a block of a
        # call over, which waits for this end to read; what arrives meanwhile is kept.
        view = memoryview(data)
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", queue))]
        poller = select.poll()
        poller.register(self.channel, select.POLLIN | select.POLLOUT)
        while view:
            try:
                if rights:
                    sent = self.channel.sendmsg([view[: 1 << 16]], rights)
                    rights = []
                else:
                    sent = self.channel.send(view)
                view = view[sent:]
                continue
            except (BlockingIOError, InterruptedError):
                pass
            events = dict(poller.poll(_POLL_SECONDS * 1000))
            if events.get(self.channel.fileno(), 0) & ~select.POLLOUT:
                self._read_available()
                if not self.open:
                    raise ConnectionError("grep's searcher ended")

    def _read_available(self) -> None:
        while self.open:
            try:
                chunk = self.channel.recv(1 << 20)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                chunk = b""
            if not chunk:
                self.open = False  # the searcher ended, or was killed
                break
            self._pending += chunk

    def receive(self) -> list[tuple[int, int, int, bytes]]:
        """The whole answers that arrived, without waiting: ``(job, index, status,
        payload)`` each (see ``_searcher``); the hello of a searcher ready (job 0) is
        taken here."""
        self._read_available()
        answers = []
        pending, size, at = self._pending, ANSWER_HEADER.size, 0
        while len(pending) - at >= size:
            job, index, status, length = ANSWER_HEADER.unpack_from(pending, at)
            end = at + size + length
            if len(pending) < end:
                break
            if job == 0:
                self.ready = True
            else:
                answers.append((job, index, status, bytes(pending[at + size : end])))
            at = end
        del pending[:at]
        return answers

    def wait(self, seconds: float) -> bool:
        """Whether something arrived (or the searcher ended) within ``seconds``."""
        if not self.open:
            return False
        return _poll([self.channel], seconds)

    def close(self) -> None:
        """Kill the searcher if it is this process's and wait (briefly) for it to be
        reaped; close this end of its socket. Once: its pid may be another's after."""
        if self._closed:
            return
        self._closed = True
        self.open = False
        if self.owner == os.getpid():
            if self.pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
            self._keeper.join(_REAP_SECONDS)
        self.channel.close()


class Searchers:
    """The searcher processes of one workspace: lent to one call at a time, started when a
    search needs them, killed with :meth:`close`, when this object is collected, or at
    exit. In a forked copy of the owner (a sandbox's worker) the owner's searchers are
    not used; that process starts its own when it needs one.

    Args:
        most: searchers kept at most (default: one fewer than the CPUs, at most
            ``MAX_PROCESSES - 1``, at least 1).
    """

    def __init__(self, most: int | None = None) -> None:
        self._most = most or max(1, _every_cpu() - 1)
        self._lock = threading.Lock()
        self._owner = os.getpid()
        self._idle: list[Searcher] = []
        self._all: list[Searcher] = []
        self._closed = False
        self._failed = False  # one never got ready: no more starts in the background
        self._finalizer = weakref.finalize(self, _close_all, self._all, self._owner)

    def _mine(self) -> None:
        # Called with no lock held; a fork copied the lock in whatever state it was.
        if self._owner != os.getpid():
            self._lock = threading.Lock()
            self._owner, self._idle, self._all = os.getpid(), [], []
            self._finalizer.detach()
            self._finalizer = weakref.finalize(self, _close_all, self._all, self._owner)

    def take_ready(self, count: int, *, start: bool) -> list[Searcher]:
        """Up to ``count`` idle searchers ready to search now; with ``start``, searchers
        are started in the background up to the pool's size for the calls to come."""
        self._mine()
        taken: list[Searcher] = []
        with self._lock:
            for searcher in list(self._idle):
                searcher.receive()
                if not searcher.usable():
                    # One that ended before it was ready cannot start here (its
                    # imports failed?): no more are started in the background.
                    self._failed = self._failed or not searcher.ready
                    self._drop(searcher)
                elif searcher.ready and len(taken) < count:
                    self._idle.remove(searcher)
                    taken.append(searcher)
            want = self._most - len(self._all)
            if start and not self._closed and not self._failed:
                for _ in range(max(want, 0)):
                    self._start_locked()
        return taken

    def take(self) -> Searcher:
        """An idle searcher (ready, or starting), or one started now.

        Raises:
            OSError: it could not be started.
        """
        self._mine()
        with self._lock:
            while self._idle:
                searcher = self._idle.pop(0)
                # What arrived since, its end included: a searcher killed meanwhile (the
                # end of a sandboxed call kills what the call left running, and the next
                # call of the same child finds it here) is dropped, not given the job.
                searcher.receive()
                if searcher.usable():
                    return searcher
                self._drop(searcher)
            if self._closed:
                raise OSError("the workspace is closed")
            searcher = Searcher()
            self._all.append(searcher)
            return searcher

    def give(self, searcher: Searcher) -> None:
        """Take back a searcher a call is done with; a dead one, or one past the pool's
        size, goes."""
        with self._lock:
            if (
                searcher.usable()
                and not self._closed
                and searcher in self._all
                and len(self._idle) < self._most
            ):
                self._idle.append(searcher)
                return
            self._drop(searcher)

    def wait_ready(self, count: int, timeout: float) -> bool:
        """Start searchers up to ``count`` and wait up to ``timeout`` seconds until that
        many are ready (for benchmarks and tests, which measure warm calls)."""
        self._mine()
        deadline = time.monotonic() + timeout
        with self._lock:
            for _ in range(min(count, self._most) - len(self._all)):
                self._start_locked()
            idle = list(self._idle)
        for searcher in idle[:count]:
            while not searcher.ready and searcher.open and time.monotonic() < deadline:
                searcher.wait(deadline - time.monotonic())
                searcher.receive()
        return sum(s.ready and s.open for s in idle[:count]) >= count

    def close(self) -> None:
        """Kill every searcher (and start none again)."""
        with self._lock:
            self._closed = True
            self._idle.clear()
        self._finalizer()

    def _start_locked(self) -> None:
        try:
            searcher = Searcher()
        except OSError:
            self._failed = True
            return
        self._all.append(searcher)
        self._idle.append(searcher)

    def _drop(self, searcher: Searcher) -> None:
        if searcher in self._idle:
            self._idle.remove(searcher)
        if searcher in self._all:
            self._all.remove(searcher)
        searcher.close()


def _close_all(searchers: list[Searcher], owner: int) -> None:
    if os.getpid() != owner:
        return  # a forked copy: the searchers are the owner's
    for searcher in list(searchers):
        searcher.close()
    searchers.clear()


def search_files(
    run: GrepRun,
    root: str,
    files: list[str],
    searchers: Searchers | None,
    *,
    min_files: int = MIN_FILES_TO_SPLIT,
    size: int | None = None,
    processes: int | None = None,
    start: bool = True,
) -> None:
    """Search ``files`` (relative to ``root``, in order) into ``run``, split with the idle
    searchers of ``searchers`` (up to ``processes`` in all, by default one per CPU, at most
    :data:`MAX_PROCESSES`, on Linux) when there are at least ``min_files``, or when they
    hold at least :data:`MIN_BYTES_TO_SPLIT` bytes (``size``, when known). A search that
    would split but finds too few searchers ready starts them for the next calls, unless
    ``start`` is false (a process that lives for one call)."""
    # Multiline matches span lines that a merge would have to split; they stay in one process.
    big_enough = (
        len(files) >= min_files or (size is not None and size >= MIN_BYTES_TO_SPLIT)
    ) and not run.matcher.multiline
    helpers = []
    if big_enough and searchers is not None and _every_cpu() > 1:
        workers = processes or _worker_count(len(files))
        helpers = searchers.take_ready(workers - 1, start=start)
    if not helpers:
        run.search_files(root, files)
        return
    assert searchers is not None
    try:
        _split(run, root, files, helpers)
    finally:
        for searcher in helpers:
            searchers.give(searcher)


def _split(run: GrepRun, root: str, files: list[str], helpers: list[Searcher]) -> None:
    # The blocks wait in a queue that every process takes from until it is empty (a
    # pipe: each read of one index is atomic), so a process that drew cheap blocks takes
    # more: the costs of files vary too much for any fixed deal. Searchers send each
    # block's results as soon as it is searched; once the queue is empty, this process
    # waits for them about as long as one of its own blocks took, and when nothing came,
    # searches a missing block itself (the last first) rather than wait on for a searcher
    # that the machine's load may have left without a CPU: whichever result comes first
    # is kept. Results are merged back block by block, in path order, as soon as the
    # blocks before are in: what the run's on_found makes of them is made meanwhile.
    starts = block_starts(len(files), len(helpers) + 1)
    blocks = [files[a:b] for a, b in pairwise(starts)]
    queue = _block_queue(len(blocks))
    if queue is None:
        run.search_files(root, files)
        return
    states: dict[int, RunState] = {}
    merged = 0  # blocks merged into run, in order

    def merge_ready() -> None:
        nonlocal merged
        while merged in states:
            run.merge(states[merged])
            merged += 1

    jobs: dict[Searcher, int] = {}
    matcher = run.matcher
    job: Job = (
        0,
        matcher.key,
        matcher.in_process,
        run.limit,
        run.context,
        root,
        files,
        starts,
    )
    try:
        for searcher in helpers:
            with contextlib.suppress(OSError):
                jobs[searcher] = searcher.start_job(job, queue)
        buffer = bytearray(WHOLE_READ)  # one for all blocks: fresh memory costs page faults
        started, searched = time.monotonic(), 0
        while len(item := os.read(queue, 2)) == 2:
            index = int.from_bytes(item, "big")
            states[index] = _search_block(run, root, blocks, index, states, buffer)
            searched += 1
            _collect(jobs, states, run, root, blocks, buffer)
            merge_ready()
        # A searcher on its last block normally sends it within about a block's time.
        patience = (time.monotonic() - started) / max(searched, 1)
        while True:
            _collect(jobs, states, run, root, blocks, buffer)
            merge_ready()
            missing = [i for i in range(len(blocks)) if i not in states]
            if not missing:
                break
            if not _wait_for_any(jobs, patience):
                last = missing[-1]
                states[last] = _search_block(run, root, blocks, last, states, buffer)
    finally:
        # Done, or the search failed here (e.g. NeedsWorker): whatever is left in the
        # queue is taken out, so that the searchers stop after the block they are on.
        with contextlib.suppress(OSError):
            os.set_blocking(queue, False)
            while os.read(queue, 1 << 16):
                pass
        os.close(queue)
    merge_ready()


def block_starts(count: int, processes: int) -> list[int]:
    """Where each block of a search of ``count`` files split between ``processes`` starts,
    and ``count``: blocks of ``count / (processes * BLOCKS_PER_WORKER)`` files, then, once
    what is left is less than a block a process, each ``1 / processes`` of what is left
    (guided self-scheduling), down to a quarter of the first size. The process that takes
    the last block then ends soon after the others instead of up to a whole block later
    (measured over mypy's sources with equal blocks: the caller waited about 3 ms for the
    searcher's last block), for a few blocks more."""
    first = max(1, -(-count // (processes * BLOCKS_PER_WORKER)))
    least = max(1, first // 4)
    starts, at = [0], 0
    while at < count:
        at = min(count, at + max(least, min(first, -(-(count - at) // processes))))
        starts.append(at)
    return starts


def _collect(
    jobs: dict[Searcher, int],
    states: dict[int, RunState],
    run: GrepRun,
    root: str,
    blocks: list[list[str]],
    buffer: bytearray,
) -> None:
    """Take the blocks the searchers sent; a block one could not search is searched here
    (where text only Python's engine can search raises ``NeedsWorker``, as in one
    process)."""
    for searcher, number in jobs.items():
        for job, index, status, payload in searcher.receive():
            if job != number or index < 0 or index in states:
                continue
            if status == FOUND:
                states[index] = marshal.loads(payload)
            else:
                states[index] = _search_block(run, root, blocks, index, states, buffer)


def _wait_for_any(jobs: dict[Searcher, int], seconds: float) -> bool:
    """Whether a searcher still there had something to read within ``seconds``."""
    there = [searcher.channel for searcher in jobs if searcher.open]
    return bool(there) and _poll(there, seconds)


def _poll(channels: list[socket.socket], seconds: float) -> bool:
    """Whether one of ``channels`` is readable (or at its end) within ``seconds``."""
    poller = select.poll()
    for channel in channels:
        poller.register(channel, select.POLLIN | select.POLLHUP)
    return bool(poller.poll(max(seconds, 0.0) * 1000))


def _search_block(
    run: GrepRun,
    root: str,
    blocks: list[list[str]],
    index: int,
    states: dict[int, RunState],
    buffer: bytearray,
) -> RunState:
    """Block ``index`` searched here. The lines that the earlier blocks searched so far
    kept count against its limit: past the limit, a block only counts (as one process
    does once it kept ``limit`` lines), and the merge never needs more."""
    before = 0
    for other, state in states.items():
        if other < index:
            before += sum(len(rows) for _, rows in state[0])
    sub = GrepRun(
        run.matcher,
        limit=run.limit,
        context=run.context,
        kept_before=before,
        kept_files=run.kept_files,
    )
    sub.search_files(root, blocks[index], buffer)
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


def _every_cpu() -> int:
    if not sys.platform.startswith("linux"):
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except (OSError, AttributeError):
        cpus = os.cpu_count() or 1
    return min(cpus, MAX_PROCESSES)


def search_in_worker(
    run: GrepRun,
    searchers: Searchers,
    root: str,
    files: list[str] | tuple[str, str],
    *,
    deadline: float | None,
    stopped: Callable[[], bool],
    seconds: float | None = None,
) -> None:
    """Search ``files`` (paths relative to ``root``, or ``(real, rel)`` of the one file a
    call named) into ``run`` (which holds nothing yet) in a searcher of ``searchers``,
    Python's engine allowed.

    The searcher is killed (SIGKILL) at ``deadline`` (``time.monotonic()`` seconds;
    ``None``: :data:`WORKER_SECONDS` from now) or as soon as ``stopped()`` says the call is
    over; the next search that needs one starts another. Where there is no such process
    (not Linux) the search runs in this thread. ``seconds``: the timeout the message of a
    timeout names (the call's); by default the time left to ``deadline``.

    Raises:
        ToolError: ``TOOL_TIMEOUT`` at the deadline; what the search raised in the
            searcher; ``TOOL_ERROR`` when the searcher could not be started or ended
            without an answer (e.g. out of memory).
    """
    run.matcher.in_process = False
    if not sys.platform.startswith("linux"):
        if isinstance(files, tuple):
            run.search_named_file(root, *files)
        else:
            run.search_files(root, files)
        return
    if deadline is None:
        deadline = time.monotonic() + WORKER_SECONDS
    if seconds is None:
        seconds = round(max(0.0, deadline - time.monotonic()), 1)
    try:
        searcher = searchers.take()
    except OSError as exc:
        raise ToolError(f"grep could not start its search process: {exc.strerror or exc}") from None
    queue = _block_queue(1)
    try:
        if queue is None:
            raise ToolError("grep could not start its search: no pipe to be had")
        job: Job = (0, run.matcher.key, False, run.limit, run.context, root, files, [0, len(files)])
        try:
            number = searcher.start_job(job, queue)
        except OSError:
            searcher.open = False
            raise _died() from None
        answer = _answer(searcher, number, deadline, stopped)
        if answer is None:
            searcher.close()  # killed: it may be backtracking for ever
            raise worker_timeout(seconds)
    finally:
        if queue is not None:
            os.close(queue)
        searchers.give(searcher)
    status, payload = answer
    if status == REFUSED:
        message, code = marshal.loads(payload)
        raise ToolError(message, ErrorCode(code))
    if status != FOUND:
        raise _died()
    run.merge(marshal.loads(payload))


def _answer(
    searcher: Searcher, number: int, deadline: float, stopped: Callable[[], bool]
) -> tuple[int, bytes] | None:
    """The status and payload of job ``number``'s one block; ``None`` when the deadline
    passed or the call is over first; ``(FAILED, b"")`` when the searcher ended without."""
    while True:
        for job, index, status, payload in searcher.receive():
            if job == number and index == 0:
                return status, payload
        if not searcher.open:
            return FAILED, b""
        left = deadline - time.monotonic()
        if left <= 0 or stopped():
            return None
        searcher.wait(min(left, _POLL_SECONDS))


def _died() -> ToolError:
    return ToolError(
        "grep's search process died without an answer (out of memory?); narrow the "
        "pattern or the path"
    )


def _worker_count(files: int) -> int:
    """How many processes search ``files`` files: one per CPU (at most
    :data:`MAX_PROCESSES`), but below :data:`MIN_FILES_TO_SPLIT_BUSY` files no more than
    one more than the CPUs that no other task is running on at this instant
    (:func:`_running_now`).

    Tasks share the CPUs about evenly, so ``k`` processes among ``r`` other running tasks
    on ``c`` CPUs get ``k * min(1, c / (r + k))`` CPUs: with every CPU but the caller's busy
    (``r = c - 1``), a searcher still raises the search's share from 1 CPU to ``2c / (c +
    1)`` (4/3 on 2 CPUs), for the split's cost (2-3 ms of CPU over mypy's sources: the job
    sent, the answers received and merged); past that, a searcher waits for a CPU while
    the caller is done, and only costs. Which tasks run changes from one millisecond to
    the next: a search that split only onto CPUs idle at that instant split or not by the
    draw of one sample whenever another process ran now and then (over mypy's sources at
    load average 0.7, 21.9 ms one run, 15.8 the next). Measured on 2 CPUs over mypy's
    1,873 files, median ms in one process against split with a ready searcher: TypeVar's
    8,103 matches 35 against 19 with a CPU free; at load average 2-2.4, 37-44 against
    39-44 (CPU 37-44 against 40-44)."""
    every_cpu = _every_cpu()
    if files >= MIN_FILES_TO_SPLIT_BUSY:
        return every_cpu
    running = _running_now()
    if running is None:
        return every_cpu
    try:
        cpus = len(os.sched_getaffinity(0))
    except (OSError, AttributeError):
        cpus = os.cpu_count() or 1
    return max(1, min(every_cpu, cpus - running + 1))


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


def worker_timeout(seconds: float) -> ToolError:
    """``TOOL_TIMEOUT`` of a search on Python's engine that ran ``seconds``: why it can take
    that long, and what to do."""
    return ToolError(
        f"grep timed out after {seconds:g} s: this pattern needs Python's backtracking "
        "regex engine (for lookaround, a backreference, \\b on non-ASCII text, or a "
        "repeat count over 1000), on which nested repeats such as (a+)+ can take "
        "exponential time and a long counted repeat retries from every character. "
        "Simplify the pattern or narrow the path.",
        ErrorCode.TOOL_TIMEOUT,
    )
