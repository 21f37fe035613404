"""A checkpoint that cannot open a file for want of file descriptors refuses the call, naming
the file: run, the call's change to that file could not be undone (before, it ran, and undo
left the file changed, "never stored")."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from tests._fds import OUT_OF_FDS_WORDS, short_of_fds_at
from workspace_tools import ErrorCode, ToolSession


@pytest.mark.parametrize("number", [errno.EMFILE, errno.ENFILE])
def test_a_checkpoint_short_of_fds_refuses_the_call_and_nothing_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, number: int
) -> None:
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text(name)
    session = ToolSession(tmp_path, checkpoints=True)
    short_of_fds_at(monkeypatch, "b.txt", number)
    result = session.call_sync("run_command", {"command": "echo changed > b.txt"})
    monkeypatch.undo()
    assert (result.error_code, result.error) == (
        ErrorCode.TOOL_ERROR,
        "Not run: the checkpoint before this call failed: Cannot open b.txt: "
        + OUT_OF_FDS_WORDS[number],
    )
    assert (tmp_path / "b.txt").read_text() == "b.txt"
    assert session.checkpoints is not None
    session.checkpoints.close()
