"""What a file tool's call carries into and out of a sandbox child: the content hashes of
the files it names (so that staleness checks see every read and write) and the lock of the
file it changes (so that concurrent calls on one file still run one after another)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from workspace_tools._errors import ToolError
from workspace_tools._tool import ToolState
from workspace_tools.workspace import Workspace

#: What crosses into the child: real path -> content hash, and the real paths those were
#: looked up for, as text (it pickles faster than a Path; ``None``: the whole table).
Shipped = tuple[dict[str, bytes], list[str] | None]


def file_tool_state(
    workspace: Workspace,
    *,
    locks_file: bool,
    paths: Callable[[Any], Iterable[str]] | None = None,
) -> ToolState:
    """The :class:`ToolState` of a tool over ``workspace`` whose calls name files.

    Args:
        locks_file: its calls take the lock of the file ``args.path`` (write_file,
            edit_file).
        paths: the path arguments a call with ``args`` names (default: ``args.path``);
            a call carries the hashes of those files only. A path that does not resolve
            is left out: the call itself reports it.
    """
    states = workspace.file_states
    named = paths if paths is not None else _path_argument

    def resolved(path: str) -> Path | None:
        try:
            return workspace.resolve(path).real
        except ToolError:
            return None

    def lock(args: Any) -> threading.Lock | None:
        real = resolved(args.path)
        return None if real is None else states.lock(real)

    def snapshot() -> Shipped:
        return states.snapshot(), None

    def snapshot_for(args: Any) -> Shipped:
        reals = [real for real in map(resolved, named(args)) if real is not None]
        return states.snapshot(reals), [str(real) for real in reals]

    def restore(shipped: Shipped) -> None:
        states.restore(*shipped)

    def changes(shipped: Shipped) -> tuple[dict[str, bytes], list[str]]:
        return states.changes(shipped[0])

    return ToolState(
        snapshot=snapshot,
        restore=restore,
        changes=changes,
        apply=states.apply,
        lock=lock if locks_file else None,
        snapshot_for=snapshot_for,
    )


def _path_argument(args: Any) -> Iterable[str]:
    return (args.path,)
