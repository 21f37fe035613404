"""The one call pipeline: :func:`prepare` parses, validates and presents a call once;
:func:`run_call` executes it (in process or in a sandbox, chosen there and only there) and
builds its result. :func:`invoke_tool` is the two with nothing between; a session puts its
policy, confirmation and cache between them."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import sniffio
from pydantic import BaseModel, ValidationError

from sandbox import Sandbox, SandboxError, SandboxUnavailable, UnpicklableCall
from workspace_tools._child_call import PortableArgs, execute_in_child
from workspace_tools._errors import (
    ECHO_LIMIT,
    ErrorCode,
    ToolError,
    clipped,
    json_error_message,
    json_kind_phrase,
)
from workspace_tools._output import ToolOutput, ToolPresentation
from workspace_tools._result import DEFAULT_MAX_RESULT_LENGTH, ToolResult, ToolUpdate
from workspace_tools._tool import Tool, ToolContext, placeholder_args
from workspace_tools.session._telemetry import tool_span
from workspace_tools.workspace import Workspace
from workspace_tools.workspace._files import OUT_OF_FDS, OUT_OF_FDS_WORDS, os_error
from workspace_tools.workspace._near_miss import not_found_hint

logger = logging.getLogger("workspace_tools")

OnUpdate = Callable[[ToolUpdate], None]


def check_on_update(on_update: OnUpdate | None) -> None:
    """Refuse an ``async def`` progress callback before the call runs.

    Updates are emitted from wherever the tool runs, a worker thread for a sync tool, so
    the callback is called, never awaited: an async one would only make coroutines that
    never run, its updates lost with no more than a ``RuntimeWarning``.

    Raises:
        TypeError: ``on_update`` is a coroutine function (or an object whose ``__call__``
            is one).
    """
    if on_update is None:
        return
    call = getattr(on_update, "__call__", None)  # noqa: B004 - an instance's async __call__
    if inspect.iscoroutinefunction(on_update) or inspect.iscoroutinefunction(call):
        name = getattr(on_update, "__qualname__", type(on_update).__qualname__)
        raise TypeError(
            f"on_update must be a plain function, not an async one ({name}): it is called "
            "with each update from the thread the tool runs in, never awaited; hand the "
            "update to your event loop from it (loop.call_soon_threadsafe, a queue)"
        )


T = TypeVar("T")


def format_validation_error(tool_name: str, exc: ValidationError) -> str:
    """A message a model can act on: one line per bad field, with what was expected."""
    lines = [f"Invalid arguments for {tool_name}:"]
    errors = exc.errors(include_url=False)
    for err in errors[:_MAX_LISTED]:
        where = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        message = json_error_message(err)
        lines.append(f"- {clipped(where, ECHO_LIMIT)}: {message}")
    if len(errors) > _MAX_LISTED:
        lines.append(f"- … and {len(errors) - _MAX_LISTED:,} more")
    return "\n".join(lines)


# Lines of a message about arguments: a call may send any number of bad ones.
_MAX_LISTED = 20


def parse_arguments(arguments: Any) -> tuple[Any, ValueError | None]:
    """Raw arguments as data (parsed JSON, a model dumped, ``{}`` for ``None``), and why they
    are not JSON when they are not (the data is then the text as given)."""
    if isinstance(arguments, (str, bytes)):
        try:
            return json.loads(arguments or "{}"), None
        except ValueError as exc:  # not JSON, or bytes that are not UTF-8/16/32 text
            text = arguments if isinstance(arguments, str) else arguments.decode("utf-8", "replace")
            return text, exc
    if isinstance(arguments, BaseModel):
        return arguments.model_dump(), None
    return ({} if arguments is None else arguments), None


def new_call_id() -> str:
    """A random call id, for a call the provider gave none: ``call_`` and 24 hex digits."""
    return f"call_{os.urandom(12).hex()}"


@dataclass(slots=True)
class Call:
    """One call, parsed, validated and presented once (by :func:`prepare`) for every stage.

    ``raw``: the arguments as data (parsed JSON, a model dumped, or the text as given when
    not JSON). ``args``: the validated arguments, ``None`` exactly when ``error`` says why
    they did not validate; ``missing``: the absent required ones. ``presentation``: of the
    arguments, or of placeholders when they did not validate (:func:`placeholder_args`).
    """

    tool: Tool[Any]
    call_id: str
    raw: Any
    args: BaseModel | None
    error: ToolError | None = None
    missing: tuple[str, ...] = ()
    presentation: ToolPresentation | None = None


def prepare(tool: Tool[Any], arguments: Any, call_id: str | None = None) -> Call:
    """The :class:`Call` of ``tool`` with raw ``arguments`` (a dict, a JSON string or bytes,
    a model instance, ``None``); never raises for bad arguments, which it records instead."""
    call_id = call_id or new_call_id()
    raw, not_json = parse_arguments(arguments)
    if not_json is not None:
        message = f"Invalid arguments for {tool.name}: not valid JSON ({not_json})"
        return _invalid(tool, call_id, raw, message)
    if raw is None or isinstance(raw, (list, str, int, float)):  # JSON, but no object
        expected = ", ".join(tool.parameters.model_fields) or "none"
        message = (
            f"Invalid arguments for {tool.name}: the arguments are {json_kind_phrase(raw)}, not an "
            f"object of named arguments (the arguments are: {expected})"
        )
        return _invalid(tool, call_id, raw, message)
    unknown = _unknown_arguments(tool, raw)
    try:
        args = tool.parameters.model_validate(raw)
    except ValidationError as exc:
        message = "\n".join([format_validation_error(tool.name, exc), *unknown])
        errors = exc.errors(include_url=False)
        missing = tuple(".".join(map(str, e["loc"])) for e in errors if e["type"] == "missing")
        return _invalid(tool, call_id, raw, message, missing)
    if unknown:
        return _invalid(
            tool, call_id, raw, "\n".join([f"Invalid arguments for {tool.name}:", *unknown])
        )
    return Call(tool, call_id, raw, args, presentation=tool.present(args))


def preempt(
    tool: Tool[Any], arguments: Any, allowed: Callable[[BaseModel], bool] = lambda _: True
) -> None:
    """Do what a call of ``tool`` must do at once (:attr:`Tool.preempt`), before it waits
    behind the calls ahead of it: only for valid ``arguments`` that ``allowed`` lets run;
    never raises (the call itself, in its turn, reports what goes wrong)."""
    if tool.preempt is None:
        return
    args = prepare(tool, arguments).args
    try:
        if args is not None and allowed(args):
            tool.preempt(args)
    except Exception:
        logger.warning("%s: what its call does at once failed", tool.name, exc_info=True)


def _invalid(
    tool: Tool[Any], call_id: str, raw: Any, message: str, missing: tuple[str, ...] = ()
) -> Call:
    error = ToolError(message, ErrorCode.INVALID_ARGUMENTS)
    presentation = tool.present(placeholder_args(tool, raw))
    return Call(tool, call_id, raw, None, error, missing, presentation)


def validate_arguments(tool: Tool[Any], arguments: Any) -> BaseModel:
    """Validate raw arguments (a dict, a JSON string or a model) against ``tool.parameters``.

    Raises:
        ToolError: with ``INVALID_ARGUMENTS`` and a message naming each bad field.
    """
    call = prepare(tool, arguments)
    if call.error is not None:
        raise call.error
    return call.args  # type: ignore[return-value]  # set whenever error is not


def _unknown_arguments(tool: Tool[Any], raw: Any) -> list[str]:
    """A line per argument ``tool.parameters`` has no field for: a misspelt name would
    otherwise be dropped without a word and the call run with the default. A model that
    allows extra fields (``extra="allow"``) takes them."""
    names = tool.argument_names
    if not isinstance(raw, dict) or names is None or names.issuperset(raw):
        return []
    unknown = [key for key in raw if key not in names]
    expected = ", ".join(tool.parameters.model_fields)
    lines = [
        f"- {clipped(str(key), ECHO_LIMIT)}: unknown argument (the arguments are: {expected})"
        for key in unknown[:_MAX_LISTED]
    ]
    if len(unknown) > _MAX_LISTED:
        lines.append(f"- … and {len(unknown) - _MAX_LISTED:,} more unknown arguments")
    return lines


def _check_output_schema(tool: Tool[Any], content: Any) -> Any:
    """``content`` as JSON data once it fits ``tool.output_schema`` as a client validating
    structured content against the declared JSON Schema would judge it: where the schema
    forbids other keys (``extra="forbid"``), content with more is refused, a model of a
    subclass that adds fields included.

    Raises:
        ToolError: ``TOOL_ERROR`` naming what does not fit.
    """
    schema = tool.output_schema
    if schema is None:
        return content
    if isinstance(content, schema):
        data = content.model_dump(mode="json")
        extra = _undeclared(tool, data)
        if extra:
            raise _schema_mismatch(tool, f"{extra}: not in the declared output schema")
        return data
    try:
        schema.model_validate(content)
    except ValidationError as exc:
        detail = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(content)'}: {e['msg']}"
            for e in exc.errors(include_url=False)
        )
        raise _schema_mismatch(tool, detail) from exc
    # Keys a forbidding schema lacks failed validation above: only a model of a subclass
    # (dumped, not validated) can carry them past it.
    return content


def _undeclared(tool: Tool[Any], data: Any) -> str:
    """The keys of the JSON object ``data`` that ``tool.output_schema`` declares no
    property for, as ``'a', 'b'``; empty when there are none (or it takes any)."""
    names = tool.output_names
    if not isinstance(data, dict) or names is None or names.issuperset(data):
        return ""
    return ", ".join(repr(key) for key in data if key not in names)


def _schema_mismatch(tool: Tool[Any], detail: str) -> ToolError:
    return ToolError(
        f"{tool.name} returned content that does not match its output schema: {detail}",
        ErrorCode.TOOL_ERROR,
    )


async def _execute(
    call: Call,
    context: ToolContext,
    sandbox: Sandbox | None,
    scope: anyio.CancelScope | None = None,
) -> Any:
    """Run the call's ``execute``: in a child of ``sandbox`` (as :func:`run_call` chose it;
    ``scope``, the call's timeout, held while a worker starts for it), else in process (a
    sync tool in a worker thread); a tool whose ``execute`` acts only through its runner's
    commands (:attr:`Tool.commands_only`) in process, with its runner's for ``sandbox``."""
    tool, args = call.tool, call.args
    if sandbox is not None and tool.commands_only:
        # A command run from a sandbox child gets the sandbox's protections by inheritance,
        # but the child, fresh for each call, starts command processes of its own (a spawn
        # server, a supervisor) for it: about ten times the command's own cost. Run in
        # the sandbox by the runner, on the sandbox's pooled supervisors, the command gets
        # every protection of the sandbox itself (its layers, limits, network off,
        # subreaper, the whole tree stopped at a timeout), as the tools bound to it give.
        in_sandbox = getattr(tool.runner, "in_sandbox", None)
        boxed = None if in_sandbox is None else in_sandbox(sandbox, tool.workspace)
        if boxed is not None:
            context.runner, sandbox = boxed, None
    if sandbox is not None:
        timing = (context.deadline, context.timeout)
        return await call_in_sandbox(sandbox, tool, args, call.call_id, timing, scope)  # type: ignore[arg-type]
    try:
        if tool.is_async:
            return await tool.execute(args, context)
        # abandon_on_cancel: a sync tool cannot be interrupted, but the caller gets its
        # timeout; the context tells the thread that it was left (ToolContext.committing).
        value = await anyio.to_thread.run_sync(
            partial(tool.execute, args, context), abandon_on_cancel=True
        )
        if inspect.isawaitable(value):
            value = await value
        return value
    except anyio.get_cancelled_exc_class():
        context.cancel()
        raise


