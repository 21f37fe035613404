"""Undo over steps whose changes cannot all be restored (a file over the store's size
limit, never stored): each undo moves one step back all the same, never stuck repeating
"Nothing to restore" while earlier steps wait."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from workspace_tools import ToolSession, Workspace, workspace_tools

# What a model reads when no change is left to undo: never that nothing changed, since
# every change may have been undone already.
UNDONE_ALL = (
    "Nothing to undo: no change of this session is left to undo (no step changed a file, or "
    "each change was undone already)."
)

pytestmark = pytest.mark.anyio


async def test_undo_passes_over_a_change_it_cannot_restore(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\n")
    workspace = Workspace(tmp_path)
    session = ToolSession(workspace_tools(workspace), workspace=workspace, checkpoints=True)
    undo = session.undo_tool()
    with anyio.fail_after(120):
        edited = await session.call("run_command", {"command": "echo two > a.txt"})
        # A sparse 30 GiB file: over the store's limit, so its step is never stored.
        huge = await session.call("run_command", {"command": "truncate -s 30G big"})
        assert (edited.error, huge.error) == (None, None)
        first = await session.call(undo, {})
        second = await session.call(undo, {})
        third = await session.call(undo, {})
    assert first.model_text() == (
        "Nothing to restore: no file changed from step 1 on.\n"
        "Not restorable (never stored; left as they are):\n  big"
    )
    # A restore from step 0 on covers step 1 too: it still says what it left.
    assert second.model_text() == (
        "Restored 1 path as before step 0:\n  changed a.txt\n"
        "Not restorable (never stored; left as they are):\n  big"
    )
    assert third.model_text() == UNDONE_ALL
    assert (tmp_path / "a.txt").read_text() == "one\n"
    # An explicit restore of that step still tries the path again, and says so.
    again = session.restore(1)
    assert again.not_restorable == ["big"]
