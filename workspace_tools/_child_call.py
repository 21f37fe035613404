"""The execute stage of a call in another process (a sandbox's child, a fresh interpreter):
what :func:`execute_in_child` needs is all this module imports (the tool model), so that a
process that runs only calls (a sandbox's warm worker) does not import the rest of the
package; the workspace room comes with a call that carries a workspace."""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from workspace_tools._output import ToolOutput
from workspace_tools._tool import ToolContext

if TYPE_CHECKING:
    # Named in annotations only: a call that carries a workspace has its class imported
    # with it (the worker holds it), so that a tool without one runs in a worker that
    # never imports the workspace room (the ignore rules, the walker, git, re2).
    from workspace_tools.workspace._workspace import FileChanges, FileSnapshot, Workspace

#: Arguments as ``portable_args`` sends them: ``(model, values, fields set)``.
PortableArgs = tuple[type[BaseModel], dict[str, Any], set[str]]

#: A :class:`ToolState`'s ``(restore, changes, snapshot)`` as a sandboxed call carries it.
CarriedState = tuple[Callable[[Any], None], Callable[[Any], Any], Any]

#: Types whose instances are never awaitable: a tool's value of one of them (text, a
#: :class:`ToolOutput`: the usual kinds) skips ``inspect.isawaitable``'s walk through the
#: abstract base classes, which in a sandbox's fresh child writes (and so copies from its
#: warm worker) about 40 pages.
_NEVER_AWAITABLE = frozenset(
    {type(None), bool, int, float, str, bytes, tuple, list, dict, ToolOutput}
)


def execute_in_child(
    execute: Any,
    args: BaseModel | PortableArgs,
    call_id: str,
    tool_name: str,
    timing: tuple[float | None, float | None] = (None, None),
    workspace: Workspace | None = None,
    files: FileSnapshot | None = None,
    state: CarriedState | None = None,
    runner: Any = None,
    left: float | None = None,
) -> Any:
    """Run a tool's ``execute`` in another process (a sandbox's child, a fresh
    interpreter) and return ``(value, (file changes, state changes))``: with a context
    nobody listens to (a sandboxed call reports no updates), the call's ``(deadline,
    timeout)`` and ``workspace`` (arrived as its settings) holding the hashes ``files``
    (:meth:`Workspace.snapshot_files`); ``state``, a custom tool's :class:`ToolState`
    as carried; ``runner``, its :attr:`Tool.runner`; ``left``, the seconds of the call's
    timeout left when the child took it (its deadline counts from here, not from before a
    worker started for it). The context is made here, so that
    only primitives, the arguments and the workspace's settings cross the process
    boundary. ``args`` may come as :func:`portable_args` sends them."""
    if isinstance(args, tuple):
        model, values, fields_set = args
        args = model.model_construct(fields_set, **values)  # validated by the caller
    if workspace is not None and files is not None:
        workspace.restore_files(files)
    if state is not None:
        state[0](state[2])
    deadline, timeout = timing
    if left is not None:
        deadline = time.monotonic() + left
    context = ToolContext(
        call_id, tool_name, deadline=deadline, timeout=timeout, workspace=workspace, runner=runner
    )
    value = execute(args, context)
    if type(value) not in _NEVER_AWAITABLE and inspect.isawaitable(value):
        # Only an async tool needs the event loop the child starts for an awaitable.
        return _with_changes(value, workspace, files, state)
    return value, _changes(workspace, files, state)


async def _with_changes(
    value: Awaitable[Any],
    workspace: Workspace | None,
    files: FileSnapshot | None,
    state: CarriedState | None,
) -> tuple[Any, Any]:
    return await value, _changes(workspace, files, state)


def _changes(
    workspace: Workspace | None, files: FileSnapshot | None, state: CarriedState | None
) -> tuple[FileChanges | None, Any]:
    carried = None if workspace is None or files is None else workspace.file_changes(files)
    return carried, None if state is None else state[1](state[2])