def _make_emitter(
    tool: Tool[Any], call_id: str, on_update: OnUpdate
) -> Callable[[Any, Any, ToolPresentation | None], None]:
    def emit(content: Any, details: Any, presentation: ToolPresentation | None) -> None:
        update = ToolUpdate(
            call_id=call_id,
            name=tool.name,
            content=content,
            details=details,
            presentation=presentation,
        )
        try:
            on_update(update)
        except Exception:
            logger.exception("on_update callback raised for %s call %s", tool.name, call_id)

    return emit


async def invoke_tool(
    tool: Tool[Any],
    arguments: Any,
    *,
    call_id: str | None = None,
    on_update: OnUpdate | None = None,
    timeout: float | None = None,
    max_result_length: int | None = None,
    sandbox: Sandbox | None = None,
) -> ToolResult:
    """Run one call of ``tool`` and return its :class:`ToolResult`; never raises for a tool
    failure.

    Args:
        tool: the tool to run.
        arguments: a dict, a JSON string, or an instance of ``tool.parameters``.
        call_id: the provider's tool-call id; a random one when omitted.
        on_update: a plain function called with each :class:`ToolUpdate` while the call
            runs (from the tool's thread: a sync tool's is a worker thread); exceptions it
            raises are logged and ignored. Updates after the call ended are dropped.
        timeout: seconds; overrides ``tool.timeout``. On expiry the call is cancelled and the
            result carries ``TOOL_TIMEOUT``. A sync tool's thread cannot be stopped: it is
            told through :attr:`ToolContext.cancelled` (see :class:`ToolContext` for what a
            timeout can and cannot stop).
        max_result_length: characters of model text (default 50,000); the rest is cut with
            a marker. ``content`` keeps the whole value.
        sandbox: a :class:`sandbox.Sandbox`; ``execute`` then runs in its child process and
            reports no updates (a tool that declares :attr:`Tool.commands_only`, such as
            run_command, runs here and its commands in the sandbox). Default: the tool's
            own (:attr:`Tool.sandbox`), if any.

    Errors: invalid arguments give ``INVALID_ARGUMENTS`` (``execute`` never runs); a
    :class:`ToolError` keeps its code; an ``OSError`` with an errno gets that errno's code
    (``NOT_FOUND``, ``PERMISSION_DENIED``, ...; see :func:`call_os_error`); any other
    exception is ``TOOL_ERROR`` with its message; a crashed sandbox child is ``SANDBOX_ERROR``.

    Raises:
        TypeError: ``on_update`` is an ``async def`` function (see :func:`check_on_update`).
    """
    check_on_update(on_update)
    call = prepare(tool, arguments, call_id)
    return await run_call(
        call,
        on_update=on_update,
        timeout=timeout,
        max_result_length=max_result_length,
        sandbox=sandbox,
    )


