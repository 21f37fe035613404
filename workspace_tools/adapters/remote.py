"""A workspace served elsewhere (``workspace-tools serve``), called as if it were local.

:class:`RemoteWorkspace` gives :class:`Tool` objects with the names, argument models,
descriptions and presentations of :func:`workspace_tools`; their ``execute`` calls the server
with the official MCP client over streamable HTTP. A result comes back whole: content
(rebuilt exactly from the blocks and ``_meta``), details and presentation (from ``_meta``,
details as JSON data), the error code; progress notifications become ``context.update``
calls. So :func:`invoke_tool`, :class:`ToolSession` and the adapters run them unchanged.

Failures of the connection are results, never hangs: a server that cannot be reached, a
connection lost mid-call or no answer within ``call_timeout`` give ``WORKSPACE_UNAVAILABLE``
(a refused token ``PERMISSION_DENIED``), and so does a server stalled mid-reply (at
``call_timeout``) or a reply over ``max_reply_bytes`` (not read further: the client never
buffers more). Only read-only tools are retried (``retries`` times): repeating a write
whose first attempt may have landed is not safe; nor is a reply over the cap asked again.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import json
import queue
import threading
import uuid
import weakref
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import anyio
import anyio.to_thread
import sniffio
from anyio.abc import TaskGroup, TaskStatus
from anyio.from_thread import BlockingPortal
from pydantic import BaseModel, ValidationError

from workspace_tools._errors import ECHO_LIMIT, ErrorCode, ToolError, clipped, json_error_message
from workspace_tools._output import ImagePart, TextPart, ToolContent, ToolOutput, ToolPresentation
from workspace_tools._tool import Tool, ToolContext
from workspace_tools.adapters._common import missing_extra
from workspace_tools.adapters._proxy import proxy_tools

try:
    import httpx
    from mcp import ClientSession, McpError, types
    from mcp.client.streamable_http import streamable_http_client

    from workspace_tools.adapters.mcp import META_PREFIX
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise missing_extra("mcp", "mcp") from exc

CONNECT_TIMEOUT = 10.0
"""Seconds to connect and for each HTTP request but a call's answer."""

_REASON_BYTES = 16384
"""Bytes of an error response's body read for its reason (a JSON-RPC error is far less)."""

_REASON_LIMIT = 1000
"""Characters of a server's reason a message quotes."""

CALL_TIMEOUT = 900.0
"""Seconds a call's answer may take (the server's own timeouts normally end it first)."""

ANSWER_GRACE = 5.0
"""Seconds at most that a reply the SDK could not read may still take to reach the
session once the HTTP stream that carried it has ended (normally it is there as soon as
the session's tasks have run); after that the connection was lost before the answer."""


MAX_REPLY_BYTES = 64 * 1024 * 1024
"""Most bytes one message from the server may be (a JSON body, or one event of an SSE
stream): the largest file a workspace reads whole, by default. A reply over it is not
read further (``WORKSPACE_UNAVAILABLE`` naming its size and the cap), so a hostile or
broken server cannot make the client buffer without bound."""

_CALL_KEY = META_PREFIX + "call"
"""The ``_meta`` key naming a call, so that the transport can tell which call's stream ended
and learn its JSON-RPC id (for ``notifications/cancelled``)."""

_SESSION_TERMINATED = 32600
"""The SDK's error code for a request the server answered 404: it knows no such session."""


class _Watch:
    """What the transport learns of one call: its JSON-RPC ``request_id`` once posted,
    ``ended`` once the HTTP stream that carries its answer closed or failed, and
    ``refused``, why its answer was not read (over the cap)."""

    def __init__(self) -> None:
        self.ended = anyio.Event()
        self.request_id: int | str | None = None
        self.refused: str | None = None


class _ReplyTooLarge(Exception):
    """A message from the server over the cap; raised in the response's stream, so that
    the SDK stops reading it."""


