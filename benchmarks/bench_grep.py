"""grep against ripgrep on a real project, and grep's warm index on a big generated tree.

Needs ripgrep (``apt-get install ripgrep``). Run from the repository root:

    python benchmarks/bench_grep.py --project DIR [--files 200000] [--profile]

(a) ``--project``: a source tree, e.g. mypy's sources (``pip download mypy --no-deps
    --no-binary :all:`` and unpack the sdist; 1,890 files, 8,103 lines with ``TypeVar``).
    Without it the installed standard library is used. Cases: a literal and a regex at the
    default limit, and ``TypeVar`` returning every match (``limit`` above the count), each
    as the median of warm in-process calls (one event loop, as an agent's) beside ``rg -n
    --hidden`` doing the same, with their ratio, and the CPU time of each (steadier than
    wall time on a shared machine); then the same with the warm index (a
    project of 1,000 files or more gets one after its first search). ``--profile`` prints
    where the time of the all-matches call goes: a split by stage (walk, read, match, the
    same split with a searcher process, the model text, the result models, the whole call), wall and
    CPU time of each (the CPU of two processes over that of one is the split's cost), and a
    cProfile of the tool's ``execute``.
(b) ``--files N``: a generated tree of N small files (``bench_search.make_generated_tree``).
    The first call of a fresh tool with the index and of one without (both after ``rg`` has
    warmed the page cache); the time until the index is ready and its memory; then the
    median of later calls of a selective literal and a selective regex beside ``rg``.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import os
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio.from_thread

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_search import SETTLE_SECONDS, make_generated_tree

from workspace_tools import invoke_tool
from workspace_tools._tool import ToolContext
from workspace_tools.search._format import format_grep
from workspace_tools.search._index import SearchIndex
from workspace_tools.search._matcher import Matcher
from workspace_tools.search._reading import WHOLE_READ
from workspace_tools.search._runner import GrepRun
from workspace_tools.search._worker import Searchers, search_files
from workspace_tools.tools import grep as grep_tool
from workspace_tools.workspace import Workspace
from workspace_tools.workspace._files import DirFds

RUNS = 11


def rg(root: Path, *args: str) -> Callable[[], Any]:
    return lambda: subprocess.run(
        ["rg", "--hidden", "-n", *args], cwd=root, capture_output=True, check=False
    )


def medians(*fns: Callable[[], Any], runs: int = RUNS) -> list[float]:
    """Median seconds of each; the functions take turns so that load weighs on all."""
    return [wall for wall, _ in timed(*fns, runs=runs)]


def timed(*fns: Callable[[], Any], runs: int = RUNS) -> list[tuple[float, float]]:
    """Median wall and CPU seconds of each (CPU: this process and its children, so rg's
    and grep's searcher processes'); the functions take turns so that load weighs on all.
    On a shared machine wall times swing with the others' load; CPU time much less.
    """
    for fn in fns:
        fn()
    walls: list[list[float]] = [[] for _ in fns]
    cpus: list[list[float]] = [[] for _ in fns]
    for _ in range(runs):
        for fn, wall, cpu in zip(fns, walls, cpus, strict=True):
            cpu_before = _cpu()
            started = time.perf_counter()
            fn()
            wall.append(time.perf_counter() - started)
            time.sleep(0.005)  # let a searcher finish a block the call no longer needed
            cpu.append(_cpu() - cpu_before)
    return [(statistics.median(w), statistics.median(c)) for w, c in zip(walls, cpus, strict=True)]


def _cpu() -> float:
    """CPU seconds of this process, of the children it reaped (rg) and of those still
    running (grep's searcher processes, from /proc)."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + _live_children()


def _live_children() -> float:
    # /proc/PID/schedstat: nanoseconds on a CPU (stat's ticks are 10 ms, too coarse).
    nanoseconds = 0
    for task in os.listdir(f"/proc/{os.getpid()}/task"):
        with (
            contextlib.suppress(OSError),
            open(f"/proc/{os.getpid()}/task/{task}/children") as file,
        ):
            for pid in file.read().split():
                with (
                    contextlib.suppress(OSError, IndexError, ValueError),
                    open(f"/proc/{pid}/schedstat") as stat,
                ):
                    nanoseconds += int(stat.read().split()[0])
    return nanoseconds / 1e9


def row(name: str, ours: float, theirs: float, extra: str = "") -> None:
    print(f"  {name:<34} {ours * 1000:9.1f} {theirs * 1000:9.1f} {ours / theirs:7.2f}x  {extra}")


def cpu_row(name: str, ours: tuple[float, float], theirs: tuple[float, float]) -> None:
    cpu = f"cpu {ours[1] * 1000:5.1f} / {theirs[1] * 1000:5.1f} = {ours[1] / theirs[1]:.2f}x"
    row(name, ours[0], theirs[0], cpu)


def bench_project(root: Path, portal: Any, profile: bool) -> None:
    workspace = Workspace(root)
    unindexed = SearchIndex(str(workspace.root))
    unindexed.close()  # every file read, as without an index
    tool = grep_tool.build(workspace, index=unindexed)
    index = SearchIndex(str(workspace.root))
    indexed = grep_tool.build(Workspace(root), index=index)

    def call(tool: Any = tool, **arguments: Any) -> Callable[[], Any]:
        def run() -> Any:
            result = portal.call(invoke_tool, tool, arguments)
            assert result.error is None, result.error
            return result

        return run

    count = call(pattern="TypeVar", limit=1_000_000)().details.match_count
    time.sleep(0.5)  # the searcher process the first call started is ready
    cases = [
        ("literal, default limit", call(pattern="NotImplementedError"), ["NotImplementedError"]),
        ("regex, default limit", call(pattern=r"def \w+_\w+\(self"), [r"def \w+_\w+\(self"]),
        (f"TypeVar, all {count:,} matches", call(pattern="TypeVar", limit=1_000_000), ["TypeVar"]),
    ]
    walk = workspace.walker.walk(str(workspace.root), "", recursive=True, include_ignored=False)
    print(f"\n(a) {root} ({len(walk.files):,} files grep searches)")
    print(f"  {'case':<34} {'grep ms':>9} {'rg ms':>9} {'ratio':>8}  cpu ms grep / rg")
    for name, ours, args in cases:
        cpu_row(name, *timed(ours, rg(root, *args)))
    call(indexed, pattern="NotImplementedError")()
    if index.wait():
        print(f"  with the warm index ({index.memory / 2**20:.1f} MiB), later calls:")
        for name, _, args in cases:
            pattern, limit = args[0], 1_000_000 if "all" in name else 100
            cpu_row(name, *timed(call(indexed, pattern=pattern, limit=limit), rg(root, *args)))
    index.close()
    if profile:
        print_split(workspace, tool, portal, walk.files)
        arguments = tool.parameters(pattern="TypeVar", limit=1_000_000)
        context = ToolContext("profile", "grep", workspace=workspace)
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(5):
            tool.execute(arguments, context)
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(12)
        print("\n  profile of 5 all-matches calls (tool.execute, by own time):")
        print("\n".join("    " + line for line in out.getvalue().splitlines()[4:]))


def print_split(workspace: Workspace, tool: Any, portal: Any, files: list[str]) -> None:
    """Where the time of the all-matches call goes, stage by stage (median wall and CPU
    time, each stage timed alone, in one process unless said)."""
    root = str(workspace.root)
    matcher = Matcher("TypeVar", in_process=True)
    found = GrepRun(matcher, limit=1_000_000, context=0)
    found.search_files(root, files)

    def read_only() -> None:
        buffer = bytearray(WHOLE_READ)
        view = memoryview(buffer)
        with DirFds(root) as dirs:
            for rel in files:
                slash = rel.rfind("/")
                fd = os.open(rel[slash + 1 :], os.O_RDONLY, dir_fd=dirs.get(rel[: max(slash, 0)]))
                try:
                    os.readv(fd, [view])
                finally:
                    os.close(fd)

    searchers = Searchers()
    searchers.wait_ready(1, 30.0)

    def search(limit: int, split: bool = False) -> Callable[[], Any]:
        def run() -> None:
            into = GrepRun(matcher, limit=limit, context=0)
            if split:
                search_files(into, root, files, searchers, min_files=0, processes=2)
            else:
                into.search_files(root, files)

        return run

    def models() -> Any:
        return [
            grep_tool.GrepMatch(path, line, column, text)
            for path, rows in found.found
            for line, column, text, _ in rows
        ]

    arguments = tool.parameters(pattern="TypeVar", limit=1_000_000)
    context = ToolContext("split", "grep", workspace=workspace)
    stages = [
        (
            "walk (stat-validated cache)",
            lambda: workspace.walker.walk(root, "", recursive=True, include_ignored=False),
        ),
        ("read: open, read, close", read_only),
        ("read + match, counting only", search(1)),
        ("read + match, keeping every line", search(1_000_000)),
        ("the same split with a searcher", search(1_000_000, split=True)),
        ("model text (format_grep)", lambda: format_grep(found, "content")),
        ("result models (GrepMatch)", models),
        ("tool.execute", lambda: tool.execute(arguments, context)),
        (
            "invoke_tool",
            lambda: portal.call(invoke_tool, tool, {"pattern": "TypeVar", "limit": 1_000_000}),
        ),
    ]
    print(f"\n  split of the all-matches call ({found.match_count:,} matches), wall / CPU:")
    for name, fn in stages:
        wall, cpu = timed(fn)[0]
        print(f"    {name:<34} {wall * 1000:7.1f} / {cpu * 1000:5.1f} ms")
    searchers.close()


def bench_index(base: Path, files: int, portal: Any) -> None:
    root = base / "generated"
    if not root.is_dir():
        print(f"\n(b) generating {files:,} files ...", flush=True)
        make_generated_tree(base, files)
        time.sleep(SETTLE_SECONDS)
    literal, regex = "NotImplementedError", r"raise \w+\('needle'\)"
    rg(root, literal)()  # the page cache is warm for both first calls

    def first_call(index: SearchIndex) -> tuple[float, Any]:
        tool = grep_tool.build(Workspace(root), index=index)
        started = time.perf_counter()
        result = portal.call(invoke_tool, tool, {"pattern": literal})
        assert result.error is None, result.error
        return time.perf_counter() - started, tool

    unindexed = SearchIndex(str(root))
    unindexed.close()
    plain_first, plain_tool = first_call(unindexed)
    index = SearchIndex(str(root))
    started = time.perf_counter()
    first, tool = first_call(index)
    index.wait()
    ready = time.perf_counter() - started
    rg_first = medians(rg(root, literal), runs=1)[0]
    print(f"\n(b) generated tree: {root} ({files:,} files)")
    print(f"  {'case':<34} {'grep ms':>9} {'rg ms':>9} {'ratio':>8}")
    row("first call, with the index", first, rg_first)
    row("first call, without an index", plain_first, rg_first)
    print(
        f"  index ready {ready:.1f} s after the first call started; "
        f"memory {index.memory / 2**20:.1f} MiB"
    )
    for name, pattern in (
        ("selective literal, later calls", literal),
        ("selective regex, later calls", regex),
    ):

        def ours(pattern: str = pattern) -> Any:
            return portal.call(invoke_tool, tool, {"pattern": pattern})

        def plain(pattern: str = pattern) -> Any:
            return portal.call(invoke_tool, plain_tool, {"pattern": pattern})

        ours_s, theirs_s, plain_s = medians(ours, rg(root, pattern), plain)
        row(name, ours_s, theirs_s, f"(rg is {theirs_s / ours_s:.1f}x slower)")
        row("  the same without an index", plain_s, theirs_s)
    index.close()


def main() -> None:
    """Print the figures (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", type=Path, help="a source tree (default: the stdlib)")
    parser.add_argument("--files", type=int, default=200_000, help="files of the generated tree")
    parser.add_argument("--dir", type=Path, help="where to keep the generated tree")
    parser.add_argument("--profile", action="store_true", help="profile the all-matches call")
    parser.add_argument("--skip-index", action="store_true", help="only the project figures")
    args = parser.parse_args()
    if shutil.which("rg") is None:
        sys.exit("ripgrep (rg) is needed: apt-get install ripgrep")
    print(f"Python {sys.version.split()[0]}, median of {RUNS} warm calls; rg {_rg_version()}")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    cpus = os.cpu_count()
    print(
        f"load average {load} on {cpus} CPUs (a search of fewer than 10,000 files splits "
        f"while fewer than {cpus} other tasks run at the call)"
    )
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        tempfile.TemporaryDirectory() as tmp,
    ):
        project = args.project
        if project is None:
            project = Path(tmp) / "stdlib"
            shutil.copytree(sysconfig.get_paths()["stdlib"], project, symlinks=True)
        bench_project(project, portal, args.profile)
        if not args.skip_index:
            base = args.dir or Path(tmp)
            base.mkdir(parents=True, exist_ok=True)
            bench_index(base, args.files, portal)


def _rg_version() -> str:
    out = subprocess.run(["rg", "--version"], capture_output=True, text=True, check=False)
    return out.stdout.split("\n", 1)[0].removeprefix("ripgrep ")


if __name__ == "__main__":
    main()