async def run_call(
    call: Call,
    *,
    on_update: OnUpdate | None = None,
    timeout: float | None = None,
    max_result_length: int | None = None,
    sandbox: Sandbox | None = None,
) -> ToolResult:
    """The last stage of every call: execute a prepared :class:`Call` (in ``sandbox``, else
    the tool's own :attr:`Tool.sandbox`, else in process) and build its result; a call whose
    arguments did not validate gives its error and never executes. Arguments as for
    :func:`invoke_tool`."""
    tool = call.tool
    started = time.perf_counter()
    limit = DEFAULT_MAX_RESULT_LENGTH if max_result_length is None else max_result_length
    effective_timeout = timeout if timeout is not None else tool.timeout
    # The result's fields are gathered here and the result made once, at the end: each
    # field set on a model one by one costs a validated assignment.
    content: Any = None
    details: Any = None
    presentation = call.presentation
    error: ToolError | None = None

    with tool_span(tool.name, call.call_id) as span:
        if call.error is not None:
            span.fail(call.error.code)
            return ToolResult(
                call_id=call.call_id,
                name=tool.name,
                arguments=call.raw,
                error=call.error.message,
                error_code=call.error.code,
                duration_ms=(time.perf_counter() - started) * 1000,
                max_result_length=limit,
            )

        box = sandbox if sandbox is not None else tool.sandbox
        emitter = (
            None
            if box is not None or on_update is None
            else _make_emitter(tool, call.call_id, on_update)
        )
        deadline = None if effective_timeout is None else time.monotonic() + effective_timeout
        context = ToolContext(
            call.call_id,
            tool.name,
            emitter,
            deadline=deadline,
            timeout=effective_timeout,
            workspace=tool.workspace,
            runner=tool.runner,
        )
        try:
            # No cancel scope without a timeout: setting one up costs more than a short call.
            scope = None
            if effective_timeout is None:
                value = await _execute(call, context, box)
            else:
                with anyio.move_on_after(effective_timeout) as scope:
                    value = await _execute(call, context, box, scope)
            if scope is not None and scope.cancelled_caught:
                # A TimeoutError the tool raises itself is an ordinary failure, below. The
                # tool's own words for its timeout, when it gave them, whichever fired first.
                error = context.timeout_error
                if error is not None:
                    details = error.details
                else:
                    error = ToolError(
                        f"{tool.name} timed out after {effective_timeout:g} s",
                        ErrorCode.TOOL_TIMEOUT,
                    )
            elif isinstance(value, ToolOutput):
                content = _check_output_schema(tool, value.content)
                details = value.details
                if value.presentation is not None:
                    presentation = value.presentation
            else:
                content = _check_output_schema(tool, value)
        except ToolError as exc:
            error, details = exc, exc.details
        except (SandboxError, SandboxUnavailable) as exc:
            error = sandbox_tool_error(exc)
        except OSError as exc:
            error = call_os_error(exc, tool.name, call.args, tool.workspace)
        except Exception as exc:
            error = ToolError(str(exc) or type(exc).__name__, ErrorCode.TOOL_ERROR)
        finally:
            context.close()
        if error is not None:
            span.fail(error.code)
    return ToolResult(
        call_id=call.call_id,
        name=tool.name,
        arguments=call.args,
        content=content,
        details=details,
        presentation=presentation,
        error=None if error is None else error.message,
        error_code=None if error is None else error.code,
        duration_ms=(time.perf_counter() - started) * 1000,
        max_result_length=limit,
    )


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


