"""apply_patch figure: a 20-file patch against ``git apply`` of the same change.

A generated tree of 20 Python-like files (``--lines`` lines each); the change edits three
places in each file. Ours: one ``apply_patch`` call (plan all 20 in memory, match every
chunk with its uniqueness check, write every file's temp file and start its writeback,
make the result (diffs from the chunks' ranges) while the disk writes, flush each temp
file, rename them all, flush the renames with one fsync a directory). Peer: ``git apply``
of the same change as one unified diff (a process start, no fsync). A floor of durability
is measured too: the 20 files written one by one with a temp file, fsync and rename and
nothing else. Like for like with git, which does not flush a working tree: ours again on a
``Workspace(root, fsync=False)`` (atomic and all or nothing still, no flush; each temp file
swapped in by exchanging names, which spares ext4's writeback of a file renamed over
another). Each run
applies the change, the next one reverts it, so every run does the same work. Times are
medians (and minimums) of ``--repeat`` runs each way; each run kind in a block, or with
``--interleave`` in turn (each kind there and back). The CPU time of each (user + sys of
this process's threads, and of git's process) is printed too: on a shared machine it
varies less than the wall time.

``--durability`` also compares ways of making 20 new contents durable before their
renames: fsync or fdatasync one by one, fsync from a pool of threads, and with the
writeback started as each is written.

Run: ``python benchmarks/bench_patch.py [--lines N] [--repeat N] [--dir DIR]
[--interleave] [--durability]``; with ``--dir /dev/shm`` (tmpfs: fsync costs nothing) the
figures are the work itself.
"""

from __future__ import annotations

import argparse
import difflib
import os
import resource
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from workspace_tools import Workspace, invoke_tool_sync, workspace_tools

FILES = 20


