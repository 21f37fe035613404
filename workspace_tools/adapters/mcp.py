"""Serve tools over the Model Context Protocol with the official ``mcp`` SDK (1.x).

Protocol: https://modelcontextprotocol.io/specification/2025-06-18/server/tools. What goes
where in a ``tools/call`` result:

- ``content``: what the model reads — one text block (:meth:`ToolResult.model_text`), or the
  text and image blocks of media content.
- ``structuredContent``: the content again as JSON when it is an object; its schema is the
  tool's ``outputSchema`` when the tool declares one.
- ``isError``: set for a failed call; the text block is the error message.
- ``_meta``: ``details``, ``presentation`` and ``errorCode`` under the :data:`META_PREFIX`
  namespace, for the client application only.

Progress (``notifications/progress``) is sent for each ``context.update`` when the client
sent a ``progressToken``: ``progress`` counts the updates, ``message`` is the update's text.

Content the blocks cannot carry whole (text cut at the result limit, JSON that is not an
object, ``None``, media content with files) also goes under ``_meta`` (``content``), and
media content the blocks do carry is marked (``contentType``: ``tool-content``), so a
client such as :class:`workspace_tools.adapters.remote.RemoteWorkspace` rebuilds the exact
result.
"""

from __future__ import annotations

import contextlib
import logging
import math
import queue
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any

import anyio
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from anyio.from_thread import BlockingPortal
from pydantic import BaseModel, Field

from workspace_tools import __version__
from workspace_tools._errors import ECHO_LIMIT, ErrorCode, echoed
from workspace_tools._output import ImagePart, TextPart, ToolContent, ToolPresentation
from workspace_tools._result import ToolResult, ToolUpdate, content_text
from workspace_tools._tool import Tool
from workspace_tools.adapters._common import (
    CallFunction,
    invoke_call,
    jsonable,
    missing_extra,
    model_parts,
    tool_presentation,
)
from workspace_tools.session._confirm import Confirmation, ConfirmationRequest

try:
    from mcp import types
    from mcp.server.lowlevel import Server

    from workspace_tools.adapters._jsonrpc import validated_stdio
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise missing_extra("mcp", "mcp") from exc

META_PREFIX = "dev.agent-workspace-tools/"
"""Namespace of this package's ``_meta`` keys (MCP reserves prefixes naming MCP itself)."""

DISCONNECTED = "workspace_tools.disconnected"
"""The ASGI scope key of an :class:`anyio.Event` an HTTP transport sets when the client of a
request went away (see :mod:`workspace_tools.adapters.mcp_http`): its call is cancelled."""


def mcp_tool(tool: Tool[Any]) -> types.Tool:
    """The MCP ``Tool`` definition: input schema, output schema when the tool declares one,
    ``title`` from the presentation label, read-only/destructive hints, and the label and
    icon under ``_meta`` (:data:`META_PREFIX` ``presentation``) for clients that draw steps."""
    presentation = tool_presentation(tool)
    title = None if presentation is None else presentation.label
    output_schema = tool.output_json_schema()
    if output_schema is not None and output_schema.get("type") != "object":
        output_schema = None  # MCP's outputSchema describes an object; other content is text
    return types.Tool(
        name=tool.name,
        title=title,
        description=tool.description,
        inputSchema=tool.input_schema(),
        outputSchema=output_schema,
        annotations=types.ToolAnnotations(
            title=title,
            readOnlyHint=tool.read_only,
            # A tool that writes may overwrite what was there (MCP's default assumption too).
            destructiveHint=not tool.read_only,
        ),
        _meta=None
        if presentation is None
        else {META_PREFIX + "presentation": jsonable(presentation.model_dump(exclude_none=True))},
    )


def mcp_result(result: ToolResult) -> types.CallToolResult:
    """The ``tools/call`` result for ``result`` (see the module docstring for the layout)."""
    meta = _meta(result.details, result.presentation)
    if result.error_code is not None:
        meta[META_PREFIX + "errorCode"] = result.error_code.value
    blocks: list[types.TextContent | types.ImageContent] = [
        types.ImageContent(type="image", data=part.data, mimeType=part.media_type)
        if isinstance(part, ImagePart)
        else types.TextContent(type="text", text=part)
        for part in model_parts(result)
    ]
    media = isinstance(result.content, ToolContent)
    structured = None if result.is_error or media else jsonable(result.content)
    if not result.is_error and not _blocks_carry_content(result, structured):
        meta[META_PREFIX + "content"] = jsonable(result.content)
    elif media:
        meta[META_PREFIX + "contentType"] = "tool-content"
    return types.CallToolResult(
        content=blocks,
        structuredContent=structured if isinstance(structured, dict) else None,
        isError=result.is_error,
        _meta=meta or None,
    )


