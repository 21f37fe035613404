"""What serving a tool over MCP costs: one read_file call through the stdio server against the
same call in-process.

1. In-process: ``invoke_tool`` of ``read_file`` on a 100-line file, awaited in a loop.
2. MCP: the same call from the official Python client to ``workspace-tools mcp`` over stdio
   (a real subprocess, JSON-RPC both ways), one call after another on one session.

Run from the repository root: ``python benchmarks/bench_mcp.py [--calls N]``. Prints the
median latency of each in milliseconds and their ratio; server start-up is excluded.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from workspace_tools import invoke_tool, workspace_tools

REPO = Path(__file__).resolve().parents[1]
ARGUMENTS = {"path": "notes.txt"}


async def in_process(root: Path, calls: int) -> list[float]:
    read_file = next(t for t in workspace_tools(root) if t.name == "read_file")
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        await invoke_tool(read_file, ARGUMENTS)
        times.append(time.perf_counter() - started)
    return times


async def over_mcp(root: Path, calls: int) -> list[float]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "workspace_tools", "mcp", "--root", str(root)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    times = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.call_tool("read_file", ARGUMENTS)  # warm-up: imports, first stat
        for _ in range(calls):
            started = time.perf_counter()
            await session.call_tool("read_file", ARGUMENTS)
            times.append(time.perf_counter() - started)
    return times


async def main(calls: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "notes.txt").write_text("".join(f"line {i}\n" for i in range(100)))
        await in_process(root, 10)  # warm-up
        direct = statistics.median(await in_process(root, calls)) * 1000
        served = statistics.median(await over_mcp(root, calls)) * 1000
    print(f"read_file in-process (invoke_tool): {direct:8.3f} ms median of {calls}")
    print(f"read_file over MCP stdio:           {served:8.3f} ms median of {calls}")
    print(f"ratio MCP / in-process:             {served / direct:8.1f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per path (default 200)")
    anyio.run(main, parser.parse_args().calls)
