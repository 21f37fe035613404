"""The output area is in the workspace, where a command can change it; this process, which
is not confined, never writes, makes or removes anything through a link a command put there:
not through a link in an output file's place, nor through one in the area's own place."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from sandbox import Sandbox
from workspace_tools import ShellSession, invoke_tool, shell_tools
from workspace_tools.shell import make_area
from workspace_tools.shell._area import open_fifo, open_output, remove_file

pytestmark = pytest.mark.anyio

HOST_TEXT = b"the host's own file\n"


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Sandbox]:
    sandbox = Sandbox(best_effort=True, env_allowlist=("PATH",))
    try:
        if "write_confinement" not in sandbox.confined_to(str(tmp_path)).capabilities:
            pytest.skip("no layer here confines writes (bubblewrap or Landlock)")
        yield sandbox
    finally:
        sandbox.close()


@pytest.fixture
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of the host outside the workspace, with a file in it."""
    where = tmp_path_factory.mktemp("host")
    (where / "target.txt").write_bytes(HOST_TEXT)
    return where


async def call(shells: ShellSession, name: str, **arguments: Any) -> Any:
    tool = next(t for t in shell_tools(shells) if t.name == name)
    with anyio.fail_after(120):
        return await invoke_tool(tool, arguments)


async def test_a_link_in_an_output_files_place_is_not_written_through(
    tmp_path: Path, box: Sandbox, outside: Path
) -> None:
    target = outside / "target.txt"
    with ShellSession(tmp_path, sandbox=box) as shells:
        await call(shells, "shell", command="true")  # the area is made
        plant = (
            "A=$(echo .shell-output.*.wt-tmp); for n in $(seq 1 9); do "
            f"ln -sf {target} $A/shell-$n.stdout; ln -sf {target} $A/shell-$n.stderr; done; "
            "echo first; head -c 3000000 /dev/zero | tr '\\0' '#'; "
            "echo; head -c 3000000 /dev/zero | tr '\\0' '%' >&2"
        )
        result = await call(shells, "shell", command=plant)
        assert result.error is None, result.error
        written = {
            name: (tmp_path / getattr(result.details, name)).read_bytes()
            for name in ("stdout_file", "stderr_file")
        }
    assert target.read_bytes() == HOST_TEXT
    assert os.listdir(outside) == ["target.txt"]
    assert written == {
        "stdout_file": b"first\n" + b"#" * 3_000_000 + b"\n",
        "stderr_file": b"%" * 3_000_000,
    }


async def test_a_link_in_the_areas_place_gets_nothing_made_through_it(
    tmp_path: Path, box: Sandbox, outside: Path
) -> None:
    with ShellSession(tmp_path, sandbox=box) as shells:
        await call(shells, "shell", command="true")
        swap = f"A=$(echo .shell-output.*.wt-tmp); rm -rf $A; ln -s {outside} $A; echo $A"
        swapped = await call(shells, "shell", command=swap)
        area = tmp_path / swapped.content["stdout"].strip()
        started = await call(shells, "start_process", command="echo from the process")
        assert started.error == (
            "Could not start 'echo from the process': its log file in "
            f"{area.name} cannot be made (Not a directory)"
        )
        long = await call(shells, "shell", command="seq 1 100000")
        assert long.error is None, long.error
        assert long.details.stdout_file is None  # counted, and kept head and tail
        assert long.content["stdout"].endswith("99999\n100000\n")
        assert area.is_symlink()
    assert sorted(os.listdir(outside)) == ["target.txt"]
    assert (outside / "target.txt").read_bytes() == HOST_TEXT


@pytest.mark.parametrize("kind", ["symlink", "hard link"])
def test_the_area_makes_its_files_anew(tmp_path: Path, outside: Path, kind: str) -> None:
    area = make_area(tmp_path)
    target = outside / "target.txt"
    for name in ("out", "fifo", "gone"):
        if kind == "symlink":
            (area / name).symlink_to(target)
        else:
            os.link(target, area / name)
    fd = open_output(area / "out")
    try:
        os.write(fd, b"written")
    finally:
        os.close(fd)
    os.close(open_fifo(area / "fifo"))
    remove_file(area / "gone")
    assert ((area / "out").read_bytes(), (area / "out").is_symlink()) == (b"written", False)
    assert (area / "fifo").is_fifo() and not (area / "gone").exists()
    assert (target.read_bytes(), sorted(os.listdir(outside))) == (HOST_TEXT, ["target.txt"])


def test_nothing_is_made_or_removed_through_a_link_in_the_areas_place(
    tmp_path: Path, outside: Path
) -> None:
    area = make_area(tmp_path)
    os.rename(area, tmp_path / "moved")
    area.symlink_to(outside)
    (outside / "gone").write_bytes(HOST_TEXT)
    remove_file(area / "gone")
    with pytest.raises(OSError) as raised:
        open_output(area / "out")
    assert raised.value.errno == errno.ENOTDIR  # O_DIRECTORY | O_NOFOLLOW on a link
    with pytest.raises(OSError):
        open_fifo(area / "fifo")
    assert (area.is_symlink(), sorted(os.listdir(outside))) == (True, ["gone", "target.txt"])
    assert (outside / "gone").read_bytes() == HOST_TEXT


def test_a_regular_output_file_of_one_link_is_truncated_in_place(tmp_path: Path) -> None:
    area = make_area(tmp_path)
    (area / "out").write_bytes(b"an earlier command's output")
    inode = (area / "out").stat().st_ino
    fd = open_output(area / "out")
    try:
        os.write(fd, b"new")
    finally:
        os.close(fd)
    assert ((area / "out").read_bytes(), (area / "out").stat().st_ino) == (b"new", inode)