def source(index: int, lines: int, changed: bool) -> list[str]:
    out = []
    for n in range(lines):
        value = (
            f"{n}" if not (changed and n in (lines // 4, lines // 2, 3 * lines // 4)) else f"-{n}"
        )
        out.append(f"    value_{index}_{n:05d} = compute({value})  # line {n}\n")
    return out


def v4a(old: list[str], new: list[str], path: str) -> str:
    out = [f"*** Update File: {path}\n"]
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for group in matcher.get_grouped_opcodes(3):
        out.append("@@\n")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out.extend(" " + line for line in old[i1:i2])
            else:
                out.extend("-" + line for line in old[i1:i2])
                out.extend("+" + line for line in new[j1:j2])
    return "".join(out)


def _threads(count: int) -> Callable[[list[int]], None]:
    def flush(fds: list[int]) -> None:
        # A pool a call: a long-lived one would be state shared by every call.
        with ThreadPoolExecutor(count) as pool:
            list(pool.map(os.fsync, fds))

    return flush


def _one_by_one(sync: Callable[[int], None]) -> Callable[[list[int]], None]:
    def flush(fds: list[int]) -> None:
        for fd in fds:
            sync(fd)

    return flush


FLUSHES: dict[str, Callable[[list[int]], None]] = {
    "fsync one by one": _one_by_one(os.fsync),
    "fdatasync one by one": _one_by_one(os.fdatasync),
    "fsync from 4 threads": _threads(4),
    "fsync from 20 threads": _threads(FILES),
    "writeback started, then fsync one by one (ours)": _one_by_one(os.fsync),
    "writeback started, then fsync from 20 threads": _threads(FILES),
    "writeback started, then fsync from 4 threads": _threads(4),
}


def durability(root: Path, contents: list[list[bytes]], repeat: int) -> None:
    """The ways to make 20 new contents durable before renaming them, each followed by the
    renames and one fsync of the directory, interleaved, medians (and minimums)."""
    # Imported here: the figures above are also taken of versions of the package without it.
    from workspace_tools.workspace._textfile import start_writeback

    times: dict[str, list[float]] = {name: [] for name in FLUSHES}
    step = 0
    for _ in range(repeat * 2):
        for name, flush in FLUSHES.items():
            started = time.perf_counter()
            fds, temps = [], []
            for f, data in enumerate(contents[step % 2]):
                temp = root / f"pkg/.mod_{f:02d}.py.tmp"
                fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.write(fd, data)
                if name.startswith("writeback started"):
                    start_writeback(fd)
                fds.append(fd)
                temps.append(temp)
            flush(fds)
            for f, (fd, temp) in enumerate(zip(fds, temps, strict=True)):
                os.replace(temp, root / f"pkg/mod_{f:02d}.py")
                os.close(fd)
            directory = os.open(root / "pkg", os.O_RDONLY | os.O_DIRECTORY)
            os.fsync(directory)
            os.close(directory)
            times[name].append(time.perf_counter() - started)
            step += 1
    print("20 new contents made durable, then renamed, then one fsync of the directory:")
    for name, values in times.items():
        median, low = statistics.median(values) * 1000, min(values) * 1000
        print(f"  {name:48}: {median:6.1f} ms ({low:.1f})")


def _cpu() -> float:
    """Seconds of CPU (user + sys) of this process's threads and of the children it
    waited for (git's process)."""
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=11)
    parser.add_argument("--dir", help="where to make the tree (a tmpfs: the work without disk)")
    parser.add_argument(
        "--interleave",
        action="store_true",
        help="run the three in turn rather than each in a block: on a shared machine each "
        "then meets the same load, but git apply starts on the journal the fsyncs left",
    )
    parser.add_argument(
        "--durability",
        action="store_true",
        help="also compare ways of flushing the 20 temp files (threads, fdatasync, ...)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        forward, backward, unified_f, unified_b = [], [], [], []
        for i in range(FILES):
            path = f"pkg/mod_{i:02d}.py"
            old, new = source(i, args.lines, False), source(i, args.lines, True)
            (root / path).parent.mkdir(exist_ok=True)
            (root / path).write_text("".join(old))
            forward.append(v4a(old, new, path))
            backward.append(v4a(new, old, path))
            unified_f.append("".join(difflib.unified_diff(old, new, f"a/{path}", f"b/{path}")))
            unified_b.append("".join(difflib.unified_diff(new, old, f"a/{path}", f"b/{path}")))
        patches = [
            "*** Begin Patch\n" + "".join(ops) + "*** End Patch\n" for ops in (forward, backward)
        ]
        diffs = ["".join(d).encode() for d in (unified_f, unified_b)]
        tool = {t.name: t for t in workspace_tools(root)}["apply_patch"]
        try:
            unflushed = {t.name: t for t in workspace_tools(Workspace(root, fsync=False))}
        except ValueError:  # a version of the package without the option
            unflushed = {}

        def ours(i: int) -> None:
            result = invoke_tool_sync(tool, {"patch": patches[i % 2]})
            assert result.error is None, result.error

        def ours_unflushed(i: int) -> None:
            result = invoke_tool_sync(unflushed["apply_patch"], {"patch": patches[i % 2]})
            assert result.error is None, result.error

        def git(i: int) -> None:
            subprocess.run(["git", "apply", "-"], input=diffs[i % 2], cwd=root, check=True)

        contents = [
            [("".join(source(f, args.lines, changed)).encode()) for f in range(FILES)]
            for changed in (True, False)
        ]

        def durable(i: int) -> None:
            # The floor of an atomic, durable write of the 20 files: temp file, fsync, rename.
            for f, data in enumerate(contents[i % 2]):
                target = root / f"pkg/mod_{f:02d}.py"
                temp = target.with_suffix(".tmp")
                with open(temp, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(temp, target)

        subprocess.run(["git", "init", "-q"], cwd=root, check=True)
        runs = (("ours", ours), ("git", git), ("durable", durable))
        if unflushed:
            runs += (("unflushed", ours_unflushed),)
        times: dict[str, list[float]] = {name: [] for name, _ in runs}
        cpu: dict[str, list[float]] = {name: [] for name, _ in runs}
        # Each run turns the tree the other way (an even count: it ends as it began). In
        # turn, each kind runs twice (there and back): a workspace whose files another
        # kind changed since it wrote them refuses them as stale.
        order = (
            [run for _ in range(args.repeat) for run in runs for _ in range(2)]
            if args.interleave
            else [run for run in runs for _ in range(args.repeat * 2)]
        )
        for step, (name, run) in enumerate(order):
            before = _cpu()
            started = time.perf_counter()
            run(step)
            times[name].append(time.perf_counter() - started)
            cpu[name].append(_cpu() - before)
        mine, peer = statistics.median(times["ours"]), statistics.median(times["git"])
        floor = statistics.median(times["durable"])
        low = {name: min(values) * 1000 for name, values in times.items()}
        print(f"20-file patch, {args.lines} lines a file, 3 changes a file (median; min)")
        print(f"  apply_patch            : {mine * 1000:8.1f} ms ({low['ours']:.1f})")
        print(f"  git apply (no fsync)   : {peer * 1000:8.1f} ms ({low['git']:.1f})")
        print(f"  ratio                  : {mine / peer:8.2f} x")
        print(
            f"  20 durable writes only : {floor * 1000:8.1f} ms ({low['durable']:.1f}) "
            "(one by one: temp file, fsync, rename)"
        )
        print(f"  ours less that floor   : {(mine - floor) * 1000:8.1f} ms")
        if unflushed:
            bare = statistics.median(times["unflushed"])
            print(
                f"  apply_patch, fsync=False: {bare * 1000:7.1f} ms ({low['unflushed']:.1f}) "
                "(no flush, as git)"
            )
            print(f"  ratio, like for like   : {bare / peer:8.2f} x")
        print("  CPU, user + sys (median; min), ours with its threads, git with its process:")
        for name, _ in runs:
            values = cpu[name]
            print(
                f"    {name:10}: {statistics.median(values) * 1000:6.1f} ms "
                f"({min(values) * 1000:.1f})"
            )
        if args.durability:
            durability(root, contents, args.repeat)


if __name__ == "__main__":
    main()
