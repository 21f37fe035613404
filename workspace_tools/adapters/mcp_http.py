"""Serve an MCP server over the official SDK's streamable HTTP transport, behind a bearer token.

Layout of the HTTP application (Starlette, run by uvicorn, both dependencies of ``mcp``):

- ``/mcp``: the MCP endpoint (streamable HTTP, stateful sessions, so a policy's ``ask`` can
  reach the person behind the client by elicitation). Every request must carry
  ``Authorization: Bearer <token>``; without it, or with another token, the answer is 401
  (the SDK's ``BearerAuthBackend`` and ``RequireAuthMiddleware``).
- Every request's ``Host`` must name the address the server is bound to (loopback names
  for a loopback address; any for a wildcard one) and its ``Origin``, when sent, that host:
  otherwise 421 or 403, so a web page cannot reach the server by DNS rebinding.
- A request body over :data:`~workspace_tools.adapters._jsonrpc.MAX_MESSAGE_BYTES` (4 MiB,
  as one message over stdio) is refused with 413 and a JSON-RPC ``-32600`` error before the
  SDK reads it (the SDK would read any body whole into memory); a body that is not JSON
  (``NaN`` included) or nests too deeply gets 400 and ``-32700``, as over stdio. While the
  application runs, log lines are cut (:func:`~workspace_tools.adapters.mcp.clipped_sdk_logs`).
- ``/health``: ``GET`` answers ``{"status": "ok", ...}`` without a token, for orchestrators'
  liveness probes; it says nothing about the workspace.
- Live MCP sessions are capped (:data:`DEFAULT_MAX_SESSIONS`, ``max_sessions``): while that
  many are open, a request that would open another gets 503 with a JSON-RPC error saying
  so, and the sessions open are unaffected; room frees up as a client ends its session
  (``DELETE``) or a session goes :data:`DEFAULT_SESSION_IDLE_TIMEOUT` without a request
  and is closed. Both are the SDK's session manager's own (``StreamableHTTPSessionManager``
  ``max_sessions`` and ``session_idle_timeout``, mcp 1.30: "While that many sessions are
  open, a request that would open another one receives a 503 response; existing sessions
  are unaffected and room frees up as they end or expire"); it closes no session to make
  room, so neither does this server. Every session shares the one token, so the cap is per
  token too.

A connection has :data:`REQUEST_HEAD_SECONDS` to send a whole request head (its request
line and headers), from its opening and from the end of each response on it; one that has
not is closed, and so is one whose request was answered before its body was read (401
without the token, 413). uvicorn waits for a head, and for the rest of such a body, for
ever, so connections that sent a byte now and then, or nothing, held the server's
descriptors without a token: past its limit of open files, the token holder's requests
and ``/health`` went unanswered.

A ``tools/call`` whose HTTP connection goes away before its answer is cancelled on the
server (``run_command`` then stops its process tree): a client that died must not leave
work running for nobody.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import json
import logging
import secrets
import signal
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio

from workspace_tools import __version__
from workspace_tools._errors import ECHO_LIMIT, clipped
from workspace_tools.adapters._common import missing_extra

try:
    import h11
    import uvicorn
    from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend, RequireAuthMiddleware
    from mcp.server.auth.provider import AccessToken
    from mcp.server.lowlevel import Server
    from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from starlette.applications import Starlette
    from starlette.datastructures import Headers
    from starlette.middleware import Middleware
    from starlette.middleware.authentication import AuthenticationMiddleware
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse
    from starlette.routing import Route
    from starlette.types import Message, Receive, Scope, Send
    from uvicorn.protocols.http.h11_impl import H11Protocol

    from workspace_tools.adapters._jsonrpc import MAX_MESSAGE_BYTES, parse_message
    from workspace_tools.adapters.mcp import DISCONNECTED, clipped_sdk_logs
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise missing_extra("mcp", "mcp") from exc

#: Seconds a connection may take to send a request head (see the module's text).
REQUEST_HEAD_SECONDS = 10.0

DEFAULT_MAX_SESSIONS = 32
"""Most MCP sessions a server keeps open at once: a workspace serves one agent or a few,
and each session holds a server task and its calls' state."""

