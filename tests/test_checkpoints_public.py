"""Checkpoints as the README names them: importable from ``workspace_tools.session``, and a
store the user chooses and keeps is read back by ``workspace-tools checkpoints``."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import anyio

from workspace_tools import ToolSession, Workspace, workspace_tools
from workspace_tools.cli import main
from workspace_tools.session import ChangedFile, CheckpointedCalls, Checkpoints, RestoreResult


def test_a_kept_store_outlives_the_session_and_lists_its_steps(tmp_path: Path) -> None:
    root, store = tmp_path / "root", tmp_path / "store"
    root.mkdir()
    checkpoints = Checkpoints(Workspace(root), directory=store, keep=True)
    with ToolSession(root, checkpoints=checkpoints) as session:
        result = session.call_sync("write_file", {"path": "a.txt", "content": "a\n"})
        assert session.steps[-1].changed_files == [
            ChangedFile(path="a.txt", change="created", type="file", restorable=True)
        ], result
        undone = session.undo(dry_run=True)
        assert isinstance(undone, RestoreResult) and undone.applied is False, undone
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["checkpoints", str(store)])
    assert (code, out.getvalue()) == (0, f"workspace {root}\nstep 0\n  created a.txt\n")


def test_checkpointed_calls_record_and_undo_a_write_without_a_session(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"old\n")
    workspace = Workspace(tmp_path)
    tools = {t.name: t for t in workspace_tools(workspace)}
    calls = CheckpointedCalls(Checkpoints(workspace))
    try:
        wrote = anyio.run(
            calls, tools["write_file"], {"path": "a.txt", "content": "new\n"}, "c1", None
        )
        assert wrote.details["changed_files"] == [
            {"path": "a.txt", "change": "changed", "type": "file", "restorable": True}
        ], wrote
        undone = anyio.run(calls, calls.undo_tool, {}, "c2", None)
        assert (undone.error_code, (tmp_path / "a.txt").read_bytes()) == (None, b"old\n"), undone
    finally:
        calls.checkpoints.close()