class _Reply(httpx.AsyncByteStream):
    """A response body read at most ``limit`` bytes a message: the whole body, or for an
    SSE stream (``events``) each event, counted from the blank line that ends the one
    before. Past the limit, or at once when its ``Content-Length`` (``declared``) is over
    it, it fails (:class:`_ReplyTooLarge`, which the SDK takes as a reply it could not
    read) and calls ``refuse`` with why; a call's body (``ended`` given) sets it once
    closed or failed."""

    def __init__(
        self,
        inner: httpx.AsyncByteStream,
        limit: int,
        *,
        declared: int | None,
        events: bool,
        refuse: Callable[[str], None],
        ended: anyio.Event | None = None,
    ) -> None:
        self._inner = inner
        self._limit = limit
        self._declared = declared
        self._events = events
        self._refuse = refuse
        self._ended = ended

    async def __aiter__(self) -> Any:
        pending = 0  # bytes of the message not yet ended
        tail = b""  # the end of the last chunk, where a blank line may begin
        try:
            if self._declared is not None and self._declared > self._limit:
                why = (
                    f"its answer is {self._declared:,} bytes long, over the {self._limit:,} "
                    "bytes a reply may be (max_reply_bytes); it was not read"
                )
                self._refuse(why)
                raise _ReplyTooLarge(why)
            async for chunk in self._inner:
                if self._events:
                    # Every event that ends in this chunk is measured, not only the last
                    # one's remainder: an event whole in one chunk counts too.
                    seen = tail + chunk
                    pending, longest = _event_sizes(seen, pending - len(tail))
                    tail = seen[-3:]
                else:
                    pending += len(chunk)
                    longest = pending
                if longest > self._limit:
                    why = (
                        f"its answer passed the {self._limit:,} bytes a reply may be "
                        "(max_reply_bytes); it was not read further"
                    )
                    self._refuse(why)
                    raise _ReplyTooLarge(why)
                yield chunk
        finally:
            if self._ended is not None:
                self._ended.set()

    async def aclose(self) -> None:
        if self._ended is not None:
            self._ended.set()
        await self._inner.aclose()


_EVENT_ENDS = (b"\n\n", b"\r\r", b"\r\n\r\n")
"""How an SSE event ends: a blank line, in any of the three line ends."""


def _event_sizes(seen: bytes, before: int) -> tuple[int, int]:
    """Measure the SSE events in ``seen``, whose first byte is byte ``before`` of an event
    still open: return the bytes of the event open at its end and the size of the longest
    event it ended or left open (bytes, separators included)."""
    start = -before  # where the open event began, relative to ``seen``
    longest = 0
    at = 0
    while True:
        ends = [found + len(sep) for sep in _EVENT_ENDS if (found := seen.find(sep, at)) >= 0]
        if not ends:
            break
        at = min(ends)
        longest = max(longest, at - start)
        start = at
    pending = len(seen) - start
    return pending, max(longest, pending)


class _CallStreamWatch(httpx.AsyncBaseTransport):
    """The HTTP transport, noting for each ``tools/call`` POST its JSON-RPC id and when its
    stream ends: the SDK's client keeps waiting when a stream ends without the answer (a
    server that shut down or died), so the caller must know. Every response is read at
    most ``limit`` bytes a message (:class:`_Reply`); ``refused`` hears why one was not."""

    def __init__(
        self, watches: dict[str, _Watch], limit: int, refused: Callable[[str], None]
    ) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self._watches = watches
        self._limit = limit
        self._refused = refused

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        watch = self._watch(request)
        try:
            response = await self._inner.handle_async_request(request)
        except BaseException:
            if watch is not None:
                watch.ended.set()
            raise
        stream = response.stream
        if not isinstance(stream, httpx.AsyncByteStream):
            return response
        if response.status_code >= 400:
            # The SDK raises on the status without reading the body, which says why (the
            # session cap's JSON-RPC error): a bounded head of it is read now, for the message.
            body = await _head(stream, _REASON_BYTES)
            if watch is not None:
                watch.ended.set()
            kept = [(k, v) for k, v in response.headers.multi_items() if k != "content-length"]
            return httpx.Response(
                response.status_code, headers=kept, content=body, extensions=response.extensions
            )

        def refuse(why: str) -> None:
            if watch is not None:
                watch.refused = why
            self._refused(why)

        length = response.headers.get("content-length", "")
        response.stream = _Reply(
            stream,
            self._limit,
            declared=int(length) if length.isdigit() else None,
            events=response.headers.get("content-type", "").startswith("text/event-stream"),
            refuse=refuse,
            ended=watch.ended if watch is not None else None,
        )
        return response

    def _watch(self, request: httpx.Request) -> _Watch | None:
        if request.method != "POST" or b'"method":"tools/call"' not in request.content:
            return None
        message = json.loads(request.content)
        meta = message.get("params", {}).get("_meta", {})
        watch = self._watches.get(meta.get(_CALL_KEY, ""))
        if watch is not None:
            watch.request_id = message.get("id")
        return watch

    async def aclose(self) -> None:
        await self._inner.aclose()