def call_os_error(
    exc: OSError, tool_name: str, args: BaseModel, workspace: Workspace | None = None
) -> ToolError:
    """The result error for an ``OSError`` that left a call of ``tool_name``: the code and
    words of :func:`os_error` for the file the error names, else for the call's ``path``
    argument; an error that names neither says which tool failed. An ``OSError`` without an
    errno (``TimeoutError("upstream did not answer")``) keeps its own message, as any
    exception does.

    With the tool's ``workspace``, a file the error names by its absolute path under the
    root is named as results name paths, relative to the root (a custom tool's ``open`` of
    ``resolve(path).real`` never shows the model the host's directories), and a missing one
    gets the path the model most likely meant (``; did you mean 'README.md'?``).

    Out of file descriptors, the call failed for want of them, not for a file: the words
    say so with or without a file, and a host path outside the root that the call's
    ``path`` did not name (one the sandbox opened for itself, a module imported on the way)
    is not shown."""
    if exc.errno is None:
        return ToolError(str(exc) or type(exc).__name__, ErrorCode.TOOL_ERROR)
    path = getattr(args, "path", None)
    subject = exc.filename if exc.filename is not None else path
    if isinstance(subject, bytes):
        subject = os.fsdecode(subject)
    if exc.errno in OUT_OF_FDS and _host_path(subject, path, workspace):
        subject = None
    if isinstance(subject, str):
        if workspace is None:
            return os_error(exc, subject)
        root = str(workspace.root)
        # Only a path placed under the root is named from it: a relative one the tool
        # opened itself is relative to the process's directory, not the root.
        placed = subject == path
        if _under(subject, root):
            subject, placed = workspace.rel(subject), True
        error = os_error(exc, subject)
        if error.code is ErrorCode.NOT_FOUND and placed and not os.path.isabs(subject):
            hint = not_found_hint(root, subject)
            if hint:
                return ToolError(error.message + hint, error.code, details=error.details)
        return error
    error = os_error(exc, tool_name)
    words = OUT_OF_FDS_WORDS.get(exc.errno) or exc.strerror or str(exc)
    return ToolError(f"{tool_name} failed: {words}", error.code)


