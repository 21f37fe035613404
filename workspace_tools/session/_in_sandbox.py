"""Running a call in a sandbox's child: what crosses (the tool's ``execute``, arguments any
process can import, the named files' hashes, the tool's state), the in-process locks held
around it, and the call's timeout held while a worker starts."""

from __future__ import annotations

import math
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from pydantic import BaseModel

from sandbox import Sandbox, UnpicklableCall
from workspace_tools._child_call import PortableArgs, execute_in_child
from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools._tool import Tool
from workspace_tools.workspace._paths import shown_path


class _PausedDeadline:
    """A call's timeout (its cancel scope's deadline) held from now until :meth:`resume`,
    then running on with the time that was left then (:attr:`left`, seconds; ``None``
    when there is no deadline or it runs again)."""

    def __init__(self, scope: anyio.CancelScope | None) -> None:
        self._scope = scope
        self.left: float | None = None
        if scope is not None and scope.deadline != math.inf:
            self.left = max(0.0, scope.deadline - anyio.current_time())
            scope.deadline = math.inf

    def resume(self) -> None:
        """Run the deadline on from now (once; later calls do nothing)."""
        if self._scope is not None and self.left is not None:
            self._scope.deadline = anyio.current_time() + self.left
            self._scope = None


async def call_in_sandbox(
    sandbox: Sandbox,
    tool: Tool[Any],
    args: BaseModel,
    call_id: str,
    timing: tuple[float | None, float | None] = (None, None),
    scope: anyio.CancelScope | None = None,
) -> Any:
    """Run ``tool.execute`` in a child of ``sandbox`` (no updates) and return its value.

    ``scope``: the cancel scope of the call's timeout, whose deadline is held while the
    sandbox starts a worker for the call and runs on, with the time that was left, from
    when a child took it (the child's deadline likewise): the timeout counts the call,
    not a worker's start (which ``SandboxLimits.start_seconds`` bounds).

    ``timing``: the call's ``(deadline, timeout)`` for the child's :class:`ToolContext`
    (``time.monotonic()`` is one clock for every process of the host).

    What crosses: ``execute`` (a module-level function by reference, as its name; a
    custom tool's closure by value, with what it captures: ``Sandbox.call``),
    the validated arguments (an argument model made for the workspace's options, which no
    other process can import, as the values of the nearest model that it can:
    :func:`portable_args`) and :attr:`Tool.workspace` as its settings, with the content
    hashes of the files the call names (:attr:`Tool.paths`,
    :meth:`Workspace.snapshot_files`); what comes back: the value and the hashes the call
    changed, applied to the workspace here. The locks the call takes in process
    (:attr:`Tool.locks_paths`) are held here around it. A tool with :attr:`Tool.state`
    carries that state in and out too. A :attr:`Tool.stateless` tool's calls may share
    one long-lived confined process (``Sandbox.call(..., reuse_process=True)``); the
    hashes restored there each call replace the previous call's.

    Raises:
        Whatever the call raised in the child; :class:`sandbox.SandboxError` when the
        child died; :class:`sandbox.UnpicklableCall` naming the tool and what of it does
        not pickle (its ``execute`` a closure over a lock, its state, its runner).
    """
    workspace, state = tool.workspace, tool.state
    reals: list[Path] = []
    locks: list[threading.Lock] = []
    if workspace is not None and tool.paths is not None:
        reals = workspace.named_files(tool.paths(args))
        if not tool.read_only:
            _refuse_kept(sandbox, workspace.root, reals)
        if tool.locks_paths:
            locks = [workspace.file_states.lock(real) for real in reals]
    if state is not None and state.lock is not None:
        lock = state.lock(args)
        locks += [] if lock is None else [lock]
    held: list[threading.Lock] = []
    try:
        for lock in locks:
            await _acquire(lock, held)
        files = None if workspace is None else workspace.snapshot_files(reals)
        before = None
        if state is not None:
            before = state.snapshot() if state.snapshot_for is None else state.snapshot_for(args)
        paused = _PausedDeadline(scope)
        try:
            value, changes = await sandbox.call(
                execute_in_child,
                # By name, so that what cannot be pickled is named by it.
                execute=tool.execute,
                args=portable_args(args),
                call_id=call_id,
                tool_name=tool.name,
                timing=timing,
                workspace=workspace,
                files=files,
                state=None if state is None else (state.restore, state.changes, before),
                runner=tool.runner,
                left=paused.left,
                reuse_process=tool.stateless,
                on_taken=paused.resume,
            )
        except UnpicklableCall as exc:
            raise exc.about(f"the tool {tool.name!r}") from None
        finally:
            paused.resume()
        file_changes, state_changes = changes
        if workspace is not None and file_changes is not None:
            workspace.apply_file_changes(file_changes)
        if state is not None:
            state.apply(state_changes)
        return value
    finally:
        for lock in reversed(held):
            lock.release()


def _refuse_kept(sandbox: Sandbox, root: Path, reals: list[Path]) -> None:
    """Refuse a writing call naming a path the sandbox keeps from its children (a host
    exec path such as ``.envrc`` or ``.git``, a denied one): the child would fail on one
    that exists, and one it created would be set aside after it (``NAME.sandbox-blocked``)
    while its result said it was written.

    Raises:
        ToolError: ``PERMISSION_DENIED`` naming the path.
    """
    confinement = sandbox.confinement
    kept = (*confinement.read_only, *confinement.read_denied)
    for real in reals:
        text = str(real)
        for path in kept:
            if text == path or text.startswith(path.rstrip("/") + "/"):
                try:
                    shown = shown_path(real.relative_to(root).as_posix())
                except ValueError:
                    shown = shown_path(text)
                raise ToolError(
                    f"{shown} is kept from tools and commands in the sandbox (tools on the "
                    "host, such as git, direnv or an editor, run what it holds), so it was "
                    "not written; leave the change to the user",
                    ErrorCode.PERMISSION_DENIED,
                )


async def _acquire(lock: threading.Lock, held: list[threading.Lock]) -> None:
    """Take ``lock`` without blocking the event loop; ``held`` records that it was taken,
    also when a cancellation arrives just after (the waiting thread is not abandoned)."""
    if lock.acquire(blocking=False):
        held.append(lock)
        return

    def take() -> None:
        lock.acquire()
        held.append(lock)

    await anyio.to_thread.run_sync(take)


def portable_args(args: BaseModel) -> BaseModel | PortableArgs:
    """``args`` as they can reach a process that imports what a call names (a sandbox's
    worker forked by its spawn server): as they are when their model is importable, else
    (a model made for a workspace's options, ``create_model``, with its base's fields) as
    the model's nearest importable base with the validated values, rebuilt by
    :func:`execute_in_child`."""
    model = type(args)
    if _importable(model):
        return args
    base = next((cls for cls in model.__mro__[1:] if _importable(cls)), None)
    if base is None or not issubclass(base, BaseModel):
        return args
    if base.model_fields.keys() != model.model_fields.keys():
        return args  # more than defaults and bounds changed: it goes as it is, or not at all
    return base, dict(args.__dict__), set(args.model_fields_set)


def _importable(cls: type) -> bool:
    module = sys.modules.get(cls.__module__)
    return module is not None and getattr(module, cls.__qualname__, None) is cls