async def _head(stream: httpx.AsyncByteStream, limit: int) -> bytes:
    """The first ``limit`` bytes of ``stream``, which is closed then."""
    body = b""
    try:
        async for chunk in stream:
            body += chunk[: limit - len(body)]
            if len(body) >= limit:
                break
    finally:
        await stream.aclose()
    return body


def _server_reason(response: httpx.Response) -> str:
    """``: <message>`` of the JSON-RPC error an error response carries (read by the
    transport), clipped; ``""`` when it carries none."""
    try:
        message = json.loads(response.content)["error"]["message"]
    except (httpx.ResponseNotRead, ValueError, KeyError, TypeError):
        return ""
    return f": {clipped(message, _REASON_LIMIT)}" if isinstance(message, str) and message else ""


class _Unavailable(Exception):
    """The server could not be reached, or the connection was lost mid-call; ``sent``:
    whether the call had been sent (else it certainly did not run); ``retry``: whether
    sending it again may help (not when its answer was over the cap)."""

    def __init__(self, message: str, sent: bool = True, *, retry: bool = True) -> None:
        super().__init__(message)
        self.sent = sent
        self.retry = retry


class _SessionLost(Exception):
    """The server knows the session no more (it restarted, or the session expired): the
    call was refused unrun, and a new session may carry it."""


Progress = Callable[[Any, Any, ToolPresentation | None], None]