def _under(subject: str, root: str) -> bool:
    """Whether the absolute path ``subject`` is ``root`` or below it (lexically)."""
    return os.path.isabs(subject) and (
        subject == root or subject.startswith(root.rstrip(os.sep) + os.sep)
    )


def _host_path(subject: object, path: object, workspace: Workspace | None) -> bool:
    """Whether ``subject`` is an absolute path neither the call's ``path`` nor under the
    workspace's root: a file the tool, the sandbox or an import opened for itself."""
    return (
        isinstance(subject, str)
        and os.path.isabs(subject)
        and subject != path
        and (workspace is None or not _under(subject, str(workspace.root)))
    )


def sandbox_tool_error(exc: SandboxError | SandboxUnavailable) -> ToolError:
    """The result error for a sandbox failure: ``SANDBOX_ERROR`` for a crashed child (the
    message names the signal), ``SANDBOX_UNAVAILABLE`` for a protection nobody can give."""
    if isinstance(exc, SandboxUnavailable):
        return ToolError(str(exc), ErrorCode.SANDBOX_UNAVAILABLE)
    return ToolError(str(exc), ErrorCode.SANDBOX_ERROR)


def invoke_tool_sync(tool: Tool[Any], arguments: Any, **kwargs: Any) -> ToolResult:
    """Blocking twin of :func:`invoke_tool` (same arguments); runs the call on an asyncio
    event loop of its own, closed before this returns. Ctrl-C (SIGINT, in the main thread
    while Python's default handler is in place) cancels the call as ``asyncio.run`` does,
    so that its command's tree is stopped, then raises ``KeyboardInterrupt``.

    Raises:
        RuntimeError: when called from inside a running event loop's thread.
        KeyboardInterrupt: the call was interrupted by Ctrl-C.
    """
    return run_on_own_loop(
        partial(invoke_tool, tool, arguments, **kwargs),
        no_loop=partial(not_started, tool, arguments, kwargs.get("call_id")),
    )


