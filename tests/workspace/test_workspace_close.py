"""Workspace.close(), also as the end of a ``with`` block: what the tools kept with the
workspace that holds a process or a watch is closed, and made again on later use."""

from __future__ import annotations

from pathlib import Path

from workspace_tools import Workspace


class _Held:
    """Stands in for grep's searchers or warm index: something with a ``close``."""

    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def test_a_workspace_in_a_with_block_closes_what_its_tools_kept(tmp_path: Path) -> None:
    held = _Held()
    with Workspace(tmp_path) as workspace:
        assert workspace.kept("searchers", lambda: held) is held
        assert held.closed == 0
    assert held.closed == 1
    again = workspace.kept("searchers", _Held)
    assert again is not held and again.closed == 0
