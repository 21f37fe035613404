"""Children of tests/test_many_workspaces.py: many workspaces driven in one fresh process
(so that what it holds is counted from a clean start), the figures printed as JSON.

``python -m tests._many_child SCENARIO ARGS...``:

- ``inotify ROOT...``: each root's grep before and after its index could be built, a file
  changed, the first workspace closed (its inotify instance freed) and the last searched
  again; run where the user's inotify instances are fewer than the roots.
- ``release close|drop SMALL_PARENT BIG_PARENT``: a workspace per directory of each parent
  (the big ones grep enough files for searchers and the warm index), sessions, shells,
  sandboxes; then closed, or dropped without closing and collected; the process's
  figures before, after the calls and at the end.
- ``servers PARENT``: a workspace per directory of ``PARENT``, a third of them each in a
  session over one shared sandbox, a third in a sandbox of their own, a third plain, all
  running a command at once from the start (no server yet); the spawn servers seen then,
  after closing all but the last workspace (which runs a command again), and at the end.
- ``fds PARENT``: a workspace per directory of ``PARENT``, driven at once under a low
  ``RLIMIT_NOFILE``: each call's error code and message, and each edited file's bytes.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from sandbox import Sandbox
from sandbox.spawn._tree import descendants
from workspace_tools import ToolSession, invoke_tool, workspace_tools
from workspace_tools.search import _index
from workspace_tools.tools.grep import INDEX_KEY

#: A literal that only one file of a big tree holds (see tests/test_many_workspaces.py).
NEEDLE = "needle_word_0777"


def figures() -> dict[str, Any]:
    """Descriptors (by kind), threads, live descendants and inotify instances of this
    process."""
    kinds: dict[str, int] = {}
    for entry in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{entry}")
        except OSError:
            continue
        kind = target if target.startswith("anon_inode:") else target.split(":")[0]
        kinds[kind if ":" in target else "file"] = kinds.get(kind, 0) + 1
    return {
        "fds": sum(kinds.values()),
        "fd_kinds": kinds,
        "threads": len(os.listdir("/proc/self/task")),
        "children": len(descendants(os.getpid())),
        "inotify": kinds.get("anon_inode:inotify", 0),
    }


def settled(baseline: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
    """The figures once they are back to ``baseline`` (processes and threads end on their
    own time), or as they are after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while True:
        gc.collect()
        now = figures()
        if all(now[k] <= baseline[k] for k in ("fds", "threads", "children", "inotify")):
            return now
        if time.monotonic() > end:
            return now
        time.sleep(0.05)


def index_of(workspace: Any) -> Any:
    """The warm index this process's grep keeps with ``workspace``; ``None`` when its grep
    never ran here (a sandboxed workspace's runs in a child)."""
    return workspace._kept.get(INDEX_KEY)


async def _grep(tool: Any, pattern: str) -> str:
    result = await invoke_tool(tool, {"pattern": pattern})
    return f"{result.error}: {result.content}" if result.error else str(result.content)


def inotify(roots: list[str]) -> dict[str, Any]:
    _index.RETRY_SECONDS = 0.0  # a build after a failed one at the next search
    greps = [{t.name: t for t in workspace_tools(root)}["grep"] for root in roots]

    def indexes() -> list[Any]:
        return [index_of(g.workspace) for g in greps]

    async def run() -> dict[str, Any]:
        out: dict[str, Any] = {"first": [await _grep(g, NEEDLE) for g in greps]}
        for index in indexes():
            index.wait(60)
        out["ready"] = [index.ready() for index in indexes()]
        out["indexed"] = [await _grep(g, NEEDLE) for g in greps]
        for root in roots:
            with open(os.path.join(root, "d00", "f000.txt"), "a") as f:
                f.write(f"added {NEEDLE}\n")
        out["changed"] = [await _grep(g, NEEDLE) for g in greps]
        greps[0].workspace.close()
        out["after_close"] = await _grep(greps[-1], NEEDLE)  # starts a build now
        indexes()[-1].wait(60)
        out["last_ready"] = indexes()[-1].ready()
        out["last_rebuilt"] = await _grep(greps[-1], NEEDLE)
        return out

    out = anyio.run(run)
    for g in greps:
        g.workspace.close()
    return out


async def _drive(
    root: Path, tools: dict[str, Any], session: ToolSession | None, big: bool
) -> list[str]:
    """One workspace's calls; the errors seen."""

    async def call(name: str, arguments: dict[str, Any]) -> str | None:
        if session is not None:
            result = await session.call(name, arguments)
        else:
            result = await invoke_tool(tools[name], arguments)
        return None if result.error is None else f"{name}: {result.error}: {result.content}"

    calls: list[tuple[str, dict[str, Any]]] = [
        ("read_file", {"path": "a.txt"}),
        ("edit_file", {"path": "a.txt", "old_text": "one", "new_text": "two"}),
        ("glob", {"pattern": "*.txt"}),
        ("list_files", {"path": "."}),
        ("grep", {"pattern": "two"}),
        ("run_command", {"command": "echo ok"}),
    ]
    if big:
        calls += [("grep", {"pattern": NEEDLE, "path": "tree"})] * 2
    if session is not None and session.shell is not None:
        calls += [("shell", {"command": "pwd"}), ("start_process", {"command": "sleep 300"})]
    errors = []
    for name, arguments in calls:
        error = await call(name, arguments)
        if error is not None:
            errors.append(error)
    return errors