def _meta(details: Any, presentation: ToolPresentation | None) -> dict[str, Any]:
    """The ``_meta`` entries of a result or a progress notification for the application:
    its details and presentation as JSON, each only when there is one."""
    meta: dict[str, Any] = {}
    if details is not None:
        meta[META_PREFIX + "details"] = jsonable(details)
    if presentation is not None:
        meta[META_PREFIX + "presentation"] = jsonable(presentation.model_dump(exclude_none=True))
    return meta


def _blocks_carry_content(result: ToolResult, structured: Any) -> bool:
    """Whether a client rebuilds ``result.content`` exactly from the blocks: a whole string
    (its one text block) or an object (``structuredContent``). Media content is rebuilt
    from its blocks when they are its parts whole (text not cut, no file parts); it is
    marked so under ``_meta`` (``contentType``), lest one text part read as a string."""
    content = result.content
    if isinstance(structured, dict):
        return True
    if isinstance(content, str):
        return len(content) <= result.max_result_length
    if isinstance(content, ToolContent):
        return all(
            isinstance(part, ImagePart)
            or (isinstance(part, TextPart) and len(part.text) <= result.max_result_length)
            for part in content.parts
        )
    return False


def _disconnected(request: Any) -> anyio.Event | None:
    """The :data:`DISCONNECTED` event of the HTTP request a call came in (the request
    context's Starlette request); ``None`` over stdio."""
    scope = getattr(request, "scope", None)
    event = scope.get(DISCONNECTED) if isinstance(scope, dict) else None
    return event if isinstance(event, anyio.Event) else None


async def _unless_disconnected(
    gone: anyio.Event | None, call: Callable[[], Awaitable[ToolResult]]
) -> ToolResult | None:
    """``call()``, cancelled (``None``) when ``gone`` is set first: nobody awaits it."""
    if gone is None:
        return await call()
    outcome: list[ToolResult] = []

    async def watch(scope: anyio.CancelScope) -> None:
        await gone.wait()
        scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch, tg.cancel_scope)
        outcome.append(await call())
        tg.cancel_scope.cancel()
    return outcome[0] if outcome else None


class _UpdateRelay:
    """Hands updates from any thread to the event loop, in order, without blocking the caller.

    ``ToolContext.update`` may run in a worker thread while the loop waits for that thread, so
    a blocking hand-off could deadlock. Updates go into a thread-safe FIFO queue; the loop is
    woken through the portal (whose task order is not guaranteed, hence the queue).
    """

    def __init__(self, wake: ObjectSendStream[None], portal: BlockingPortal) -> None:
        self.pending: queue.SimpleQueue[ToolUpdate] = queue.SimpleQueue()
        self._wake = wake
        self._portal = portal
        self._loop_thread = threading.get_ident()

    def __call__(self, update: ToolUpdate) -> None:
        self.pending.put(update)
        try:
            if threading.get_ident() == self._loop_thread:
                self._wake.send_nowait(None)
            else:
                self._portal.start_task_soon(self._wake.send, None)
        except (RuntimeError, anyio.ClosedResourceError):
            pass  # the call is over; late updates are dropped, as invoke_tool does


async def _send_progress(
    wakeups: ObjectReceiveStream[None],
    relay: _UpdateRelay,
    session: Any,
    token: str | int,
    request_id: Any,
) -> None:
    count = 0
    async with wakeups:
        async for _ in wakeups:
            while True:
                try:
                    update = relay.pending.get_nowait()
                except queue.Empty:
                    break
                count += 1
                await session.send_notification(
                    _progress_notification(update, token, count), related_request_id=request_id
                )


def _progress_notification(
    update: ToolUpdate, token: str | int, count: int
) -> types.ServerNotification:
    meta = _meta(update.details, update.presentation)
    params = types.ProgressNotificationParams(
        progressToken=token,
        progress=count,
        message=content_text(update.content) or None,
        _meta=meta or None,
    )
    return types.ServerNotification(types.ProgressNotification(params=params))


MAX_RUNNING_CALLS = 16
"""Most ``tools/call`` requests of one MCP session that run at once; more wait their turn."""

MAX_WAITING_CALLS = 48
"""Most ``tools/call`` requests of one MCP session that wait for a turn; one more is
answered at once with an error result (``isError``), unrun: a client cannot make the
server start thousands of calls, nor hold thousands waiting."""