def not_started(target: object, arguments: Any, call_id: str | None, exc: OSError) -> ToolResult:
    """The result of a blocking call of ``target`` (a tool, or a tool's name) whose event
    loop could not be made (``exc``: out of file descriptors, for its epoll and wake-up
    pipe): it did not run."""
    # A target that is no tool is the call's own error once it runs; here it is only named.
    name = target if isinstance(target, str) else getattr(target, "name", str(target))
    error = os_error(exc, "an event loop for the call")
    return ToolResult(
        call_id=call_id or new_call_id(),
        name=name,
        arguments=arguments,
        error=f"{name} did not run: {error.message}",
        error_code=error.code,
    )


def run_on_own_loop(
    run: Callable[[], Awaitable[T]], *, no_loop: Callable[[OSError], T] | None = None
) -> T:
    """``run()`` on an asyncio event loop of its own, as ``asyncio.run`` would run it,
    without what a short call cannot afford: ``anyio.run`` and ``asyncio.Runner`` cost
    about 80 µs a call more (context and debug set-up, a pass of the loop per shutdown
    step, the SIGINT handler put back by formatting the task). What they guarantee is
    kept: SIGINT cancels the main task (then ``KeyboardInterrupt``), tasks it left are
    cancelled and awaited, async generators and the default executor are shut down (at
    the end of the main task, in the same pass of the loop).

    ``no_loop(error)`` is returned instead when the loop cannot be made (its epoll and
    wake-up pipe need descriptors: ``OSError``, raised without ``no_loop``).

    Raises:
        RuntimeError: an event loop already runs in this thread.
        KeyboardInterrupt: Ctrl-C cancelled the call.
    """
    running = _running_async_library()
    if running is not None:
        raise RuntimeError(
            f"cannot block inside a running {running} event loop: await the call instead"
        )
    try:
        loop = asyncio.new_event_loop()
    except OSError as exc:
        _discard_half_made_loop(exc)
        if no_loop is None:
            raise
        return no_loop(exc)
    try:
        task = loop.create_task(_then_shut_down(run, loop))
        interrupted: list[bool] = []
        restore = _cancel_on_sigint(loop, task, interrupted)
        try:
            return loop.run_until_complete(task)
        except asyncio.CancelledError:
            if interrupted:
                raise KeyboardInterrupt from None
            raise
        finally:
            restore()
    finally:
        loop.close()


