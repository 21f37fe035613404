"""A session of calls for one agent conversation: policy, confirmation, cache and the record."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import anyio
import anyio.to_thread
from pydantic import BaseModel

from sandbox import COMMAND_OWNER, Sandbox
from workspace_tools._errors import ErrorCode, ToolError, echoed
from workspace_tools._output import ToolPresentation
from workspace_tools._result import DEFAULT_MAX_RESULT_LENGTH, ToolResult
from workspace_tools._tool import CacheKey, Tool
from workspace_tools.session._cache import CachedResult, ResultCache
from workspace_tools.session._call_errors import call_os_error
from workspace_tools.session._checkpoints import ChangedFile, Checkpoints, RestoreResult
from workspace_tools.session._confirm import ConfirmationRequest, ConfirmCallback, ask
from workspace_tools.session._own_loop import run_on_own_loop
from workspace_tools.session._pipeline import (
    Call,
    OnUpdate,
    check_on_update,
    new_call_id,
    not_started,
    parse_arguments,
    preempt,
    prepare,
    run_call,
)
from workspace_tools.session._policy import ALLOW_ALL, Policy, PolicyDecision, check_policy
from workspace_tools.session._steps import (
    CacheEvent,
    CallEvent,
    ConfirmEvent,
    PolicyEvent,
    SessionRecord,
    SkipReason,
    Step,
    StepSummary,
    ToolRunEvent,
    TraceEvent,
)
from workspace_tools.session._undo import (
    CheckpointLost,
    UndoArgs,
    checkpoint_after,
    checkpoint_before,
    last_change,
    sandbox_protected,
    undo_call,
    undo_tool,
    with_changed_files,
    with_undo_lost,
)
from workspace_tools.tools import (
    SHELL_TOOL_NAMES,
    ShellSession,
    shell_tools,
    start_ahead,
    workspace_tools,
)
from workspace_tools.workspace import Workspace, as_workspace

logger = logging.getLogger("workspace_tools")


def _carried(tools: Sequence[Tool[Any]]) -> Workspace | None:
    """The workspace the tools carry (``tool(..., workspace=...)``) when they carry exactly one
    (one object): a session over them works in it as if it were given as ``workspace``."""
    carried = {id(t.workspace): t.workspace for t in tools if t.workspace is not None}
    return next(iter(carried.values())) if len(carried) == 1 else None


class ToolSession:
    """Runs one conversation's tool calls one after another and keeps their record.

    Args:
        tools: a :class:`Workspace` or root directory (the session then runs the eight
            workspace tools), or a sequence of tools.
        workspace: the workspace the tools work in, when ``tools`` is a sequence; policy
            path globs and cache fingerprints use it. Left out, it is the one
            :class:`Workspace` the tools carry (``tool(..., workspace=...)``, every built-in
            tool, the text editor), if they carry exactly one.
        policy: which calls run (:class:`Policy`); allow-all by default.
        confirm: called for calls the policy marks ``ask``, with a
            :class:`ConfirmationRequest`; returns a :class:`Confirmation` or a bool, sync or
            async (a sync callback runs in a worker thread, so it may block on a prompt).
            Without one, an ``ask`` is a denial. A callback that raises declines the call.
        fingerprints: per tool name, a :data:`CacheKey` (a function of the validated
            arguments returning a fingerprint of what the call reads; ``None``: do not
            cache that call), over the tool's own :attr:`Tool.cache_key`. Only read-only
            tools with one are cached; ``read_file``, ``list_files``, ``glob`` and ``grep``
            declare theirs. A call of a tool that :attr:`Tool.invalidates` (by default any
            tool that is not read-only) forgets every cached result.
        cache: ``False`` turns the cache off.
        timeout, max_result_length, sandbox: as for :func:`invoke_tool`, for every call.
            The session runs its calls in a copy of ``sandbox`` (``Sandbox.copy``: the same
            settings, processes of its own), whose spawn server and first warm worker
            start at once in the background (a call is sure to come), and stop on
            :meth:`close`.
        shell: ``True`` adds the shell tools (``shell``, ``start_process``,
            ``read_process_output``, ``write_process_stdin``, ``stop_process``,
            ``list_processes``) over a :class:`ShellSession` of the workspace, whose shell
            and processes run in ``sandbox`` when one is given; or a :class:`ShellSession`
            to use. Either way the session owns it: :meth:`close` ends every process it
            started. Shell tool calls run in this process (what they start runs in the
            sandbox), never in a sandbox child.
        checkpoints: ``True`` takes a checkpoint around every call of a tool that can write
            (not ``read_only``; ``run_command`` included), so that :meth:`restore` and
            :meth:`undo` can bring files back and each such step lists its
            ``changed_files``; or a :class:`~workspace_tools.session._checkpoints.Checkpoints`
            to choose where the content store lives, whether it is kept and the size cap.
            With a sequence of tools, give them and the session the same :class:`Workspace`,
            so that files a restore brings back count as read by ``edit_file``.
            Off by default (the CLI's MCP server turns it on). The store is removed by
            :meth:`close` (and so on leaving a ``with`` block), unless kept; otherwise when
            the session is collected.

    Raises:
        TypeError: ``workspace`` given together with a workspace as ``tools``.
        ValueError: two tools share a name, the policy names a tool or an argument these
            tools do not have (see :func:`check_policy`), or checkpoints are asked for
            without a workspace.
        NotADirectoryError: the workspace root does not exist.

    Calls are serialised with a lock: a concurrent :meth:`call` waits for the one before it,
    having done what its tool does at once (:attr:`Tool.preempt`: a shell restart stops the
    command it would wait behind) when the policy allows it outright. Use either
    :meth:`call` (in one event loop) or :meth:`call_sync`, not both at once.
    """

    def __init__(
        self,
        tools: Workspace | str | os.PathLike[str] | Sequence[Tool[Any]],
        *,
        workspace: Workspace | str | os.PathLike[str] | None = None,
        policy: Policy = ALLOW_ALL,
        confirm: ConfirmCallback | None = None,
        fingerprints: Mapping[str, CacheKey] | None = None,
        cache: bool = True,
        timeout: float | None = None,
        max_result_length: int | None = None,
        sandbox: Any = None,
        shell: bool | ShellSession = False,
        checkpoints: bool | Checkpoints = False,
    ) -> None:
        if isinstance(tools, (Workspace, str, os.PathLike)):
            if workspace is not None:
                raise TypeError("workspace= applies when tools is a sequence of tools")
            self.workspace: Workspace | None = as_workspace(tools)
            tool_list = workspace_tools(self.workspace)
        else:
            tool_list = list(tools)
            self.workspace = (
                as_workspace(workspace) if workspace is not None else _carried(tool_list)
            )
        if isinstance(sandbox, Sandbox):
            # The session's own spawn server and workers, with the sandbox's settings:
            # started ahead below, stopped by close().
            sandbox = sandbox.copy()
        self._sandbox: Sandbox | None = sandbox
        self.shell: ShellSession | None = None
        if shell is not False:
            if isinstance(shell, ShellSession):
                self.shell = shell
            elif self.workspace is None:
                raise TypeError(
                    "shell=True needs the session's workspace: pass workspace=, the Workspace "
                    "the tools were built with (these tools carry none, or more than one)"
                )
            else:
                self.shell = ShellSession(self.workspace, sandbox=sandbox)
            tool_list += shell_tools(self.shell)
        names = [t.name for t in tool_list]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"tool names must be unique; given more than once: {twice}")
        self.tools: tuple[Tool[Any], ...] = tuple(tool_list)
        self._by_name: dict[str, Tool[Any]] = {t.name: t for t in tool_list}
        check_policy(policy, tool_list)
        self.checkpoints = self._checkpoints(checkpoints)
        # Not among the session's tools: a rule covers it as a tool that is not read-only.
        self._undo_tool = (
            undo_tool(self._undo_call, self._undo_paths) if self.checkpoints is not None else None
        )
        self.policy = policy
        self.confirm = confirm
        self._cache = ResultCache(fingerprints or {}, enabled=cache)
        self._max_result_length = max_result_length or DEFAULT_MAX_RESULT_LENGTH
        # The execution stage, the same as invoke_tool's.
        self._execute = partial(
            run_call, timeout=timeout, max_result_length=self._max_result_length, sandbox=sandbox
        )
        # The shell tools hold their processes in this process: never run in a child.
        self._in_process = partial(
            run_call, timeout=timeout, max_result_length=self._max_result_length
        )
        self._owned = frozenset(SHELL_TOOL_NAMES) if self.shell is not None else frozenset()
        if isinstance(sandbox, Sandbox):
            start_ahead(sandbox, [t for t in tool_list if t.name not in self._owned])
        self._record = SessionRecord()
        #: Set around each call (COMMAND_OWNER): the commands the session's calls start,
        #: which close() stops, and no other caller's of the same tools.
        self._commands = object()
        self._started = time.perf_counter()
        self._lock: anyio.Lock | None = None
        self._sync_lock = threading.Lock()
        #: How many times close() ran: a call that waited in line across one does not run.
        self._closes = 0
        # The changed files of the step being recorded: (step index, rows).
        self._changes: tuple[int, list[ChangedFile]] | None = None

    def _checkpoints(self, given: bool | Checkpoints) -> Checkpoints | None:
        if given is False:
            return None
        if self.workspace is None:
            raise ValueError(
                "checkpoints need the session's workspace: pass workspace=, the Workspace the "
                "tools were built with (these tools carry none, or more than one)"
            )
        return given if isinstance(given, Checkpoints) else Checkpoints(self.workspace)

    def close(self) -> None:
        """End what the session owns: its :class:`ShellSession` (the shell and every
        background process, each whole tree, and the output area), its checkpoint store
        (unless kept: ``Checkpoints(..., keep=True)`` or a ``directory`` given) and the
        processes its calls run in (the spawn server and warm workers of its copy of
        ``sandbox``, and the commands its calls started through its tools' runners, such
        as run_command's: each running command's whole tree is stopped and its call ends
        with ``SANDBOX_ERROR`` and the output so far, while those another session or
        caller started through the same tools run on; calls waiting in line then end with
        ``ABORTED`` without running; a later call starts them again). Idempotent;
        the calls recorded stay readable; a writing call or a restore after it fails (its
        checkpoint cannot be taken or read)."""
        self._closes += 1
        parts = (self.shell, self.checkpoints, self._sandbox)
        closers: list[Callable[[], object]] = [p.close for p in parts if p is not None]
        # The commands its tools run through runners of their own (run_command's portable
        # level): each whole tree stopped. A runner shared with another session, or other
        # callers, stops only this session's commands.
        for runner in {id(t.runner): t.runner for t in self.tools}.values():
            ours = getattr(runner, "close_commands", None)
            close = getattr(runner, "close", None)
            if callable(ours):
                closers.append(partial(ours, self._commands))
            elif callable(close):
                closers.append(close)
        # In that order, each even when one before it raised (an ExitStack runs last first).
        with contextlib.ExitStack() as stack:
            for close in reversed(closers):
                stack.callback(close)

    def __enter__(self) -> ToolSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> ToolSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await anyio.to_thread.run_sync(self.close)

    @property
    def steps(self) -> list[Step]:
        """The step records so far (a copy)."""
        return list(self._record.steps)

    @property
    def trace(self) -> list[TraceEvent]:
        """The trace events so far (a copy)."""
        return list(self._record.trace)

    def record(self) -> SessionRecord:
        """A snapshot of the steps and trace; ``.model_dump_json()`` serialises it."""
        return self._record.model_copy(deep=True)

    def summary(self) -> list[StepSummary]:
        """The steps as rows for a list: label, detail, icon, state."""
        return self._record.summary()

    def render_summary(self) -> str:
        """The summary as terminal lines (see :meth:`SessionRecord.render`)."""
        return self._record.render()

    def invalidate_cache(self) -> None:
        """Forget every cached result (when the application knows the workspace changed in
        a way no fingerprint sees, such as a file outside it that a tool reads)."""
        self._cache.clear()

    async def call(
        self,
        tool: Tool[Any] | str,
        arguments: Any,
        call_id: str | None = None,
        on_update: OnUpdate | None = None,
        *,
        confirm: ConfirmCallback | None = None,
    ) -> ToolResult:
        """Run one call through policy, confirmation and cache; record it as a step.

        Args:
            tool: the name of the tool the model called, looked up among the session's
                tools; or a :class:`Tool`, run as given (the adapters' ``CallFunction`` form:
                ``create_server(session.tools, call=session.call)``).
            arguments: a dict, a JSON string or a model instance.
            call_id: the provider's tool-call id; a random one when omitted.
            on_update: receives the tool's progress updates (not for cached or skipped calls).
            confirm: this call's confirmation callback, over the session's (an MCP server
                binds one to the request that carries the call, to elicit from its client).

        Returns the :class:`ToolResult` whose ``model_text()`` the model reads; never raises
        for a refused or failed call, nor for a path that changes while it is checked.
        Skipped calls are error results: ``PERMISSION_DENIED`` (policy, confirmation) or
        ``INVALID_ARGUMENTS`` (missing), with ``details`` naming the skip; a policy check that
        raises skips the call too (an ``OSError`` keeps the code of its errno). A cancelled
        call is recorded as failed before the cancellation propagates.

        Raises:
            TypeError: ``on_update`` is an ``async def`` function, which would never run.
        """
        check_on_update(on_update)
        if self._lock is None:
            self._lock = anyio.Lock()
        if self._lock.locked():
            self._preempt(tool, arguments)
        closes = self._closes
        async with self._lock:
            if self._closes != closes:
                return self._closed_meanwhile(tool, arguments, call_id)
            return await self._call(tool, arguments, call_id, on_update, confirm)

    def _preempt(self, target: Tool[Any] | str, arguments: Any) -> None:
        """What a call that waits behind another does at once (:attr:`Tool.preempt`: a
        shell restart stops the command ahead of it), when the policy allows it outright."""
        tool = target if isinstance(target, Tool) else self._by_name.get(str(target))
        if tool is None:
            return

        def allowed(args: BaseModel) -> bool:
            return self.policy.decide(tool, args, self.workspace).decision == "allow"

        preempt(tool, arguments, allowed)

    def call_sync(
        self,
        tool: Tool[Any] | str,
        arguments: Any,
        call_id: str | None = None,
        on_update: OnUpdate | None = None,
        *,
        confirm: ConfirmCallback | None = None,
    ) -> ToolResult:
        """Blocking twin of :meth:`call`; runs its own event loop (Ctrl-C cancels the call,
        then raises ``KeyboardInterrupt``, as with ``invoke_tool_sync``).

        Raises:
            RuntimeError: when called from inside a running event loop's thread.
            TypeError: ``on_update`` is an ``async def`` function, which would never run.
        """
        check_on_update(on_update)
        closes = self._closes
        with self._sync_lock:
            if self._closes != closes:
                return self._closed_meanwhile(tool, arguments, call_id)
            call = partial(self._call, tool, arguments, call_id, on_update, confirm)
            return run_on_own_loop(call, no_loop=partial(not_started, tool, arguments, call_id))

    async def _call(
        self,
        target: Tool[Any] | str,
        arguments: Any,
        call_id: str | None,
        on_update: OnUpdate | None,
        confirm: ConfirmCallback | None,
    ) -> ToolResult:
        index = len(self._record.steps)
        # str(): a name from a client that does not type-check its input is still a name.
        tool = target if isinstance(target, Tool) else self._by_name.get(str(target))
        if tool is None:
            return self._unknown(index, str(target), arguments, call_id or new_call_id())
        call = prepare(tool, arguments, call_id)
        commands = COMMAND_OWNER.set(self._commands)
        try:
            return await self._run(index, call, on_update, confirm)
        except anyio.get_cancelled_exc_class():
            if len(self._record.steps) == index:
                shown = _shown(call)
                ran = any(isinstance(e, ToolRunEvent) and e.step == index for e in self.trace)
                when = "while it ran; it may have run in part" if ran else "before it ran"
                text = f"The {tool.name} call was cancelled {when}."
                result = self._error(call.call_id, tool.name, shown, text, ErrorCode.ABORTED)
                self._finish(index, tool.name, shown, result, failed=True)
            raise
        finally:
            COMMAND_OWNER.reset(commands)

    def _closed_meanwhile(
        self, target: Tool[Any] | str, arguments: Any, call_id: str | None
    ) -> ToolResult:
        """The failed step of a call that waited for the one before it while the session
        closed: it does not run (its command would start in a closed session, to run on
        to its own timeout)."""
        index = len(self._record.steps)
        name = target.name if isinstance(target, Tool) else str(target)
        call_id = call_id or new_call_id()
        self._event(CallEvent, index, call_id, tool=name, presentation=None)
        raw, _ = parse_arguments(arguments)
        message = (
            "The session was closed while this call waited for the call before it; it did not run."
        )
        result = self._error(call_id, name, raw, message, ErrorCode.ABORTED)
        return self._finish(index, name, raw, result, failed=True)

    def _unknown(self, index: int, name: str, arguments: Any, call_id: str) -> ToolResult:
        """The failed step of a call of a tool the session does not have."""
        self._event(CallEvent, index, call_id, tool=name, presentation=None)
        raw, _ = parse_arguments(arguments)
        known = ", ".join(sorted(self._by_name))
        message = f"Unknown tool {echoed(name)}; the tools are: {known}"
        result = self._error(call_id, name, raw, message, ErrorCode.INVALID_ARGUMENTS)
        return self._finish(index, name, raw, result, failed=True)

    async def _run(
        self,
        index: int,
        call: Call,
        on_update: OnUpdate | None,
        confirm: ConfirmCallback | None,
    ) -> ToolResult:
        tool, args, call_id, name = call.tool, call.args, call.call_id, call.tool.name
        self._event(CallEvent, index, call_id, tool=name, presentation=call.presentation)
        if call.missing:
            text = _missing_text(name, call.missing)
            return self._skip(
                index, tool, call.raw, call_id, "missing", None, text, call.presentation
            )
        if args is None:
            # Invalid for another reason: run_call reports it and never executes, so the
            # workspace is unchanged and the cache stays.
            result = await self._execute(call, on_update=on_update)
            return self._finish(index, name, call.raw, result, failed=True)

        dumped = _shown(call)
        try:
            decision = self.policy.decide(tool, args, self.workspace)
        except Exception as exc:
            # Fail closed: a call the policy cannot decide on does not run.
            return self._undecided(index, call, exc)
        self._event(PolicyEvent, index, call_id, decision=decision.decision, rule=decision.rule)
        if decision.decision == "deny":
            text = _denied_text(name, decision)
            return self._skip(
                index, tool, dumped, call_id, "policy", decision.rule, text, call.presentation
            )
        if decision.decision == "ask":
            request = ConfirmationRequest(
                call_id=call_id,
                tool=name,
                arguments=dumped,
                presentation=call.presentation,
                read_only=tool.read_only,
                rule=decision.rule,
            )
            refusal = await self._ask(index, tool, request, confirm or self.confirm)
            if refusal is not None:
                return refusal

        hit = self._cache.lookup(tool, args)
        if hit is not None:
            self._event(CacheEvent, index, call_id, from_step=hit.step)
            result = hit.result.model_copy(update={"call_id": call_id, "duration_ms": 0.0})
            return self._finish(index, name, dumped, result, cached=True)
        fingerprint = self._cache.fingerprint(tool, args)
        if tool.invalidates:
            # Even a failed or cancelled write or command may have changed the workspace.
            self._cache.clear()
        own = tool is self._undo_tool
        undoing = None if self.checkpoints is None else undo_call(call, self._restore_path)
        if undoing is not None:  # an UndoingTool's undo call: a restore, as the undo tool
            call, own = undoing, True
        checkpoint = self.checkpoints is not None and not tool.read_only and not own
        if checkpoint:
            refusal = await self._checkpoint_before(index, call)
            if refusal is not None:
                return refusal
        started = time.perf_counter()
        # The session's own undo and the shell tools keep their state in this process.
        execute = self._in_process if own or name in self._owned else self._execute
        try:
            result = await execute(call, on_update=on_update)
        except anyio.get_cancelled_exc_class():
            ms = (time.perf_counter() - started) * 1000
            self._event(ToolRunEvent, index, call_id, ms=ms, error_code=ErrorCode.ABORTED)
            if checkpoint:
                await self._checkpoint_after(index)
            raise
        self._event(
            ToolRunEvent, index, call_id, ms=result.duration_ms, error_code=result.error_code
        )
        if checkpoint:
            lost = await self._checkpoint_after(index)
            if lost is not None:
                result = with_undo_lost(result, lost)
        if self._changes is not None and self._changes[0] == index:
            result.details = with_changed_files(result.details, self._changes[1])
        if fingerprint is not None and not result.is_error:
            self._cache.store(tool, args, CachedResult(index, fingerprint, result))
        return self._finish(index, name, dumped, result, failed=result.is_error)

    async def _checkpoint_before(self, index: int, call: Call) -> ToolResult | None:
        """Take the checkpoint before a writing call; the failed step when it cannot be
        taken (the call does not run: its changes could not be undone)."""
        assert self.checkpoints is not None
        error = await checkpoint_before(self.checkpoints)
        if error is None:
            return None
        name, shown = call.tool.name, _shown(call)
        result = self._error(call.call_id, name, shown, error.message, error.code)
        return self._finish(index, name, shown, result, failed=True)

    async def _checkpoint_after(self, index: int) -> CheckpointLost | None:
        """Record what the step changed; what failed when the workspace cannot be walked
        (nothing is recorded, and the step's result says undo is not available)."""
        assert self.checkpoints is not None
        rows = await checkpoint_after(self.checkpoints, index)
        if isinstance(rows, CheckpointLost):
            return rows
        if rows is not None:
            self._changes = (index, rows)
        return None

    def restore(
        self,
        step: int,
        paths: Sequence[str] | None = None,
        *,
        dry_run: bool = False,
        overwrite: bool = False,
    ) -> RestoreResult:
        """Bring the files the steps from ``step`` on changed back to how they were before
        (content and mode; created files are removed, deleted ones come back).

        Args:
            step: a step index (:attr:`Step.index`); every later writing step is undone too.
            paths: only these paths, relative to the root (a directory: all below it).
            dry_run: change nothing; the result's ``diff`` is what a restore would apply.
            overwrite: also restore files changed since by someone else (conflicts).

        Returns the :class:`RestoreResult`: a restore with conflicts and without
        ``overwrite`` changes nothing and lists them in ``conflicts``.

        Raises:
            RuntimeError: the session takes no checkpoints.
            ToolError: ``INVALID_ARGUMENTS`` for a step this session has not taken, and as
                :meth:`Checkpoints.restore` (a step still running, a path outside the
                workspace, a damaged store, a write that failed).
        """
        if self.checkpoints is None:
            raise RuntimeError("this session takes no checkpoints (ToolSession(checkpoints=True))")
        taken = len(self._record.steps)
        if step >= taken:
            # A typo must not pass for "nothing to restore".
            have = f"its steps are 0 to {taken - 1}" if taken else "it has taken no step yet"
            raise ToolError(
                f"step {step} is not a step of this session: {have}", ErrorCode.INVALID_ARGUMENTS
            )
        result = self.checkpoints.restore(
            step, paths, dry_run=dry_run, overwrite=overwrite, protected=self._protected()
        )
        if result.applied:
            self._cache.clear()
        return result

    def _protected(self) -> list[str]:
        """What a restore leaves alone (``sandbox_protected``): the protected paths of the
        sandboxes the session's calls, its tools and its tools' runners (the shell
        session's) run commands in."""
        assert self.workspace is not None  # checkpoints have one
        boxes = [self._sandbox, self.shell.sandbox if self.shell is not None else None]
        for tool in self.tools:
            boxes += [tool.sandbox, getattr(tool.runner, "sandbox", None)]
        return sandbox_protected(str(self.workspace.root), boxes)

    def undo(
        self, paths: Sequence[str] | None = None, *, dry_run: bool = False, overwrite: bool = False
    ) -> RestoreResult:
        """Undo the last step that changed files and is not undone yet (:meth:`restore` of
        it); called again, the one before. ``step`` is ``None`` in the result when there is
        nothing left to undo.

        Raises:
            RuntimeError, ToolError: as :meth:`restore`.
        """
        if self.checkpoints is None:
            raise RuntimeError("this session takes no checkpoints (ToolSession(checkpoints=True))")
        last = self.checkpoints.last_step()
        if last is None:
            return RestoreResult(step=None, dry_run=dry_run)
        return self.restore(last, paths, dry_run=dry_run, overwrite=overwrite)

    def undo_tool(self) -> Tool[UndoArgs]:
        """The ``undo`` tool for a model: :meth:`undo` as a call, through the session's
        policy and record (its step lists what it restored). Serve it beside the session's
        tools: ``create_server([*session.tools, session.undo_tool()], call=session.call)``.
        It is not among :attr:`tools`, so policy rules cover it by ``read_only=False`` or
        by applying to every tool, not by its name.

        Raises:
            RuntimeError: the session takes no checkpoints.
        """
        if self.checkpoints is None:
            raise RuntimeError("this session takes no checkpoints (ToolSession(checkpoints=True))")
        assert self._undo_tool is not None
        return self._undo_tool

    def _restore_path(self, rel: str, dry_run: bool) -> RestoreResult:
        """The :data:`RestorePath` an :class:`UndoingTool`'s undo call runs with."""
        assert self.checkpoints is not None
        step = last_change(self.checkpoints, rel)
        if step is None:
            return RestoreResult(step=None, dry_run=dry_run)
        result = self.restore(step, [rel], dry_run=dry_run)
        if result.applied:
            self._changes = (len(self._record.steps), result.files)
        return result

    def _undo_paths(self, args: UndoArgs) -> list[str]:
        """The files an undo call would put back, for policy path rules (the undo tool's
        :attr:`Tool.paths`); none when it names a path that does not resolve (the undo
        then refuses it)."""
        assert self.checkpoints is not None
        last = self.checkpoints.last_step()
        if last is None:
            return []
        try:
            return self.checkpoints.restore_targets(last, args.paths)
        except ToolError:
            return []

    def _undo_call(self, args: UndoArgs) -> RestoreResult:
        result = self.undo(args.paths, dry_run=args.dry_run, overwrite=args.overwrite)
        if result.applied:
            self._changes = (len(self._record.steps), result.files)
        return result

    async def _ask(
        self,
        index: int,
        tool: Tool[Any],
        request: ConfirmationRequest,
        confirm: ConfirmCallback | None,
    ) -> ToolResult | None:
        """Ask ``confirm``; the refusal result when declined, ``None`` when approved."""
        call_id, dumped, rule = request.call_id, request.arguments, request.rule
        if confirm is None:
            text = (
                f"Not run: {tool.name} needs confirmation (policy rule '{rule}') "
                "and nobody can confirm calls in this session."
            )
            return self._skip(
                index, tool, dumped, call_id, "policy", rule, text, request.presentation
            )
        started = time.perf_counter()
        answer = await ask(confirm, request)
        self._event(
            ConfirmEvent,
            index,
            call_id,
            approved=answer.approved,
            reason=answer.reason,
            ms=(time.perf_counter() - started) * 1000,
        )
        if answer.approved:
            return None
        because = f": {answer.reason}" if answer.reason else "."
        text = f"Not run: the user declined this {tool.name} call{because}"
        return self._skip(
            index, tool, dumped, call_id, "confirmation", rule, text, request.presentation
        )

    def _undecided(self, index: int, call: Call, exc: Exception) -> ToolResult:
        """The skipped step of a call whose policy check raised: an ``OSError`` (a path that
        changed while it was checked) keeps the code :func:`call_os_error` gives it, a
        :class:`ToolError` its own; anything else is a ``PERMISSION_DENIED`` refusal."""
        tool = call.tool
        if isinstance(exc, OSError):
            error = call_os_error(exc, tool.name, call.args, tool.workspace)  # type: ignore[arg-type]
        elif isinstance(exc, ToolError):
            error = exc
        else:
            logger.error("policy check of %s failed", tool.name, exc_info=exc)
            error = ToolError(f"{type(exc).__name__}: {exc}", ErrorCode.PERMISSION_DENIED)
        text = f"Not run: the policy could not decide on this {tool.name} call: {error.message}"
        return self._skip(
            index,
            tool,
            _shown(call),
            call.call_id,
            "policy",
            None,
            text,
            call.presentation,
            error.code,
        )

    def _skip(
        self,
        index: int,
        tool: Tool[Any],
        arguments: Any,
        call_id: str,
        reason: SkipReason,
        rule: str | None,
        text: str,
        presentation: ToolPresentation | None,
        code: ErrorCode | None = None,
    ) -> ToolResult:
        """The error result of a call that did not run, with the call's ``presentation``
        (a client draws skipped steps too)."""
        if code is None:
            missing = reason == "missing"
            code = ErrorCode.INVALID_ARGUMENTS if missing else ErrorCode.PERMISSION_DENIED
        result = self._error(call_id, tool.name, arguments, text, code)
        result.details = {"skipped": True, "skip_reason": reason, "denied_by": rule}
        result.presentation = presentation
        return self._finish(index, tool.name, arguments, result, skip=reason, denied_by=rule)

    def _finish(
        self,
        index: int,
        name: str,
        arguments: Any,
        result: ToolResult,
        *,
        failed: bool = False,
        cached: bool = False,
        skip: SkipReason | None = None,
        denied_by: str | None = None,
    ) -> ToolResult:
        changes, self._changes = self._changes, None
        self._record.steps.append(
            Step(
                index=index,
                tool=name,
                input=arguments,
                result=result.model_text(),
                skipped=skip is not None,
                skip_reason=skip,
                denied_by=denied_by,
                cached=cached,
                failed=failed,
                changed_files=changes[1] if changes is not None and changes[0] == index else None,
            )
        )
        return result

    def _error(
        self, call_id: str, name: str, arguments: Any, text: str, code: ErrorCode
    ) -> ToolResult:
        return ToolResult(
            call_id=call_id,
            name=name,
            arguments=arguments,
            error=text,
            error_code=code,
            max_result_length=self._max_result_length,
        )

    def _event(self, kind: type[Any], index: int, call_id: str, **fields: Any) -> None:
        at_ms = (time.perf_counter() - self._started) * 1000
        self._record.trace.append(kind(step=index, call_id=call_id, at_ms=at_ms, **fields))


def _shown(call: Call) -> Any:
    """The call's arguments as the record shows them: validated and dumped as JSON, else as
    given."""
    return call.raw if call.args is None else call.args.model_dump(mode="json")


def _missing_text(name: str, missing: tuple[str, ...]) -> str:
    return (
        f"Not run: {name} needs the required argument{'' if len(missing) == 1 else 's'} "
        f"{', '.join(missing)}. "
        "Call it again with every required argument."
    )


def _denied_text(name: str, decision: PolicyDecision) -> str:
    because = f": {decision.reason}" if decision.reason else "."
    return f"Not run: policy rule '{decision.rule}' denies this {name} call{because}"
