"""A checkpoint that cannot open a file for want of file descriptors refuses the call, naming
the file: run, the call's change to that file could not be undone (before, it ran, and undo
left the file changed, "never stored")."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from workspace_tools import ErrorCode, ToolSession


@pytest.mark.parametrize("number", [errno.EMFILE, errno.ENFILE])
def test_a_checkpoint_short_of_fds_refuses_the_call_and_nothing_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, number: int
) -> None:
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text(name)
    session = ToolSession(tmp_path, checkpoints=True)
    real_open = os.open

    def open_short_of_fds(path: str, flags: int, mode: int = 0o777, **kwargs: object) -> int:
        if path == "b.txt":
            raise OSError(number, os.strerror(number), path)
        return real_open(path, flags, mode, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", open_short_of_fds)
    result = session.call_sync("run_command", {"command": "echo changed > b.txt"})
    monkeypatch.undo()
    words = {
        errno.EMFILE: "this process has too many files open; try again when fewer calls run "
        "at once",
        errno.ENFILE: "the system has too many files open; try again later",
    }[number]
    assert (result.error_code, result.error) == (
        ErrorCode.TOOL_ERROR,
        f"Not run: the checkpoint before this call failed: Cannot open b.txt: {words}",
    )
    assert (tmp_path / "b.txt").read_text() == "b.txt"
    assert session.checkpoints is not None
    session.checkpoints.close()
