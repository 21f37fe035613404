"""What keeps a call on the warm worker fast keeps the calls as they were: a call's child
finds the pages the previous call wrote already copied (a waiting child copies what a hint
names, only its own private memory, and stops when a call comes; a hint that is garbage
changes nothing), and the worker forks at a lower priority than the calls run at."""

from __future__ import annotations

import ctypes
import os
import random
import resource
import secrets
import signal
import socket
import struct
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from sandbox import Sandbox, SandboxError, SandboxLimits
from sandbox.spawn import _call_worker, _prefault
from tests._processes import survivors
from tests._waiting import DEADLINE
from tests.sandbox._boxes import NewBox
from tests.sandbox._slow_import import slow_import_module

needs_populate = pytest.mark.skipif(
    not _prefault.supported(), reason="no MADV_POPULATE_WRITE here (Linux 5.14 and later)"
)

PAGE = os.sysconf("SC_PAGE_SIZE")
PAGES = 256
#: Memory of this process that a forked child shares until it writes to it.
SHARED = bytearray(PAGE * (PAGES + 1))


def _pages() -> list[int]:
    """The addresses of the whole pages of SHARED."""
    base = ctypes.addressof(ctypes.c_char.from_buffer(SHARED))
    first = (base + PAGE - 1) // PAGE * PAGE
    return [first + i * PAGE for i in range(PAGES)]


def _write_all_pages() -> int:
    """Write one byte in each page of SHARED; the minor faults that took. The loop
    allocates nothing: a new object could land on a heap page this fork has not written
    yet, and its copy would count too (how many depends on what earlier tests left in the
    heap)."""
    base = ctypes.addressof(ctypes.c_char.from_buffer(SHARED))
    offsets = [address - base for address in _pages()]
    view = memoryview(SHARED)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for offset in offsets:
        view[offset] = 120
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def _in_child(work: Callable[[], bytes]) -> bytes:
    """``work()`` in a fork of this process (single-threaded enough: it only touches
    memory and pipes), its bytes returned."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write_end, work())
        finally:
            os._exit(0)
    os.close(write_end)
    data = b""
    while chunk := os.read(read_end, 65536):
        data += chunk
    os.close(read_end)
    os.waitpid(pid, 0)
    return data


def _faults_after(hint: bytes, call_waiting: bool = False) -> int:
    """In a fork: populate what ``hint`` names (with a call already waiting on the socket
    when ``call_waiting``), then the faults that writing SHARED's pages takes."""

    def work() -> bytes:
        ours, theirs = socket.socketpair()
        if call_waiting:
            theirs.send(b"call")
        _prefault.populate(_prefault.plan(_prefault.parse(hint)), ours.fileno())
        return str(_write_all_pages()).encode()

    return int(_in_child(work))


def _learned() -> bytes:
    """The hint of a fork of this process that wrote SHARED's pages."""

    def work() -> bytes:
        inherited = _prefault.mappings()
        _write_all_pages()
        return _prefault.learn(inherited)

    return _in_child(work)


@needs_populate
def test_a_hint_learned_after_writing_names_those_pages() -> None:
    hint = _learned()
    covered = {(first + i) * PAGE for first, count in _prefault.parse(hint) for i in range(count)}
    assert set(_pages()) <= covered
    assert len(hint) <= _prefault.HINT_BYTES


@needs_populate
def test_pages_a_hint_names_are_copied_before_they_are_written() -> None:
    hint = _learned()
    assert _faults_after(b"") >= PAGES  # each shared page is copied on its first write
    faults = _faults_after(hint)
    assert faults < PAGES // 8, f"{faults} faults writing {PAGES} populated pages"


@needs_populate
def test_populating_stops_when_a_call_is_waiting() -> None:
    assert _faults_after(_learned(), call_waiting=True) >= PAGES


