"""Latency of run_command and of a sandboxed tool call, each beside its peer.

Run from the repository root: ``python benchmarks/bench_run.py [--runs N]
[--calls-only | --commands-only | --custom-only | --boxed-commands-only | --headline-only]``
(``--headline-only``: ``run_command("true")`` against ``subprocess.run`` and its CPU rows
alone, seconds, for runs repeated to see the spread; ``--commands-only``: run_command's rows
alone, about a minute; ``--custom-only``: the small
custom tool's rows in a sandbox alone, latency and CPU, about 20 seconds;
``--boxed-commands-only``: run_command's rows in a sandbox alone).

Prints medians in milliseconds and ratios:
- ``run_command("true")`` through ``invoke_tool`` in a running event loop, and through
  ``invoke_tool_sync`` (which starts an event loop per call) from plain code, each against
  ``subprocess.run(["bash", "-c", "true"])`` (target: at most 1.1x), and ``Sandbox.run`` of
  the same argv (the spawn path through a supervisor without the tool's pipeline) against
  the same peer; and the CPU each costs in this process alone (``time.process_time``, the
  caller's share, which the machine's other load hardly moves), and what a command costs
  on both sides of the supervisor hop (CPU a command in the caller and in the supervisor,
  and how often each goes to sleep: each sleep is a wake-up later; Linux); and the floor
  of the supervisor hop on this machine (see :func:`floor_rows`): a bare round trip between
  two Python processes over a Unix socketpair, ``posix_spawn`` and wait of the same bash
  in this process, and one hop to another Python process that spawns and waits for it,
  awaited on the event loop as the caller awaits its supervisor, each beside
  ``subprocess.run``; what is above the hop's figure is the software's, not the hop's;
  and the same hop with its child forked ahead, waiting for the request, so that only an
  execve is on the path (measured slower than the spawn, 20 ms apart too, when the fork is
  made in the gap: the child of a fork, not of a vfork, copies each page of the heap it
  touches before its exec, and the exec tears its copy of the address space down);
- ``run_command("true")`` through the call's sandbox door (``invoke_tool(tool, args,
  sandbox=box)``, the door a ``ToolSession(..., sandbox=box)`` runs it through) beside the
  same box's ``workspace_tools(root, sandbox=box)`` run_command, latency and CPU in all
  processes;
- a ``read_file`` call, and a small custom tool (its ``execute`` importable, and the same
  as a closure, which crosses by value), in a sandbox against in process (target: the
  sandboxed call under 2 ms median), and the CPU each costs in all processes (on a shared
  machine the steadier figure), split between the caller, the warm workers and the
  calls' children (Linux); the floor of a call's fresh child (see
  :func:`fork_floor_rows`): the fork and exit of a process holding the same modules with
  no call, and the CPU of each page a child writes; ``read_file`` again once the
  workspace has read 2,000 other files (a sandboxed call carries the hashes of the files
  it names, not all);
- the same small tool declared stateless (``tool(..., stateless=True)``: its calls share
  one long-lived confined child) against its default, a fresh child per call, latency
  and CPU;
- ``read_file`` (whose ``execute`` declares it keeps no state: ``Tool.stateless``) served
  by a worker's one reused child against the same tool undeclared, a fresh child per
  call, latency and CPU;
- the first call of the closure tool in a new sandbox (its spawn server and worker
  started for it), latency;
- the first call (``read_file``) of a new ``ToolSession(root, sandbox=box)``, timed from
  the session's creation, with no gap and with 200 ms before the call (an agent's first
  model turn): the session starts the spawn server and a worker ahead, in the background,
  against the same with that start turned off (as before: the call starts them).

Each figure is measured twice: calls back to back, and calls 20 ms apart (untimed), as an
agent's calls are separated by model turns. The sandbox's warm worker forks the child for
the next call while a call runs and in that gap; back to back, the fork and the previous
child's exit compete with the call. run_command's calls and
subprocess.run's alternate, so that both see the same load on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _small_tool import HEAD_TOOL, STATELESS_HEAD_TOOL, closure_head_tool

from sandbox import Sandbox
from sandbox.spawn._tree import descendants
from workspace_tools import Tool, ToolSession, invoke_tool, invoke_tool_sync
from workspace_tools.tools import workspace_tools

GAPS = (0.0, 0.02)
SEEN_FILES = 2000


async def samples_ms(
    ours: Callable[[], Awaitable[object]],
    peer: Callable[[], Awaitable[object]],
    runs: int,
    gap: float,
    interleave: bool,
) -> tuple[list[float], list[float]]:
    """Milliseconds of each of ``runs`` calls of ``ours`` and of ``peer``. Interleaved,
    their calls alternate so that both see the same load on the machine (the i-th of each
    list made moments apart); otherwise all of ours come first (a sandbox's worker forks
    its next child with each call, which would burden the peer's)."""
    for _ in range(max(3, runs // 10)):  # warm up: servers started, caches filled
        await ours()
        await peer()
    samples: tuple[list[float], list[float]] = ([], [])
    pairs = list(zip((ours, peer), samples, strict=True))
    if interleave:
        # Each round runs both, the first of the pair alternating, so that neither always
        # follows the other (the one after a fork or an exit pays for its tail).
        rounds = [pairs if n % 2 == 0 else pairs[::-1] for n in range(runs)]
    else:
        rounds = [[pair] * runs for pair in pairs]
    for round_ in rounds:
        for call, times in round_:
            await anyio.sleep(gap)
            started = time.perf_counter()
            await call()
            times.append((time.perf_counter() - started) * 1000)
    return samples


def pair_ratios(ours: list[float], peer: list[float]) -> tuple[float, float, float]:
    """The median of the ratios of ``ours`` to ``peer`` taken pair by pair (samples of one
    round, measured moments apart, under the same load), and its quartiles: on a shared
    machine, whose load moves both of a pair alike, steadier than a ratio of medians."""
    ratios = sorted(a / b for a, b in zip(ours, peer, strict=True))
    low, middle, high = statistics.quantiles(ratios, n=4)
    return middle, low, high


async def compare(
    label: str,
    ours: Callable[[], Awaitable[object]],
    peer_label: str,
    peer: Callable[[], Awaitable[object]],
    target: str,
    runs: int,
    interleave: bool,
) -> None:
    for gap in GAPS:
        spacing = "back to back" if gap == 0 else f"{gap * 1000:g} ms apart"
        ours_ms, peer_ms = await samples_ms(ours, peer, runs, gap, interleave)
        report(
            f"{label} [{spacing}]",
            statistics.median(ours_ms),
            peer_label,
            statistics.median(peer_ms),
            target,
            pair_ratios(ours_ms, peer_ms) if interleave else None,
        )


def compare_sync(
    label: str,
    ours: Callable[[], object],
    peer_label: str,
    peer: Callable[[], object],
    target: str,
    runs: int,
) -> None:
    """:func:`compare` for blocking calls, made outside any event loop (interleaved)."""
    for gap in GAPS:
        spacing = "back to back" if gap == 0 else f"{gap * 1000:g} ms apart"
        for _ in range(max(3, runs // 10)):
            ours()
            peer()
        samples: tuple[list[float], list[float]] = ([], [])
        pairs = list(zip((ours, peer), samples, strict=True))
        for n in range(runs):
            for call, times in pairs if n % 2 == 0 else pairs[::-1]:
                time.sleep(gap)
                started = time.perf_counter()
                call()
                times.append((time.perf_counter() - started) * 1000)
        ours_ms, peer_ms = samples
        report(
            f"{label} [{spacing}]",
            statistics.median(ours_ms),
            peer_label,
            statistics.median(peer_ms),
            target,
            pair_ratios(ours_ms, peer_ms),
        )


def sync_rows(runs: int) -> None:
    """run_command through invoke_tool_sync, from code that runs no event loop."""
    with tempfile.TemporaryDirectory() as root:
        tools = {t.name: t for t in workspace_tools(root)}

        def run_true_sync() -> None:
            result = invoke_tool_sync(tools["run_command"], {"command": "true"})
            assert result.content["exit_code"] == 0, result.error

        compare_sync(
            'run_command("true") via invoke_tool_sync',
            run_true_sync,
            "subprocess.run(bash -c true)",
            lambda: subprocess.run(["bash", "-c", "true"], check=True),
            "target <= 1.1x",
            runs,
        )


def _own_cpu_seconds() -> float:
    """CPU seconds of this process alone (user and system)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def _descendants_cpu_seconds() -> float:
    """CPU seconds this process's descendants spent, running or reaped: the spawn servers,
    the warm workers and their children (``/proc``: a live one's own time to the
    nanosecond from its schedstat, what it reaped in clock ticks), and those this process
    reaped."""
    seconds = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for pid in descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            own = _sched(pid)[0]
        except OSError:
            continue  # ended meanwhile: its time is its parent's now
        # cutime, cstime: fields 16 and 17 of proc(5), in clock ticks.
        seconds += own + (int(fields[13]) + int(fields[14])) / tick
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return seconds + reaped.ru_utime + reaped.ru_stime


def _children(pid: int) -> list[int]:
    """The children of every thread of ``pid`` (``/proc``, Linux; none elsewhere): the
    spawn server is started from whichever thread made the first call."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for thread in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{thread}/children") as f:
                found += [int(child) for child in f.read().split()]
    return found


def _workers_cpu_seconds() -> tuple[float, float]:
    """CPU seconds of the calls' warm workers themselves (children of the spawn servers,
    this process's children) and of their children, running or reaped by them (``/proc``,
    Linux; zeros elsewhere)."""
    tick = os.sysconf("SC_CLK_TCK")
    own = children = 0.0
    for worker in (w for server in _children(os.getpid()) for w in _children(server)):
        try:
            with open(f"/proc/{worker}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # utime, stime, cutime, cstime: fields 14 to 17 of proc(5), in clock ticks.
        own += (int(fields[11]) + int(fields[12])) / tick
        children += (int(fields[13]) + int(fields[14])) / tick
        for child in _children(worker):
            with contextlib.suppress(OSError):
                children += _sched(child)[0]
    return own, children


async def cpu_rows(
    label: str,
    call: Callable[[Sandbox], Awaitable[object]],
    runs: int,
    make: Callable[[], Sandbox] = Sandbox,
) -> None:
    """CPU milliseconds a sandboxed call costs in all processes (the caller, the warm
    workers, their children), back to back and 20 ms apart: a figure the machine's other
    load hardly moves; and how it splits between the caller, the workers and the
    children that ran the calls. A fresh sandbox each (``make()``), measured once warm."""
    for gap in GAPS:
        spacing = "back to back" if gap == 0 else f"{gap * 1000:g} ms apart"
        box = make()
        for _ in range(max(3, runs // 10)):
            await call(box)
        others_before, caller_before = _descendants_cpu_seconds(), _own_cpu_seconds()
        split_before = _workers_cpu_seconds()
        for _ in range(runs):
            await anyio.sleep(gap)
            await call(box)
        caller = (_own_cpu_seconds() - caller_before) / runs * 1000
        others = (_descendants_cpu_seconds() - others_before) / runs * 1000
        workers, children = (
            (after - before) / runs * 1000
            for after, before in zip(_workers_cpu_seconds(), split_before, strict=True)
        )
        box.close()
        print(
            f"{f'{label} [{spacing}]':<56} CPU a call {caller + others:6.2f} ms in all "
            f"processes, {caller:5.2f} ms in the caller, {workers:5.2f} in the workers, "
            f"{children:5.2f} in the calls' children"
        )


#: A process holding what a sandbox's warm worker holds for the small tool (its module,
#: pydantic), its heap frozen as the worker's: it forks children that exit at once
#: (``fork`` and ``_exit`` of libc, as the worker's own), and children that first write
#: one byte to each of ``PAGES`` pages of its heap; one JSON line of medians in
#: microseconds (fork, fork to reaped, the child's CPU) for each.
_FORK_FLOOR = """
import ctypes, gc, json, os, statistics, sys, time
sys.path[:0] = sys.argv[1:3]
import _small_tool
PAGES = 300
heap = bytearray(PAGES * 4096)
gc.freeze()
libc = ctypes.PyDLL(None)
fork, exit_ = libc.fork, libc._exit
figures = {}
for pages in (0, PAGES):
    forks, reaped, child = [], [], []
    for _ in range(300):
        started = time.perf_counter()
        pid = fork()
        if pid == 0:
            for page in range(pages):
                heap[page * 4096] = 1
            exit_(0)
        forked = time.perf_counter()
        usage = os.wait4(pid, 0)[2]
        forks.append(forked - started)
        reaped.append(time.perf_counter() - started)
        child.append(usage.ru_utime + usage.ru_stime)
    figures[pages] = [statistics.median(v) * 1e6 for v in (forks, reaped, child)]
rss = [line.split()[1] for line in open("/proc/self/smaps_rollup") if line.startswith("Anon")]
print(json.dumps({"figures": figures, "pages": PAGES, "anon_kib": int(rss[0])}))
"""


def fork_floor_rows() -> None:
    """The floor of a call's fresh child here (Linux): what a fork of a process holding the
    worker's modules, and its exit, cost with no call at all, and what each page the child
    writes adds (a copy-on-write fault); beside them, the CPU a sandboxed call costs in all
    processes shows how much of it is the fresh child itself. Back to back on two CPUs a
    call takes at least half its CPU in all processes."""
    if not sys.platform.startswith("linux"):
        return
    here = Path(__file__).resolve().parent
    done = subprocess.run(
        [sys.executable, "-c", _FORK_FLOOR, str(here), str(here.parent)],
        capture_output=True,
        text=True,
        check=True,
    )
    found = json.loads(done.stdout)
    (fork0, reaped0, child0), (_, _, child) = found["figures"].values()
    pages = found["pages"]
    print(
        f"floor: a fresh child of a process holding the small tool's modules "
        f"({found['anon_kib'] / 1024:.1f} MiB anonymous memory): fork {fork0:.0f} us, "
        f"fork to reaped {reaped0:.0f} us, the child's exit {child0:.0f} us CPU; "
        f"writing {pages} pages of its heap {(child - child0) / pages:.2f} us CPU a page"
    )


async def first_call_rows(label: str, tool_: Tool[Any], path: str, runs: int) -> None:
    """Milliseconds of the first call of ``tool_`` in a new sandbox (median, and the
    slowest), the sandbox closed after each."""
    samples = []
    for _ in range(runs):
        box = Sandbox()
        started = time.perf_counter()
        result = await invoke_tool(tool_, {"path": path}, sandbox=box)
        samples.append((time.perf_counter() - started) * 1000)
        box.close()
        assert result.error is None, result.error
    print(
        f"{label:<56} {statistics.median(samples):6.2f} ms median, "
        f"{max(samples):6.2f} ms the slowest of {runs}"
    )


async def session_first_call_rows(root: str, runs: int) -> None:
    """Milliseconds from ``ToolSession(root, sandbox=Sandbox())`` to the end of its first
    call (``read_file``), median and slowest of ``runs``, the call made at once or after
    200 ms; the session starting its processes ahead, and not (as before)."""
    ahead = Sandbox.start_calls_ahead
    for gap in (0.0, 0.2):
        for label, start in (("started ahead", ahead), ("not started ahead (before)", None)):
            samples = []
            for _ in range(runs):
                if start is None:
                    Sandbox.start_calls_ahead = lambda *_, **__: None  # type: ignore[method-assign]
                box = Sandbox()
                began = time.perf_counter()
                session = ToolSession(root, sandbox=box)
                Sandbox.start_calls_ahead = ahead  # type: ignore[method-assign]
                await anyio.sleep(gap)
                result = await session.call("read_file", {"path": "sample.py"})
                samples.append((time.perf_counter() - began) * 1000)
                session.close()
                box.close()
                assert result.error is None, result.error
            print(
                f"{f'session first call, {gap * 1000:.0f} ms gap, {label}':<56} "
                f"{statistics.median(samples):6.2f} ms median, "
                f"{max(samples):6.2f} ms the slowest of {runs}"
            )


async def caller_cpu_rows(
    label: str,
    ours: Callable[[], Awaitable[object]],
    peer_label: str,
    peer: Callable[[], Awaitable[object]],
    runs: int,
) -> None:
    """CPU microseconds a call costs this process (``time.process_time``: user and system,
    not the children's), over ``runs`` calls back to back of each, ours first."""
    for _ in range(max(3, runs // 10)):
        await ours()
        await peer()
    spent = []
    for call in (ours, peer):
        started = time.process_time()
        for _ in range(runs):
            await call()
        spent.append((time.process_time() - started) / runs * 1e6)
    print(
        f"{label:<56} {spent[0]:6.0f} us   {peer_label:<30} {spent[1]:6.0f} us   "
        "CPU a call in the caller"
    )


def _descendants_of(parent: int, depth: int) -> list[int]:
    """Processes ``depth`` generations below ``parent`` (2: the spawn server's supervisors),
    from ``/proc`` (Linux); empty elsewhere."""
    found = [parent]
    for _ in range(depth):
        children = []
        for pid in found:
            try:
                with open(f"/proc/{pid}/task/{pid}/children") as f:
                    children += [int(child) for child in f.read().split()]
            except OSError:
                return []
        found = children
    return found


def _sched(pid: int) -> tuple[float, int]:
    """Seconds ``pid`` has run (``/proc/PID/schedstat``, user and system, to the
    nanosecond) and how many times it went to sleep (voluntary context switches)."""
    with open(f"/proc/{pid}/schedstat") as f:
        ran = int(f.read().split()[0]) / 1e9
    with open(f"/proc/{pid}/status") as f:
        sleeps = next(int(line.split()[1]) for line in f if line.startswith("voluntary_"))
    return ran, sleeps


async def both_sides_rows(label: str, ours: Callable[[], Awaitable[object]], runs: int) -> None:
    """What a command costs on each side of the supervisor hop, over ``runs`` calls back to
    back: CPU microseconds in the caller and in its supervisor, and how many times each
    went to sleep (each sleep is a wake-up later, a context switch, on this machine a
    cross-CPU one at tens of microseconds). Linux only (``/proc``)."""
    for _ in range(max(3, runs // 10)):
        await ours()
    me = os.getpid()
    supervisors = _descendants_of(me, 2)
    try:
        before = [_sched(pid) for pid in (me, *supervisors)]
    except OSError:
        print(f"{label:<56} (no /proc here: both sides not measured)")
        return
    for _ in range(runs):
        await ours()
    after = [_sched(pid) for pid in (me, *supervisors)]
    spent = [(a[0] - b[0]) / runs * 1e6 for a, b in zip(after, before, strict=True)]
    sleeps = [(a[1] - b[1]) / runs for a, b in zip(after, before, strict=True)]
    print(
        f"{label:<56} caller {spent[0]:4.0f} us, {sleeps[0]:.2f} sleeps; supervisor "
        f"{sum(spent[1:]):4.0f} us, {sum(sleeps[1:]):.2f} sleeps   a command, both sides"
    )


def _ticks_reaped(pid: int) -> float:
    """CPU seconds of the children ``pid`` has reaped (``/proc/PID/stat``'s cutime and
    cstime, in clock ticks: a sum over many commands, so the tick is a small error)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


async def all_cpu_rows(
    label: str,
    ours: Callable[[], Awaitable[object]],
    peer_label: str,
    peer: Callable[[], Awaitable[object]],
    runs: int,
    blocks: int = 5,
) -> None:
    """CPU microseconds a command costs in every process on its path, ours against the
    peer's, and their ratio: the caller (``getrusage``), its supervisors (``schedstat``)
    and the bash each ran (reaped by the supervisor), against the caller and the bash it
    reaped itself. Unlike the wall clock, the machine's other load hardly moves it (it
    does slow every instruction, both sides alike). ``blocks`` blocks of each, taking
    turns. Linux only (``/proc``)."""
    for _ in range(max(3, runs // 10)):
        await ours()
        await peer()
    supervisors = _descendants_of(os.getpid(), 2)
    if not supervisors:
        print(f"{label:<56} (no /proc here: CPU in all processes not measured)")
        return

    def ours_now() -> float:
        spent = _own_cpu_seconds()
        for pid in supervisors:
            spent += _sched(pid)[0] + _ticks_reaped(pid)
        return spent

    def peer_now() -> float:
        reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
        return _own_cpu_seconds() + reaped.ru_utime + reaped.ru_stime

    spent = [0.0, 0.0]
    per_block = max(1, runs // blocks)
    for _ in range(blocks):
        for side, (call, now) in enumerate(((ours, ours_now), (peer, peer_now))):
            before = now()
            for _ in range(per_block):
                await call()
            spent[side] += now() - before
    ours_us, peer_us = (total / (per_block * blocks) * 1e6 for total in spent)
    print(
        f"{label:<56} {ours_us:6.0f} us   {peer_label:<30} {peer_us:6.0f} us   "
        f"ratio {ours_us / peer_us:6.2f}x   CPU a call in all processes (bash included)"
    )


#: The other end of :func:`floor_rows`' hop: a fresh interpreter that answers each byte on
#: the socket (its fd in argv[1]): ``p`` at once, ``s`` once it has started
#: ``bash -c true`` in a new session (``posix_spawn``) and waited for it.
_FLOOR_PEER = """
import os, socket, sys
sock = socket.socket(fileno=int(sys.argv[1]))
bash = sys.argv[2]
env = dict(os.environ)
while (asked := sock.recv(1)):
    if asked == b"s":
        os.waitpid(os.posix_spawn(bash, [bash, "-c", "true"], env, setsid=True), 0)
    sock.send(b"q")
"""

#: The other end of :func:`floor_rows`' hop with the fork forked ahead (an idea for taking
#: the spawn off a command's path): a child forked before the request waits for it on the
#: socket, then starts ``bash -c true`` in a new session with execve alone; the process
#: waits for it, answers ``q`` and forks the next child.
_FORK_AHEAD_PEER = """
import os, socket, sys
sock = socket.socket(fileno=int(sys.argv[1]))
bash = sys.argv[2]
env = dict(os.environ)
while True:
    child = os.fork()
    if child == 0:
        if not sock.recv(1):
            os._exit(1)  # end of file: the bench is over
        os.setsid()
        os.execve(bash, [bash, "-c", "true"], env)
    if os.waitpid(child, 0)[1] != 0:
        break
    sock.send(b"q")
"""


async def floor_rows(runs: int) -> None:
    """The floor of a supervisor hop here: what the physics of two processes cost, beside
    ``subprocess.run`` in one run. A round trip of one byte between two Python processes
    (blocking); ``posix_spawn`` of ``bash -c true`` and its wait in this process; and the
    hop itself: another Python process spawns and waits for that bash, and this one awaits
    the answer on the event loop (a reader callback, as the caller awaits its supervisor);
    and that hop with the peer's child forked ahead, so that the request meets a child that
    only has to execve bash. Interleaved, medians; and the CPU each costs this process."""
    bash = shutil.which("bash") or "/bin/bash"
    ours, peer = _floor_peer(_FLOOR_PEER, bash)
    ahead, ahead_peer = _floor_peer(_FORK_AHEAD_PEER, bash)
    env = dict(os.environ)
    loop = asyncio.get_running_loop()

    async def ping() -> None:
        ours.send(b"p")
        ours.recv(1)

    async def spawn_here() -> None:
        os.waitpid(os.posix_spawn(bash, [bash, "-c", "true"], env, setsid=True), 0)

    async def hop_on(sock: socket.socket, asked: bytes) -> None:
        sock.send(asked)
        answered = loop.create_future()
        loop.add_reader(sock.fileno(), answered.set_result, None)
        try:
            await answered
        finally:
            loop.remove_reader(sock.fileno())
        sock.recv(1)

    async def hop() -> None:
        await hop_on(ours, b"s")

    async def hop_forked_ahead() -> None:
        await hop_on(ahead, b"s")

    async def subprocess_true() -> None:
        subprocess.run([bash, "-c", "true"], check=True)

    try:
        for label, call in (
            ("floor: one round trip between two processes", ping),
            ("floor: posix_spawn + wait of bash, in process", spawn_here),
            ("floor: a hop that spawns bash, awaited", hop),
            ("the same hop, its child forked ahead (execve only)", hop_forked_ahead),
        ):
            await compare(
                label,
                call,
                "subprocess.run(bash -c true)",
                subprocess_true,
                "the floor",
                runs,
                interleave=True,
            )
            await caller_cpu_rows(
                label, call, "subprocess.run(bash -c true)", subprocess_true, max(runs, 500)
            )
    finally:
        for sock, process in ((ours, peer), (ahead, ahead_peer)):
            sock.close()
            process.wait()


def _floor_peer(script: str, bash: str) -> tuple[socket.socket, subprocess.Popen[bytes]]:
    """Our end of a socket to a fresh interpreter running ``script`` (its end's fd and
    ``bash`` in its argv), and the interpreter."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    peer = subprocess.Popen(
        [sys.executable, "-c", script, str(theirs.fileno()), bash], pass_fds=[theirs.fileno()]
    )
    theirs.close()
    return ours, peer


def report(
    label: str,
    ours: float,
    peer_label: str,
    peer: float,
    target: str,
    paired: tuple[float, float, float] | None = None,
) -> None:
    """A row: the medians of both, their ratio, and with ``paired`` (see
    :func:`pair_ratios`) the median of the pairs' ratios and its quartiles."""
    by_pair = (
        ""
        if paired is None
        else (f", pair by pair {paired[0]:.2f}x (quartiles {paired[1]:.2f}-{paired[2]:.2f})")
    )
    print(
        f"{label:<56} {ours:6.2f} ms   {peer_label:<30} {peer:6.2f} ms   "
        f"ratio {ours / peer:6.2f}x{by_pair}   ({target})"
    )


async def command_rows(
    root: str, tools: dict[str, Tool[Any]], runs: int, headline_only: bool = False
) -> None:
    """run_command's and Sandbox.run's rows (``headline_only``: run_command's against
    ``subprocess.run`` and its CPU alone)."""

    async def run_true() -> None:
        result = await invoke_tool(tools["run_command"], {"command": "true"})
        assert result.content["exit_code"] == 0, result.error

    async def subprocess_true() -> None:
        subprocess.run(["bash", "-c", "true"], check=True)

    await compare(
        'run_command("true") via invoke_tool',
        run_true,
        "subprocess.run(bash -c true)",
        subprocess_true,
        "target <= 1.1x",
        runs,
        interleave=True,
    )

    await caller_cpu_rows(
        'run_command("true") via invoke_tool',
        run_true,
        "subprocess.run(bash -c true)",
        subprocess_true,
        max(runs, 500),
    )

    await both_sides_rows('run_command("true") via invoke_tool', run_true, max(runs, 500))
    await all_cpu_rows(
        'run_command("true") via invoke_tool',
        run_true,
        "subprocess.run(bash -c true)",
        subprocess_true,
        max(runs, 500),
    )
    if headline_only:
        return
    await floor_rows(runs)

    plain = Sandbox(layers=False, network=True, env_allowlist=())
    env = dict(os.environ)

    async def sandbox_run_true() -> None:
        result = await plain.run(["bash", "-c", "true"], cwd=root, env=env)
        assert result.exit_code == 0, result.stderr.complete

    await compare(
        'Sandbox.run(["bash", "-c", "true"]), no layers',
        sandbox_run_true,
        "subprocess.run(bash -c true)",
        subprocess_true,
        "the spawn path alone",
        runs,
        interleave=True,
    )
    plain.close()


async def boxed_command_rows(root: str, runs: int) -> None:
    """run_command through the call's sandbox door (``invoke_tool(tool, args,
    sandbox=box)``, as a ``ToolSession(..., sandbox=box)`` runs it) beside the same box's
    ``workspace_tools(root, sandbox=box)`` run_command: latency (interleaved) and CPU in
    all processes, a fresh box each."""
    door = {t.name: t for t in workspace_tools(root)}["run_command"]
    bound: dict[int, Tool[Any]] = {}

    async def through_door(box: Sandbox) -> None:
        result = await invoke_tool(door, {"command": "true"}, sandbox=box)
        assert result.content["exit_code"] == 0, result.error

    async def bound_to(box: Sandbox) -> None:
        if id(box) not in bound:
            bound[id(box)] = {t.name: t for t in workspace_tools(root, sandbox=box)}["run_command"]
        result = await invoke_tool(bound[id(box)], {"command": "true"})
        assert result.content["exit_code"] == 0, result.error

    box = Sandbox()
    await compare(
        'run_command("true") via invoke_tool(sandbox=box)',
        lambda: through_door(box),
        "workspace_tools(sandbox=box)",
        lambda: bound_to(box),
        "the same box's commands",
        runs,
        interleave=True,
    )
    box.close()
    await cpu_rows('run_command("true") via invoke_tool(sandbox=box)', through_door, runs)
    await cpu_rows('run_command("true") of workspace_tools(sandbox=box)', bound_to, runs)


async def main(
    runs: int,
    calls_only: bool,
    commands_only: bool = False,
    custom_only: bool = False,
    boxed_only: bool = False,
    headline_only: bool = False,
) -> None:
    with tempfile.TemporaryDirectory() as root:
        sample = Path(root, "sample.py")
        sample.write_text("".join(f"line {i}\n" for i in range(200)))
        tools = {t.name: t for t in workspace_tools(root)}
        if headline_only:
            await command_rows(root, tools, runs, headline_only=True)
            return
        if not calls_only:
            if not boxed_only:
                await command_rows(root, tools, runs)
            await boxed_command_rows(root, runs)
        if commands_only or boxed_only:
            return
        box = Sandbox()

        async def head(sandbox: Sandbox | None) -> None:
            result = await invoke_tool(HEAD_TOOL, {"path": str(sample)}, sandbox=sandbox)
            assert result.error is None, result.error

        await compare(
            "custom tool in the sandbox",
            lambda: head(box),
            "same tool in process",
            lambda: head(None),
            "target < 2 ms",
            runs,
            interleave=False,
        )

        await cpu_rows("custom tool in the sandbox", head, runs)
        fork_floor_rows()
        if custom_only:
            box.close()
            return

        async def head_stateless(sandbox: Sandbox | None) -> None:
            result = await invoke_tool(STATELESS_HEAD_TOOL, {"path": str(sample)}, sandbox=sandbox)
            assert result.error is None, result.error

        # Declared stateless, its calls share one long-lived confined child; by default,
        # each gets a fresh child.
        fresh = Sandbox()
        await compare(
            "custom tool declared stateless in the sandbox",
            lambda: head_stateless(box),
            "by default: a fresh child per call",
            lambda: head(fresh),
            "target < 2 ms",
            runs,
            interleave=False,
        )
        fresh.close()
        await cpu_rows("custom tool declared stateless in the sandbox", head_stateless, runs)
        closure_tool = closure_head_tool()

        async def head_closure(sandbox: Sandbox | None) -> None:
            result = await invoke_tool(closure_tool, {"path": str(sample)}, sandbox=sandbox)
            assert result.error is None, result.error

        await compare(
            "custom tool as a closure in the sandbox",
            lambda: head_closure(box),
            "same tool in process",
            lambda: head_closure(None),
            "target < 2 ms",
            runs,
            interleave=False,
        )
        await cpu_rows("custom tool as a closure in the sandbox", head_closure, runs)
        await first_call_rows(
            "first call of the closure tool, a new sandbox", closure_tool, str(sample), 20
        )
        await session_first_call_rows(root, 20)

        probe = await invoke_tool(tools["read_file"], {"path": "sample.py"})
        if probe.error is not None:
            print(f"read_file: not measured ({probe.error})")
        else:

            async def read(sandbox: Sandbox | None) -> None:
                result = await invoke_tool(
                    tools["read_file"], {"path": "sample.py"}, sandbox=sandbox
                )
                assert result.error is None, result.error

            await compare(
                "read_file in the sandbox",
                lambda: read(box),
                "read_file in process",
                lambda: read(None),
                "target < 2 ms",
                runs,
                interleave=False,
            )
            await cpu_rows("read_file in the sandbox", read, runs)
            # read_file declares that it keeps no state (Tool.stateless): its calls share
            # one long-lived confined child; undeclared, each gets a fresh child.
            fresh_tool = dataclasses.replace(tools["read_file"], stateless=False)

            async def read_fresh(sandbox: Sandbox | None) -> None:
                result = await invoke_tool(fresh_tool, {"path": "sample.py"}, sandbox=sandbox)
                assert result.error is None, result.error

            fresh = Sandbox()
            await compare(
                "read_file in the sandbox, one reused child",
                lambda: read(box),
                "a fresh child per call",
                lambda: read_fresh(fresh),
                "the same or faster",
                runs,
                interleave=False,
            )
            fresh.close()
            await cpu_rows("read_file, a fresh child per call", read_fresh, runs)
            many = Path(root, "many")
            many.mkdir()
            for i in range(SEEN_FILES):
                Path(many, f"f{i}.txt").write_text(f"file {i}\n")
                seen = await invoke_tool(tools["read_file"], {"path": f"many/f{i}.txt"})
                assert seen.error is None, seen.error
            await compare(
                f"read_file in the sandbox, {SEEN_FILES:,} files read before",
                lambda: read(box),
                "read_file in process",
                lambda: read(None),
                "target < 2 ms",
                runs,
                interleave=False,
            )
        print(f"sandbox capabilities: commands {box.capabilities}, calls {box.call_capabilities}")
        box.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="timed calls per figure")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--calls-only", action="store_true", help="no command rows")
    only.add_argument("--commands-only", action="store_true", help="only the command rows")
    only.add_argument(
        "--custom-only", action="store_true", help="only the custom tool's sandbox rows"
    )
    only.add_argument(
        "--headline-only",
        action="store_true",
        help="only run_command via invoke_tool against subprocess.run, and its CPU",
    )
    only.add_argument(
        "--boxed-commands-only",
        action="store_true",
        help="only run_command's rows in a sandbox, through the call's door and bound",
    )
    parsed = parser.parse_args()
    calls_only = parsed.calls_only or parsed.custom_only
    anyio.run(
        main,
        parsed.runs,
        calls_only,
        parsed.commands_only,
        parsed.custom_only,
        parsed.boxed_commands_only,
        parsed.headline_only,
    )
    if not (calls_only or parsed.boxed_commands_only or parsed.headline_only):
        sync_rows(parsed.runs)
