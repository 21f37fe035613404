"""The one call pipeline: :func:`prepare` parses, validates and presents a call once;
:func:`run_call` executes it (in process or in a sandbox, chosen there and only there) and
builds its result. :func:`invoke_tool` is the two with nothing between; a session puts its
policy, confirmation and cache between them."""

from __future__ import annotations

import inspect
import json
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
import anyio.to_thread
from pydantic import BaseModel, ValidationError

from sandbox import Sandbox, SandboxError, SandboxUnavailable
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
from workspace_tools.session._call_errors import call_os_error, sandbox_tool_error
from workspace_tools.session._in_sandbox import call_in_sandbox
from workspace_tools.session._own_loop import in_a_thread, on_own_loop, run_on_own_loop
from workspace_tools.session._telemetry import tool_span
from workspace_tools.workspace._files import os_error

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
        if on_own_loop():  # a blocking call's loop: a thread of its own is quicker
            value = await in_a_thread(partial(tool.execute, args, context))
        else:
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
        TypeError: ``on_update`` is an ``async def`` function (see :func:`check_on_update`);
            ``timeout`` is not a number, ``max_result_length`` not an int.
        ValueError: ``timeout`` is not above 0 and finite; ``max_result_length`` below 0.
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


def _check_limits(timeout: object, max_result_length: object) -> None:
    """Refuse a caller's timeout that is not a number of seconds above 0, or a
    ``max_result_length`` that is not a whole number of characters from 0 (a string from a
    configuration file, say), before anything runs.

    Raises:
        TypeError: of the wrong type; ValueError: out of range.
    """
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise TypeError(
                f"timeout must be seconds as a number (or None), not {type(timeout).__name__} "
                f"{timeout!r}"
            )
        if not 0 < timeout < math.inf:
            raise ValueError(f"timeout must be above 0 seconds and finite, not {timeout!r}")
    if max_result_length is not None:
        if isinstance(max_result_length, bool) or not isinstance(max_result_length, int):
            raise TypeError(
                "max_result_length must be a whole number of characters (or None), not "
                f"{type(max_result_length).__name__} {max_result_length!r}"
            )
        if max_result_length < 0:
            raise ValueError(f"max_result_length must be 0 or more, not {max_result_length}")


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
    _check_limits(timeout, max_result_length)
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