DEFAULT_SESSION_IDLE_TIMEOUT = 30 * 60.0
"""Seconds without a request after which a session is closed (its id then answers 404)."""

TOKEN_ENV = "WORKSPACE_TOOLS_TOKEN"
"""The environment variable ``workspace-tools serve`` takes its bearer token from."""

MCP_PATH = "/mcp"
HEALTH_PATH = "/health"


def new_token() -> str:
    """A fresh bearer token: 32 random bytes, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(32)


class StaticTokenVerifier:
    """The SDK's ``TokenVerifier`` for one shared secret, compared in constant time."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("the bearer token must not be empty")
        self._token = token.encode()

    async def verify_token(self, token: str) -> AccessToken | None:
        """An ``AccessToken`` for the right token, ``None`` (so 401) for any other."""
        if not hmac.compare_digest(token.encode(), self._token):
            return None
        return AccessToken(token=token, client_id="workspace-tools", scopes=[])


class _DisconnectWatch:
    """Sets the scope's :data:`DISCONNECTED` event when the server reads ``http.disconnect``
    (the SSE response listens for it), so a call handler can stop work nobody awaits."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        event = anyio.Event()
        scope[DISCONNECTED] = event

        async def watched() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect":
                event.set()
            return message

        try:
            await self.app(scope, watched, send)
        finally:
            # The response is over; whatever still waits on the request is not awaited.
            event.set()


class _BodyCheck:
    """Answers 413 (with a JSON-RPC ``-32600`` error, ``id`` null) to a request whose body
    is over ``limit`` bytes, by its ``Content-Length`` or as it arrives, and 400 with the
    stdio transport's ``-32700`` to a ``POST`` body that is not JSON (``NaN`` included) or
    nests deeper than the parser recurses; hands any other body to the application whole.
    The SDK reads a body into memory without a limit, takes ``NaN``, and answers deep
    nesting with a 500 and a traceback in the log."""

    def __init__(self, app: Any, limit: int = MAX_MESSAGE_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.limit:
            await self._refuse(int(declared), scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break  # the client went away: the application sees that too
            body += message.get("body", b"")
            if len(body) > self.limit:
                await self._refuse(len(body), scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        replay: list[Message] = [{"type": "http.request", "body": bytes(body), "more_body": False}]
        if message["type"] != "http.request":
            replay = [message]
        elif scope.get("method") == "POST":
            _, refused = parse_message(bytes(body))
            if refused is not None:
                await JSONResponse(refused, status_code=400)(scope, receive, send)
                return

        async def replayed() -> Message:
            return replay.pop() if replay else await receive()

        await self.app(scope, replayed, send)

    async def _refuse(self, size: int, scope: Scope, receive: Receive, send: Send) -> None:
        text = (
            f"Invalid Request: the message is {size:,} bytes long or more, over the limit of "
            f"{self.limit:,} bytes (4 MiB); send a smaller one"
        )
        error = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": text}}
        await JSONResponse(error, status_code=413)(scope, receive, send)


class _HostOriginCheck:
    """Refuses a request whose ``Host`` is not one of ``hosts`` (421) or whose ``Origin``
    names another host (403), before anything else sees it: a web page whose name was
    rebound to this machine's address (DNS rebinding) sends its own name in both, and a
    browser sends the ``Origin`` of any page that posts across origins. MCP's transport
    rules ask servers to check ``Origin``. ``hosts`` empty (a wildcard bind, whose names
    are not known) checks only that an ``Origin`` names the ``Host`` it was sent to."""

    def __init__(self, app: Any, hosts: frozenset[str]) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host", "").lower()
        origin = headers.get("origin")
        refusal = None
        if self.hosts and host not in self.hosts:
            refusal = PlainTextResponse("Invalid Host header", status_code=421)
        elif origin is not None and origin.lower() not in (
            f"http://{h}" for h in self.hosts | {host}
        ):
            refusal = PlainTextResponse("Invalid Origin header", status_code=403)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)


class _SessionCapWording:
    """Words the session manager's 503 to a request that would open one session too many
    (``Too many open sessions``): the JSON-RPC error keeps its code and says what the limit
    is and how room is made. Any other response passes as it is."""

    def __init__(self, send: Send, message: str) -> None:
        self._send = send
        self._message = message
        self._start: Message | None = None

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] == 503:
            self._start = message  # sent with the worded body
            return
        if self._start is None or message["type"] != "http.response.body":
            await self._send(message)
            return
        body = message.get("body", b"")
        try:
            answer = json.loads(body)
            answer["error"]["message"] = self._message
            body = json.dumps(answer).encode()
        except (ValueError, TypeError, KeyError):
            pass  # not the SDK's JSON-RPC error: sent as it came
        headers = [(k, v) for k, v in self._start["headers"] if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await self._send({**self._start, "headers": headers})
        self._start = None
        await self._send({**message, "body": body})


def session_cap_message(max_sessions: int, idle_timeout: float | None) -> str:
    """The error message of a request refused for opening one session too many."""
    wait = (
        f" or wait: a session without a request for {idle_timeout:g} seconds is closed"
        if idle_timeout is not None
        else ""
    )
    return (
        f"Too many open sessions: this server keeps at most {max_sessions:,} MCP sessions open "
        "and all are in use (workspace-tools serve --max-sessions); end a session you no "
        f"longer use (an HTTP DELETE with its Mcp-Session-Id){wait}, then initialize again"
    )


def allowed_hosts(host: str, port: int) -> frozenset[str]:
    """The ``Host`` header values a server bound to ``host``:``port`` answers: that address,
    and for a loopback address every loopback name (``localhost``, ``127.0.0.1``,
    ``[::1]``); empty for a wildcard address (``0.0.0.0``, ``::``), whose names are not
    known."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return frozenset({f"{host.lower()}:{port}"})  # a name given to --http
    if address.is_unspecified:
        return frozenset()
    shown = f"[{address}]" if address.version == 6 else str(address)
    names = {shown}
    if address.is_loopback:
        names |= {"localhost", "127.0.0.1", "[::1]"}
    return frozenset(f"{name}:{port}" for name in names)


