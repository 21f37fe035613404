"""A checkpoint that cannot open a file for want of file descriptors refuses the call, naming
the file: run, the call's change to that file could not be undone (before, it ran, and undo
left the file changed, "never stored"). An undo short of them is a ToolError naming the
file, with nothing changed and nothing lost: it works once they are free."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from tests._fds import OUT_OF_FDS_WORDS, short_of_fds_at
from workspace_tools import ErrorCode, ToolError, ToolSession


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


@pytest.mark.parametrize("number", [errno.EMFILE, errno.ENFILE])
def test_an_undo_short_of_fds_is_a_tool_error_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, number: int
) -> None:
    (tmp_path / "a.txt").write_text("old\n")
    session = ToolSession(tmp_path, checkpoints=True)
    wrote = session.call_sync("write_file", {"path": "a.txt", "content": "new\n"})
    assert wrote.error is None, wrote.error
    short_of_fds_at(monkeypatch, "a.txt", number)
    with pytest.raises(ToolError) as raised:
        session.undo()
    monkeypatch.undo()
    assert (raised.value.code, raised.value.message) == (
        ErrorCode.TOOL_ERROR,
        "Nothing was restored: Cannot open a.txt: " + OUT_OF_FDS_WORDS[number],
    )
    assert (tmp_path / "a.txt").read_text() == "new\n"
    # Nothing lost: the same undo works once descriptors are free.
    again = session.undo()
    assert (again.step, again.applied, [f.path for f in again.files]) == (0, True, ["a.txt"])
    assert (tmp_path / "a.txt").read_text() == "old\n"
    assert session.checkpoints is not None
    session.checkpoints.close()


def test_an_undo_that_cannot_open_the_root_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = ToolSession(tmp_path, checkpoints=True)
    session.call_sync("write_file", {"path": "b.txt", "content": "b\n"})
    short_of_fds_at(monkeypatch, str(tmp_path), errno.EMFILE)
    with pytest.raises(ToolError) as raised:
        session.undo()
    monkeypatch.undo()
    assert raised.value.message == (
        "Nothing was restored: Cannot open the workspace root: " + OUT_OF_FDS_WORDS[errno.EMFILE]
    )
    assert session.undo().files[0].path == "b.txt"
    assert not (tmp_path / "b.txt").exists()
    assert session.checkpoints is not None
    session.checkpoints.close()
