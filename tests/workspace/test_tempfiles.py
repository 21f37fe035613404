"""The temp files of writes: never discovered, and removed once their writer is dead."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.file_support import call, tools
from workspace_tools import Workspace
from workspace_tools.workspace import _tempfiles
from workspace_tools.workspace._fingerprint import tree_fingerprint
from workspace_tools.workspace._tempfiles import (
    STALE_SECONDS,
    TempSweeps,
    create_temp,
    is_temp_name,
    remove_stale_temps,
)

REPO = Path(__file__).resolve().parents[2]
HEX = "0123456789abcdef"


@pytest.mark.parametrize(
    ("name", "ours"),
    [
        (f".f.txt.{HEX}.wt-tmp", True),
        (f".a\nb c.{HEX}.wt-tmp", True),
        (f"...x.{HEX}.wt-tmp", True),
        (f"f.txt.{HEX}.wt-tmp", False),
        (f".{HEX}.wt-tmp", False),
        (f".f.txt.{HEX[:-1]}.wt-tmp", False),
        (f".f.txt.{HEX.upper()}.wt-tmp", False),
        (f".f.txt.{HEX}.wt-tmp~", False),
        (".f.txt.deadbeef.tmp", False),
        ("notes.wt-tmp", False),
    ],
)
def test_temp_names_are_recognised_exactly(name: str, ours: bool) -> None:
    assert is_temp_name(name) is ours


@pytest.mark.parametrize("name", ["f.txt", "é" * 127, "x" * 255, ".hidden"])
def test_created_temp_names_fit_and_are_recognised(tmp_path: Path, name: str) -> None:
    dir_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        temp, fd = create_temp(dir_fd, name, 0o600)
        os.close(fd)
    finally:
        os.close(dir_fd)
    assert is_temp_name(temp), temp
    assert len(os.fsencode(temp)) <= 255
    assert os.listdir(tmp_path) == [temp]


def _backdate(path: Path, seconds: float = STALE_SECONDS + 60) -> None:
    past = time.time() - seconds
    os.utime(path, (past, past), follow_symlinks=False)


def _sweep(directory: Path) -> list[str]:
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return sorted(remove_stale_temps(dir_fd))
    finally:
        os.close(dir_fd)


def test_only_dead_old_regular_temp_files_of_this_package_are_removed(tmp_path: Path) -> None:
    dead = f".dead.txt.{HEX}.wt-tmp"
    (tmp_path / dead).write_bytes(b"half")
    young = f".young.txt.{HEX}.wt-tmp"
    (tmp_path / young).write_bytes(b"half")
    other = ".f.txt.deadbeef.tmp"
    (tmp_path / other).write_bytes(b"someone else's")
    as_dir = f".d.{HEX}.wt-tmp"
    (tmp_path / as_dir).mkdir()
    as_link = f".l.{HEX}.wt-tmp"
    (tmp_path / as_link).symlink_to(dead)
    dir_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        held, held_fd = create_temp(dir_fd, "held.txt", 0o644)
    finally:
        os.close(dir_fd)
    for name in (dead, other, as_dir, as_link, held):
        _backdate(tmp_path / name)
    try:
        assert _sweep(tmp_path) == [dead]
        assert sorted(os.listdir(tmp_path)) == sorted([young, other, as_dir, as_link, held])
    finally:
        os.close(held_fd)  # its writer is gone now
    assert _sweep(tmp_path) == [held]


def test_a_temp_file_locked_by_another_process_is_kept(tmp_path: Path) -> None:
    name = f".f.txt.{HEX}.wt-tmp"
    (tmp_path / name).write_bytes(b"half")
    _backdate(tmp_path / name)
    locker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys\n"
            "f = open(sys.argv[1], 'rb')\n"
            "fcntl.flock(f, fcntl.LOCK_EX)\n"
            "print('locked', flush=True)\n"
            "sys.stdin.read()\n",
            str(tmp_path / name),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert locker.stdout is not None and locker.stdout.readline() == b"locked\n"
        assert _sweep(tmp_path) == []
    finally:
        locker.kill()
        locker.wait(timeout=30)
    assert _sweep(tmp_path) == [name]
    assert os.listdir(tmp_path) == []


_KILLED_WRITER = textwrap.dedent(
    """
    import os, sys, time
    from workspace_tools import workspace_tools, invoke_tool_sync
    from workspace_tools.workspace import _files

    real_write = os.write
    def write(fd, data):
        # Half of the content, then wait to be killed.
        real_write(fd, data[: len(data) // 2])
        print("writing", flush=True)
        time.sleep(600)

    _files.os = type(sys)("os_in_files")
    _files.os.__dict__.update(os.__dict__)
    _files.os.write = write
    write_tool = {t.name: t for t in workspace_tools(sys.argv[1])}["write_file"]
    invoke_tool_sync(write_tool, {"path": "d/big.txt", "content": sys.argv[2] * 5_000_000})
    """
)


def test_a_killed_write_leaves_nothing_that_discovery_shows(tmp_path: Path) -> None:
    root = tmp_path / "w"
    (root / "d").mkdir(parents=True)
    (root / "d/big.txt").write_bytes(b"old needle\n")
    (root / "d/other.txt").write_bytes(b"other\n")
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, str(root), "needle new\n"],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"writing\n"
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    # The dead write's half copy (27.5 MB of "needle") is on disk...
    temps = [name for name in os.listdir(root / "d") if name not in ("big.txt", "other.txt")]
    assert len(temps) == 1 and is_temp_name(temps[0]), temps
    assert temps[0].startswith(".big.txt.")
    assert (root / "d" / temps[0]).stat().st_size == 27_500_000
    assert (root / "d/big.txt").read_bytes() == b"old needle\n"

    # ...and no discovery tool shows it, whatever the options.
    tool_set = tools(root)
    for include_ignored in (False, True):
        listing = call(tool_set["list_files"], recursive=True, include_ignored=include_ignored)
        assert listing.content == "d/\nd/big.txt\nd/other.txt"
        assert call(tool_set["list_files"], path="d", include_ignored=include_ignored).content == (
            "d/big.txt\nd/other.txt"
        )
        found = call(tool_set["glob"], pattern="**/*", include_ignored=include_ignored)
        assert found.content == "d/big.txt\nd/other.txt"
        hidden = call(tool_set["glob"], pattern="**/.*", include_ignored=include_ignored)
        assert hidden.content == "No files matched"
        grep = call(tool_set["grep"], pattern="needle", include_ignored=include_ignored)
        assert grep.content == "d/big.txt:1:old needle"
        assert grep.details.files_searched == 2

    # A later write in that directory leaves a young temp file alone (its writer may be
    # between open and lock), and removes it once it is old and unlocked.
    assert call(tool_set["write_file"], path="d/other.txt", content="2\n").error is None
    assert sorted(os.listdir(root / "d")) == sorted(["big.txt", "other.txt", temps[0]])
    _backdate(root / "d" / temps[0])
    assert call(tool_set["write_file"], path="d/other.txt", content="3\n").error is None
    assert sorted(os.listdir(root / "d")) == ["big.txt", "other.txt"]


def test_temp_files_do_not_change_the_tree_fingerprint(
    tmp_path: Path, clock_moved_on: None
) -> None:
    (tmp_path / "a.txt").write_bytes(b"a\n")
    workspace = Workspace(tmp_path)
    before = tree_fingerprint(workspace)
    (tmp_path / f".a.txt.{HEX}.wt-tmp").write_bytes(b"half")
    assert tree_fingerprint(workspace) == before
    (tmp_path / ".a.txt.deadbeef.tmp").write_bytes(b"not ours")
    assert tree_fingerprint(workspace) != before


def test_a_write_holds_the_lock_on_its_temp_file_until_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workspace_tools.workspace import _files

    seen: list[bool] = []
    real_replace = os.replace

    def replace(src: str, dst: str, **kwargs: int) -> None:
        # Another open file description of the temp file cannot take the lock.
        fd = os.open(src, os.O_RDONLY, dir_fd=kwargs["src_dir_fd"])
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            seen.append(False)
        except BlockingIOError:
            seen.append(True)
        finally:
            os.close(fd)
        real_replace(src, dst, **kwargs)

    monkeypatch.setattr(_files.os, "replace", replace)
    assert call(tools(tmp_path)["write_file"], path="f.txt", content="x\n").error is None
    assert seen == [True]
    assert (tmp_path / "f.txt").read_bytes() == b"x\n"


def test_a_workspaces_writes_look_for_dead_writes_only_when_one_may_be_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    looked: list[str] = []
    sweep = _tempfiles._sweep

    def counted(dir_fd: int, now: float) -> tuple[list[str], bool]:
        looked.append(os.readlink(f"/proc/self/fd/{dir_fd}"))
        return sweep(dir_fd, now)

    monkeypatch.setattr(_tempfiles, "_sweep", counted)
    root = tmp_path / "w"
    (root / "d").mkdir(parents=True)
    clock = [1000.0]
    workspace = Workspace(root)
    workspace.temp_sweeps = TempSweeps(clock=lambda: clock[0])
    by_name = tools(workspace)

    def write(content: str) -> None:
        result = call(by_name["write_file"], path="d/f.txt", content=content)
        assert result.error is None, result.error

    write("1\n")
    write("2\n")
    write("3\n")
    assert looked == [str(root / "d")], looked  # the first write alone: nothing changed since

    # Another process adds a file: the directory changed, so the next write looks again.
    (root / "d/other.txt").write_bytes(b"x\n")
    write("4\n")
    write("5\n")
    assert len(looked) == 2, looked

    # A dead write's temp file appears (with an old mtime): the next write removes it.
    dead = root / "d" / f".f.txt.{HEX}.wt-tmp"
    dead.write_bytes(b"half")
    _backdate(dead)
    write("6\n")
    assert sorted(os.listdir(root / "d")) == ["f.txt", "other.txt"]
    assert len(looked) == 3, looked

    # A young one is left, and looked for on every write until it is removed.
    young = root / "d" / f".g.txt.{HEX}.wt-tmp"
    young.write_bytes(b"half")
    write("7\n")
    write("8\n")
    assert len(looked) == 5, looked
    _backdate(young)
    write("9\n")
    assert sorted(os.listdir(root / "d")) == ["f.txt", "other.txt"]
    write("10\n")
    assert len(looked) == 6, looked

    # However quiet the directory, a write looks again once a stale temp file could be due.
    clock[0] += STALE_SECONDS
    write("11\n")
    write("12\n")
    assert len(looked) == 7, looked
    assert (root / "d/f.txt").read_bytes() == b"12\n"
