"""A workspace served elsewhere (``workspace-tools serve``), called as if it were local.

:class:`RemoteWorkspace` gives :class:`Tool` objects with the names, argument models,
descriptions and presentations of :func:`workspace_tools`; their ``execute`` calls the server
with the official MCP client over streamable HTTP. A result comes back whole: content
(rebuilt exactly from the blocks and ``_meta``), details and presentation (from ``_meta``,
details as JSON data), the error code; progress notifications become ``context.update``
calls. So :func:`invoke_tool`, :class:`ToolSession` and the adapters run them unchanged.

Failures of the connection are results, never hangs: a server that cannot be reached, a
connection lost mid-call or no answer within ``call_timeout`` give ``WORKSPACE_UNAVAILABLE``
(a refused token ``PERMISSION_DENIED``). Only read-only tools are retried (``retries``
times): repeating a write whose first attempt may have landed is not safe.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import anyio
from pydantic import BaseModel

from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools._output import ImagePart, TextPart, ToolContent, ToolOutput, ToolPresentation
from workspace_tools._tool import Tool, ToolContext
from workspace_tools.adapters._common import missing_extra
from workspace_tools.adapters._proxy import proxy_tools

try:
    import httpx
    from mcp import ClientSession, types
    from mcp.client.streamable_http import streamable_http_client

    from workspace_tools.adapters.mcp import META_PREFIX
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise missing_extra("mcp", "mcp") from exc

CONNECT_TIMEOUT = 10.0
"""Seconds to connect and for each HTTP request but a call's answer."""

CALL_TIMEOUT = 900.0
"""Seconds a call's answer may take (the server's own timeouts normally end it first)."""

ANSWER_GRACE = 5.0
"""Seconds the answer may still take to reach the session once the HTTP stream that
carries it has ended; after that the connection was lost before the answer."""


class _EndSignal(httpx.AsyncByteStream):
    """A response body that sets ``ended`` once it is closed or fails."""

    def __init__(self, inner: httpx.AsyncByteStream, ended: anyio.Event) -> None:
        self._inner = inner
        self._ended = ended

    async def __aiter__(self) -> Any:
        try:
            async for chunk in self._inner:
                yield chunk
        finally:
            self._ended.set()

    async def aclose(self) -> None:
        self._ended.set()
        await self._inner.aclose()


class _CallStreamWatch(httpx.AsyncBaseTransport):
    """The HTTP transport, noting when the stream of the ``tools/call`` POST ends: the
    SDK's client keeps waiting when a stream ends without the answer (a server that shut
    down or died), so the caller must know."""

    def __init__(self, ended: anyio.Event) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self._ended = ended

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await self._inner.handle_async_request(request)
        except BaseException:
            if _is_call(request):
                self._ended.set()
            raise
        if _is_call(request) and isinstance(response.stream, httpx.AsyncByteStream):
            response.stream = _EndSignal(response.stream, self._ended)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def _is_call(request: httpx.Request) -> bool:
    return request.method == "POST" and b'"method":"tools/call"' in request.content


class _Unavailable(Exception):
    """The server could not be reached, or the connection was lost mid-call; ``sent``:
    whether the call had been sent (else it certainly did not run)."""

    def __init__(self, message: str, sent: bool = True) -> None:
        super().__init__(message)
        self.sent = sent


