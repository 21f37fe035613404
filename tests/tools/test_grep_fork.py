"""A grep spread over processes finds exactly what one process finds."""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests._waiting import wait_until
from workspace_tools.search._matcher import Matcher
from workspace_tools.search._runner import GrepRun, format_grep
from workspace_tools.search._worker import search_files

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


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


@pytest.mark.parametrize("limit, context", [(1, 0), (2, 3), (7, 1), (50, 2), (10_000, 0)])
@pytest.mark.parametrize("processes", [2, 3])
@pytest.mark.parametrize("pattern", ["hit", "line [0-4] (hit|miss)"])
def test_forked_search_equals_one_process(
    tmp_path: Path, limit: int, context: int, processes: int, pattern: str
) -> None:
    files = make_tree(tmp_path)
    matcher = Matcher(pattern)
    single = GrepRun(matcher, limit=limit, context=context)
    single.search_files(str(tmp_path), files)
    forked = GrepRun(matcher, limit=limit, context=context)
    search_files(forked, str(tmp_path), files, min_files=0, processes=processes)
    assert forked.state() == single.state()
    assert format_grep(forked, "content") == format_grep(single, "content")
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
def test_forked_search_equals_one_process_on_any_text(
    bodies: list[tuple[list[str], str]], pattern: str, limit: int, context: int
) -> None:
    # Whatever the encodings, line endings, long lines and binary files: the blocks'
    # results, sent from the children and merged, are exactly one process's.
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
        forked = GrepRun(matcher, limit=limit, context=context)
        search_files(forked, tmp, files, min_files=0, processes=2)
        assert forked.state() == single.state()
        assert format_grep(forked, "content") == format_grep(single, "content")


@pytest.mark.anyio
async def test_grep_tool_forks_inside_an_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workspace_tools import invoke_tool, workspace_tools
    from workspace_tools.search import _worker as _grep_fork

    for i in range(_grep_fork.MIN_FILES_TO_FORK + 50):
        (tmp_path / f"f{i:05d}.txt").write_text("hit\n" if i % 3 else "miss\n")
    # Forks whatever the load, and whatever else runs now.
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setattr(_grep_fork, "_running_now", lambda: 0)
    forked: list[int] = []
    fork = _grep_fork._fork
    monkeypatch.setattr(_grep_fork, "_fork", lambda *args: forked.append(1) or fork(*args))
    tool = {t.name: t for t in workspace_tools(tmp_path)}["grep"]
    result = await invoke_tool(tool, {"pattern": "hit", "output_mode": "count", "limit": 5})
    assert result.error is None
    total = _grep_fork.MIN_FILES_TO_FORK + 50
    assert result.details.match_count == len([i for i in range(total) if i % 3])
    assert result.model_text().splitlines()[:2] == ["f00001.txt:1", "f00002.txt:1"]
    assert forked, "the search did not fork"


def test_a_failing_child_leaves_its_blocks_to_the_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workspace_tools.search import _worker as _grep_fork

    files = make_tree(tmp_path)
    matcher = Matcher("hit")
    single = GrepRun(matcher, limit=5, context=1)
    single.search_files(str(tmp_path), files)

    def fail(*args: object, **kwargs: object) -> bytes:
        raise MemoryError  # only children pickle

    monkeypatch.setattr(_grep_fork.pickle, "dumps", fail)
    forked = GrepRun(matcher, limit=5, context=1)
    search_files(forked, str(tmp_path), files, min_files=0, processes=3)
    assert forked.state() == single.state()


def live_children() -> set[int]:
    """This process's live (not zombie) child processes, from the process table."""
    found = set()
    for task in os.listdir(f"/proc/{os.getpid()}/task"):
        with open(f"/proc/{os.getpid()}/task/{task}/children") as f:
            found.update(int(p) for p in f.read().split())
    live = set()
    for pid in found:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    live.add(pid)
        except FileNotFoundError:
            continue
    return live


def test_children_that_never_answer_leave_their_blocks_to_the_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A child the machine's load leaves without a CPU is, to the parent, one that never
    # answers: the parent searches every block itself, stops the children and reaps them.
    from workspace_tools.search import _worker as _grep_fork

    files = make_tree(tmp_path)
    matcher = Matcher("line [0-4] (hit|miss)")
    single = GrepRun(matcher, limit=7, context=1)
    single.search_files(str(tmp_path), files)
    parent = os.getpid()
    search_block = _grep_fork._search_block

    def stalled(*args: Any) -> Any:
        if os.getpid() != parent:
            time.sleep(3600)  # a child: never answers
        return search_block(*args)

    monkeypatch.setattr(_grep_fork, "_search_block", stalled)
    before = live_children()
    forked = GrepRun(matcher, limit=7, context=1)
    done: list[bool] = []
    thread = threading.Thread(
        target=lambda: done.append(
            search_files(forked, str(tmp_path), files, min_files=0, processes=3) is None
        ),
        daemon=True,
    )
    thread.start()
    thread.join(60)
    assert done == [True]
    assert forked.state() == single.state()
    wait_until(live_children, lambda now: now <= before, "the stalled children to be gone")


def test_a_busy_machine_forks_only_for_many_files(monkeypatch: pytest.MonkeyPatch) -> None:
    from workspace_tools.search import _worker as _grep_fork

    cpus = len(os.sched_getaffinity(0))
    every_cpu = min(cpus, _grep_fork.MAX_PROCESSES)
    busy = _grep_fork.MIN_FILES_TO_FORK_BUSY
    monkeypatch.setattr(_grep_fork, "_running_now", lambda: 0)
    monkeypatch.setattr(os, "getloadavg", lambda: (float(cpus), 0.0, 0.0))
    assert [_grep_fork._worker_count(n) for n in (1000, busy - 1, busy)] == [1, 1, every_cpu]
    monkeypatch.setattr(os, "getloadavg", lambda: (cpus - 0.5, 0.0, 0.0))
    assert _grep_fork._worker_count(1000) == every_cpu


def test_a_search_forks_only_onto_cpus_nothing_else_runs_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from workspace_tools.search import _worker as _grep_fork

    cpus = len(os.sched_getaffinity(0))
    every_cpu = min(cpus, _grep_fork.MAX_PROCESSES)
    busy = _grep_fork.MIN_FILES_TO_FORK_BUSY
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    counts = {}
    for running in (None, 0, cpus - 1, cpus, cpus + 3):
        monkeypatch.setattr(_grep_fork, "_running_now", lambda running=running: running)
        counts[running] = (_grep_fork._worker_count(1000), _grep_fork._worker_count(busy))
    assert counts == {
        None: (every_cpu, every_cpu),  # unknown: as on an idle machine
        0: (every_cpu, every_cpu),
        cpus - 1: (1, every_cpu),  # one CPU free: this process's own
        cpus: (1, every_cpu),
        cpus + 3: (1, every_cpu),
    }


def test_running_now_reads_the_tasks_running_besides_this_thread() -> None:
    from workspace_tools.search import _worker as _grep_fork

    with open("/proc/loadavg", "rb") as file:
        total = int(file.read().split()[3].split(b"/")[1])
    running = _grep_fork._running_now()
    # At least this thread runs: the others are fewer than all tasks.
    assert running is not None and 0 <= running < total, (running, total)