def create_http_app(
    server: Server[Any, Any],
    token: str,
    *,
    session_idle_timeout: float | None = DEFAULT_SESSION_IDLE_TIMEOUT,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    hosts: frozenset[str] = frozenset(),
) -> Starlette:
    """The ASGI application serving ``server`` at :data:`MCP_PATH` behind ``token``, with
    :data:`HEALTH_PATH` open.

    Args:
        server: a low-level MCP server (:func:`workspace_tools.adapters.mcp.create_server`).
        token: the bearer token every MCP request must carry.
        session_idle_timeout: seconds after which an MCP session nobody used is closed
            (``None``: never).
        max_sessions: most MCP sessions open at once; a request that would open another
            gets 503 and a JSON-RPC error (:func:`session_cap_message`).
        hosts: the ``Host`` values (``name:port``, lower case) to answer, from
            :func:`allowed_hosts`; any other is refused with 421 and an ``Origin`` naming
            another host with 403 (DNS rebinding). Empty: any ``Host``, and an ``Origin``
            must name the ``Host`` it was sent to.

    Raises:
        ValueError: an empty token, ``max_sessions`` below 1, or a ``session_idle_timeout``
            that is not a positive number of seconds.
    """
    verifier = StaticTokenVerifier(token)
    manager = StreamableHTTPSessionManager(
        server, session_idle_timeout=session_idle_timeout, max_sessions=max_sessions
    )
    refusal = session_cap_message(max_sessions, session_idle_timeout)

    async def mcp_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
        if MCP_SESSION_ID_HEADER not in Headers(scope=scope):
            send = _SessionCapWording(send, refusal)  # a request that opens a session
        await manager.handle_request(scope, receive, send)

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "server": "workspace-tools", "version": __version__})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        with clipped_sdk_logs():
            async with manager.run():
                yield

    return Starlette(
        routes=[
            Route(HEALTH_PATH, health, methods=["GET"]),
            # A Route, not a Mount: a Mount answers POST /mcp with a redirect to /mcp/.
            # The body is checked once the token is: a stranger's body is never read.
            Route(MCP_PATH, _DisconnectWatch(RequireAuthMiddleware(_BodyCheck(mcp_endpoint), []))),
        ],
        middleware=[
            Middleware(_HostOriginCheck, hosts=hosts),
            Middleware(AuthenticationMiddleware, backend=BearerAuthBackend(verifier)),
        ],
        lifespan=lifespan,
    )