@needs_populate
@pytest.mark.parametrize(
    "garbage",
    [
        b"\xff\xff" + b"\x00" * 64,  # more runs than a hint holds
        struct.pack("<H", 3) + b"\x01" * 8,  # cut short
        b"\x01",
        struct.pack("<HQ", 1, (0xFFFFFFFFF << 16) | 0xFFFF),  # beyond user space
        struct.pack("<HQ", 1, (1 << 16) | 0xFFFF),  # page 1: never mapped
        # This module's own code (read-only, not private writable memory).
        struct.pack("<HQ", 1, (id(_prefault.populate.__code__) // PAGE << 16) | 1),
    ],
    # Named, not shown: the last one holds an address, and test ids must be the same in
    # every process that collects them (pytest-xdist's workers compare them).
    ids=["too-many-runs", "cut-short", "one-byte", "beyond-user-space", "page-1", "code-page"],
)
def test_a_garbage_hint_changes_nothing(garbage: bytes) -> None:
    # What a call's code may have written in place of a hint: parsed with bounds, then
    # only this process's own private writable memory is populated.
    assert _faults_after(garbage) >= PAGES


@needs_populate
def test_the_last_whole_hint_counts() -> None:
    one = struct.pack("<HQ", 1, (5 << 16) | 2)
    two = struct.pack("<HQQ", 2, (7 << 16) | 1, (9 << 16) | 3)
    assert _prefault.parse(one + two) == [(7, 1), (9, 3)]
    assert _prefault.parse(one + two[:-1]) == [(5, 2)]
    assert _prefault.parse(b"") == []


def _write_shared_pages() -> int:
    return _write_all_pages()


@needs_populate
@pytest.mark.anyio
async def test_calls_on_a_warm_worker_find_the_pages_copied() -> None:
    # The first call on the worker learns the pages it wrote; the worker gives the hint to
    # each child it forks, which copies them while it waits for its call.
    box = Sandbox(layers=False)
    try:
        first = await box.call(_write_shared_pages)
        seen = []
        with anyio.move_on_after(DEADLINE):
            while not seen or seen[-1] >= PAGES // 8:
                await anyio.sleep(0.05)  # a gap between calls, as a model's turn leaves
                seen.append(await box.call(_write_shared_pages))
    finally:
        box.close()
    assert first >= PAGES
    assert seen and seen[-1] < PAGES // 8, f"faults writing {PAGES} pages, call by call: {seen}"


@needs_populate
@pytest.mark.anyio
async def test_after_calls_back_to_back_a_gap_finds_the_pages_copied_again() -> None:
    # Back to back, a child finds its call waiting as soon as it is set up, and the next
    # is forked with no pages to copy ahead; once calls leave gaps again, children copy.
    box = Sandbox(layers=False)
    try:
        first = await box.call(_write_shared_pages)
        burst = [await box.call(_write_shared_pages) for _ in range(30)]
        seen = []
        with anyio.move_on_after(DEADLINE):
            while not seen or seen[-1] >= PAGES // 8:
                await anyio.sleep(0.05)
                seen.append(await box.call(_write_shared_pages))
    finally:
        box.close()
    assert first >= PAGES
    assert seen and seen[-1] < PAGES // 8, f"faults after a burst of {burst}: {seen}"


def _policy() -> tuple[int, int]:
    return os.sched_getscheduler(0), os.getppid()


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="no scheduling policies here")
@pytest.mark.anyio
async def test_the_worker_forks_under_batch_while_calls_run_as_the_caller() -> None:
    assert os.sched_getscheduler(0) == os.SCHED_OTHER
    box = Sandbox(layers=False)
    try:
        seen = [await box.call(_policy) for _ in range(2)]
        worker = seen[-1][1]
        assert worker != os.getpid()
        assert seen[-1] == (os.SCHED_OTHER, worker), seen
        assert os.sched_getscheduler(worker) == os.SCHED_BATCH
    finally:
        box.close()


def _crash_leaving(how: str) -> int:
    """Start a process that holds every descriptor of this one (the result's pipe too),
    then end as ``how`` says."""
    os.system("sleep 300 &")
    if how == "crash":
        ctypes.string_at(0)
    return os.getppid()


@pytest.mark.anyio
async def test_a_crash_is_reported_while_a_process_it_left_holds_the_result_pipe(
    new_box: NewBox, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The caller waits on the result's pipe alone; with the pipe held open by what the
    # call left, the worker's report of the crash says it, read on the next look.
    marker = secrets.token_hex(12)
    monkeypatch.setenv("WT_TEST_MARKER", marker)
    box = new_box(layers=False, env_allowlist={"PATH", "WT_TEST_MARKER"})
    with anyio.fail_after(DEADLINE):
        assert await box.call(_crash_leaving, "answer") != os.getpid()
        with pytest.raises(SandboxError) as raised:
            await box.call(_crash_leaving, "crash")
    assert str(raised.value) == "the sandboxed call was killed by SIGSEGV"
    assert survivors(f"WT_TEST_MARKER={marker}") == []


def test_a_plan_keeps_only_private_writable_memory_within_the_budget() -> None:
    mine = [(100, 108), (200, 200 + 2 * _prefault.MAX_PAGES)]
    runs = [(90, 4), (104, 10), (150, 1), (200, 3), (210, 2 * _prefault.MAX_PAGES)]
    assert _prefault.plan(runs, mine) == [(104, 4), (200, 3), (210, _prefault.MAX_PAGES - 7)]
    assert _prefault.plan([], mine) == []


def _draw_in_a_thread() -> tuple[int, float, float, bool]:
    """The parent's pid, a random number drawn here and one drawn in a thread started
    here, and whether this runs as the main thread."""
    drawn: list[float] = []
    thread = threading.Thread(target=lambda: drawn.append(random.random()))
    thread.start()
    thread.join()
    return (
        os.getppid(),
        random.random(),
        drawn[0],
        threading.current_thread() is threading.main_thread(),
    )


@pytest.mark.anyio
async def test_each_call_on_the_warm_worker_draws_its_own_random_numbers_and_runs_threads() -> None:
    # The worker forks its children without Python's at-fork hooks: random is reseeded
    # for each, and threads start and join as in any process.
    box = Sandbox(layers=False)
    try:
        seen = [await box.call(_draw_in_a_thread) for _ in range(3)]
    finally:
        box.close()
    warm = [s for s in seen if s[0] != os.getpid()]
    assert len(warm) == 3, seen
    assert len({s[0] for s in warm}) == 1, warm  # one worker served them
    assert len({n for s in warm for n in s[1:3]}) == 6, warm
    assert all(s[3] for s in warm), warm


class _Kept:
    """Long-lived, as a workspace is: the warm worker may keep it. Says in which process
    it was made (``made_in``): by this test, or from its pickle."""

    sandbox_by_reference = True

    def __init__(self) -> None:
        self.value = "before"
        self.made_in = os.getpid()

    def __getstate__(self) -> dict[str, str]:
        return {"value": self.value}

    def __setstate__(self, state: dict[str, str]) -> None:
        self.value = state["value"]
        self.made_in = os.getpid()


class _Passed:
    def __init__(self) -> None:
        self.value = "before"


def _values(kept: _Kept, passed: _Passed) -> tuple[int, int, str, str]:
    return os.getppid(), kept.made_in, kept.value, passed.value


@pytest.mark.anyio
async def test_the_worker_keeps_one_copy_of_a_kept_object_by_its_pickle() -> None:
    # The worker makes the kept object once from its pickle (a workspace: from its
    # settings) and gives that copy to each call's child, whether the callable crosses by
    # reference or by value (a closure); an object that pickles otherwise is another copy,
    # which the worker makes too, before the call; anything else is pickled as it is at
    # the call.
    kept, passed = _Kept(), _Passed()

    def values(kept: _Kept, passed: _Passed) -> tuple[int, int, str, str]:
        return _values(kept, passed)

    box = Sandbox(layers=False)
    try:
        first = await box.call(_values, kept, passed)
        by_closure = await box.call(values, kept, passed)
        kept.value = passed.value = "after"
        changed = await box.call(_values, kept, passed)
    finally:
        box.close()
    worker = first[0]
    assert worker != os.getpid()
    assert first == by_closure == (worker, worker, "before", "before"), (first, by_closure)
    assert changed[0] == changed[1] == worker, changed
    assert changed[2:] == ("after", "after"), changed


def _start_state() -> tuple[int, int, int, bool, bool, int]:
    """The parent's pid, the signal this process gets when its parent dies
    (``PR_GET_PDEATHSIG``), the wakeup fd it had, whether SIGCHLD has its default
    action, whether it leads a session of its own, and whether it is the subreaper of its
    descendants (``PR_GET_CHILD_SUBREAPER``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    death, subreaper = ctypes.c_int(-1), ctypes.c_int(-1)
    assert libc.prctl(2, ctypes.byref(death), 0, 0, 0) == 0, ctypes.get_errno()
    assert libc.prctl(37, ctypes.byref(subreaper), 0, 0, 0) == 0, ctypes.get_errno()
    wakeup = signal.set_wakeup_fd(-1)
    return (
        os.getppid(),
        death.value,
        wakeup,
        signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL,
        os.getsid(0) == os.getpid(),
        subreaper.value,
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
@pytest.mark.parametrize("reuse", [False, True], ids=["fresh child", "reused child"])
@pytest.mark.anyio
async def test_a_calls_child_dies_with_its_worker_and_keeps_none_of_its_signal_handling(
    reuse: bool,
) -> None:
    # What the worker sets up to hear its children end stays the worker's; the child gets
    # SIGKILL when the worker dies, so that no child is left to take a call.
    box = Sandbox(layers=False)
    try:
        seen = [await box.call(_start_state, reuse_process=reuse) for _ in range(2)]
    finally:
        box.close()
    worker = seen[0][0]
    assert worker != os.getpid()
    assert seen == [(worker, signal.SIGKILL, -1, True, True, 1)] * 2, seen


def test_the_reseed_a_child_starts_with_draws_a_new_state_and_holds_no_gaussian() -> None:
    # A child of the warm worker reseeds random with the C seed the worker bound for it:
    # each child's numbers are its own, and none starts with the worker's spare Gaussian.
    kept = random.getstate()
    try:
        random.gauss(0.0, 1.0)  # draws a pair, and holds the second
        reseed = _call_worker._reseeder()
        assert reseed is not None
        held = random._inst.gauss_next  # type: ignore[attr-defined]
        states = [random.getstate()]
        for _ in range(2):
            reseed()
            states.append(random.getstate())
        assert (held, len(set(states))) == (None, 3), (held, states)
    finally:
        random.setstate(kept)


def _send_later(sock: socket.socket, parts: list[bytes]) -> threading.Thread:
    """A thread that sends ``parts`` on ``sock`` one by one, a little apart, then shuts
    its writing down."""

    def send() -> None:
        for part in parts:
            threading.Event().wait(0.02)
            sock.sendall(part)
        sock.shutdown(socket.SHUT_WR)

    thread = threading.Thread(target=send)
    thread.start()
    return thread


@pytest.mark.parametrize(
    ("parts", "size", "expected"),
    [
        ([b"abc", b"de"], 5, b"abcde"),
        ([b"abc", b"defg"], 5, b"abcde"),
        ([b"ab"], 5, None),
        ([], 3, None),
        ([b"x" * 300_000, b"y" * 5], 300_005, b"x" * 300_000 + b"y" * 5),
        ([b"x" * 300_000], 300_005, None),
    ],
    ids=["in parts", "more behind", "cut short", "nothing", "past a read", "long, cut short"],
)
def test_a_child_reads_exactly_its_message_however_it_arrives(
    parts: list[bytes], size: int, expected: bytes | None
) -> None:
    ours, theirs = socket.socketpair()
    sender = _send_later(theirs, parts)
    try:
        assert _call_worker._receive_exactly(ours, size) == expected
    finally:
        sender.join()
        ours.close()
        theirs.close()


def _cpu_state() -> tuple[int, tuple[int, int], tuple[int, int]]:
    """This process, its CPU limits and its parent's (the worker's)."""
    return (
        os.getpid(),
        resource.getrlimit(resource.RLIMIT_CPU),
        resource.prlimit(os.getppid(), resource.RLIMIT_CPU),
    )


def _spin() -> None:
    while True:
        pass


@pytest.mark.skipif(not hasattr(resource, "prlimit"), reason="prlimit is Linux's")
@pytest.mark.parametrize("layers", [False, True], ids=["portable", "layers"])
@pytest.mark.anyio
async def test_a_fresh_calls_child_gets_the_whole_cpu_limit_counted_from_its_fork(
    new_box: NewBox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layers: bool
) -> None:
    # The worker imports the call's module before any call: 1.5 s of CPU there, past the
    # limit of 1 s a call, ends no worker (it did, by SIGXCPU, when the worker applied the
    # limit before its imports) and counts against no call; a call that spins is still
    # stopped at 1 s of its own, and the next one is served.
    module = slow_import_module(tmp_path, monkeypatch)
    box = new_box(layers=layers, best_effort=True, limits=SandboxLimits(cpu_seconds=1))
    first = await box.call(module.pid)
    child, limits, worker_limits = await box.call(_cpu_state)
    with pytest.raises(SandboxError) as stopped:
        await box.call(_spin)
    after = await box.call(module.pid)
    assert first != child
    assert limits == (1, 1)
    # The worker's own limit counts from the end of its set-up: the 1.5 s of imports and
    # a second more (rounded up to whole seconds).
    assert worker_limits[0] == worker_limits[1] >= 3
    # Soft and hard limit alike, as a command's: the kernel's SIGKILL at the hard limit.
    assert (str(stopped.value), stopped.value.signal) == (
        "the sandboxed call was killed by SIGKILL",
        "SIGKILL",
    )
    assert after not in (first, child)
