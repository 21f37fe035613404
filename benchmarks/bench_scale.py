"""What running workspaces elsewhere costs: a remote call against the same call in process,
and many workspaces through Ray against one process.

1. Per-call latency of ``read_file`` (a 100-line file): in process (``invoke_tool``), over
   HTTP (``RemoteWorkspace`` to a ``workspace-tools serve`` subprocess on 127.0.0.1; the
   calls share the workspace's one MCP session; and, as before that was so, a new session
   a call: a new ``RemoteWorkspace`` each time, closed after it), and through a Ray actor
   (``RayWorkspace``).
2. Throughput: W workspaces x C calls (``read_file``, then ``grep``, alternating), each
   workspace's calls one after another and the workspaces at once: through W Ray actors
   against the same calls over W local workspaces in this one process.
3. Peak memory (VmHWM) of each actor process.

Run from the repository root: ``PYTHONPATH=. python benchmarks/bench_scale.py
[--calls N] [--workspaces W] [--per-workspace C]``. Start-up (the server, the cluster, the
actors) is excluded; medians in milliseconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import ray

from workspace_tools import invoke_tool, invoke_tool_sync, workspace_tools
from workspace_tools.adapters.ray import RayWorkspace
from workspace_tools.adapters.remote import RemoteWorkspace

READ = {"path": "notes.txt"}
GREP = {"pattern": "line 4[0-9]"}


def make_root(parent: Path, name: str) -> Path:
    root = parent / name
    root.mkdir()
    (root / "notes.txt").write_text("".join(f"line {i}\n" for i in range(100)))
    return root


async def latencies(tool: Any, calls: int) -> list[float]:
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        result = await invoke_tool(tool, READ)
        times.append(time.perf_counter() - started)
        assert result.error is None, result.error
    return times


def served(root: Path) -> tuple[subprocess.Popen[str], str, str]:
    env = {k: v for k, v in os.environ.items() if k != "WORKSPACE_TOOLS_TOKEN"}
    command = [sys.executable, "-m", "workspace_tools", "serve", "--root", str(root)]
    server = subprocess.Popen(
        [*command, "--http", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True, env=env
    )
    assert server.stdout is not None
    url = server.stdout.readline().split()[1]
    token = server.stdout.readline().split()[1]
    return server, url, token


async def episodes(toolsets: list[list[Any]], per_workspace: int) -> float:
    async def one(tools: list[Any]) -> None:
        by_name = {t.name: t for t in tools}
        for i in range(per_workspace):
            name, arguments = ("read_file", READ) if i % 2 == 0 else ("grep", GREP)
            result = await invoke_tool(by_name[name], arguments)
            assert result.error is None, result.error

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for tools in toolsets:
            tg.start_soon(one, tools)
    return time.perf_counter() - started


def new_session_each_call(url: str, token: str, calls: int) -> list[float]:
    """Latencies of ``read_file`` through a new ``RemoteWorkspace`` each call (a session of
    its own, ended after the call): what every call cost before calls shared a session."""
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        with RemoteWorkspace(url, token) as remote:
            result = invoke_tool_sync(remote.tools[0], READ)
        times.append(time.perf_counter() - started)
        assert result.error is None, result.error
    return times


def peak_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--workspaces", type=int, default=16)
    parser.add_argument("--per-workspace", type=int, default=50)
    args = parser.parse_args()
    ms = 1000.0
    with tempfile.TemporaryDirectory() as tmp:
        parent = Path(tmp)
        root = make_root(parent, "one")
        read_file = workspace_tools(root)[0]
        anyio.run(latencies, read_file, 20)  # warm up
        local = statistics.median(anyio.run(latencies, read_file, args.calls))
        print(f"read_file in process:       {local * ms:7.2f} ms")

        server, url, token = served(root)
        try:
            with RemoteWorkspace(url, token) as remote:
                anyio.run(latencies, remote.tools[0], 5)
                http = statistics.median(
                    anyio.run(latencies, remote.tools[0], max(20, args.calls // 4))
                )
            fresh = statistics.median(new_session_each_call(url, token, max(20, args.calls // 4)))
        finally:
            server.terminate()
            server.wait()
        print(f"read_file over HTTP:        {http * ms:7.2f} ms  ({http / local:.1f}x)")
        print(f"  a new session a call:     {fresh * ms:7.2f} ms  ({fresh / local:.1f}x)")

        ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False, log_to_driver=False)
        small = {"num_cpus": 0.01}
        actor = RayWorkspace(root=str(root), actor_options=small)
        anyio.run(latencies, actor.tools[0], 20)
        through_ray = statistics.median(anyio.run(latencies, actor.tools[0], args.calls))
        actor.close()
        ratio = through_ray / local
        print(f"read_file via a Ray actor:  {through_ray * ms:7.2f} ms  ({ratio:.1f}x)")

        roots = [make_root(parent, f"w{i}") for i in range(args.workspaces)]
        calls = args.workspaces * args.per_workspace
        in_one = anyio.run(episodes, [workspace_tools(r) for r in roots], args.per_workspace)
        actors = [RayWorkspace(r, actor_options=small) for r in roots]
        for a in actors:
            a.root()  # started
        anyio.run(episodes, [a.tools for a in actors], 2)  # warm up
        spread = anyio.run(episodes, [a.tools for a in actors], args.per_workspace)
        pids = [ray.get(a.handle.__ray_call__.remote(lambda self: os.getpid())) for a in actors]
        peaks = [peak_kib(pid) / 1024 for pid in pids]
        for a in actors:
            a.close()
        ray.shutdown()
        print(
            f"{args.workspaces} workspaces x {args.per_workspace} calls: one process "
            f"{in_one:.2f} s ({calls / in_one:,.0f} calls/s), Ray actors {spread:.2f} s "
            f"({calls / spread:,.0f} calls/s, {spread / in_one:.1f}x)"
        )
        print(
            f"actor peak memory: median {statistics.median(peaks):.0f} MiB, "
            f"max {max(peaks):.0f} MiB (VmHWM of each actor process)"
        )


if __name__ == "__main__":
    main()
