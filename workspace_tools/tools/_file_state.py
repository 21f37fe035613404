"""What a file tool's call carries into and out of a sandbox child: the workspace's content
hashes (so that staleness checks see every read and write) and the lock of the file it
changes (so that concurrent calls on one file still run one after another)."""

from __future__ import annotations

import threading
from typing import Any

from workspace_tools._errors import ToolError
from workspace_tools._tool import ToolState
from workspace_tools.workspace import Workspace


def file_tool_state(workspace: Workspace, *, locks_file: bool) -> ToolState:
    """The :class:`ToolState` of a tool over ``workspace`` whose arguments name a ``path``;
    ``locks_file``: its calls take that file's lock (write_file, edit_file)."""
    states = workspace.file_states

    def lock(args: Any) -> threading.Lock | None:
        try:
            resolved = workspace.resolve(args.path)
        except ToolError:
            return None  # the call itself reports the bad path
        return states.lock(resolved.real)

    return ToolState(
        snapshot=states.snapshot,
        restore=states.restore,
        changes=states.changes,
        apply=states.apply,
        lock=lock if locks_file else None,
    )
