"""File tool figures: time and peak memory of edit_file and read_file beside plain Python.

1. ``edit_file`` of one line in a 100,000-line file, against a plain read/replace/write and
   a durable one (temp file, fsync, rename, fsync of the directory); the tool is called
   with ``invoke_tool_sync`` and from one running event loop (as an agent calls it: the
   file's later edits, which number lines from the counts the edit before kept, and a
   file's first edit), each group alternating with its own plain and
   durable writes; a first edit also beside the peer's own first durable write (a fresh
   copy in a directory of its own, as the tool's: a directory's first flushes cost more).
2. ``read_file`` of lines 500,000-500,100 of a 1 GiB file, against a plain read of those lines
   (``itertools.islice`` over the file): the first read of the file, then later windows of
   the same unchanged file (read from its line index: target under 5 ms).
3. ``--small``: small files' calls, each beside what it was before a change, in one run:
   ``edit_file`` of a one-line file among 20 and 2,000 files of one directory, from an event
   loop, against the same edit with every write listing its directory for dead writes'
   temp files (as before ``TempSweeps``); and ``read_file`` of a 200-line file through
   ``invoke_tool_sync``, its ``execute`` in a thread of the call's own against anyio's
   worker thread (as before), in blocks of 1,500 calls.
4. ``--deep``: each file tool on a file at the bottom of a chain of directories 500, 1,000
   and 2,000 levels deep (``d/d/.../f.txt``): what a hostile tree costs a call. The work
   is linear in the depth (one lookup a level, never the whole path again per level).

Run: ``python benchmarks/bench_files.py [--dir DIR] [--repeat N] [--small | --deep]``. Peak
memory is what ``tracemalloc`` sees of Python allocations during one call; times are the
median of N runs.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import statistics
import subprocess
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from workspace_tools import Workspace, invoke_tool, invoke_tool_sync, workspace_tools
from workspace_tools.session import _pipeline
from workspace_tools.workspace._tempfiles import TempSweeps, remove_stale_temps

EDIT_LINES = 100_000
GIB = 1 << 30
READ_OFFSET, READ_LIMIT = 500_000, 101


def _measure(run: Callable[[int], object], repeat: int) -> tuple[float, int]:
    times = []
    for i in range(repeat):
        started = time.perf_counter()
        run(i)
        times.append(time.perf_counter() - started)
    tracemalloc.start()
    run(repeat)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return statistics.median(times), peak


def _report(name: str, tool: tuple[float, int], plain: tuple[float, int]) -> None:
    (t_tool, m_tool), (t_plain, m_plain) = tool, plain
    print(
        f"{name}\n"
        f"  tool : {t_tool * 1000:9.1f} ms  peak {m_tool / 1024:10,.0f} KiB\n"
        f"  plain: {t_plain * 1000:9.1f} ms  peak {m_plain / 1024:10,.0f} KiB\n"
        f"  ratio: {t_tool / t_plain:9.2f} x time, {m_tool / max(m_plain, 1):.2f} x memory"
    )


#: The peers of an edit, as printed: a plain write, a durable one of the file the peer
#: writes every round, and a durable first write of a fresh copy (a first edit's own peer).
_PEERS = {
    "plain": "plain write",
    "durable": "durable write",
    "fresh": "durable first write of its own copy",
}


def _durable_write(path: Path, data: bytes) -> None:
    """What a careful program does: a temp file, fsync, rename, fsync of the directory."""
    temp = path.with_name(f".{path.name}.bench-tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(temp, path)
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _alternating(runs: dict[str, Callable[[int], object]], repeat: int) -> dict[str, float]:
    """Median seconds of each run; the runs take turns so load weighs on all alike."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for i in range(repeat):
        for name, run in runs.items():
            started = time.perf_counter()
            run(i)
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in times.items()}


