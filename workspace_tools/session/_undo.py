"""Undo for a model, and checkpoints around calls made without a session.

:func:`undo_tool` is the ``undo`` tool a session or :class:`CheckpointedCalls` offers a
model; :class:`CheckpointedCalls` is the call function an MCP server without a policy runs
calls through, taking a checkpoint around each writing call as a session does.
:class:`UndoingTool` is a tool some of whose calls are undos of one path (the older
Anthropic text editor's ``undo_edit``): both run those through the checkpoints.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Collection, Iterable
from functools import partial
from typing import Any, Generic

import anyio
import anyio.to_thread
from pydantic import BaseModel, Field
from pydantic_core import to_jsonable_python

from sandbox import Sandbox
from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools._output import (
    TextPart,
    ToolContent,
    ToolOutput,
    ToolPresentation,
    tool_output,
)
from workspace_tools._result import ToolResult
from workspace_tools._tool import ArgsT, NamedPaths, Tool, ToolContext, tool
from workspace_tools.session._checkpoints import ChangedFile, Checkpoints, RestoreResult
from workspace_tools.session._pipeline import (
    Call,
    OnUpdate,
    invoke_tool,
    preempt,
    prepare,
    run_call,
)
from workspace_tools.workspace._files import os_error

logger = logging.getLogger("workspace_tools")


def with_changed_files(details: Any, rows: list[ChangedFile]) -> dict[str, Any]:
    """A result's ``details`` as JSON with ``changed_files`` added (a tool's details that
    are not an object are kept under ``details``)."""
    base = {} if details is None else to_jsonable_python(details)
    if not isinstance(base, dict):
        base = {"details": base}
    return {**base, "changed_files": [row.model_dump() for row in rows]}


class UndoArgs(BaseModel):
    """Arguments of the ``undo`` tool."""

    paths: list[str] | None = Field(
        None,
        description="Undo only these paths (a directory stands for everything below it); "
        "default: every file the last step changed",
    )
    dry_run: bool = Field(
        False, description="Show the unified diff the undo would apply; change nothing"
    )
    overwrite: bool = Field(
        False,
        description="Also put back files someone else changed since the step (without it, "
        "such files make the undo refuse and are listed)",
    )


UNDO_DESCRIPTION = (
    "Undo the last step of this session that changed files, whichever tool made it "
    "(run_command included): files it changed or deleted come back as they were before it, "
    "with their permissions; files it created are removed. Call it again to undo the step "
    "before. Files changed since by someone else are not overwritten unless asked."
)


def undo_tool(
    undo: Callable[[UndoArgs], RestoreResult], paths: NamedPaths | None = None
) -> Tool[UndoArgs]:
    """The ``undo`` tool a session offers a model (:meth:`ToolSession.undo_tool`).

    ``undo`` runs the undo for the validated arguments; ``paths`` names the files a call
    would put back (:attr:`Tool.paths`), so policy path rules see them. The result's content is
    :meth:`RestoreResult.model_text`, its details the :class:`RestoreResult` as JSON with
    ``changed_files``. A refused undo (conflicts) is a ``STALE_FILE`` error listing them.
    """

    def execute(args: UndoArgs, context: ToolContext) -> ToolOutput:
        result = undo(args)
        if result.conflicts and not result.applied and not result.dry_run:
            raise ToolError(result.model_text(), ErrorCode.STALE_FILE)
        details = with_changed_files(result, result.files if result.applied else [])
        return tool_output(result.model_text(), details=details)

    return tool(
        name="undo",
        description=UNDO_DESCRIPTION,
        parameters=UndoArgs,
        execute=execute,
        presentation=ToolPresentation(label="Undo", icon="undo"),
        paths=paths,
    )


RestorePath = Callable[[str, bool], RestoreResult]
"""``restore(rel, dry_run)``: bring the path ``rel`` (relative to the root, ``/``-separated)
back to how it was before the last step that changed it and is not undone yet (a
:meth:`Checkpoints.restore` of that step limited to the path; ``dry_run`` changes nothing
and carries the diff). ``step`` is ``None`` in the result when no such step exists."""


def _never(args: Any) -> bool:
    return False


@dataclasses.dataclass(frozen=True)
class UndoingTool(Tool[ArgsT], Generic[ArgsT]):
    """A tool some of whose calls undo the last change to one path, such as the older
    Anthropic text editor's ``undo_edit``. Build one with :func:`undoing_tool`.

    Attributes:
        undoes: whether a call (its validated arguments) is such an undo.
        undo: ``undo(args, context, restore)`` runs that call with a :data:`RestorePath`
            over the caller's checkpoints; it returns content or a ``ToolOutput`` and
            raises :class:`ToolError`, as ``execute`` does.

    Where checkpoints are taken (a :class:`ToolSession` with ``checkpoints``,
    :class:`CheckpointedCalls`), an undo call runs ``undo`` in this process (never in a
    sandbox child: the checkpoints live here) and takes no checkpoint of its own, as the
    ``undo`` tool; its step lists what it restored in ``changed_files``. Anywhere else
    every call runs ``execute``.
    """

    undoes: Callable[[Any], bool] = _never
    undo: Callable[[Any, ToolContext, RestorePath], object] | None = None


def undoing_tool(
    base: Tool[ArgsT],
    *,
    undoes: Callable[[ArgsT], bool],
    undo: Callable[[ArgsT, ToolContext, RestorePath], object],
) -> UndoingTool[ArgsT]:
    """``base`` as an :class:`UndoingTool` whose calls with ``undoes(args)`` run ``undo``
    where checkpoints are taken."""
    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
    return UndoingTool(**fields, undoes=undoes, undo=undo)


def undo_call(call: Call, restore: RestorePath) -> Call | None:
    """For a valid call of an :class:`UndoingTool` that is an undo, the same call bound to
    run its ``undo`` with ``restore``, in process; ``None`` for any other call."""
    tool = call.tool
    if not isinstance(tool, UndoingTool) or tool.undo is None or call.args is None:
        return None
    if not tool.undoes(call.args):
        return None
    run = partial(_run_undo, tool.undo, restore)
    bound = dataclasses.replace(tool, execute=run, sandbox=None, state=None)
    return dataclasses.replace(call, tool=bound)


def _run_undo(
    undo: Callable[[Any, ToolContext, RestorePath], object],
    restore: RestorePath,
    args: Any,
    context: ToolContext,
) -> object:
    return undo(args, context, restore)


def last_change(checkpoints: Checkpoints, rel: str) -> int | None:
    """The last step that changed ``rel`` (relative, ``/``-separated) and whose change to
    it is not undone yet, or ``None``."""
    for checkpoint in reversed(checkpoints.steps):
        if rel in checkpoint.changes and rel not in checkpoint.undone:
            return checkpoint.step
    return None


async def checkpoint_before(checkpoints: Checkpoints) -> ToolError | None:
    """Take the checkpoint before a writing call in a worker thread; the error to report
    instead of running the call when it cannot be taken (its changes could not be undone)."""
    try:
        await anyio.to_thread.run_sync(checkpoints.before)
    except OSError as exc:
        error = _named_error(exc)
        return ToolError(
            f"Not run: the checkpoint before this call failed: {error.message}", error.code
        )
    return None


def _named_error(exc: OSError) -> ToolError:
    """The error of a failed checkpoint as the model reads it."""
    # The workspace's files are named relative to its root; the store's by absolute path.
    named = isinstance(exc.filename, str) and not os.path.isabs(exc.filename)
    return os_error(exc, exc.filename if named else "the checkpoint store")


@dataclasses.dataclass(frozen=True)
class CheckpointLost:
    """The checkpoint after a step failed: nothing of what the step changed was recorded,
    so undo cannot put it back. ``reason``: what failed, in words for the model."""

    reason: str


async def checkpoint_after(
    checkpoints: Checkpoints, step: int
) -> list[ChangedFile] | CheckpointLost | None:
    """Record what step ``step`` changed, in a worker thread and shielded from
    cancellation (a cancelled command may have changed files too). A
    :class:`CheckpointLost` when the workspace cannot be walked (logged too, with the
    traceback); ``None`` when the store was removed meanwhile: the session or server
    closed while the step ran, which ends the step's call itself."""
    if checkpoints.store.removed:
        return None
    with anyio.CancelScope(shield=True):
        try:
            return await anyio.to_thread.run_sync(checkpoints.after, step)
        except OSError as exc:
            # A close during the walk removes the store under it: not a failure.
            if checkpoints.store.removed:
                return None
            logger.warning("the checkpoint after step %d failed", step, exc_info=True)
            return CheckpointLost(_named_error(exc).message)