class _CallLimit:
    """The turns of one MCP session's calls: ``running`` at once, ``waiting`` more queued
    in arrival order (anyio's semaphore is fair)."""

    def __init__(self, running: int, waiting: int) -> None:
        self.turns = anyio.Semaphore(running)
        self.running = running
        self.waiting = waiting
        self.queued = 0

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[bool]:
        """Yields ``True`` once the call may run, ``False`` at once when the queue is full
        (the call must not run)."""
        if self.turns.value == 0 and self.queued >= self.waiting:
            yield False
            return
        self.queued += 1
        try:
            await self.turns.acquire()
        finally:
            self.queued -= 1
        try:
            yield True
        finally:
            self.turns.release()

    def refusal(self) -> str:
        return (
            f"Too many calls at once: this MCP session runs {self.running} calls and queues "
            f"{self.waiting} more, and both are full; this call was not run. Wait for answers "
            "to the calls already sent, then send it again"
        )


def create_server(
    tools: Sequence[Tool[Any]],
    *,
    call: CallFunction | None = None,
    name: str = "workspace-tools",
    instructions: str | None = None,
    max_running_calls: int = MAX_RUNNING_CALLS,
    max_waiting_calls: int = MAX_WAITING_CALLS,
) -> Server[Any, Any]:
    """A low-level MCP :class:`Server` exposing ``tools``.

    Args:
        tools: the tools to list and call (names must be unique).
        call: how a call runs; :func:`invoke_call` without a sandbox by default.
        name: the server name sent at initialisation.
        instructions: text the client may show the model about the server.
        max_running_calls: most calls of one MCP session (one stdio client, one HTTP
            session) that run at once; the next ones wait their turn, in order.
        max_waiting_calls: most calls of one session that wait; one more gets an error
            result at once (``isError``, ``errorCode`` ``TOOL_ERROR``) and never runs.

    Arguments are validated by each tool's pydantic model (an invalid call is a result with
    ``isError`` and ``errorCode`` ``INVALID_ARGUMENTS``), not by the SDK, so the model gets
    the same message as everywhere else.
    """
    if max_running_calls < 1 or max_waiting_calls < 0:
        raise ValueError("max_running_calls must be at least 1, max_waiting_calls at least 0")
    by_name = {t.name: t for t in tools}
    run = call or invoke_call()
    server: Server[Any, Any] = Server(name, version=__version__, instructions=instructions)
    # Per MCP session (the SDK makes one ServerSession per client), gone with it.
    limits: weakref.WeakKeyDictionary[Any, _CallLimit] = weakref.WeakKeyDictionary()

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return [mcp_tool(t) for t in tools]

    @server.call_tool(validate_input=False)
    async def call_tool(tool_name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        chosen = by_name.get(tool_name)
        ctx = server.request_context
        call_id = f"mcp-{ctx.request_id}"
        if chosen is None:
            # The code a session gives a call of a tool it lacks, so a remote client's
            # result is the one a local call gets.
            known = ", ".join(by_name)
            return mcp_result(
                ToolResult(
                    call_id=call_id,
                    name=tool_name,
                    arguments=arguments,
                    error=f"Unknown tool {echoed(tool_name)}; available: {known}",
                    error_code=ErrorCode.INVALID_ARGUMENTS,
                )
            )
        token = ctx.meta.progressToken if ctx.meta is not None else None

        async def run_call() -> ToolResult:
            if token is None:
                return await run(chosen, arguments, call_id, None)
            wake, wakeups = anyio.create_memory_object_stream[None](math.inf)
            async with anyio.create_task_group() as tg, wake, BlockingPortal() as portal:
                relay = _UpdateRelay(wake, portal)
                tg.start_soon(_send_progress, wakeups, relay, ctx.session, token, ctx.request_id)
                result = await run(chosen, arguments, call_id, relay)
                # Leaving the block stops the portal (its scheduled wake-ups run), then closes
                # the stream, so the progress task sends what is left before the result.
            return result

        limit = limits.get(ctx.session)
        if limit is None:
            limit = limits[ctx.session] = _CallLimit(max_running_calls, max_waiting_calls)

        async def run_in_turn() -> ToolResult:
            async with limit.turn() as allowed:
                if allowed:
                    return await run_call()
            return ToolResult(
                call_id=call_id,
                name=tool_name,
                arguments=arguments,
                error=limit.refusal(),
                error_code=ErrorCode.TOOL_ERROR,
            )

        # A call waiting for its turn whose client went away stops waiting, too.
        result = await _unless_disconnected(_disconnected(ctx.request), run_in_turn)
        if result is None:
            return types.CallToolResult(
                content=[types.TextContent(type="text", text="The client disconnected")],
                isError=True,
            )
        return mcp_result(result)

    return server


class ConfirmationForm(BaseModel):
    """The form an MCP elicitation shows: flat, primitive fields only, as the MCP
    specification requires of ``requestedSchema`` (revision 2025-06-18, "Elicitation").

    Pass the class to FastMCP's ``ctx.elicit(message, schema=ConfirmationForm)``, or its
    ``model_json_schema()`` as ``requestedSchema`` to ``ServerSession.elicit_form``.
    """

    approve: bool = Field(title="Allow this call")
    reason: str = Field("", title="Reason (the model reads it when you decline)")


def confirmation_from_elicitation(action: str, content: Mapping[str, Any] | None) -> Confirmation:
    """The :class:`Confirmation` of an MCP elicitation result (``ElicitResult.action`` and
    ``.content``): ``accept`` with ``approve`` true approves; ``accept`` with ``approve``
    false, ``decline`` and ``cancel`` decline, with the form's reason when given."""
    if action == "accept":
        if content is None:
            return Confirmation(approved=False, reason="the confirmation came back empty")
        form = ConfirmationForm.model_validate(dict(content))
        return Confirmation(approved=form.approve, reason=form.reason or None)
    if action == "decline":
        return Confirmation(approved=False, reason="the user declined")
    return Confirmation(approved=False, reason="the user dismissed the confirmation")


def elicitation_confirm(
    server: Server[Any, Any],
) -> Callable[[ConfirmationRequest], Awaitable[Confirmation]]:
    """A :class:`ToolSession` confirmation callback that asks the person behind the MCP client.

    It sends an ``elicitation/create`` request (form mode, MCP revision 2025-06-18,
    https://modelcontextprotocol.io/specification/2025-06-18/client/elicitation) tied to the
    ``tools/call`` being served, with :class:`ConfirmationForm` as the requested schema.
    A client that did not declare the ``elicitation`` capability cannot ask: the call is
    declined with a reason the model reads. Use it as::

        session = ToolSession(tools, workspace=workspace, policy=policy)
        server = create_server(session.tools, call=session.call)
        session.confirm = elicitation_confirm(server)
    """

    async def confirm(request: ConfirmationRequest) -> Confirmation:
        ctx = server.request_context
        wanted = types.ClientCapabilities(elicitation=types.ElicitationCapability())
        if not ctx.session.check_client_capability(wanted):
            return Confirmation(
                approved=False, reason="the MCP client cannot ask the user (no elicitation)"
            )
        answer = await ctx.session.elicit_form(
            request.prompt(),
            ConfirmationForm.model_json_schema(),
            related_request_id=ctx.request_id,
        )
        return confirmation_from_elicitation(answer.action, answer.content)

    return confirm


class ClippedLogLines(logging.Filter):
    """Cuts a log line longer than ``limit`` characters to its head, saying how long it was.

    The SDK logs what a client sent as it is (``Tool '<name>' not listed`` for any name a
    ``tools/call`` gives): a 100 KB name would otherwise be written whole to stderr.
    """

    def __init__(self, limit: int = 5 * ECHO_LIMIT) -> None:
        super().__init__()
        self.limit = limit

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if len(text) > self.limit:
            record.msg = f"{text[: self.limit]}… ({len(text):,} characters)"
            record.args = None
        return True


@contextlib.contextmanager
def clipped_sdk_logs() -> Iterator[None]:
    """While inside, every ``mcp`` SDK logger and this package's adapters log lines of at
    most :class:`ClippedLogLines`' limit (a filter on a logger sees only its own records,
    hence one on each)."""
    import mcp.server.lowlevel.server  # noqa: F401  (its logger exists before it is listed)

    names = [
        name
        for name in list(logging.Logger.manager.loggerDict)
        if name == "mcp" or name.startswith(("mcp.", "workspace_tools"))
    ]
    loggers = [logging.getLogger(name) for name in names]
    clip = ClippedLogLines()
    for logger in loggers:
        logger.addFilter(clip)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(clip)


async def serve_stdio(server: Server[Any, Any]) -> None:
    """Run ``server`` over stdin/stdout until the client closes stdin (calls in flight are
    cancelled). Every request gets an answer: malformed input gets the JSON-RPC error its
    specification names, and the server stays up (see :mod:`._jsonrpc` for the table).
    Log lines are cut (:func:`clipped_sdk_logs`)."""
    with clipped_sdk_logs():
        async with validated_stdio() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
