"""cgroup v2 layer: finding the hierarchy, and a fork loop capped by pids.max."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.layers import cgroup
from tests._waiting import wait_until

_UNAVAILABLE = cgroup.available()
needs_delegation = pytest.mark.skipif(_UNAVAILABLE is not None, reason=str(_UNAVAILABLE))

# Forks up to 20 children that wait on a pipe, and prints how many it got.
FORK_LOOP = """
import os
read_end, write_end = os.pipe()
children = []
for _ in range(20):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os.close(write_end)
        os.read(read_end, 1)
        os._exit(0)
    children.append(pid)
os.close(write_end)
for pid in children:
    os.waitpid(pid, 0)
print(len(children))
"""


@pytest.mark.skipif(shutil.which("findmnt") is None, reason="needs findmnt (util-linux)")
def test_cgroup2_mount_point_agrees_with_findmnt() -> None:
    expected = subprocess.run(
        ["findmnt", "--types", "cgroup2", "--noheadings", "--output", "TARGET"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.splitlines()

    found = cgroup.cgroup2_mount(Path("/proc/self/mountinfo").read_text())

    assert (found[0] if found else None) == (expected[0] if expected else None)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("41 31 0:38 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw", ("/sys/fs/cgroup", "/")),
        (
            r"7 1 0:5 /sub /mnt/with\040space rw shared:1 - cgroup2 none rw",
            ("/mnt/with space", "/sub"),
        ),
        ("39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids", None),
    ],
)
def test_cgroup2_mount_reads_mountinfo_fields(line: str, expected: tuple[str, str] | None) -> None:
    assert cgroup.cgroup2_mount(line) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0::/user.slice/session-1.scope\n", "/user.slice/session-1.scope"),
        ("12:pids:/a\n1:name=systemd:/b\n0::/\n", "/"),
        ("4:memory:/only-v1\n", None),
    ],
)
def test_own_cgroup_reads_the_unified_line(text: str, expected: str | None) -> None:
    assert cgroup.own_cgroup(text) == expected


@needs_delegation
def test_fork_loop_is_capped_by_pids_max() -> None:
    parent = cgroup.locate()
    uncapped = subprocess.run(
        [sys.executable, "-c", FORK_LOOP], capture_output=True, text=True, check=True
    )
    path = cgroup.create(parent, max_processes=5)
    try:
        capped = subprocess.run(
            [sys.executable, "-c", FORK_LOOP],
            capture_output=True,
            text=True,
            check=True,
            preexec_fn=lambda: cgroup.add_process(path),
        )
    finally:
        cgroup.remove(path)

    assert uncapped.stdout == "20\n"
    assert capped.stdout == "4\n"  # pids.max counts the loop's own process
    assert not os.path.exists(path)


@pytest.fixture
def plain_cgroup() -> Iterator[str]:
    """A child cgroup without limits: needs a writable cgroup v2 directory, not delegation."""
    try:
        path = cgroup.create(cgroup.own_directory(), max_processes=None)
    except OSError as exc:
        pytest.skip(f"cannot create a cgroup v2 child here: {exc}")
    yield path
    cgroup.remove(path)


def test_kill_ends_every_process_in_the_cgroup(plain_cgroup: str) -> None:
    process = subprocess.Popen(
        ["bash", "-c", "setsid sleep 1000 & (trap '' TERM; sleep 1000) & wait"],
        preexec_fn=lambda: cgroup.add_process(plain_cgroup),
    )
    procs = Path(plain_cgroup, "cgroup.procs")
    members = wait_until(
        lambda: procs.read_text().split(),
        lambda pids: len(pids) >= 3,
        "bash, the detached sleep and the subshell's sleep in the cgroup",
    )
    assert len(members) == 3, members

    cgroup.kill(plain_cgroup)

    assert procs.read_text() == ""
    assert process.wait(timeout=10) == -9


def test_remove_kills_what_is_left_and_deletes_the_cgroup(plain_cgroup: str) -> None:
    process = subprocess.Popen(
        ["sleep", "1000"], preexec_fn=lambda: cgroup.add_process(plain_cgroup)
    )

    cgroup.remove(plain_cgroup)

    assert process.wait(timeout=10) == -9
    assert not os.path.exists(plain_cgroup)
