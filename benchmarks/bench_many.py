"""Hundreds of workspaces in one process: what each one holds, and what closing gives back.

N workspaces (small generated trees of ``--files`` files, enough for grep's warm index,
built after a search of 1,000 files or more), each with its own tools
(``workspace_tools(root)``); every ``--session-every``-th one through a ``ToolSession``
with checkpoints and the shell tools, every ``--sandbox-every``-th one in one shared
``Sandbox`` (and ``--own-sandboxes`` of them in a sandbox of their own). All are driven at
once with anyio: read_file, edit_file, grep (twice, then again once the index is ready),
glob, list_files, run_command, and in the sessions a shell command and a background
process. Then everything is closed, and finally the tools are dropped and collected.

Printed after each phase, for this process and its descendants: descriptors, threads,
child processes, inotify instances and watches (``/proc/self/fdinfo``), RSS of this
process (and of the descendants), and the phase's wall time; per workspace where that is
what the figure grows with.

Run from the repository root: ``PYTHONPATH=. python benchmarks/bench_many.py
[--workspaces 200] [--files 1000] [--session-every 4] [--sandbox-every 3]
[--own-sandboxes 3] [--concurrency 32]``.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from sandbox import Sandbox
from sandbox.spawn._tree import descendants
from workspace_tools import ToolSession, invoke_tool, workspace_tools


@dataclass
class Figures:
    """What this process (and its descendants) holds at one moment."""

    fds: int
    threads: int
    children: int
    inotify_instances: int
    inotify_watches: int
    rss_kib: int
    children_rss_kib: int
    kinds: dict[str, int]
    fd_kinds: dict[str, int]

    @classmethod
    def now(cls) -> Figures:
        """Read from /proc."""
        instances = watches = 0
        fds = 0
        fd_kinds: dict[str, int] = {}
        for entry in os.listdir("/proc/self/fd"):
            fds += 1
            try:
                with open(f"/proc/self/fdinfo/{entry}") as f:
                    lines = [line for line in f if line.startswith("inotify wd:")]
                target = os.readlink(f"/proc/self/fd/{entry}")
                kind = target.split(":")[0] if ":" in target else "file"
                kind = target if kind == "anon_inode" else kind
                fd_kinds[kind] = fd_kinds.get(kind, 0) + 1
                if target == "anon_inode:inotify":
                    instances += 1
                    watches += len(lines)
            except OSError:
                continue
        kids = descendants(os.getpid())
        return cls(
            fds=fds,
            threads=len(os.listdir("/proc/self/task")),
            children=len(kids),
            inotify_instances=instances,
            inotify_watches=watches,
            rss_kib=_rss(os.getpid()),
            children_rss_kib=sum(_pss(pid) for pid in kids),
            kinds=_kinds(kids),
            fd_kinds=fd_kinds,
        )


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _pss(pid: int) -> int:
    """Proportional set size in KiB: shared pages split between the processes sharing them
    (RSS would count a forked server's pages once a child)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _kinds(pids: list[int]) -> dict[str, int]:
    """How many of ``pids`` are spawn servers, processes they forked (supervisors, call
    workers and their children), grep's searchers, and commands."""
    counts: dict[str, int] = {}
    servers = set()
    for pid in pids:  # parents before children
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat", "rb") as f:
                parent = int(f.read().rsplit(b")", 1)[1].split()[1])
        except OSError:
            continue
        forked = any(b"sandbox.spawn._server" in arg for arg in argv)  # forks keep argv
        if forked and parent == os.getpid():
            kind = "spawn server"
            servers.add(pid)
        elif parent in servers:
            kind = "supervisor/call worker"
        elif forked:
            kind = "call worker's child"
        elif any(b"search._searcher" in arg for arg in argv):
            kind = "searcher"
        else:
            kind = "command"
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def make_tree(root: Path, files: int) -> None:
    """``files`` small Python-like files in directories of 50, words shared and unique."""
    for i in range(files):
        directory = root / f"pkg{i // 50:03d}"
        directory.mkdir(exist_ok=True)
        (directory / f"mod{i:04d}.py").write_text(
            f"def function_{i}(value):\n    return value + {i}  # common_word\n"
            f"\nclass Thing{i}:\n    unique_marker_{i} = 'text {i}'\n"
        )


@dataclass
class Bench:
    root: Path
    tools: dict[str, Any]
    session: ToolSession | None


async def call(bench: Bench, name: str, arguments: dict[str, Any]) -> None:
    if bench.session is not None:
        result = await bench.session.call(name, arguments)
    else:
        result = await invoke_tool(bench.tools[name], arguments)
    if result.error is not None:
        raise RuntimeError(f"{bench.root.name} {name}: {result.error}: {result.content}")


async def drive(bench: Bench, files: int) -> None:
    """One workspace's calls, one after another."""
    last = files - 1
    await call(bench, "read_file", {"path": "pkg000/mod0000.py"})
    await call(
        bench,
        "edit_file",
        {"path": "pkg000/mod0000.py", "old_text": "value + 0", "new_text": "value + 100"},
    )
    await call(bench, "glob", {"pattern": "**/mod00*.py"})
    await call(bench, "list_files", {"path": ".", "recursive": True, "limit": 20})
    await call(bench, "grep", {"pattern": "common_word", "limit": 5})
    await call(bench, "grep", {"pattern": f"unique_marker_{last}\\b"})
    await call(bench, "run_command", {"command": "echo ok"})
    if bench.session is not None and bench.session.shell is not None:
        await call(bench, "shell", {"command": "cd pkg000 && pwd"})
        await call(bench, "start_process", {"command": "sleep 600"})


async def drive_all(benches: list[Bench], files: int, concurrency: int) -> None:
    limiter = anyio.CapacityLimiter(concurrency)

    async def one(bench: Bench) -> None:
        async with limiter:
            await drive(bench, files)

    async with anyio.create_task_group() as group:
        for bench in benches:
            group.start_soon(one, bench)


async def grep_again(benches: list[Bench], files: int, concurrency: int) -> None:
    limiter = anyio.CapacityLimiter(concurrency)

    async def one(bench: Bench) -> None:
        async with limiter:
            await call(bench, "grep", {"pattern": f"unique_marker_{files // 2}\\b"})

    async with anyio.create_task_group() as group:
        for bench in benches:
            group.start_soon(one, bench)


def indexes(benches: list[Bench]) -> tuple[int, int]:
    """How many workspaces have a warm index ready, and the bytes they hold."""
    ready = held = 0
    for bench in benches:
        workspace = bench.tools["grep"].workspace
        index = workspace._kept.get("grep.index")
        if index is not None and index.ready():
            ready += 1
            held += index.memory
    return ready, held


def make_benches(roots: list[Path], args: argparse.Namespace) -> tuple[list[Bench], list[Sandbox]]:
    """The workspaces' tools: every ``session_every``-th through a session with checkpoints
    and the shell tools, every ``sandbox_every``-th in a sandbox (the first
    ``own_sandboxes`` of them in one of their own, the others in one shared)."""
    shared = Sandbox(best_effort=True)
    boxes = [shared]
    benches = []
    for i, root in enumerate(roots):
        box = None
        if args.sandbox_every and i % args.sandbox_every == 1:
            if len(boxes) <= args.own_sandboxes:
                boxes.append(Sandbox(best_effort=True))
                box = boxes[-1]
            else:
                box = shared
        if args.session_every and i % args.session_every == 0:
            session = ToolSession(root, sandbox=box, shell=True, checkpoints=True)
            benches.append(Bench(root, {t.name: t for t in session.tools}, session))
        else:
            tools = {t.name: t for t in workspace_tools(root, sandbox=box)}
            benches.append(Bench(root, tools, None))
    return benches, boxes


def show(phase: str, figures: Figures, base: Figures, n: int, seconds: float) -> None:
    per = max(n, 1)
    fds = (figures.fds - base.fds) / per
    rss = (figures.rss_kib - base.rss_kib) / per
    print(
        f"{phase:<22} {seconds:7.2f} s  fds {figures.fds:6d} ({fds:5.2f}/ws)"
        f"  threads {figures.threads:4d} ({(figures.threads - base.threads) / per:4.2f}/ws)"
        f"  children {figures.children:5d} ({(figures.children - base.children) / per:4.2f}/ws)"
        f"  inotify {figures.inotify_instances:4d} inst {figures.inotify_watches:6d} watches"
        f"  RSS {figures.rss_kib / 1024:7.1f} MiB ({rss:6.0f} KiB/ws)"
        f"  children PSS {figures.children_rss_kib / 1024:7.1f} MiB",
        flush=True,
    )
    print(" " * 23 + "children: " + ", ".join(f"{n} {k}" for k, n in figures.kinds.items()))
    print(" " * 23 + "fds: " + ", ".join(f"{n} {k}" for k, n in figures.fd_kinds.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspaces", type=int, default=200)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--session-every", type=int, default=4)
    parser.add_argument("--sandbox-every", type=int, default=3)
    parser.add_argument("--own-sandboxes", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    n = args.workspaces
    with open("/proc/sys/fs/inotify/max_user_instances") as f:
        limit = f.read().strip()
    with open("/proc/sys/user/max_inotify_instances") as f:  # this user namespace's
        here = f.read().strip()
    print(f"inotify instances: {limit} a user, {here} in this namespace; {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as parent:
        started = time.perf_counter()
        roots = []
        for i in range(n):
            root = Path(parent) / f"ws{i:04d}"
            root.mkdir()
            make_tree(root, args.files)
            roots.append(root)
        print(f"trees: {n} x {args.files} files in {time.perf_counter() - started:.1f} s")
        gc.collect()
        base = Figures.now()
        show("baseline", base, base, n, 0.0)
        started = time.perf_counter()
        benches, boxes = make_benches(roots, args)
        show("made", Figures.now(), base, n, time.perf_counter() - started)
        started = time.perf_counter()
        anyio.run(drive_all, benches, args.files, args.concurrency)
        show("driven", Figures.now(), base, n, time.perf_counter() - started)
        started = time.perf_counter()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for bench in benches:
                index = bench.tools["grep"].workspace._kept.get("grep.index")
                if index is not None:
                    index.wait(max(deadline - time.monotonic(), 0))
            break
        ready, held = indexes(benches)
        print(f"indexes ready: {ready} of {n}, {held / 2**20:.1f} MiB held")
        anyio.run(grep_again, benches, args.files, args.concurrency)
        show("indexed, grep again", Figures.now(), base, n, time.perf_counter() - started)
        started = time.perf_counter()
        for bench in benches:
            if bench.session is not None:
                bench.session.close()
            bench.tools["grep"].workspace.close()
        for box in boxes:
            box.close()
        show("closed", Figures.now(), base, n, time.perf_counter() - started)
        started = time.perf_counter()
        benches.clear()
        boxes.clear()
        gc.collect()
        show("dropped and collected", Figures.now(), base, n, time.perf_counter() - started)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