async def _alternating_in_loop(
    runs: dict[str, Callable[[int], Awaitable[object]]], repeat: int
) -> dict[str, float]:
    """:func:`_alternating` of calls awaited on the running event loop."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for i in range(repeat):
        for name, run in runs.items():
            started = time.perf_counter()
            await run(i)
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in times.items()}


def bench_edit(root: Path, repeat: int) -> None:
    """Four groups, each alternating with its own plain and durable writes: the tool from
    plain code (``invoke_tool_sync``, which starts an event loop per call); from a running
    event loop, as an agent calls it, the file's later edits (its line counts kept from the
    edit before), and a file's first edit (a copy of it the workspace never saw), without
    and after a read of the lines around the change (not timed: the agent's earlier turn)."""
    path = root / "edit.py"
    base = b"".join(b"value_%06d = %d\n" % (i, i) for i in range(EDIT_LINES))
    path.write_bytes(base)
    by_name = {t.name: t for t in workspace_tools(root)}
    edit, read = by_name["edit_file"], by_name["read_file"]
    target = EDIT_LINES // 2

    edits = itertools.count()

    def pair() -> tuple[str, str]:
        # Every run changes the file: the next one changes it back.
        old, new = f"value_{target:06d} = {target}\n", f"value_{target:06d} = -{target}\n"
        return (old, new) if next(edits) % 2 == 0 else (new, old)

    def tool_run(_: int) -> None:
        old, new = pair()
        result = invoke_tool_sync(edit, {"path": "edit.py", "old_text": old, "new_text": new})
        assert result.error is None, result.error

    def plain_run(_: int) -> None:
        old, new = pair()
        text = path.read_bytes().decode("utf-8")
        assert text.count(old) == 1
        path.write_bytes(text.replace(old, new).encode("utf-8"))

    def durable_run(_: int) -> None:
        old, new = pair()
        text = path.read_bytes().decode("utf-8")
        assert text.count(old) == 1
        _durable_write(path, text.replace(old, new).encode("utf-8"))

    async def in_loop_run(_: int) -> None:
        old, new = pair()
        arguments = {"path": "edit.py", "old_text": old, "new_text": new}
        result = await invoke_tool(edit, arguments)
        assert result.error is None, result.error

    # The first edit of a file: each round edits a copy of the first content that the
    # workspace never saw (pair() is the edit.py's runs' alone: they alternate its content),
    # each in a directory of its own, as a file among a few.
    first_old, first_new = f"value_{target:06d} = {target}\n", f"value_{target:06d} = -{target}\n"

    def copy_of(kind: str, i: int) -> str:
        return f"first-{kind}/{i}/edit.py"

    def first_edit(kind: str) -> Callable[[int], Awaitable[None]]:
        async def run(i: int) -> None:
            arguments = {"path": copy_of(kind, i), "old_text": first_old, "new_text": first_new}
            result = await invoke_tool(edit, arguments)
            assert result.error is None, result.error

        return run

    def forget(kind: str) -> Callable[[int], Awaitable[None]]:
        async def run(i: int) -> None:
            # Microseconds, not reported: the workspace lets go of the copy's content, which
            # it keeps for the next edit, as it would of a file seen long ago.
            edit.workspace.file_states.forget((root / copy_of(kind, i)).resolve())

        return run

    async def read_around(i: int) -> None:
        # Not reported: an agent's earlier turn, reading the lines around the change.
        arguments = {"path": copy_of("read", i), "offset": target - 10, "limit": 40}
        result = await invoke_tool(read, arguments)
        assert result.error is None, result.error

    def fresh_durable(kind: str) -> Callable[[int], Awaitable[None]]:
        # The peer's own first write: a copy no one wrote since it was made, in a directory
        # of its own, as the tool's is (a directory's first flushes cost more than a
        # directory just written: the same file's writes alone are not the peer here).
        async def run(i: int) -> None:
            copy = root / copy_of(f"{kind}-peer", i)
            text = copy.read_bytes().decode("utf-8")
            assert text.count(first_old) == 1
            _durable_write(copy, text.replace(first_old, first_new).encode("utf-8"))

        return run

    async def plain_in_loop(i: int) -> None:
        plain_run(i)

    async def durable_in_loop(i: int) -> None:
        durable_run(i)

    runs = repeat * 40
    # plain and durable change the file twice a round: the next edit finds the content
    # the tool last wrote, as an agent's next edit does.
    groups: dict[str, dict[str, float]] = {}
    for i in range(4):  # warm up
        tool_run(i), plain_run(i), durable_run(i)
    groups["from plain code (invoke_tool_sync)"] = _alternating(
        {"tool": tool_run, "plain": plain_run, "durable": durable_run}, runs
    )

    async def in_loop() -> None:
        groups["from a running event loop, the file's later edits"] = await _alternating_in_loop(
            {"tool": in_loop_run, "plain": plain_in_loop, "durable": durable_in_loop}, runs
        )

        # untimed: the copies the first edits change, the tool's and the peer's
        for kind in ("none", "read", "none-peer", "read-peer"):
            for i in range(runs // 2):
                copy = root / copy_of(kind, i)
                copy.parent.mkdir(parents=True)
                copy.write_bytes(base)
        os.sync()  # their writeback is not the edits' to wait for
        label = "from a running event loop, a file's first edit"
        groups[label] = await _alternating_in_loop(
            {
                "tool": first_edit("none"),
                "durable": durable_in_loop,
                "fresh": fresh_durable("none"),
                "-": forget("none"),
            },
            runs // 2,
        )
        groups[f"{label}, after a read of the lines around it"] = await _alternating_in_loop(
            {
                "-": read_around,
                "tool": first_edit("read"),
                "durable": durable_in_loop,
                "fresh": fresh_durable("read"),
                "--": forget("read"),
            },
            runs // 2,
        )

    anyio.run(in_loop)
    size = path.stat().st_size
    print(f"edit_file: one line of a {EDIT_LINES:,}-line file ({size:,} bytes)")
    for label, figures in groups.items():
        ratios = ", ".join(
            f"{figures['tool'] / figures[peer]:.2f}x {_PEERS[peer]}"
            for peer in _PEERS
            if peer in figures
        )
        peers = "  ".join(
            f"{_PEERS[name]} {seconds * 1000:.2f} ms"
            for name, seconds in figures.items()
            if name in _PEERS
        )
        print(f"  {label}: tool {figures['tool'] * 1000:.2f} ms  {peers}  -> {ratios}")


def _build_gib(path: Path) -> None:
    line = b"%09d " + b"x" * 90 + b"\n"
    block_lines = 1 << 14
    with open(path, "wb") as handle:
        for start in range(GIB // (len(line % 0) * block_lines)):
            first = start * block_lines
            handle.write(b"".join(line % (first + n) for n in range(block_lines)))


def bench_read(root: Path, repeat: int) -> None:
    path = root / "big.txt"
    _build_gib(path)
    # A file written this recently may change without its timestamps moving: read_file
    # keeps its line index only once they are 2 s old.
    time.sleep(2.1)
    arguments = {"path": "big.txt", "offset": READ_OFFSET, "limit": READ_LIMIT}

    def first_run(_: int) -> None:
        # A fresh tool: nothing is known of the file yet.
        read = {t.name: t for t in workspace_tools(root)}["read_file"]
        result = invoke_tool_sync(read, arguments)
        assert result.error is None, result.error

    warm = {t.name: t for t in workspace_tools(root)}["read_file"]
    invoke_tool_sync(warm, arguments)

    def later_run(i: int) -> None:
        # Later windows of the same unchanged file, here and there in it.
        offset = READ_OFFSET + (i % 7 - 3) * 100_000
        result = invoke_tool_sync(warm, {"path": "big.txt", "offset": offset, "limit": READ_LIMIT})
        assert result.error is None, result.error

    def plain_run(_: int) -> None:
        with open(path, encoding="utf-8") as handle:
            lines = list(itertools.islice(handle, READ_OFFSET - 1, READ_OFFSET - 1 + READ_LIMIT))
        assert len(lines) == READ_LIMIT

    def plain_count_run(_: int) -> None:
        # The plain read plus what the tool also reports: the total line count.
        plain_run(0)
        with open(path, "rb") as handle:
            sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))

    name = f"read_file: lines {READ_OFFSET:,}-{READ_OFFSET + READ_LIMIT - 1:,} of a "
    name += f"{path.stat().st_size / GIB:.2f} GiB file"
    first = _measure(first_run, repeat)
    _report(name + ", first read", first, _measure(plain_run, repeat))
    _report(
        name + ", first read (plain also counts all lines)",
        first,
        _measure(plain_count_run, repeat),
    )
    later = _measure(later_run, repeat * 4)
    _report(name + ", later windows of the unchanged file", later, _measure(plain_run, repeat))


DEEP_LEVELS = (500, 1_000, 2_000)


def _chain(root: Path, depth: int) -> None:
    """``root/d/.../d/f.txt``, ``depth`` levels, made by fd (past PATH_MAX, too)."""
    flags = os.O_RDONLY | os.O_DIRECTORY
    fd = os.open(root, flags)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", flags, dir_fd=fd)
        os.close(fd)
        fd = child
    out = os.open("f.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
    os.write(out, b"one\ntwo\nthree\n")
    os.close(out)
    os.close(fd)


Arguments = Callable[[int], dict[str, object]]


def _deep_calls(deep: str) -> dict[str, tuple[str, Arguments]]:
    """Each timed call at the bottom of ``deep``: its tool and its arguments for run ``i``
    (every run changes something: a no-op edit is refused)."""

    def flip(i: int, old: str, new: str) -> tuple[str, str]:
        return (old, new) if i % 2 == 0 else (new, old)

    def patch(i: int) -> dict[str, object]:
        old, new = flip(i, "two", "TWO")
        return {
            "patch": f"*** Begin Patch\n*** Add File: {deep}p{i}/q.txt\n+q\n"
            f"*** Update File: {deep}f.txt\n@@\n-{old}\n+{new}\n*** End Patch\n"
        }

    def edit(i: int) -> dict[str, object]:
        old, new = flip(i, "one", "ONE")
        return {"path": deep + "f.txt", "old_text": old, "new_text": new}

    return {
        "read_file": ("read_file", lambda i: {"path": deep + "f.txt"}),
        "write_file (new, 2 parents)": (
            "write_file",
            lambda i: {"path": f"{deep}n{i}/m/new.txt", "content": "x\n"},
        ),
        "write_file (overwrite)": (
            "write_file",
            lambda i: {"path": deep + "f.txt", "content": f"one\ntwo\nthree\n# {i}\n"},
        ),
        "edit_file": ("edit_file", edit),
        "apply_patch (add+update)": ("apply_patch", patch),
        "list_files (the deep dir)": ("list_files", lambda i: {"path": deep}),
        "glob **/f.txt": ("glob", lambda i: {"pattern": "**/f.txt"}),
        "grep": ("grep", lambda i: {"pattern": "three"}),
    }


def bench_deep(base: Path, repeat: int) -> None:
    print("file tools at the bottom of a chain of directories (ms, median):")
    rows: dict[str, list[float]] = {}
    for depth in DEEP_LEVELS:
        root = base / f"deep{depth}"
        root.mkdir()
        _chain(root, depth)
        tools = {t.name: t for t in workspace_tools(root, fsync=False)}
        calls = _deep_calls("d/" * depth)
        for label, (name, arguments) in calls.items():
            times = []
            for i in range(repeat):
                started = time.perf_counter()
                result = invoke_tool_sync(tools[name], arguments(i))
                times.append(time.perf_counter() - started)
                assert result.error is None, (label, result.error)
            rows.setdefault(label, []).append(statistics.median(times))
        # rm walks by fd; shutil.rmtree recurses once a level.
        subprocess.run(["rm", "-rf", str(root)], check=True)
    print(f"  {'depth':<28}" + "".join(f"{d:>9,}" for d in DEEP_LEVELS))
    for label, values in rows.items():
        print(f"  {label:<28}" + "".join(f"{v * 1000:9.1f}" for v in values))


class _LookingEveryTime(TempSweeps):
    """What writes did before :class:`TempSweeps`: list the directory on every write."""

    def sweep(self, dir_fd: int) -> list[str]:
        return remove_stale_temps(dir_fd)


def bench_small(root: Path) -> None:
    """``--small`` (see the module's text)."""
    for count in (20, 2_000):
        edits = {}
        for label, sweeps in (("now", TempSweeps()), ("listing every time", _LookingEveryTime())):
            directory = root / f"{count}-{label.replace(' ', '-')}"
            directory.mkdir()
            for i in range(count):
                (directory / f"f{i}.py").write_text(f"x = {i}\n")
            workspace = Workspace(root)
            workspace.temp_sweeps = sweeps
            edit = {t.name: t for t in workspace_tools(workspace)}["edit_file"]
            edits[label] = (edit, f"{directory.name}/f1.py")
        os.sync()

        async def run(label: str, i: int, edits: dict[str, Any] = edits) -> None:
            edit, path = edits[label]
            old, new = ("x = 1\n", "x = 2\n") if i % 2 == 0 else ("x = 2\n", "x = 1\n")
            result = await invoke_tool(edit, {"path": path, "old_text": old, "new_text": new})
            assert result.error is None, result.error

        runs = {label: functools.partial(run, label) for label in edits}
        figures = anyio.run(_alternating_in_loop, runs, 300)
        now, before = figures["now"], figures["listing every time"]
        print(
            f"edit_file of a one-line file among {count:,} files: {now * 1000:.2f} ms, "
            f"listing the directory every write {before * 1000:.2f} ms ({now / before:.2f}x)"
        )
    (root / "sample.py").write_text("".join(f"line {i}\n" for i in range(200)))
    read = {t.name: t for t in workspace_tools(root)}["read_file"]
    own_loop_thread = _pipeline.on_own_loop
    blocks: dict[str, list[float]] = {"own thread": [], "anyio's thread": []}
    for _ in range(2):
        for label in blocks:
            _pipeline.on_own_loop = own_loop_thread if label == "own thread" else lambda: False
            times = []
            for _ in range(1_500):
                started = time.perf_counter()
                result = invoke_tool_sync(read, {"path": "sample.py"})
                times.append(time.perf_counter() - started)
                assert result.error is None, result.error
            blocks[label].append(statistics.median(times[100:]))
    _pipeline.on_own_loop = own_loop_thread
    mine, theirs = blocks["own thread"], blocks["anyio's thread"]
    print(
        "read_file of 200 lines via invoke_tool_sync, two blocks each: in a thread of its own "
        f"{', '.join(f'{t * 1000:.2f}' for t in mine)} ms, in anyio's "
        f"{', '.join(f'{t * 1000:.2f}' for t in theirs)} ms "
        f"({statistics.median(mine) / statistics.median(theirs):.2f}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="where to build the files")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--edit-only", action="store_true", help="only the edit figures")
    parser.add_argument("--read-only", action="store_true", help="only the read figures")
    parser.add_argument("--deep", action="store_true", help="only the deep-path figures")
    parser.add_argument("--small", action="store_true", help="only the small files' figures")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as temp:
        if args.small:
            bench_small(Path(temp))
            return
        if args.deep:
            bench_deep(Path(temp), args.repeat)
            return
        if not args.read_only:
            bench_edit(Path(temp), args.repeat)
        if not args.edit_only:
            bench_read(Path(temp), args.repeat)


if __name__ == "__main__":
    main()
