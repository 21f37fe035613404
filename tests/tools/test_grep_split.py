"""A grep split between the caller and its searcher processes finds exactly what one process
finds, whatever happens to the searchers; the searchers live as long as their workspace."""

from __future__ import annotations

import fcntl
import gc
import marshal
import os
import select
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import threading
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests._waiting import wait_until
from workspace_tools.search import _worker
from workspace_tools.search._format import format_grep
from workspace_tools.search._matcher import Matcher
from workspace_tools.search._runner import GrepRun
from workspace_tools.search._searcher import DONE, FOUND
from workspace_tools.search._worker import Searcher, Searchers, search_files
from workspace_tools.tools.grep import SEARCHERS_KEY

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


@pytest.fixture(autouse=True)
def at_least_two_cpus() -> Iterator[None]:
    """The split's mechanics are tested on any host: with one CPU (a small runner, or a run
    pinned to one core) a search never splits, and these tests would check nothing. A
    patch of its own, which a test's ``monkeypatch.undo()`` leaves in place."""
    every = _worker._every_cpu()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_worker, "_every_cpu", lambda: max(every, 2))
        yield


@pytest.fixture(scope="module")
def searchers() -> Iterator[Searchers]:
    """Two searchers, ready (started once for the module's tests)."""
    pool = Searchers(most=2)
    assert pool.wait_ready(2, 60.0), "the searchers did not start"
    yield pool
    pool.close()


def make_tree(root: Path) -> list[str]:
    files = []
    for i in range(120):
        rel = f"d{i % 7}/f{i:03d}.txt"
        (root / rel).parent.mkdir(exist_ok=True)
        body = "".join(
            f"line {j} {'hit' if (i * j) % 5 == 0 else 'miss'}\n" for j in range(i % 9 + 1)
        )
        (root / rel).write_bytes(body.encode() if i % 11 else b"hit\0binary")
        files.append(rel)
    return sorted(files)


