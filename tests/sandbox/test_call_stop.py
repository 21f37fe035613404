"""A sandboxed Python call that is stopped (it timed out, or was cancelled: the same stop)
has its tree stopped as a command's is: SIGTERM
with SIGCONT, so that a process stopped by SIGSTOP (or ^Z) runs its SIGTERM handler, and
the grace given to the whole tree, not only to the call's own process, before SIGKILL of
what is left; nothing of the tree survives. Both kinds of call: a fresh child per call,
and the reused child of stateless calls (the built-in file tools')."""

from __future__ import annotations

import secrets
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from pydantic import BaseModel

from sandbox import Sandbox, SandboxLimits
from tests._processes import survivors
from tests._waiting import poll_async
from tests.sandbox._boxes import NewBox
from workspace_tools import ToolContext, invoke_tool, tool

pytestmark = pytest.mark.anyio

#: Seconds the grandchild's SIGTERM handler takes before it writes its marker: a part of
#: the grace, which is far longer.
CLEANUP_SECONDS = 0.5
GRACE = 30.0

# The call's child: starts the grandchild, traps SIGTERM (its marker written, then it
# exits) and stops itself, as ^Z would.
_CHILD = """d=$1
"$2" -c "$3" "$d" &
trap 'echo cleaned > "$d/child"; exit 0' TERM
kill -STOP $$
while :; do sleep 1; done
"""

# The grandchild: on SIGTERM it takes CLEANUP_SECONDS, then writes its marker and exits.
_GRANDCHILD = f"""import signal, sys, time
def end(*_):
    # Each SIGTERM it gets starts this again: the marker counts them.
    with open(sys.argv[1] + "/grandchild", "a") as f:
        f.write("term\\n")
    time.sleep({CLEANUP_SECONDS})
    with open(sys.argv[1] + "/grandchild", "a") as f:
        f.write("cleaned\\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, end)
open(sys.argv[1] + "/grandchild-ready", "w").close()
while True:
    signal.pause()
"""


class TreeArgs(BaseModel):
    directory: str


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except OSError:
        return ""


def _hang_over_a_stopped_tree(args: TreeArgs, context: ToolContext) -> None:
    """Start the tree, say it is ready once the child stopped itself and the grandchild
    handles SIGTERM, then run until stopped."""
    directory = Path(args.directory)
    child = subprocess.Popen(
        ["/bin/sh", "-c", _CHILD, "sh", str(directory), sys.executable, _GRANDCHILD]
    )
    while _state(child.pid) != "T" or not (directory / "grandchild-ready").exists():
        time.sleep(0.01)
    (directory / "ready").write_text(f"{child.pid}\n")
    while True:
        time.sleep(1)


@pytest.mark.parametrize("stateless", [False, True], ids=["fresh-child", "reused-child"])
async def test_a_stopped_call_gives_its_stopped_tree_the_grace_to_clean_up(
    new_box: NewBox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stateless: bool
) -> None:
    marker = secrets.token_hex(12)
    monkeypatch.setenv("WT_TEST_MARKER", marker)
    box: Sandbox = new_box(
        layers=False,
        env_allowlist={"PATH", "WT_TEST_MARKER"},
        limits=SandboxLimits(grace_seconds=GRACE),
    )
    hangs = tool(
        name="hang",
        description="",
        parameters=TreeArgs,
        execute=_hang_over_a_stopped_tree,
        sandbox=box,
        stateless=stateless,
    )
    # Cancelled once its tree is set up (two processes started, one stopping itself): a
    # cancelled call's stop, awaited before the cancellation goes on, is a timed-out one's.
    async with anyio.create_task_group() as group:
        group.start_soon(invoke_tool, hangs, {"directory": str(tmp_path)})
        ready = await poll_async(lambda: (tmp_path / "ready").exists(), bool)
        group.cancel_scope.cancel()
    left = survivors(f"WT_TEST_MARKER={marker}")
    assert ready, "the call's tree was not set up"
    assert (tmp_path / "child").read_text() == "cleaned\n"
    assert (tmp_path / "grandchild").read_text() == "term\ncleaned\n"
    assert left == []
