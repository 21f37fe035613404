"""A checkpoint after a step that fails (the workspace cannot be walked) is not only
logged: the step's result tells the model that undo is not available for it."""

from __future__ import annotations

import errno
from pathlib import Path

import anyio
import pytest

from tests._fds import OUT_OF_FDS_WORDS, short_of_fds_at
from workspace_tools import ToolSession, Workspace
from workspace_tools.session._checkpoints import Checkpoints
from workspace_tools.session._undo import CheckpointedCalls
from workspace_tools.tools import workspace_tools

NOTE = (
    "Undo is not available for this step: the checkpoint after it failed (Cannot open "
    f"new.txt: {OUT_OF_FDS_WORDS[errno.EMFILE]}), so what it changed cannot be undone."
)


def test_a_commands_result_says_undo_is_not_available(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = ToolSession(tmp_path, checkpoints=True)
    short_of_fds_at(monkeypatch, "new.txt", errno.EMFILE)
    result = session.call_sync("run_command", {"command": "echo made > new.txt"})
    monkeypatch.undo()
    assert result.error is None, result.error
    assert result.content == {"exit_code": 0, "stdout": "", "stderr": "", "note": NOTE}
    assert result.details["undo_unavailable"] == NOTE.split("(")[1].split(")")[0]
    assert (tmp_path / "new.txt").read_text() == "made\n"
    assert session.checkpoints is not None
    session.checkpoints.close()


def test_a_failed_calls_error_ends_with_the_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = ToolSession(tmp_path, checkpoints=True)
    short_of_fds_at(monkeypatch, "new.txt", errno.EMFILE)
    result = session.call_sync("run_command", {"command": "echo made > new.txt; exit 3"})
    monkeypatch.undo()
    # A non-zero exit is content, not an error: the note joins the command's own note.
    assert result.content["exit_code"] == 3
    assert result.content["note"] == NOTE
    failed = session.call_sync("write_file", {"path": "new.txt/x", "content": "x"})
    assert failed.error_code is not None
    assert "Undo is not available" not in failed.error  # its checkpoint was taken
    assert session.checkpoints is not None
    session.checkpoints.close()


def test_checkpointed_calls_say_it_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    workspace = Workspace(tmp_path)
    checkpoints = Checkpoints(workspace)
    calls = CheckpointedCalls(checkpoints)
    tools = {t.name: t for t in workspace_tools(workspace)}

    async def main() -> object:
        return await calls(tools["write_file"], {"path": "new.txt", "content": "x"}, "c1", None)

    short_of_fds_at(monkeypatch, "new.txt", errno.EMFILE)
    try:
        result = anyio.run(main)
    finally:
        monkeypatch.undo()
        checkpoints.close()
    assert result.error is None, result.error
    assert result.content["note"] == NOTE, result.model_text()
    assert "changed_files" not in result.details