def with_undo_lost(result: ToolResult, lost: CheckpointLost) -> ToolResult:
    """``result`` telling the model that undo is not available for its step: a note at the
    end of its error, or in its content (a string gets a paragraph, an object a ``note``,
    or its ``notes`` list an entry; other content is kept under ``content``), and
    ``undo_unavailable`` (the reason) in its details."""
    note = (
        f"Undo is not available for this step: the checkpoint after it failed "
        f"({lost.reason}), so what it changed cannot be undone."
    )
    if result.error is not None:
        result.error = f"{result.error}\n{note}"
    else:
        result.content = _with_note(result.content, note)
    base = {} if result.details is None else to_jsonable_python(result.details)
    if not isinstance(base, dict):
        base = {"details": base}
    result.details = {**base, "undo_unavailable": lost.reason}
    return result


def _with_note(content: Any, note: str) -> Any:
    if content is None or content == "":
        return note
    if isinstance(content, str):
        return f"{content}\n\n{note}"
    if isinstance(content, ToolContent):
        return ToolContent(parts=[*content.parts, TextPart(text=note)])
    data = to_jsonable_python(content)
    if not isinstance(data, dict):
        return {"content": data, "note": note}
    if isinstance(data.get("notes"), list):
        return {**data, "notes": [*data["notes"], note]}
    if isinstance(data.get("note"), str) and data["note"]:
        return {**data, "note": f"{data['note']}. {note}"}
    return {**data, "note": note}


