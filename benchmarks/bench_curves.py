"""Scaling curves: how the tools' times grow with the tree and the file, beside their peers.

Needs ripgrep (``apt-get install ripgrep``). Run from the repository root:

    python benchmarks/bench_curves.py [--quick] [--dir DIR]

(a) Trees of 2,000, 50,000 and 200,000 generated small files (``bench_search.
    make_generated_tree``; ``--quick``: 2,000 and 20,000). On each, the median of warm
    in-process calls (one event loop, as an agent's) beside the command doing the same job:
    ``grep`` of a selective literal and of a regex (without the warm index: every file is
    read, as on a first search; ``bench_grep.py`` measures the index) against ``rg -n
    --hidden``; ``glob("**/*.py")`` and ``list_files(recursive=True)`` against ``rg --files
    --hidden``.
(b) Files of 1 MB, 32 MB, 100 MB and 1 GiB of 100-byte lines (``--quick``: all but 1 GiB).
    ``read_file`` of 100 lines in the middle: the first read by a fresh tool and later
    windows by a warm one, against a plain Python read of the same lines
    (``itertools.islice`` over the open file). ``edit_file`` of one line in the middle
    against a plain Python durable replace (read, ``str.replace``, temp file, fsync, rename,
    fsync of the directory), which is what the tool guarantees, and ``edits`` lists of
    two lines, ten apart and far apart (the middle and the last sixteenth), against the
    same with two ``str.replace``; for the edits the
    workspace's ``max_file_bytes`` is raised to 2 GiB so the tool accepts the bigger files
    (read_file keeps the default: a file above it is streamed, with a line index).

Each row prints both times and their ratio, so growth shows down a column. Trees and files
are built once in ``--dir`` (default: a temporary directory) and reused on a later run.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio.from_thread

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_files import _durable_write
from bench_search import SETTLE_SECONDS, make_generated_tree

from workspace_tools import invoke_tool, workspace_tools
from workspace_tools.search._index import SearchIndex
from workspace_tools.tools import grep as grep_tool
from workspace_tools.workspace import Workspace

TREE_SIZES = (2_000, 50_000, 200_000)
QUICK_TREE_SIZES = (2_000, 20_000)
# 32 MiB: read whole (under max_file_bytes), as edits take it, and indexed (over the
# 8 MiB edits keep whole); 100 MiB and 1 GiB: streamed.
FILE_SIZES = (1 << 20, 32 << 20, 100 << 20, 1 << 30)
QUICK_FILE_SIZES = (1 << 20, 32 << 20, 100 << 20)
LINE = b"%09d " + b"x" * 89 + b"\n"  # 100 bytes
WINDOW = 100
LITERAL, REGEX = "NotImplementedError", r"def \w+_1\d\(self, \w+\)"
# Files settle this long before reads, so read_file may keep their line index (it keeps
# none for a file whose timestamps are too recent to tell a change).
FILE_SETTLE_SECONDS = 2.1


def runs_for(seconds: float) -> int:
    """Fewer runs for slower cases, so that the whole run stays within minutes."""
    return 9 if seconds < 0.2 else 5 if seconds < 2 else 3


def medians(*fns: Callable[[], Any]) -> list[float]:
    """Median seconds of each function (after one warm-up call each); the functions take
    turns so that load on the machine weighs on all of them alike."""
    started = time.perf_counter()
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(runs_for((time.perf_counter() - started) / len(fns))):
        for fn, bucket in zip(fns, times, strict=True):
            started = time.perf_counter()
            fn()
            bucket.append(time.perf_counter() - started)
    return [statistics.median(bucket) for bucket in times]


def header(title: str) -> None:
    print(f"\n{title}")
    print(f"  {'size':>9}  {'case':<26} {'tool ms':>10} {'peer ms':>10} {'ratio':>7}  peer")


def row(size: str, case: str, ours: float, theirs: float, peer: str) -> None:
    print(
        f"  {size:>9}  {case:<26} {ours * 1000:10.1f} {theirs * 1000:10.1f} "
        f"{ours / theirs:6.2f}x  {peer}",
        flush=True,
    )


def tools_for(root: Path, portal: Any, **options: Any) -> dict[str, Callable[..., Any]]:
    """Callers of the tools over ``root`` by name, each returning the result (grep without
    a warm index)."""
    tools = {t.name: t for t in workspace_tools(root, **options)}
    index = SearchIndex(str(root))
    index.close()  # every file read, as on a first search
    tools["grep"] = grep_tool.build(Workspace(root, **options), index=index)

    def caller(name: str) -> Callable[..., Any]:
        def call(**arguments: Any) -> Any:
            result = portal.call(invoke_tool, tools[name], arguments)
            assert result.error is None, result.error
            return result

        return call

    return {name: caller(name) for name in tools}


def rg(root: Path, *args: str) -> Callable[[], Any]:
    return lambda: subprocess.run(
        ["rg", "--hidden", *args], cwd=root, capture_output=True, check=False
    )


def bench_trees(base: Path, sizes: tuple[int, ...], portal: Any) -> None:
    header("(a) generated trees: grep / glob / list_files vs rg (median of warm calls)")
    for files in sizes:
        holder = base / f"tree-{files}"
        root = holder / "generated"
        if not root.is_dir():
            print(f"  ... generating {files:,} files", flush=True)
            shutil.rmtree(holder, ignore_errors=True)
            make_generated_tree(holder, files)
            time.sleep(SETTLE_SECONDS)  # walk caches keep only settled directories
        bench_tree(root, f"{files:,}", portal)


def bench_tree(root: Path, size: str, portal: Any) -> None:
    """grep, glob and list_files on ``root`` beside rg."""
    call = tools_for(root, portal)
    cases = [
        ("grep literal", lambda: call["grep"](pattern=LITERAL), ("-n", LITERAL), "rg -n"),
        ("grep regex", lambda: call["grep"](pattern=REGEX), ("-n", REGEX), "rg -n"),
        (
            "glob **/*.py",
            lambda: call["glob"](pattern="**/*.py"),
            ("--files",),
            "rg --files",
        ),
        (
            "list_files recursive",
            lambda: call["list_files"](recursive=True),
            ("--files",),
            "rg --files",
        ),
    ]
    for case, ours, args, peer in cases:
        ours_s, theirs_s = medians(ours, rg(root, *args))
        row(size, case, ours_s, theirs_s, peer)


def make_file(path: Path, size: int) -> int:
    """A file of ``size`` bytes of numbered 100-byte lines; returns its line count."""
    lines = size // len(LINE % 0)
    block = 1 << 14
    with open(path, "wb") as handle:
        for first in range(0, lines, block):
            handle.write(b"".join(LINE % n for n in range(first, min(first + block, lines))))
    return lines


def bench_files(base: Path, sizes: tuple[int, ...], portal: Any) -> None:
    header("(b) files: read_file / edit_file vs plain Python (median of calls)")
    options = {"max_file_bytes": 2 << 30}
    for size in sizes:
        root = base / f"file-{size}"
        path = root / "big.txt"
        lines = size // len(LINE % 0)
        if not path.is_file() or path.stat().st_size != lines * len(LINE % 0):
            print(f"  ... writing {size:,} bytes", flush=True)
            root.mkdir(parents=True, exist_ok=True)
            make_file(path, size)
            time.sleep(FILE_SETTLE_SECONDS)
        # A file changed within 2 s (a run before this one edited it) gets no kept line
        # index yet (its stat may not show a change made in the same clock tick).
        time.sleep(max(0.0, path.stat().st_mtime + FILE_SETTLE_SECONDS - time.time()))
        label = f"{size / 2**20:,.0f} MiB" if size < 1 << 30 else f"{size / 2**30:.0f} GiB"
        bench_file(path, lines, label, portal, options)


def bench_file(path: Path, lines: int, label: str, portal: Any, options: dict[str, Any]) -> None:
    """read_file and edit_file on ``path`` (``lines`` lines) beside plain Python."""
    root = path.parent
    middle = lines // 2
    windows = itertools.count()

    def offset() -> int:
        # Windows here and there around the middle, each a different one.
        return max(1, middle + (next(windows) % 7 - 3) * (lines // 16))

    def plain_read() -> None:
        start = offset()
        with open(path, encoding="utf-8") as handle:
            got = list(itertools.islice(handle, start - 1, start - 1 + WINDOW))
        assert len(got) == WINDOW

    def first_read() -> None:
        fresh = tools_for(root, portal)  # nothing known of the file yet
        fresh["read_file"](path="big.txt", offset=offset(), limit=WINDOW)

    warm = tools_for(root, portal)

    def later_read() -> None:
        warm["read_file"](path="big.txt", offset=offset(), limit=WINDOW)

    first_s, later_s, plain_s = medians(first_read, later_read, plain_read)
    row(label, "read_file, first read", first_s, plain_s, "islice")
    row(label, "read_file, later windows", later_s, plain_s, "islice")

    target = (LINE % middle).decode()
    changed = target.replace("x", "y", 1)
    edits = itertools.count()

    def pair() -> tuple[str, str]:
        # Every run changes the file: the next one changes it back.
        return (target, changed) if next(edits) % 2 == 0 else (changed, target)

    # Tools that never read the file: the plain edits change it under them.
    editor = tools_for(root, portal, **options)

    def tool_edit() -> None:
        old, new = pair()
        editor["edit_file"](path="big.txt", old_text=old, new_text=new)

    def plain_edit() -> None:
        old, new = pair()
        text = path.read_bytes().decode("utf-8")
        assert text.count(old) == 1
        _durable_write(path, text.replace(old, new).encode("utf-8"))

    # An even number of runs of each leaves the file as it was.
    tool_s, plain_s = medians(twice(tool_edit), twice(plain_edit))
    row(label, "edit_file, one line", tool_s / 2, plain_s / 2, "durable replace")

    # Edits lists of two lines: ten apart, as a model changes a function in two places,
    # and far apart (the middle and near the end), as it changes a file's use and its
    # definition: each edit's lines are diffed alone, not the stretch between them.
    for case, other in (("", middle + 10), (", far apart", lines - lines // 16)):
        tool_s, plain_s = medians(*list_edits(path, editor, pair, target, other))
        row(label, f"edit_file, edits list of 2{case}", tool_s / 2, plain_s / 2, "durable replace")


def list_edits(
    path: Path,
    editor: dict[str, Callable[..., Any]],
    pair: Callable[[], tuple[str, str]],
    target: str,
    other: int,
) -> tuple[Callable[[], None], Callable[[], None]]:
    """An edits list of the line ``pair()`` changes and line ``other``, by the tool and by
    plain Python, each run twice (so that the file ends as it was)."""
    second = (LINE % other).decode()
    second_changed = second.replace("x", "y", 1)

    def pairs() -> list[tuple[str, str]]:
        first = pair()
        return [first, (second, second_changed) if first[0] == target else (second_changed, second)]

    def tool_list() -> None:
        listed = [{"old_text": old, "new_text": new} for old, new in pairs()]
        editor["edit_file"](path="big.txt", edits=listed)

    def plain_list() -> None:
        text = path.read_bytes().decode("utf-8")
        for old, new in pairs():
            assert text.count(old) == 1
            text = text.replace(old, new)
        _durable_write(path, text.encode("utf-8"))

    return twice(tool_list), twice(plain_list)


def twice(fn: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        fn()
        fn()

    return run


def main() -> None:
    """Print the curves (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only (a minute)")
    parser.add_argument("--dir", type=Path, help="where to keep the trees and files")
    parser.add_argument("--skip-trees", action="store_true", help="only the file figures")
    parser.add_argument("--skip-files", action="store_true", help="only the tree figures")
    args = parser.parse_args()
    if shutil.which("rg") is None:
        sys.exit("ripgrep (rg) is needed: apt-get install ripgrep")
    load = os.getloadavg()[0]
    print(
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load:.1f} "
        f"at the start; rg {_rg_version()}"
    )
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        contextlib.ExitStack() as stack,
    ):
        base = args.dir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        base.mkdir(parents=True, exist_ok=True)
        if not args.skip_trees:
            bench_trees(base, QUICK_TREE_SIZES if args.quick else TREE_SIZES, portal)
        if not args.skip_files:
            bench_files(base, QUICK_FILE_SIZES if args.quick else FILE_SIZES, portal)
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")


def _rg_version() -> str:
    out = subprocess.run(["rg", "--version"], capture_output=True, text=True, check=False)
    return out.stdout.split("\n", 1)[0].removeprefix("ripgrep ")


if __name__ == "__main__":
    main()