class RemoteWorkspace:
    """The eight tools of a workspace served by ``workspace-tools serve``.

    Args:
        url: the server's MCP endpoint, ``http://HOST:PORT/mcp`` as ``serve`` prints it.
        token: its bearer token.
        retries: how many times a read-only call is repeated after a connection failure
            (waiting 0.2 s, 0.4 s, ...); a writing call never is.
        connect_timeout: seconds to connect, and for every HTTP request but the answer.
        call_timeout: seconds a call's answer may take before the call is given up
            (``WORKSPACE_UNAVAILABLE``).
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
        **options: Any,
    ) -> None:
        self.url = url
        self._token = token
        self.retries = retries
        self.connect_timeout = connect_timeout
        self.call_timeout = call_timeout
        self.tools: list[Tool[Any]] = proxy_tools(self._execute, **options)

    def __repr__(self) -> str:
        return f"RemoteWorkspace({self.url!r})"

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
                    if attempt < attempts:
                        await anyio.sleep(0.2 * 2 ** (attempt - 1))
                        continue
                    raise ToolError(
                        _unavailable_text(self.url, exc, attempts, read_only),
                        ErrorCode.WORKSPACE_UNAVAILABLE,
                    ) from None

        return execute

    async def _call(
        self, name: str, arguments: dict[str, Any], context: ToolContext
    ) -> types.CallToolResult:
        """One ``tools/call`` in a session of its own (so calls never share a broken
        connection, and a call in any event loop works).

        Raises:
            _Unavailable: the connection failed or timed out.
            ToolError: the server refused the token (``PERMISSION_DENIED``).
        """

        async def on_message(message: Any) -> None:
            if isinstance(message, types.ServerNotification) and isinstance(
                message.root, types.ProgressNotification
            ):
                params = message.root.params
                meta = params.meta.model_dump(by_alias=True) if params.meta else {}
                context.update(
                    params.message,
                    meta.get(META_PREFIX + "details"),
                    _presentation(meta.get(META_PREFIX + "presentation")),
                )

        async def no_progress(progress: float, total: float | None, message: str | None) -> None:
            # Asks the server for progress (a progressToken); on_message reads it whole.
            return None

        headers = {"Authorization": f"Bearer {self._token}"}
        answer: list[types.CallToolResult] = []
        sent: list[bool] = []
        ended = anyio.Event()

        async def unanswered(scope: anyio.CancelScope) -> None:
            await ended.wait()
            await anyio.sleep(ANSWER_GRACE)
            scope.cancel()

        try:
            with anyio.fail_after(self.call_timeout + self.connect_timeout):
                async with (
                    httpx.AsyncClient(
                        headers=headers,
                        timeout=httpx.Timeout(self.connect_timeout, read=self.call_timeout),
                        transport=_CallStreamWatch(ended),
                    ) as client,
                    streamable_http_client(self.url, http_client=client) as (read, write, _),
                    ClientSession(
                        read,
                        write,
                        read_timeout_seconds=timedelta(seconds=self.connect_timeout),
                        message_handler=on_message,
                    ) as session,
                ):
                    await session.initialize()
                    request = types.CallToolRequest(
                        params=types.CallToolRequestParams(name=name, arguments=arguments)
                    )
                    sent.append(True)
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(unanswered, tg.cancel_scope)
                        answer.append(
                            await session.send_request(
                                types.ClientRequest(request),
                                types.CallToolResult,
                                request_read_timeout_seconds=timedelta(seconds=self.call_timeout),
                                progress_callback=no_progress if context.reports_progress else None,
                            )
                        )
                        tg.cancel_scope.cancel()
                    if not answer:
                        raise _Unavailable("the connection closed before the answer came")
        except _Unavailable:
            raise
        except TimeoutError:
            if not answer:
                raise _Unavailable(
                    f"no answer within {self.call_timeout + self.connect_timeout:g} s",
                    bool(sent),
                ) from None
        except Exception as exc:
            if not answer:
                raise _failure(exc, bool(sent)) from None
        return answer[0]


def _unavailable_text(url: str, exc: _Unavailable, attempts: int, read_only: bool) -> str:
    """What the model reads when the server could not answer: why, how often it was tried,
    and whether the call may have run (a write that may have landed must be checked)."""
    tried = f" (tried {attempts} times)" if attempts > 1 else ""
    if not exc.sent:
        outcome = "; the call did not run"
    elif read_only:
        outcome = ""
    else:
        outcome = "; the call may or may not have run: check first"
    return f"The workspace server at {url} is unavailable{tried}: {exc}{outcome}"


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
            return _Unavailable(f"HTTP {leaf.response.status_code}", sent)
        if isinstance(leaf, httpx.TransportError):
            said = f"{type(leaf).__name__}: {leaf}" if str(leaf) else repr(leaf)
            return _Unavailable(said, sent)
    first = leaves[0]
    return _Unavailable(str(first) or type(first).__name__, sent)


def _presentation(value: Any) -> ToolPresentation | None:
    return ToolPresentation.model_validate(value) if isinstance(value, dict) else None


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
            content = ToolContent.model_validate(content)
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