def release(how: str, small_parent: str, big_parent: str) -> dict[str, Any]:
    smalls = sorted(Path(small_parent).iterdir())
    bigs = sorted(Path(big_parent).iterdir())
    gc.collect()
    out: dict[str, Any] = {"baseline": figures()}

    def make() -> tuple[list[tuple[Path, dict[str, Any], ToolSession | None, bool]], list[Any]]:
        shared = Sandbox(layers=False)
        own = Sandbox(layers=False)
        benches = []
        for i, root in enumerate([*smalls, *bigs]):
            box = (own if i == 1 else shared) if i % 3 == 1 else None
            if i % 4 == 0:
                session = ToolSession(root, sandbox=box, shell=True, checkpoints=True)
                benches.append((root, {t.name: t for t in session.tools}, session, root in bigs))
            else:
                tools = {t.name: t for t in workspace_tools(root, sandbox=box)}
                benches.append((root, tools, None, root in bigs))
        return benches, [shared, own]

    benches, boxes = make()

    async def run() -> list[str]:
        errors: list[str] = []
        limiter = anyio.CapacityLimiter(16)

        async def one(bench: tuple[Path, dict[str, Any], ToolSession | None, bool]) -> None:
            async with limiter:
                errors.extend(await _drive(*bench))

        async with anyio.create_task_group() as group:
            for bench in benches:
                group.start_soon(one, bench)
        return errors

    out["errors"] = anyio.run(run)
    built = [index_of(tools["grep"].workspace) for _, tools, _, _ in benches]
    out["indexes"] = sum(index.wait(60) for index in built if index is not None)
    del built
    out["driven"] = figures()
    if how == "close":
        for _, tools, session, _ in benches:
            if session is not None:
                session.close()
            tools["grep"].workspace.close()
        for box in boxes:
            box.close()
        out["end"] = settled(out["baseline"])
        del benches, boxes
    else:
        del benches, boxes
        out["end"] = settled(out["baseline"])
    return out


def spawn_servers() -> int:
    """This process's spawn servers (children running ``sandbox.spawn._server``; what they
    fork keeps their command line but is not this process's child)."""
    count = 0
    for pid in descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                parent = int(f.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read()
        except OSError:
            continue
        count += parent == os.getpid() and b"sandbox.spawn._server" in argv
    return count


def servers(parent: str) -> dict[str, Any]:
    roots = sorted(Path(parent).iterdir())
    shared = Sandbox(layers=False)
    owners: list[Any] = []  # what each workspace is closed by
    runs: list[Any] = []  # each workspace's run_command
    for i, root in enumerate(roots):
        if i % 3 == 0:
            session = ToolSession(root, sandbox=shared)
            owners.append(session)
            runs.append(lambda arguments, s=session: s.call("run_command", arguments))
        else:
            box = Sandbox(layers=False) if i % 3 == 1 else None
            tools = {t.name: t for t in workspace_tools(root, sandbox=box)}
            owners.append(box or tools["run_command"].workspace)
            runs.append(lambda arguments, t=tools["run_command"]: invoke_tool(t, arguments))

    async def run_all(which: list[Any]) -> list[str]:
        outputs: list[str] = []

        async def one(run: Any) -> None:
            result = await run({"command": "echo ok"})
            outputs.append(result.error or result.content["stdout"])

        async with anyio.create_task_group() as group:
            for run in which:
                group.start_soon(one, run)
        return outputs

    out: dict[str, Any] = {"first": anyio.run(run_all, runs), "servers_first": spawn_servers()}
    for owner in owners[:-1]:
        owner.close()
    out["last"] = anyio.run(run_all, runs[-1:])
    out["servers_last"] = spawn_servers()
    owners[-1].close()
    shared.close()
    out["servers_end"] = settled({"fds": 10**6, "threads": 10**6, "children": 0, "inotify": 0})[
        "children"
    ]
    return out


def processes(parent: str) -> dict[str, Any]:
    """Each workspace of ``parent`` runs a command at once (run where the process count is
    capped): each one's error code and message, or its output."""
    benches = [
        {t.name: t for t in workspace_tools(root)} for root in sorted(Path(parent).iterdir())
    ]
    results: list[tuple[str | None, str | None, Any]] = []

    async def one(tools: dict[str, Any]) -> None:
        result = await invoke_tool(tools["run_command"], {"command": "sleep 1; echo ok"})
        code = None if result.error_code is None else result.error_code.value
        results.append((code, result.error, None if result.error else result.content["stdout"]))

    async def run() -> None:
        async with anyio.create_task_group() as group:
            for tools in benches:
                group.start_soon(one, tools)

    anyio.run(run)
    return {"results": results}


def fds(parent: str, limit: int) -> dict[str, Any]:
    roots = sorted(Path(parent).iterdir())
    benches = [{t.name: t for t in workspace_tools(root)} for root in roots]
    resource.setrlimit(
        resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    )
    results: list[tuple[str, str | None, str | None]] = []

    async def one(tools: dict[str, Any]) -> None:
        for name, arguments in (
            ("edit_file", {"path": "a.txt", "old_text": "one", "new_text": "two"}),
            ("read_file", {"path": "a.txt"}),
            ("grep", {"pattern": "two"}),
            ("list_files", {"path": "."}),
            ("run_command", {"command": "echo ok"}),
        ):
            result = await invoke_tool(tools[name], arguments)
            code = None if result.error_code is None else result.error_code.value
            results.append((name, code, result.error))

    async def run() -> None:
        async with anyio.create_task_group() as group:
            for tools in benches:
                group.start_soon(one, tools)

    anyio.run(run)
    return {
        "results": results,
        "files": [(root / "a.txt").read_text() for root in roots],
    }


def main() -> None:
    scenario, *args = sys.argv[1:]
    if scenario == "inotify":
        out = inotify(args)
    elif scenario == "release":
        out = release(*args)
    elif scenario == "servers":
        out = servers(args[0])
    elif scenario == "processes":
        out = processes(args[0])
    else:
        out = fds(args[0], int(args[1]))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
