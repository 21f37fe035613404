"""A command in the persistent shell against run_command of the same command.

Run from the repository root: ``python benchmarks/bench_shell.py [--runs N]``.

Prints medians in milliseconds and the ratio, for ``true`` and for a command that starts a
program (``ls``), each through ``invoke_tool``: the ``shell`` tool (no shell starts; the
command is written to the running one) against ``run_command`` (a new ``bash -c`` each
time). Target: the shell is faster (ratio below 1). Calls alternate, so both see the same
load on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workspace_tools import ShellSession, invoke_tool, shell_tools
from workspace_tools.tools import workspace_tools


async def main(runs: int) -> None:
    with tempfile.TemporaryDirectory() as root, ShellSession(root) as shells:
        run_command = next(t for t in workspace_tools(root) if t.name == "run_command")
        shell = shell_tools(shells)[0]
        for command in ("true", "ls"):
            samples: dict[str, list[float]] = {"shell": [], "run_command": []}
            for index in range(runs + max(3, runs // 10)):
                for name, tool in (("shell", shell), ("run_command", run_command)):
                    started = time.perf_counter()
                    result = await invoke_tool(tool, {"command": command})
                    elapsed = (time.perf_counter() - started) * 1000
                    assert result.content["exit_code"] == 0, result.error
                    if index >= max(3, runs // 10):  # the first ones warm up
                        samples[name].append(elapsed)
            ours = statistics.median(samples["shell"])
            peer = statistics.median(samples["run_command"])
            print(
                f"shell {command!r:<8} {ours:6.2f} ms   run_command {command!r:<8} "
                f"{peer:6.2f} ms   ratio {ours / peer:5.2f}x   (target < 1)"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    anyio.run(main, parser.parse_args().runs)