@settings(max_examples=300, deadline=None)
@given(count=st.integers(0, 300_000), processes=st.integers(2, 4))
def test_blocks_cover_the_files_once_in_order_the_last_ones_smaller(
    count: int, processes: int
) -> None:
    starts = _worker.block_starts(count, processes)
    sizes = [b - a for a, b in pairwise(starts)]
    first = -(-count // (processes * _worker.BLOCKS_PER_WORKER))
    assert (starts[0], starts[-1]) == (0, count), starts
    # Equal blocks, then shrinking ones down to a quarter of the first size (the last
    # block holds what is left), at most two more a process than equal blocks.
    assert sizes == sorted(sizes, reverse=True), sizes
    assert all(0 < size <= first for size in sizes), sizes
    assert all(size >= max(1, first // 4) for size in sizes[:-1]), sizes
    assert len(sizes) <= processes * (_worker.BLOCKS_PER_WORKER + 2), len(sizes)
    if count >= 4 * processes * _worker.BLOCKS_PER_WORKER:
        assert sizes[-2] <= max(1, first // 2), sizes


@pytest.mark.parametrize("limit, context", [(1, 0), (2, 3), (7, 1), (50, 2), (10_000, 0)])
@pytest.mark.parametrize("processes", [2, 3])
@pytest.mark.parametrize("pattern", ["hit", "line [0-4] (hit|miss)"])
def test_split_search_equals_one_process(
    tmp_path: Path, limit: int, context: int, processes: int, pattern: str, searchers: Searchers
) -> None:
    files = make_tree(tmp_path)
    matcher = Matcher(pattern)
    single = GrepRun(matcher, limit=limit, context=context)
    single.search_files(str(tmp_path), files)
    split = GrepRun(matcher, limit=limit, context=context)
    search_files(split, str(tmp_path), files, searchers, min_files=0, processes=processes)
    assert split.state() == single.state()
    assert format_grep(split, "content") == format_grep(single, "content")
    assert single.binary_skipped == 11


_PIECES = ["hit", "miss", " ", "\n", "\r\n", "\r", "é", "ä hit", "\t", "Hit", "x" * 2100, "\0"]


@settings(max_examples=40, deadline=None)
@given(
    bodies=st.lists(
        st.tuples(
            st.lists(st.sampled_from(_PIECES), max_size=24),
            st.sampled_from(["utf-8", "latin-1", "utf-8-sig", "utf-16"]),
        ),
        min_size=2,
        max_size=14,
    ),
    pattern=st.sampled_from(["hit", "h.t", "^hit", "it$", "(?i)hit", "é"]),
    limit=st.sampled_from([1, 3, 1_000]),
    context=st.sampled_from([0, 1, 2]),
)
def test_split_search_equals_one_process_on_any_text(
    searchers: Searchers,
    bodies: list[tuple[list[str], str]],
    pattern: str,
    limit: int,
    context: int,
) -> None:
    # Whatever the encodings, line endings, long lines and binary files: the blocks'
    # results, sent from the searchers and merged, are exactly one process's.
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for i, (pieces, encoding) in enumerate(bodies):
            rel = f"d{i % 3}/f{i:02d}.txt"
            (Path(tmp) / rel).parent.mkdir(exist_ok=True)
            (Path(tmp) / rel).write_bytes("".join(pieces).encode(encoding))
            files.append(rel)
        files.sort()
        matcher = Matcher(pattern)
        single = GrepRun(matcher, limit=limit, context=context)
        single.search_files(tmp, files)
        split = GrepRun(matcher, limit=limit, context=context)
        search_files(split, tmp, files, searchers, min_files=0, processes=2)
        assert split.state() == single.state()
        assert format_grep(split, "content") == format_grep(single, "content")
        # Every block searched by a searcher, sent and merged: the same again.
        by_searcher = searched_by_a_searcher(searchers, matcher, tmp, files, limit, context)
        assert by_searcher.state() == single.state()


def searched_by_a_searcher(
    searchers: Searchers, matcher: Matcher, root: str, files: list[str], limit: int, context: int
) -> GrepRun:
    """``files`` searched in blocks of one file, each by a searcher (the caller takes
    none), the answers merged in order."""
    (searcher,) = searchers.take_ready(1, start=False)
    queue = _worker._block_queue(len(files))
    assert queue is not None
    try:
        job = (0, matcher.key, True, limit, context, root, files, list(range(len(files) + 1)))
        number = searcher.start_job(job, queue)  # type: ignore[arg-type]
    finally:
        os.close(queue)
    states: dict[int, Any] = {}

    def receive() -> dict[int, Any]:
        for job_number, index, status, payload in searcher.receive():
            if job_number == number:
                assert status in (FOUND, DONE), (index, status)
                states[index] = payload
        searcher.wait(0.1)
        return states

    try:
        wait_until(receive, lambda got: -1 in got, "the searcher's answers")
    finally:
        searchers.give(searcher)
    run = GrepRun(matcher, limit=limit, context=context)
    for index in range(len(files)):
        run.merge(marshal.loads(states[index]))
    return run


def live_children() -> set[int]:
    """This process's live (not zombie) child processes, from the process table."""
    found = set()
    for task in os.listdir(f"/proc/{os.getpid()}/task"):
        try:
            with open(f"/proc/{os.getpid()}/task/{task}/children") as f:
                found.update(int(p) for p in f.read().split())
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended meanwhile (a searcher's, once it is reaped)
    return {pid for pid in found if alive(pid)}


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def pids(pool: Searchers) -> list[int]:
    return [searcher.pid for searcher in pool._all]


def queued(fd: int) -> int:
    """Bytes waiting in the pipe ``fd``."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def test_searchers_search_blocks_and_their_results_are_merged_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The caller waits, before each block of its own, until a searcher answered one: so
    # the searchers' answers are part of every merge.
    files = make_tree(tmp_path)
    matcher = Matcher("line [0-4] (hit|miss)")
    single = GrepRun(matcher, limit=9, context=2)
    single.search_files(str(tmp_path), files)
    answered: list[int] = []
    receive = Searcher.receive

    def recording(searcher: Searcher) -> list[tuple[int, int, int, bytes]]:
        answers = receive(searcher)
        answered.extend(index for _, index, status, _ in answers if status == FOUND)
        return answers

    search_block = _worker._search_block

    def after_a_searcher(*args: Any) -> Any:
        channels = [searcher.channel for searcher in helpers]
        wait_until(lambda: answered or select.select(channels, [], [], 0)[0], bool, "an answer")
        return search_block(*args)

    monkeypatch.setattr(Searcher, "receive", recording)
    monkeypatch.setattr(_worker, "_search_block", after_a_searcher)
    pool = Searchers(most=1)
    try:
        assert pool.wait_ready(1, 60.0)
        helpers = list(pool._idle)
        split = GrepRun(matcher, limit=9, context=2)
        search_files(split, str(tmp_path), files, pool, min_files=0, processes=2)
    finally:
        pool.close()
    assert answered, "no searcher answered"
    assert split.state() == single.state()


def test_a_searcher_killed_mid_search_leaves_its_blocks_to_the_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = make_tree(tmp_path)
    matcher = Matcher("hit")
    single = GrepRun(matcher, limit=5, context=1)
    single.search_files(str(tmp_path), files)
    pool = Searchers(most=1)
    assert pool.wait_ready(1, 60.0)
    (pid,) = pids(pool)
    start_job = Searcher.start_job

    def killed_once_it_took_a_block(searcher: Searcher, job: Any, queue: int) -> int:
        total = queued(queue)
        number = start_job(searcher, job, queue)
        wait_until(lambda: queued(queue), lambda left: left < total, "a block taken")
        os.kill(searcher.pid, signal.SIGKILL)
        return number

    monkeypatch.setattr(Searcher, "start_job", killed_once_it_took_a_block)
    try:
        split = GrepRun(matcher, limit=5, context=1)
        search_files(split, str(tmp_path), files, pool, min_files=0, processes=2)
        assert split.state() == single.state()
        wait_until(lambda: alive(pid), lambda now: not now, "the killed searcher reaped")
        # The next search finds it gone, searches alone and starts another.
        monkeypatch.undo()
        again = GrepRun(matcher, limit=5, context=1)
        search_files(again, str(tmp_path), files, pool, min_files=0, processes=2)
        assert again.state() == single.state()
        assert pool.wait_ready(1, 60.0)
        assert pids(pool) != [pid]
    finally:
        pool.close()


def test_a_searcher_that_never_answers_leaves_its_blocks_to_the_caller(tmp_path: Path) -> None:
    # A searcher the machine's load leaves without a CPU is, to the caller, one that never
    # answers; what it sends once it runs again is of a job over, and left alone.
    files = make_tree(tmp_path)
    pool = Searchers(most=1)
    assert pool.wait_ready(1, 60.0)
    (pid,) = pids(pool)
    os.kill(pid, signal.SIGSTOP)
    try:
        for pattern in ("line [0-4] (hit|miss)", "hit"):
            matcher = Matcher(pattern)
            single = GrepRun(matcher, limit=7, context=1)
            single.search_files(str(tmp_path), files)
            split = GrepRun(matcher, limit=7, context=1)
            done: list[bool] = []
            thread = threading.Thread(
                target=lambda split=split, done=done: done.append(
                    search_files(split, str(tmp_path), files, pool, min_files=0, processes=2)
                    is None
                ),
                daemon=True,
            )
            thread.start()
            thread.join(60)
            assert done == [True]
            assert split.state() == single.state()
            os.kill(pid, signal.SIGCONT)
        assert pids(pool) == [pid]
    finally:
        os.kill(pid, signal.SIGCONT)
        pool.close()


def big_tree(root: Path) -> int:
    total = _worker.MIN_FILES_TO_SPLIT + 50
    for i in range(total):
        (root / f"f{i:05d}.txt").write_text("hit\n" if i % 3 else "miss\n")
    return len([i for i in range(total) if i % 3])


@pytest.mark.anyio
async def test_grep_tool_splits_with_its_searcher_inside_an_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workspace_tools import Workspace, invoke_tool, workspace_tools

    hits = big_tree(tmp_path)
    before = live_children()
    workspace = Workspace(tmp_path)
    tool = {t.name: t for t in workspace_tools(workspace)}["grep"]
    monkeypatch.setattr(_worker, "_running_now", lambda: 0)  # a CPU free for the searcher
    jobs: list[int] = []
    start_job = Searcher.start_job
    monkeypatch.setattr(Searcher, "start_job", lambda *args: jobs.append(1) or start_job(*args))
    # The first call starts the searcher in the background; later ones split with it.
    results = [await invoke_tool(tool, {"pattern": "hit", "output_mode": "count", "limit": 5})]
    assert workspace.kept(SEARCHERS_KEY, Searchers).wait_ready(1, 60.0)
    results.append(await invoke_tool(tool, {"pattern": "hit", "output_mode": "count", "limit": 5}))
    for result in results:
        assert result.error is None
        assert result.details.match_count == hits
        assert result.model_text().splitlines()[:2] == ["f00001.txt:1", "f00002.txt:1"]
    assert jobs, "the search was not split"
    assert len(live_children() - before) == 1
    workspace.close()
    wait_until(live_children, lambda now: now <= before, "the searcher to be gone")


def test_the_searcher_outlives_the_thread_that_started_it(tmp_path: Path) -> None:
    # It dies with its owner's process, not with the thread of the call that started it.
    from workspace_tools import Workspace, invoke_tool_sync, workspace_tools

    hits = big_tree(tmp_path)
    workspace = Workspace(tmp_path)
    tool = {t.name: t for t in workspace_tools(workspace)}["grep"]
    pool = workspace.kept(SEARCHERS_KEY, Searchers)
    thread = threading.Thread(target=invoke_tool_sync, args=(tool, {"pattern": "hit"}))
    thread.start()
    thread.join()
    try:
        assert pool.wait_ready(1, 60.0)
        (pid,) = pids(pool)
        result = invoke_tool_sync(tool, {"pattern": "hit", "output_mode": "count"})
        assert result.details.match_count == hits
        assert alive(pid) and pids(pool) == [pid]
    finally:
        workspace.close()
    assert not alive(pid)


def test_collecting_the_workspace_stops_its_searcher(tmp_path: Path) -> None:
    from workspace_tools import Workspace

    workspace = Workspace(tmp_path)
    pool = workspace.kept(SEARCHERS_KEY, Searchers)
    assert pool.wait_ready(1, 60.0)
    (pid,) = pids(pool)
    del workspace, pool
    gc.collect()
    wait_until(lambda: alive(pid), lambda now: not now, "the searcher to be gone")


OWNER = """
import sys, time
from workspace_tools import Workspace
from workspace_tools.search._worker import Searchers
from workspace_tools.tools.grep import SEARCHERS_KEY
workspace = Workspace(sys.argv[1])
pool = workspace.kept(SEARCHERS_KEY, Searchers)
assert pool.wait_ready(1, 60.0)
print(pool._all[0].pid, flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_the_searcher_dies_with_its_owner(tmp_path: Path, how: int) -> None:
    # Killed outright, the owner runs no cleanup: the kernel's PR_SET_PDEATHSIG does it.
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout is not None
        pid = int(owner.stdout.readline())
        assert alive(pid)
    finally:
        owner.send_signal(how)
        owner.wait()
    wait_until(lambda: alive(pid), lambda now: not now, "the owner's searcher to be gone")


def test_a_workspace_restored_for_one_call_starts_no_searcher(tmp_path: Path) -> None:
    # A sandboxed call's copy of the workspace dies with the call: a searcher started for
    # later calls would only cost its start.
    from workspace_tools import Workspace, invoke_tool_sync, workspace_tools

    hits = big_tree(tmp_path)
    workspace = Workspace(tmp_path)
    workspace.restore_files(workspace.snapshot_files([]))
    tool = {t.name: t for t in workspace_tools(workspace)}["grep"]
    try:
        for _ in range(2):
            result = invoke_tool_sync(tool, {"pattern": "hit", "output_mode": "count"})
            assert result.details.match_count == hits
        assert pids(workspace.kept(SEARCHERS_KEY, Searchers)) == []
    finally:
        workspace.close()


def test_a_big_job_is_sent_while_the_searcher_sends_an_old_jobs_answers(tmp_path: Path) -> None:
    # The searcher is stuck sending the answers of a job nobody reads any more (a call
    # over: about 5 MB here) while the next job is too big for the socket's buffers
    # (about 4 MB): sending it reads what the searcher sends meanwhile, so neither waits
    # for the other for ever.
    files = []
    for i in range(64):
        (tmp_path / f"f{i:02d}.txt").write_text(("hit " + "x" * 400 + "\n") * 200)
        files.append(f"f{i:02d}.txt")
    many = [f"missing/{i:07d}.txt" for i in range(200_000)]
    pool = Searchers(most=1)
    try:
        assert pool.wait_ready(1, 60.0)
        (searcher,) = pool.take_ready(1, start=False)
        numbers = []
        for job_files, limit in ((files, 10**6), (many, 10)):
            queue = _worker._block_queue(1 if job_files is many else 64)
            assert queue is not None
            starts = [0, len(many)] if job_files is many else list(range(65))
            job = (0, ("hit", False, False), True, limit, 0, str(tmp_path), job_files, starts)
            sent: list[int] = []
            sender = threading.Thread(
                target=lambda job=job, queue=queue, sent=sent: sent.append(
                    searcher.start_job(job, queue)
                ),
                daemon=True,
            )
            sender.start()
            sender.join(60)
            os.close(queue)
            assert sent, "sending the job never ended"
            numbers += sent
        ends: list[tuple[int, int]] = []
        wait_until(
            lambda: (
                ends.extend(
                    (index, status)
                    for job, index, status, _ in searcher.receive()
                    if job == numbers[1]
                )
                or searcher.wait(0.1)
                or ends
            ),
            lambda _: (-1, DONE) in ends,
            "the new job's end",
        )
        assert ends == [(0, FOUND), (-1, DONE)], ends
    finally:
        pool.close()


def test_a_closed_workspace_searches_again_with_a_new_searcher(tmp_path: Path) -> None:
    from workspace_tools import Workspace, invoke_tool_sync, workspace_tools

    hits = big_tree(tmp_path)
    workspace = Workspace(tmp_path)
    tool = {t.name: t for t in workspace_tools(workspace)}["grep"]
    try:
        first = workspace.kept(SEARCHERS_KEY, Searchers)
        assert first.wait_ready(1, 60.0)
        (old,) = pids(first)
        workspace.close()
        assert not alive(old)
        result = invoke_tool_sync(tool, {"pattern": "hit", "output_mode": "count"})
        assert result.details.match_count == hits
        again = workspace.kept(SEARCHERS_KEY, Searchers)
        assert again is not first
        assert again.wait_ready(1, 60.0)
        assert pids(again) != [old]
    finally:
        workspace.close()


def test_a_search_splits_onto_one_more_process_than_cpus_nothing_else_runs_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_worker, "_every_cpu", lambda: 2)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    busy = _worker.MIN_FILES_TO_SPLIT_BUSY
    counts = {}
    for running in (None, 0, 1, 2, 5):
        monkeypatch.setattr(_worker, "_running_now", lambda running=running: running)
        counts[running] = (_worker._worker_count(1000), _worker._worker_count(busy))
    assert counts == {
        None: (2, 2),  # unknown: as on an idle machine
        0: (2, 2),
        1: (2, 2),  # the other CPU busy: a searcher still gets a share of the two
        2: (1, 2),  # both taken besides the caller: the searcher would only wait
        5: (1, 2),
    }
    monkeypatch.setattr(_worker, "_every_cpu", lambda: 4)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    counts = {}
    for running in (0, 2, 3, 4):
        monkeypatch.setattr(_worker, "_running_now", lambda running=running: running)
        counts[running] = _worker._worker_count(1000)
    assert counts == {0: 4, 2: 3, 3: 2, 4: 1}


def test_running_now_reads_the_tasks_running_besides_this_thread() -> None:
    with open("/proc/loadavg", "rb") as file:
        total = int(file.read().split()[3].split(b"/")[1])
    running = _worker._running_now()
    # At least this thread runs: the others are fewer than all tasks.
    assert running is not None and 0 <= running < total, (running, total)


def test_a_short_list_of_big_files_splits(
    tmp_path: Path, searchers: Searchers, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The warm index's selection: fewer files than MIN_FILES_TO_SPLIT, each holding the
    # literal; their bytes decide.
    files = make_tree(tmp_path)
    matcher = Matcher("hit")
    single = GrepRun(matcher, limit=1000, context=0)
    single.search_files(str(tmp_path), files)
    monkeypatch.setattr(_worker, "_running_now", lambda: 0)  # a CPU free for a searcher
    jobs: list[int] = []
    start_job = Searcher.start_job
    monkeypatch.setattr(Searcher, "start_job", lambda *args: jobs.append(1) or start_job(*args))
    split_by = {}
    for size in (None, _worker.MIN_BYTES_TO_SPLIT - 1, _worker.MIN_BYTES_TO_SPLIT):
        jobs.clear()
        run = GrepRun(matcher, limit=1000, context=0)
        search_files(run, str(tmp_path), files, searchers, size=size, processes=2)
        assert run.state() == single.state(), size
        split_by[size] = bool(jobs)
    assert split_by == {
        None: False,
        _worker.MIN_BYTES_TO_SPLIT - 1: False,
        _worker.MIN_BYTES_TO_SPLIT: True,
    }
