"""Many workspaces in one process: what runs out, and what each one gives back.

Each scenario runs in a fresh interpreter (``tests/_many_child.py``) so that its figures
(descriptors, threads, processes, inotify instances) count from a clean start, whatever
the tests before it left in this one.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox import Sandbox
from tests._fds import OUT_OF_FDS_WORDS
from tests._index_builds import index_build_server
from tests._many_child import NEEDLE
from tests._waiting import poll, wait_until
from workspace_tools import ToolSession, invoke_tool, workspace_tools
from workspace_tools.search import _index
from workspace_tools.search._index import SearchIndex
from workspace_tools.session._cache import MAX_ENTRIES
from workspace_tools.tools.grep import INDEX_KEY
from workspace_tools.workspace import Workspace

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.anyio

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="inotify, /proc and the spawn server's counts"
)


def _child(*args: str, prefix: tuple[str, ...] = (), timeout: float = 120) -> dict[str, Any]:
    """Run ``tests._many_child`` with ``args`` (behind ``prefix``, a command that runs it)
    and return its JSON."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [*prefix, sys.executable, "-m", "tests._many_child", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _big_tree(root: Path, files: int = 1000) -> None:
    """``files`` small text files in directories of 50; only ``d00/f007.txt`` holds
    :data:`NEEDLE` (enough files for grep's warm index and its searcher processes)."""
    for i in range(files):
        directory = root / f"d{i // 50:02d}"
        directory.mkdir(parents=True, exist_ok=True)
        text = f"line one {i}\nword_{i} common\n"
        if i == 7:
            text += f"the {NEEDLE} here\n"
        (directory / f"f{i:03d}.txt").write_text(text)