def parse_address(address: str) -> tuple[str, int]:
    """``"127.0.0.1:8765"`` -> ``("127.0.0.1", 8765)``; ``"[::1]:0"`` for IPv6; port 0
    picks a free port.

    Raises:
        ValueError: no port, or a port that is not 0-65535.
    """
    shown = clipped(address, ECHO_LIMIT)
    host, sep, port = address.rpartition(":")
    if not sep or not host:
        raise ValueError(f"--http {shown}: give HOST:PORT, e.g. 127.0.0.1:8765")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--http {shown}: the port must be a number from 0 to 65535")
    return host, int(port)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (so port 0's choice is known before the
    server starts).

    Raises:
        OSError: the address is in use or not on this machine.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def mcp_url(sock: socket.socket) -> str:
    """The MCP endpoint's URL for a socket from :func:`bind`."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{MCP_PATH}"


class _QuietClosedStream(logging.Filter):
    """Drops the SDK's traceback for a session's GET stream closed by its own DELETE (the
    normal end of every client session, not an error)."""

    def filter(self, record: logging.LogRecord) -> bool:
        closed = record.exc_info is not None and isinstance(
            record.exc_info[1], anyio.ClosedResourceError
        )
        return not (closed and record.getMessage() == "Error in standalone SSE writer")


async def serve_http(
    server: Server[Any, Any],
    token: str,
    sock: socket.socket,
    *,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    session_idle_timeout: float | None = DEFAULT_SESSION_IDLE_TIMEOUT,
) -> None:
    """Run ``server`` over streamable HTTP on ``sock`` until SIGINT/SIGTERM; calls in
    flight are cancelled at shutdown (their processes stopped). ``max_sessions`` and
    ``session_idle_timeout`` as :func:`create_http_app` takes them."""
    logger = logging.getLogger("mcp.server.streamable_http")
    quiet = _QuietClosedStream()
    logger.addFilter(quiet)
    try:
        app = create_http_app(
            server,
            token,
            max_sessions=max_sessions,
            session_idle_timeout=session_idle_timeout,
            hosts=allowed_hosts(*sock.getsockname()[:2]),
        )
        await _serve(app, sock)
    finally:
        logger.removeFilter(quiet)


async def _serve(app: Starlette, sock: socket.socket) -> None:
    config = uvicorn.Config(
        app,
        http=_HeadTimedH11,
        log_level="warning",
        # Streams of calls in flight would hold a graceful shutdown open indefinitely.
        timeout_graceful_shutdown=2,
    )
    await _Server(config).serve(sockets=[sock])


class _HeadTimedH11(H11Protocol):
    """uvicorn's h11 protocol, closing a connection that has not sent a whole request head
    within :data:`REQUEST_HEAD_SECONDS` of its opening or of its last response's end, and
    one answered before its request's body was read."""

    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._cancel_head_timer()  # the head is in

    def on_response_complete(self) -> None:
        if self.conn.their_state is h11.SEND_BODY:
            # Answered before its body was read (401, 413): the rest of the body would
            # keep the connection open a byte at a time, so the connection ends here.
            self.transport.close()
        super().on_response_complete()
        self._arm_head_timer()  # for the next request on the connection

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(REQUEST_HEAD_SECONDS, self._head_late)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


class _Server(uvicorn.Server):
    """uvicorn's server, but SIGTERM only ends serving: uvicorn raises a signal it caught
    again once it shut down, and a SIGTERM raised again kills the process before what it
    owns is closed (a shell session and its background processes, checkpoints, the
    workspace's commands). SIGINT is raised again (``KeyboardInterrupt``, which closes
    them on its way out)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        with super().capture_signals():
            try:
                yield
            finally:
                caught = self._captured_signals
                caught[:] = [number for number in caught if number != signal.SIGTERM]