def _discard_half_made_loop(exc: OSError) -> None:
    """Let go of the loop an asyncio loop constructor left half made when ``exc`` stopped
    it (no descriptor for its epoll or its wake-up socket pair). Collected as it is, its
    ``__del__`` would close it, meet the socket pair that was never made and print an
    ``AttributeError`` traceback to stderr ("Exception ignored in ... '_ssock'") for every
    such call; and the epoll it did get would stay open until then. So: its selector is
    closed now and the loop counts as closed, which leaves its ``__del__`` nothing to do.
    A loop of another kind (uvloop's) is not one of asyncio's and is left alone."""
    trace = exc.__traceback__
    while trace is not None:
        loop = trace.tb_frame.f_locals.get("self")
        if isinstance(loop, asyncio.BaseEventLoop):
            selector = getattr(loop, "_selector", None)
            if selector is not None:
                selector.close()
            loop._closed = True  # type: ignore[attr-defined]  # what close() ends with
            return
        trace = trace.tb_next


def _running_async_library() -> str | None:
    """The event loop library running in this thread (``"asyncio"``, ``"trio"``), if any."""
    try:
        return str(sniffio.current_async_library())
    except sniffio.AsyncLibraryNotFoundError:
        return None


async def _then_shut_down(run: Callable[[], Awaitable[T]], loop: asyncio.AbstractEventLoop) -> T:
    """``run()``, then what it left on ``loop``: its tasks cancelled and awaited, its async
    generators closed, the default executor's threads joined."""
    try:
        return await run()
    finally:
        pending = [t for t in asyncio.all_tasks(loop) if t is not asyncio.current_task()]
        for leftover in pending:
            leftover.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        await loop.shutdown_asyncgens()
        await loop.shutdown_default_executor()


# The C module under ``signal``, where there is one (CPython): ``signal.signal`` and
# ``signal.getsignal`` try to make a ``Handlers`` enum of each handler they return, which
# for a function raises and catches a ValueError inside: about 17 µs of the three calls
# each blocking call makes, for a value compared by identity here. Elsewhere, ``signal``.
try:
    import _signal as _handlers
except ImportError:  # pragma: no cover - another Python implementation
    _handlers = signal  # type: ignore[no-redef]
_SIGINT = int(signal.SIGINT)


def _cancel_on_sigint(
    loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any], interrupted: list[bool]
) -> Callable[[], None]:
    """As ``asyncio.Runner`` does: in the main thread, while SIGINT has Python's default
    handler, the first Ctrl-C cancels ``task`` (recorded in ``interrupted``) and a second
    one raises ``KeyboardInterrupt`` at once. Returns what puts the handler back."""
    if (
        threading.current_thread() is not threading.main_thread()
        or _handlers.getsignal(_SIGINT) is not signal.default_int_handler
    ):
        return lambda: None

    def on_sigint(signum: int, frame: object) -> None:
        if interrupted or task.done():
            raise KeyboardInterrupt
        interrupted.append(True)
        task.cancel()
        loop.call_soon_threadsafe(lambda: None)  # wake the loop from its wait

    _handlers.signal(_SIGINT, on_sigint)
    return lambda: _handlers.signal(_SIGINT, signal.default_int_handler)
