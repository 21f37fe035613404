"""A program that cannot be started fails the same way whatever the layers: the error
``posix_spawn`` gives without any (its errno, argv[0] and the path), never the message of a
shell that stands between under bubblewrap, and nothing runs."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from sandbox import Sandbox, SandboxError
from sandbox.layers import BUBBLEWRAP, LANDLOCK, bwrap
from tests.sandbox._boxes import NewBox, force_landlock

pytestmark = pytest.mark.anyio

MODES = ["plain", "bubblewrap", "landlock"]

# argv[0] -> the error's errno name and the path it names ("" : it runs).
CASES = {
    "nosuch-program": ("ENOENT", "nosuch-program"),
    "./missing": ("ENOENT", "./missing"),
    "/nonexistent/program": ("ENOENT", "/nonexistent/program"),
    "./data.txt": ("EACCES", "./data.txt"),
    "./folder": ("EACCES", "./folder"),
    "data.txt/program": ("ENOTDIR", "data.txt/program"),
    "./no-header": ("ENOEXEC", "./no-header"),
    "./script.sh": ("", ""),
}


def _box(new_box: NewBox, mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    if mode == "plain":
        return new_box(layers=False)
    if mode == "landlock":
        force_landlock(monkeypatch)
    elif bwrap.available() is not None:
        pytest.skip(f"bubblewrap does not work here: {bwrap.available()}")
    box = new_box(writable=[str(tmp_path)])
    expected = BUBBLEWRAP if mode == "bubblewrap" else LANDLOCK
    assert expected in box.capabilities.values(), box.capabilities
    return box


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "data.txt").write_bytes(b"not a program\n")
    (tmp_path / "folder").mkdir()
    (tmp_path / "no-header").write_bytes(b"echo ran as a script > ran\n")
    (tmp_path / "no-header").chmod(0o755)
    (tmp_path / "script.sh").write_bytes(b'#!/bin/sh\necho ran "$@"\n')
    (tmp_path / "script.sh").chmod(0o755)
    return tmp_path


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("program", CASES)
async def test_a_program_that_cannot_start_fails_as_without_layers(
    new_box: NewBox,
    mode: str,
    program: str,
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    box = _box(new_box, mode, project, monkeypatch)
    name, path = CASES[program]
    if not name:
        result = await box.run([program, "arg"], cwd=str(project))
        assert (result.exit_code, result.stdout.complete, result.stderr.complete) == (
            0,
            b"ran arg\n",
            b"",
        )
        return
    with pytest.raises(SandboxError) as raised:
        await box.run([program, "arg"], cwd=str(project))
    number = getattr(errno, name)
    assert str(raised.value) == (
        f"cannot start {program!r}: [Errno {number}] {os.strerror(number)}: {path!r}"
    )
    assert not (project / "ran").exists()


@pytest.mark.parametrize("mode", MODES)
async def test_a_program_found_on_path_runs(
    new_box: NewBox, mode: str, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = _box(new_box, mode, project, monkeypatch)
    result = await box.run(["printf", "%s", "x"], cwd=str(project))
    assert (result.exit_code, result.stdout.complete, result.stderr.complete) == (0, b"x", b"")