def _rg(root: Path, pattern: str) -> str:
    """The oracle: ripgrep's ``path:line:text`` lines, sorted by path, as grep shows them."""
    done = subprocess.run(
        ["rg", "-n", "--no-heading", "--sort", "path", pattern],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.rstrip("\n") or "No matches"


def _in_user_namespace_with_inotify_instances(count: int) -> tuple[str, ...]:
    """A command prefix running its command in a user namespace of its own whose inotify
    instance limit is ``count``: the host's limit and other processes are left alone.
    Skips where there are no user namespaces or the limit cannot be set."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare(1)")
    prefix = (
        unshare,
        "-U",
        "-r",
        "sh",
        "-c",
        f'echo {count} > /proc/sys/user/max_inotify_instances && exec "$@"',
        "sh",
    )
    probe = subprocess.run(
        [*prefix, "cat", "/proc/sys/user/max_inotify_instances"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0 or probe.stdout.strip() != str(count):
        pytest.skip(f"cannot set an inotify limit in a user namespace: {probe.stderr}")
    return prefix


@linux_only
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("rg") is None, reason="the oracle is ripgrep")
def test_a_workspace_past_the_users_inotify_instances_greps_every_file_and_indexes_later(
    tmp_path: Path,
) -> None:
    # Three workspaces where the user may hold two inotify instances (as the 129th index
    # under the default limit of 128): the third gets no index, and its searches read
    # every file (the same lines as rg, changes seen at once); once the first workspace is
    # closed, a later build of the third one's index finds the instance freed.
    roots = [tmp_path / f"ws{i}" for i in range(3)]
    for root in roots:
        _big_tree(root)
    prefix = _in_user_namespace_with_inotify_instances(2)
    before = _rg(roots[0], NEEDLE)
    out = _child("inotify", *map(str, roots), prefix=prefix)
    after = _rg(roots[2], NEEDLE)
    assert before == f"d00/f007.txt:3:the {NEEDLE} here", before
    assert after == f"d00/f000.txt:3:added {NEEDLE}\n{before}", after
    assert out["ready"] == [True, True, False], out
    assert out["first"] == [before] * 3, out
    assert out["indexed"] == [before] * 3, out
    assert out["changed"] == [after] * 3, out
    assert out["after_close"] == after, out
    assert out["last_ready"] is True, out
    assert out["last_rebuilt"] == after, out


@linux_only
def test_sandboxes_sessions_and_plain_workspaces_share_one_spawn_server(tmp_path: Path) -> None:
    # 24 workspaces whose first commands all start at once, before any server runs: one
    # spawn server for the process (not one a sandbox, a session's copy or a workspace's
    # plain runner), kept while a workspace still uses it, gone with the last one.
    for i in range(24):
        (tmp_path / f"ws{i:02d}").mkdir()
    out = _child("servers", str(tmp_path))
    assert out["first"] == ["ok\n"] * 24, out
    assert out["servers_first"] == 1, out
    assert (out["last"], out["servers_last"]) == (["ok\n"], 1), out
    assert out["servers_end"] == 0, out


@linux_only
@pytest.mark.slow
@pytest.mark.parametrize(
    ("how", "smalls", "bigs", "indexed"), [("close", 80, 4, 3), ("drop", 24, 2, 1)]
)
def test_many_workspaces_give_back_every_fd_thread_process_and_watch(
    tmp_path: Path, how: str, smalls: int, bigs: int, indexed: int
) -> None:
    # Many small workspaces and a few big ones (grep's searchers and warm index), a quarter
    # in sessions with checkpoints, a shell and a background process, a third sandboxed
    # (one sandbox shared, one of its own), all driven at once. Closed, or dropped without
    # a close and collected (fewer of them: collection does not depend on how many), they
    # leave this process as it was before them.
    small, big = tmp_path / "small", tmp_path / "big"
    for i in range(smalls):
        root = small / f"ws{i:03d}"
        root.mkdir(parents=True)
        (root / "a.txt").write_text("one\n")
    for i in range(bigs):
        root = big / f"ws{i}"
        _big_tree(root / "tree")
        (root / "a.txt").write_text("one\n")
    out = _child("release", how, str(small), str(big))
    assert out["errors"] == [], out["errors"]
    # The big workspaces that grep in this process (not sandboxed) built their index.
    assert out["indexes"] == indexed, out
    driven, baseline, end = out["driven"], out["baseline"], out["end"]
    assert driven["inotify"] == indexed and driven["children"] > smalls, driven
    for figure in ("fds", "threads", "children", "inotify"):
        assert end[figure] == baseline[figure], (figure, baseline, driven, end)
    assert end["fd_kinds"] == baseline["fd_kinds"], (baseline, end)


@linux_only
@pytest.mark.slow
def test_calls_short_of_fds_get_a_clear_error_and_leave_files_whole(tmp_path: Path) -> None:
    # 60 workspaces driven at once in a process allowed 64 descriptors: each call either
    # works or says it ran out of them (an error code and a sentence, no trace), nothing
    # hangs, and each edited file holds its old bytes or its new ones.
    for i in range(60):
        root = tmp_path / f"ws{i:02d}"
        root.mkdir()
        (root / "a.txt").write_text("one\n")
    out = _child("fds", str(tmp_path), "64")
    results = out["results"]
    assert len(results) == 60 * 5, len(results)
    failed = [r for r in results if r[1] is not None]
    assert failed, "the limit was never reached: the test checks nothing"
    words = OUT_OF_FDS_WORDS[errno.EMFILE]
    for name, code, message in failed:
        assert code == "TOOL_ERROR" and message.endswith(f": {words}"), (name, code, message)
    # Commands ran out of them too (their pipes), not only the file tools.
    assert {name for name, _, _ in failed} >= {"run_command"}, failed
    assert sorted(set(out["files"])) in (["one\n"], ["two\n"], ["one\n", "two\n"]), out["files"]
    edits = [r for r in results if r[0] == "edit_file"]
    edited = sum(r[1] is None for r in edits)
    assert out["files"].count("two\n") == edited, (edited, out["files"])


@linux_only
@pytest.mark.slow
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_process_past_1024_descriptors_runs_every_kind_of_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Hundreds of workspaces hold well over 1,024 descriptors, and every new one is
    # numbered above them: nothing may wait on one with select() (FD_SETSIZE), which
    # refuses such numbers. Sandboxed calls (their workers let go on close), the warm
    # index's build (its own spawn server's worker), commands and a shell all run.
    errors: list[str] = []
    monkeypatch.setattr(threading, "excepthook", lambda hook: errors.append(repr(hook.exc_value)))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        _big_tree(tmp_path / "big")
        tools = {t.name: t for t in workspace_tools(tmp_path / "big")}
        for _ in range(2):
            result = await invoke_tool(tools["grep"], {"pattern": NEEDLE})
            assert result.content == f"d00/f007.txt:3:the {NEEDLE} here", result
        index = tools["grep"].workspace.kept(INDEX_KEY, lambda: None)
        assert index is not None and index.wait(60), errors
        command = await invoke_tool(tools["run_command"], {"command": "echo ok"})
        assert (command.error, command.content["stdout"]) == (None, "ok\n"), command
        box = Sandbox(layers=False)
        try:
            assert await box.call(len, "four") == 4
            boxed = {t.name: t for t in workspace_tools(tmp_path / "big", sandbox=box)}
            read = await invoke_tool(boxed["read_file"], {"path": "d00/f007.txt"})
            assert read.error is None, read
        finally:
            box.close()
        with ToolSession(tmp_path / "big", shell=True) as session:
            answer = await session.call("shell", {"command": "echo $((6 * 7))"})
            assert (answer.error, answer.content["stdout"]) == (None, "42\n"), answer
        tools["grep"].workspace.close()
    finally:
        for fd in held:
            os.close(fd)
    assert errors == []


@pytest.fixture
def build_server() -> Iterator[Callable[..., Any]]:
    """The warm index's builds on one spawn server's worker (each in a child of its own)."""
    with index_build_server() as in_child:
        yield in_child


@linux_only
def test_index_builds_of_many_workspaces_take_turns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, build_server: Callable[..., Any]
) -> None:
    # Six workspaces' first big searches at once: their builds read one tree at a time
    # (the process's build slots, one here), not six at once; each index is built.
    monkeypatch.setattr(_index, "_BUILD_SLOTS", threading.BoundedSemaphore(1))
    real_in_child = build_server
    guard = threading.Lock()
    inside: list[int] = []
    most: list[int] = []
    gate = threading.Event()

    def counted(control: Any, work: Any, *args: Any) -> Any:
        with guard:
            inside.append(1)
            most.append(len(inside))
        gate.wait(60)
        try:
            return real_in_child(control, work, *args)
        finally:
            with guard:
                inside.pop()

    monkeypatch.setattr(_index, "_in_child", counted)
    indexes = []
    for i in range(6):
        root = tmp_path / f"ws{i}"
        (root / "d").mkdir(parents=True)
        (root / "d" / "a.txt").write_text(f"word_{i}\n")
        workspace = Workspace(root)
        index = SearchIndex(str(workspace.root), min_files=1)
        index.after_search(workspace.walker, 1)
        indexes.append(index)
    # One build is waiting at the gate; no other may join it, however long they get.
    wait_until(lambda: len(most), lambda n: n >= 1, "a build under way")
    assert poll(lambda: max(most), lambda n: n > 1, timeout=2.0) == 1, most
    gate.set()
    assert [index.wait(60) for index in indexes] == [True] * 6, most
    assert max(most) == 1 and len(most) == 6, most
    for index in indexes:
        index.close()


def test_a_session_keeps_its_last_results_only(tmp_path: Path) -> None:
    # A session of read-only calls keeps the results of the last MAX_ENTRIES distinct
    # calls used, not of every call it ever made: the oldest one runs again.
    for i in range(MAX_ENTRIES + 1):
        (tmp_path / f"f{i:03d}.txt").write_text(f"{i}\n")
    with ToolSession(tmp_path) as session:
        session.call_sync("read_file", {"path": "f000.txt"})
        for i in range(1, MAX_ENTRIES):
            session.call_sync("read_file", {"path": f"f{i:03d}.txt"})
        again = session.call_sync("read_file", {"path": "f000.txt"})  # used: kept
        session.call_sync("read_file", {"path": f"f{MAX_ENTRIES:03d}.txt"})  # f001 goes
        first = session.call_sync("read_file", {"path": "f000.txt"})
        dropped = session.call_sync("read_file", {"path": "f001.txt"})
        states = [step.cached for step in session.steps[-4:]]
    assert (again.content, first.content, dropped.content) == (
        "     1\t0",
        "     1\t0",
        "     1\t1",
    )
    assert states == [True, False, True, False], states


@linux_only
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_sandboxed_workspace_greps_with_pythons_engine_call_after_call(
    tmp_path: Path,
) -> None:
    # A pattern only Python's engine runs exactly (\b) is searched in a searcher process;
    # in a sandboxed workspace that process belongs to the call's child, which kills what
    # a call left running: the next call must start another, not send it its job.
    for i in range(10):
        (tmp_path / f"f{i}.py").write_text(f"x_{i} = 1\n")
    box = Sandbox(layers=False)
    try:
        grep = {t.name: t for t in workspace_tools(tmp_path, sandbox=box)}["grep"]
        seen = []
        for i in range(4):
            result = await invoke_tool(grep, {"pattern": f"x_{i}\\b"})
            seen.append((result.error, result.content))
    finally:
        box.close()
    assert seen == [(None, f"f{i}.py:1:x_{i} = 1") for i in range(4)], seen


def _pids_cgroup(tmp_path: Path) -> Path:
    """A pids cgroup (v1) of this test's own; skips where there is none to be made."""
    top = Path("/sys/fs/cgroup/pids")
    if not (top / "cgroup.procs").exists() or os.geteuid() != 0:
        pytest.skip("no pids cgroup (v1) this test may make")
    group = top / f"wt-test-{tmp_path.name}-{os.getpid()}"
    try:
        group.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a pids cgroup: {exc}")
    return group


@linux_only
@pytest.mark.slow
def test_commands_past_the_process_limit_get_a_clear_error(tmp_path: Path) -> None:
    # 30 workspaces start a command at once in a process allowed 30 processes and
    # threads in all (a pids cgroup; RLIMIT_NPROC does not bind root): each command runs
    # or is refused with what to do, the spawn server serving on; none hangs.
    for i in range(30):
        (tmp_path / f"ws{i:02d}").mkdir()
    group = _pids_cgroup(tmp_path)
    try:
        (group / "pids.max").write_text("30")
        prefix = ("sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$@"', "sh")
        out = _child("processes", str(tmp_path), prefix=prefix)
    finally:
        wait_until(lambda: (group / "pids.current").read_text().strip(), "0".__eq__, "no pid")
        group.rmdir()
    refused = (
        "TOOL_ERROR",
        "No new process could be started: Resource temporarily unavailable (the limit on "
        "processes, or memory, is reached); try again when fewer commands run at once",
        None,
    )
    kinds = {tuple(result) for result in out["results"]}
    assert len(out["results"]) == 30 and (None, None, "ok\n") in kinds, kinds
    # Refused alike whether the server's fork of a supervisor or the command's own start
    # (its supervisor's spawn) met the limit.
    assert kinds == {(None, None, "ok\n"), refused}, kinds