def sandbox_protected(root: str, sandboxes: Iterable[object]) -> list[str]:
    """The paths, relative to the workspace ``root``, that any of ``sandboxes`` (those that
    are a :class:`Sandbox`; ``None`` and a plain runner are skipped) keeps from its
    commands: ``Sandbox.host_exec_paths`` and what git's configuration runs there, in path
    order.

    A restore runs outside the sandbox, so it leaves these as they are, and what the
    sandbox set aside of them (see :meth:`Checkpoints.restore`'s ``protected``): the
    persistent shell holds a protected path it created under its own name until it ends,
    so a checkpoint between can hold it, and putting it back would hand the host's tools
    (direnv, git, an editor) what a sandboxed command wrote."""
    found: set[str] = set()
    prefix = root.rstrip("/") + "/"
    for box in {id(box): box for box in sandboxes}.values():
        if not isinstance(box, Sandbox):
            continue
        if root not in box.confinement.writable:
            box = box.confined_to(root)
        found.update(
            path[len(prefix) :] for path in box.confinement.read_only if path.startswith(prefix)
        )
    return sorted(found)


class CheckpointedCalls:
    """A call function (``async (tool, arguments, call_id, on_update) -> ToolResult``, an
    adapter's ``CallFunction``) that takes a checkpoint around every call of a tool that
    can write, without a session: what an MCP server without a policy serves.

    Args:
        checkpoints: where the checkpoints go.
        sandbox: as for :func:`invoke_tool`, for every call.
        protected: what a restore leaves as it is (see :func:`sandbox_protected`), asked
            at each restore; by default what ``sandbox`` protects.

    Calls of writing tools (and of :attr:`undo_tool`) run one at a time, numbered from 0 as
    the checkpoints' steps (what a waiting call does at once, :attr:`Tool.preempt`, it does
    before it waits); read-only calls run beside them unchecked, as they change nothing.
    A writing call's result gets ``changed_files`` in its details.
    """

    def __init__(
        self,
        checkpoints: Checkpoints,
        *,
        sandbox: Any = None,
        protected: Callable[[], Collection[str]] | None = None,
    ) -> None:
        self.checkpoints = checkpoints
        self._sandbox = sandbox
        if protected is None:
            root = str(checkpoints.workspace.root)
            protected = partial(sandbox_protected, root, [sandbox])
        self._protected = protected
        self._lock: anyio.Lock | None = None
        self._count = 0
        self.undo_tool = undo_tool(self._undo)
        # What the running undo call of an UndoingTool restored (set by _restore_path).
        self._restored: list[ChangedFile] = []

    def _restore_path(self, rel: str, dry_run: bool) -> RestoreResult:
        step = last_change(self.checkpoints, rel)
        if step is None:
            return RestoreResult(step=None, dry_run=dry_run)
        result = self.checkpoints.restore(step, [rel], dry_run=dry_run, protected=self._protected())
        if result.applied:
            self._restored = result.files
        return result

    def _undo(self, args: UndoArgs) -> RestoreResult:
        last = self.checkpoints.last_step()
        if last is None:
            return RestoreResult(step=None, dry_run=args.dry_run)
        return self.checkpoints.restore(
            last,
            args.paths,
            dry_run=args.dry_run,
            overwrite=args.overwrite,
            protected=self._protected(),
        )

    async def __call__(
        self,
        tool: Tool[Any],
        arguments: Any,
        call_id: str,
        on_update: OnUpdate | None,
    ) -> ToolResult:
        if tool.read_only:
            return await invoke_tool(
                tool, arguments, call_id=call_id, on_update=on_update, sandbox=self._sandbox
            )
        if self._lock is None:
            self._lock = anyio.Lock()
        if self._lock.locked():
            preempt(tool, arguments)  # a shell restart stops the command ahead of it
        async with self._lock:
            if tool is self.undo_tool:
                # Changes the checkpoints' own state: in process, never in a sandbox child.
                return await invoke_tool(tool, arguments, call_id=call_id, on_update=on_update)
            if isinstance(tool, UndoingTool):
                undoing = undo_call(prepare(tool, arguments, call_id), self._restore_path)
                if undoing is not None:
                    self._restored = []
                    result = await run_call(undoing, on_update=on_update)
                    if self._restored:
                        result.details = with_changed_files(result.details, self._restored)
                    return result
            refusal = await checkpoint_before(self.checkpoints)
            if refusal is not None:
                return ToolResult(
                    call_id=call_id,
                    name=tool.name,
                    arguments=arguments,
                    error=refusal.message,
                    error_code=refusal.code,
                )
            step, self._count = self._count, self._count + 1
            try:
                result = await invoke_tool(
                    tool, arguments, call_id=call_id, on_update=on_update, sandbox=self._sandbox
                )
            finally:
                rows = await checkpoint_after(self.checkpoints, step)
            if isinstance(rows, CheckpointLost):
                return with_undo_lost(result, rows)
            if rows is not None:
                result.details = with_changed_files(result.details, rows)
            return result