class _Connection:
    """One MCP session over streamable HTTP, held open by :meth:`hold`, a task of the
    link's event loop, until ``stop`` is set or its transport fails (then ``error``)."""

    def __init__(
        self,
        url: str,
        token: str,
        connect_timeout: float,
        call_timeout: float,
        max_reply_bytes: int = MAX_REPLY_BYTES,
    ) -> None:
        self.url = url
        self._token = token
        self.connect_timeout = connect_timeout
        self.call_timeout = call_timeout
        self.max_reply_bytes = max_reply_bytes
        # Why the last reply over the cap was not read; set when one was.
        self.refused: str | None = None
        self._oversized = anyio.Event()
        # When and why the SDK could not read replies (not JSON-RPC), not yet claimed by a
        # call whose answer stream ended without its answer. Bounded: a server may send
        # garbage no call claims (on its GET stream).
        self._garbled: collections.deque[tuple[float, str]] = collections.deque(maxlen=16)
        self.session: ClientSession | None = None
        self.error: Exception | None = None
        self.stop = anyio.Event()
        self.gone = anyio.Event()
        self._watches: dict[str, _Watch] = {}
        self._progress: dict[str, Progress] = {}

    async def hold(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Open the session, report started (``session`` is ``None`` when opening failed,
        ``error`` says why), keep it until ``stop``; never raises."""
        started = False
        headers = {"Authorization": f"Bearer {self._token}"}
        try:
            async with (
                httpx.AsyncClient(
                    headers=headers,
                    timeout=httpx.Timeout(self.connect_timeout, read=self.call_timeout),
                    transport=_CallStreamWatch(self._watches, self.max_reply_bytes, self._refuse),
                ) as client,
                streamable_http_client(self.url, http_client=client) as (read, write, _),
                ClientSession(
                    read,
                    write,
                    read_timeout_seconds=timedelta(seconds=self.connect_timeout),
                    message_handler=self._on_message,
                ) as session,
            ):
                # An answer to initialize over the cap ends the opening at once.
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_cancel_when, self._oversized, tg.cancel_scope)
                    await session.initialize()
                    tg.cancel_scope.cancel()
                if self._oversized.is_set():
                    raise _ReplyTooLarge(self.refused)
                self.session = session
                started = True
                task_status.started()
                await self.stop.wait()
        except Exception as exc:  # the transport failed: every call in flight learns why
            self.error = exc
        finally:
            self.gone.set()
            if not started:
                task_status.started()

    def _refuse(self, why: str) -> None:
        self.refused = why
        self._oversized.set()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, _ReplyTooLarge):
            return  # its call knows already (``_Watch.refused``)
        if isinstance(message, Exception):
            # A reply the SDK could not read (it names no request): the call whose stream
            # ended without its answer claims it (``_claim_garbled``).
            why = f"its answer could not be read ({_reason(message)})"
            self._garbled.append((anyio.current_time(), why))
            return
        if isinstance(message, types.ServerNotification) and isinstance(
            message.root, types.ProgressNotification
        ):
            params = message.root.params
            sink = self._progress.get(str(params.progressToken))
            if sink is not None:
                meta = params.meta.model_dump(by_alias=True) if params.meta else {}
                sink(
                    params.message,
                    meta.get(META_PREFIX + "details"),
                    _presentation(meta.get(META_PREFIX + "presentation")),
                )

    async def call(
        self, name: str, arguments: dict[str, Any], progress: Progress | None
    ) -> types.CallToolResult:
        """One ``tools/call`` on this session; a cancelled call is cancelled on the server
        (``notifications/cancelled``).

        Raises:
            _SessionLost: the server no longer knows the session (the call did not run).
            _Unavailable: the connection failed, closed before the answer, or timed out.
            ToolError: the server refused the token (``PERMISSION_DENIED``).
        """
        assert self.session is not None
        marker = uuid.uuid4().hex
        watch = self._watches[marker] = _Watch()
        meta: dict[str, Any] = {_CALL_KEY: marker}
        if progress is not None:
            # Asks the server for progress; _on_message reads it whole (details, presentation).
            meta["progressToken"] = marker
            self._progress[marker] = progress
        request = types.CallToolRequest(
            params=types.CallToolRequestParams(
                name=name, arguments=arguments, _meta=types.RequestParams.Meta(**meta)
            )
        )
        answer: list[types.CallToolResult] = []
        failed: list[McpError] = []
        sent_at = anyio.current_time()

        async def unanswered(scope: anyio.CancelScope) -> None:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_cancel_when, self.gone, scope)
                await watch.ended.wait()
                if watch.refused is None:  # an answer refused will not come
                    await self._claim_garbled(watch, sent_at)
                scope.cancel()

        try:
            with anyio.fail_after(self.call_timeout + self.connect_timeout):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(unanswered, tg.cancel_scope)
                    try:
                        answer.append(
                            await self.session.send_request(
                                types.ClientRequest(request),
                                types.CallToolResult,
                                request_read_timeout_seconds=timedelta(seconds=self.call_timeout),
                            )
                        )
                    except McpError as exc:
                        failed.append(exc)
                    except ValidationError as exc:  # JSON-RPC, but no tools/call result
                        watch.refused = f"its answer is not a tools/call result ({_reason(exc)})"
                    tg.cancel_scope.cancel()
        except TimeoutError:
            await self._cancel(watch)
            raise _Unavailable(
                f"no answer within {self.call_timeout + self.connect_timeout:g} s",
                watch.request_id is not None,
            ) from None
        except anyio.get_cancelled_exc_class():
            await self._cancel(watch)
            raise
        finally:
            del self._watches[marker]
            self._progress.pop(marker, None)
        if answer:
            return answer[0]
        if watch.refused is not None:
            raise _Unavailable(watch.refused, retry=False)
        if failed and failed[0].error.code == _SESSION_TERMINATED:
            raise _SessionLost(failed[0].error.message)
        if failed and failed[0].error.code == httpx.codes.REQUEST_TIMEOUT:
            # The SDK's own wait ran out (a server stalled mid-reply, or slow).
            await self._cancel(watch)
            raise _Unavailable(
                f"no answer within {self.call_timeout:g} s", watch.request_id is not None
            )
        if self.error is not None:
            raise _failure(self.error, watch.request_id is not None)
        if failed:
            error = failed[0].error
            raise ToolError(
                f"The workspace server answered the call with JSON-RPC error {error.code}: "
                f"{clipped(error.message, ECHO_LIMIT)}",
                ErrorCode.TOOL_ERROR,
            )
        raise _Unavailable("the connection closed before the answer came")

    async def _claim_garbled(self, watch: _Watch, since: float) -> None:
        """Once ``watch``'s stream ended without its answer: take the first reply the SDK
        could not read since the call was sent (``since``), if there is one (it is this
        call's, or one of calls that ended alike).

        The SDK hands such a reply to its session's receive loop before it reads on, so
        before the stream ends; the loop reports it (:meth:`_on_message`) when it next runs.
        So the wait ends once every other task of the loop waits (nothing is on its way:
        a server that died is reported at once), or at the latest after
        :data:`ANSWER_GRACE`."""
        with anyio.move_on_after(ANSWER_GRACE):
            settled = False
            while True:
                while self._garbled and self._garbled[0][0] < since:
                    self._garbled.popleft()  # older than the call: not its answer
                if self._garbled:
                    watch.refused = self._garbled.popleft()[1]
                    return
                if settled:
                    return
                await anyio.wait_all_tasks_blocked()
                settled = True

    async def _cancel(self, watch: _Watch) -> None:
        """Tell the server to stop a call it may be running (its command's processes)."""
        if watch.request_id is None or self.session is None or self.gone.is_set():
            return
        notice = types.CancelledNotification(
            params=types.CancelledNotificationParams(
                requestId=watch.request_id, reason="cancelled by the caller"
            )
        )
        with (
            anyio.CancelScope(shield=True),
            anyio.move_on_after(self.connect_timeout),
            contextlib.suppress(Exception),
        ):
            await self.session.send_notification(types.ClientNotification(notice))


async def _cancel_when(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


class _Link:
    """The one MCP session of a :class:`RemoteWorkspace`: an event loop in a thread of its
    own (an anyio blocking portal) that holds the session open between calls, started at
    the first call and stopped by :meth:`close`. It refers to no :class:`RemoteWorkspace`,
    so that a workspace nobody holds is collected (and its link closed)."""

    def __init__(self, url: str, connect: Callable[[], _Connection]) -> None:
        self._url = url
        # Opens a session anew: the first call, and each after one failed.
        self._connect = connect
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._portal: BlockingPortal | None = None
        # Only touched in the link's loop:
        self._tasks: TaskGroup | None = None
        self._connecting: anyio.Lock | None = None
        self._connection: _Connection | None = None

    @property
    def thread(self) -> threading.Thread | None:
        """The thread of the link's event loop, ``None`` while closed."""
        return self._thread

    def submit(
        self, name: str, arguments: dict[str, Any], progress: Progress | None
    ) -> concurrent.futures.Future[types.CallToolResult]:
        """Start a call in the link's loop (starting the loop if needed)."""
        with self._lock:
            if self._portal is None:
                self._start()
            assert self._portal is not None
            return self._portal.start_task_soon(self._call, name, arguments, progress)

    def _start(self) -> None:
        ready: queue.Queue[BlockingPortal] = queue.Queue()

        async def run() -> None:
            async with BlockingPortal() as portal, anyio.create_task_group() as tasks:
                self._tasks = tasks
                self._connecting = anyio.Lock()
                ready.put(portal)
                await portal.sleep_until_stopped()
                tasks.cancel_scope.cancel()

        # A daemon: a workspace left open must not hold the interpreter at exit (its
        # finalizer closes the session then).
        self._thread = threading.Thread(
            target=anyio.run, args=(run,), name=f"RemoteWorkspace {self._url}", daemon=True
        )
        self._thread.start()
        self._portal = ready.get()

    def close(self) -> None:
        """End the session (the server forgets it) and the thread; idempotent."""
        with self._lock:
            portal, thread = self._portal, self._thread
            self._portal = self._thread = None
        if portal is None or thread is None:
            return
        if thread is threading.current_thread():
            # Collected in the link's own thread: it cannot wait for itself.
            threading.Thread(target=_stop, args=(self, portal, thread)).start()
            return
        _stop(self, portal, thread)

    async def _disconnect(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.stop.set()
            with anyio.move_on_after(connection.connect_timeout):
                await connection.gone.wait()

    async def _connected(self) -> _Connection:
        """The open session, opened anew when there is none or it failed."""
        assert self._connecting is not None and self._tasks is not None
        async with self._connecting:
            connection = self._connection
            if connection is None or connection.gone.is_set():
                connection = self._connect()
                await self._tasks.start(connection.hold)
                if connection.session is None:
                    raise _failure(connection.error or RuntimeError("no session"), False)
                self._connection = connection
            return connection

    async def _call(
        self, name: str, arguments: dict[str, Any], progress: Progress | None
    ) -> types.CallToolResult:
        """The call on the open session; once more on a new one when the server no
        longer knew the session (restarted, or the session expired)."""
        for attempt in range(2):
            connection = await self._connected()
            try:
                return await connection.call(name, arguments, progress)
            except _SessionLost as exc:
                connection.stop.set()
                if self._connection is connection:
                    self._connection = None
                if attempt:
                    message = f"the server dropped the new session too ({exc})"
                    raise _Unavailable(message, False) from None
        raise AssertionError("unreachable")


def _stop(link: _Link, portal: BlockingPortal, thread: threading.Thread) -> None:
    with contextlib.suppress(Exception):
        portal.call(link._disconnect)
    with contextlib.suppress(Exception):
        portal.call(portal.stop, True)
    thread.join()


def _run_soon() -> Callable[[Callable[[], object]], object]:
    """A thread-safe "run this soon in the caller's event loop" (asyncio or trio)."""
    if sniffio.current_async_library() == "trio":
        import trio

        return trio.lowlevel.current_trio_token().run_sync_soon
    return asyncio.get_running_loop().call_soon_threadsafe


class RemoteWorkspace:
    """The eight tools of a workspace served by ``workspace-tools serve``.

    Calls share one MCP session, held open between them by an event loop in a thread this
    object owns (started at the first call); the session is ended and the thread gone after
    :meth:`close`, leaving a ``with`` block, or when the object is collected. A call that
    finds the session unknown to the server (it restarted, or the session expired) opens a
    new one and is sent once more (it did not run); a session whose connection failed is
    replaced at the next call.

    Args:
        url: the server's MCP endpoint, ``http://HOST:PORT/mcp`` as ``serve`` prints it.
        token: its bearer token.
        retries: how many times a read-only call is repeated after a connection failure
            (waiting 0.2 s, 0.4 s, ...); a writing call never is.
        connect_timeout: seconds to connect, and for every HTTP request but the answer.
        call_timeout: seconds a call's answer may take before the call is given up
            (``WORKSPACE_UNAVAILABLE``), a server that stalls mid-reply included.
        max_reply_bytes: most bytes one message from the server may be
            (:data:`MAX_REPLY_BYTES`); an answer over it is not read further and the call
            is ``WORKSPACE_UNAVAILABLE`` naming its size and the cap, not retried.
        **options: :class:`WorkspaceOptions` fields the server was started with that
            shape the arguments (``read_limit`` is the default of ``read_file``'s
            ``limit``); the server applies its own in any case.

    Attributes:
        tools: the tools, in the order of :func:`workspace_tools`. Each is read-only or not
            as its local twin; none has a ``cache_key`` (a local fingerprint cannot see the
            remote files) or a sandbox (the server has its own). Details come back as JSON
            data (the local tools' details models dumped).
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        retries: int = 2,
        connect_timeout: float = CONNECT_TIMEOUT,
        call_timeout: float = CALL_TIMEOUT,
        max_reply_bytes: int = MAX_REPLY_BYTES,
        **options: Any,
    ) -> None:
        self.url = url
        self.retries = retries
        self.connect_timeout = connect_timeout
        self.call_timeout = call_timeout
        self.max_reply_bytes = max_reply_bytes
        connect = functools.partial(
            _Connection, url, token, connect_timeout, call_timeout, max_reply_bytes
        )
        self._link = _Link(url, connect)
        self._finalizer = weakref.finalize(self, self._link.close)
        self.tools: list[Tool[Any]] = proxy_tools(self._execute, **options)

    def __repr__(self) -> str:
        return f"RemoteWorkspace({self.url!r})"

    def close(self) -> None:
        """End the MCP session and stop the thread that holds it (waits up to
        ``connect_timeout`` for the server's goodbye). A later call opens a new session."""
        self._link.close()

    def __enter__(self) -> RemoteWorkspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> RemoteWorkspace:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await anyio.to_thread.run_sync(self.close)

    def health(self) -> dict[str, Any]:
        """The server's ``/health`` answer (``{"status": "ok", ...}``).

        Raises:
            httpx.HTTPError: the server could not be reached or answered with an error.
        """
        base = self.url.rsplit("/", 1)[0]
        response = httpx.get(f"{base}/health", timeout=self.connect_timeout)
        response.raise_for_status()
        return dict(response.json())

    def _execute(self, local: Tool[Any]) -> Any:
        name, read_only = local.name, local.read_only

        async def execute(args: BaseModel, context: ToolContext) -> ToolOutput:
            # Only what the caller gave: the server fills in its own defaults.
            arguments = args.model_dump(mode="json", exclude_unset=True)
            attempts = 1 + (max(0, self.retries) if read_only else 0)
            attempt = 0
            while True:
                try:
                    return _output(await self._call(name, arguments, context))
                except _Unavailable as exc:
                    attempt += 1
                    if attempt < attempts and exc.retry:
                        await anyio.sleep(0.2 * 2 ** (attempt - 1))
                        continue
                    raise ToolError(
                        _unavailable_text(self.url, exc, attempt, read_only),
                        ErrorCode.WORKSPACE_UNAVAILABLE,
                    ) from None

        return execute

    async def _call(
        self, name: str, arguments: dict[str, Any], context: ToolContext
    ) -> types.CallToolResult:
        """One ``tools/call`` on the shared session, awaited in the caller's event loop
        (asyncio or trio) while it runs in the link's; progress is handed to ``context``
        in the caller's loop. A cancelled call is cancelled on the server.

        Raises:
            _Unavailable: the connection failed or timed out.
            ToolError: the server refused the token (``PERMISSION_DENIED``).
        """
        run_soon = _run_soon()
        done = anyio.Event()

        def soon(function: Callable[[], object]) -> None:
            with contextlib.suppress(RuntimeError):  # the caller's loop has ended
                run_soon(function)

        def progress(content: Any, details: Any, presentation: ToolPresentation | None) -> None:
            soon(functools.partial(context.update, content, details, presentation))

        future = self._link.submit(name, arguments, progress if context.reports_progress else None)
        future.add_done_callback(lambda _: soon(done.set))
        try:
            await done.wait()
        except BaseException:
            future.cancel()
            raise
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise _Unavailable("the workspace was closed during the call") from None


def _unavailable_text(url: str, exc: _Unavailable, tried: int, read_only: bool) -> str:
    """What the model reads when the server could not answer: why, how often it was tried,
    and whether the call may have run (a write that may have landed must be checked)."""
    times = f" (tried {tried} times)" if tried > 1 else ""
    if not exc.sent:
        outcome = "; the call did not run"
    elif read_only:
        outcome = ""
    else:
        outcome = "; the call may or may not have run: check first"
    return f"The workspace server at {url} is unavailable{times}: {exc}{outcome}"


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, in order."""
    inner = getattr(exc, "exceptions", None)  # BaseExceptionGroup (a backport before 3.11)
    if isinstance(inner, tuple):
        return [leaf for each in inner for leaf in _leaves(each)]
    return [exc]


def _failure(exc: Exception, sent: bool) -> Exception:
    """What a transport exception means for the call: a refused token (``ToolError``), or
    the server unavailable (:class:`_Unavailable`, with the first cause found)."""
    leaves = _leaves(exc)
    for leaf in leaves:
        if isinstance(leaf, httpx.HTTPStatusError) and leaf.response.status_code in (401, 403):
            code = leaf.response.status_code
            return ToolError(
                f"The workspace server refused the token (HTTP {code}); check the token "
                "it printed at start or its WORKSPACE_TOOLS_TOKEN",
                ErrorCode.PERMISSION_DENIED,
            )
    for leaf in leaves:
        if isinstance(leaf, httpx.HTTPStatusError):
            reason = _server_reason(leaf.response)
            return _Unavailable(f"HTTP {leaf.response.status_code}{reason}", sent)
        if isinstance(leaf, httpx.TransportError):
            said = f"{type(leaf).__name__}: {leaf}" if str(leaf) else repr(leaf)
            # A request that could not connect was never sent.
            return _Unavailable(said, sent and not isinstance(leaf, httpx.ConnectError))
    first = leaves[0]
    return _Unavailable(str(first) or type(first).__name__, sent)


def _reason(exc: Exception) -> str:
    """One short line on why a reply could not be read: a validation error's first
    problem in JSON's words (``content: Input should be an array, not an object``), else
    the exception's text."""
    if isinstance(exc, ValidationError) and exc.errors():
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        message = json_error_message(first)
        said = f"{where}: {message}" if where else message
    else:
        # The SDK appends the message's repr to some ("unknown request ID: SessionMessage(").
        said = (str(exc) or type(exc).__name__).partition(": SessionMessage(")[0]
    return clipped(said.splitlines()[0] if said else said, ECHO_LIMIT)


def _presentation(value: Any) -> ToolPresentation | None:
    """The presentation under ``_meta``; ``None`` when absent or not one (it is for the
    application only: a broken one leaves the result without one, as a local call's
    presentation function that raises does)."""
    if not isinstance(value, dict):
        return None
    try:
        return ToolPresentation.model_validate(value)
    except ValidationError:
        return None


def _text(blocks: Sequence[Any]) -> str:
    return "\n".join(b.text for b in blocks if isinstance(b, types.TextContent))


def _output(result: types.CallToolResult) -> ToolOutput:
    """The :class:`ToolOutput` of a ``tools/call`` result, or the :class:`ToolError` it
    carries (its code from ``_meta``, ``TOOL_ERROR`` when the server gave none)."""
    meta = result.meta or {}
    details = meta.get(META_PREFIX + "details")
    if result.isError:
        code = meta.get(META_PREFIX + "errorCode")
        known = code in ErrorCode._value2member_map_
        raise ToolError(
            _text(result.content),
            ErrorCode(code) if known else ErrorCode.TOOL_ERROR,
            details=details,
        )
    presentation = _presentation(meta.get(META_PREFIX + "presentation"))
    if META_PREFIX + "content" in meta:
        content = meta[META_PREFIX + "content"]
        if isinstance(content, dict) and content.get("type") == "tool-content":
            try:
                content = ToolContent.model_validate(content)
            except ValidationError as exc:
                why = f"its answer's content is not valid ({_reason(exc)})"
                raise _Unavailable(why, retry=False) from None
    elif result.structuredContent is not None:
        content = result.structuredContent
    elif meta.get(META_PREFIX + "contentType") == "tool-content":
        content = ToolContent(
            parts=[
                ImagePart(data=b.data, media_type=b.mimeType)
                if isinstance(b, types.ImageContent)
                else TextPart(text=b.text)
                for b in result.content
                if isinstance(b, types.ImageContent | types.TextContent)
            ]
        )
    else:
        content = _text(result.content)
    return ToolOutput(content=content, details=details, presentation=presentation)
