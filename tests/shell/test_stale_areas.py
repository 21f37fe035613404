"""Output areas left behind by a process killed outright (kill -9) are removed when the
next session makes its own; an area whose owner lives, or that cannot be judged, stays."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from tests._waiting import wait_until
from workspace_tools import ShellSession, invoke_tool, shell_tools
from workspace_tools.shell import make_area, remove_area
from workspace_tools.shell._area import OWNER_FILE, remove_stale_areas

#: A process that makes an output area, prints its path, then waits to be killed.
_OWNER = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from workspace_tools.shell import make_area\n"
    "print(make_area(Path(sys.argv[1])), flush=True)\n"
    "time.sleep(1000)\n"
)


def start_owner(root: Path) -> tuple[subprocess.Popen[str], Path]:
    """A live process owning a new area in ``root``, and the area."""
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER, str(root)], stdout=subprocess.PIPE, text=True
    )
    assert owner.stdout is not None
    area = Path(owner.stdout.readline().strip())
    assert area.parent == root and (area / OWNER_FILE).is_file(), area
    return owner, area


def kill_owner(owner: subprocess.Popen[str]) -> None:
    owner.send_signal(signal.SIGKILL)
    assert owner.wait(timeout=30) == -signal.SIGKILL  # reaped: no zombie holds the pid


def entries(root: Path) -> list[str]:
    return sorted(os.listdir(root))


def test_the_area_of_a_killed_owner_is_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    dead, dead_area = start_owner(tmp_path)
    live, live_area = start_owner(tmp_path)
    try:
        kill_owner(dead)
        (dead_area / "shell-1.stdout").write_bytes(b"x" * 10)
        assert remove_stale_areas(tmp_path) == [dead_area.name]
        assert entries(tmp_path) == [live_area.name]
        assert sorted(os.listdir(live_area)) == [".gitignore", OWNER_FILE]
    finally:
        kill_owner(live)
    assert remove_stale_areas(tmp_path) == [live_area.name]
    assert entries(tmp_path) == []


def test_areas_that_cannot_be_judged_are_kept(tmp_path: Path) -> None:
    dead, dead_area = start_owner(tmp_path)
    kill_owner(dead)
    fields = (dead_area / OWNER_FILE).read_text(encoding="ascii").split()
    names = {
        "other-namespace": " ".join([*fields[:3], "pid:[1]"]),
        "other-boot": " ".join([*fields[:2], "boot", fields[3]]),
        "garbled": "not an owner line",
    }
    kept = []
    for label, line in names.items():
        area = tmp_path / f".shell-output.{label.encode().hex()[:16]:0<16}.wt-tmp"
        area.mkdir()
        (area / OWNER_FILE).write_text(line, encoding="ascii")
        kept.append(area.name)
    no_owner = tmp_path / ".shell-output.00000000000000aa.wt-tmp"
    no_owner.mkdir()
    # A link named as an area, to a directory outside with an owner file of a dead owner:
    # neither the link nor what it points to is touched.
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / OWNER_FILE).write_text(" ".join(fields), encoding="ascii")
    link = tmp_path / ".shell-output.00000000000000bb.wt-tmp"
    link.symlink_to(outside)
    other_name = tmp_path / ".shell-output.keep.wt-tmp"
    other_name.mkdir()
    (other_name / OWNER_FILE).write_text(" ".join(fields), encoding="ascii")

    assert remove_stale_areas(tmp_path) == [dead_area.name]
    assert entries(tmp_path) == sorted([*kept, no_owner.name, link.name, other_name.name])
    assert sorted(os.listdir(outside)) == [OWNER_FILE]


@pytest.mark.anyio
async def test_a_new_session_removes_a_killed_sessions_area(tmp_path: Path) -> None:
    dead, dead_area = start_owner(tmp_path)
    kill_owner(dead)
    with ShellSession(tmp_path) as session:
        tool = {t.name: t for t in shell_tools(session)}["shell"]
        with anyio.fail_after(60):
            result = await invoke_tool(tool, {"command": "ls -A"})
        areas = [name for name in entries(tmp_path) if name.startswith(".shell-output.")]
        assert len(areas) == 1 and areas[0] != dead_area.name, areas
        assert result.content["stdout"] == f"{areas[0]}\n", result.model_text()
    wait_until(lambda: entries(tmp_path), lambda seen: seen == [], "the session's area removed")


def test_an_area_made_and_removed_in_process_leaves_nothing(tmp_path: Path) -> None:
    area = make_area(tmp_path)
    assert sorted(os.listdir(area)) == [".gitignore", OWNER_FILE]
    assert remove_stale_areas(tmp_path) == []  # its owner (this process) lives
    remove_area(area)
    assert entries(tmp_path) == []
