"""A validating stdio transport for the MCP SDK's server: every request gets an answer.

The SDK's own ``stdio_server`` hands lines it cannot parse to the server as exceptions, which
the client sees as a log notification at best, so a client waiting for an answer hangs. This
transport reads newline-delimited JSON-RPC 2.0 (https://www.jsonrpc.org/specification) from
stdin, answers protocol errors itself with the codes of section 5.1, and passes only messages
the SDK accepts to ``Server.run``. What it answers (``id`` is the request's when it is a valid
id, else ``null``):

- ``-32700`` Parse error: a line that is not UTF-8 JSON (``NaN``/``Infinity`` included), or
  whose arrays and objects nest deeper than Python's parser recurses.
- ``-32600`` Invalid Request: a message (a line) over :data:`MAX_MESSAGE_BYTES` (4 MiB, as
  the HTTP transport's body cap), answered with its length at its end; what passes the
  limit is read and dropped, never held, and the next line is served. Or
  JSON that is not a request object — a number, a string, an
  object without ``"jsonrpc": "2.0"``, without a string ``method``, with an ``id`` that is
  neither a string nor an integer (MCP forbids ``null`` ids too), and any array: MCP
  2025-06-18 removed JSON-RPC batching, so a batch is one Invalid Request, not one answer
  per element.
- ``-32602`` Invalid params: ``params`` that is not an object (MCP's methods take named
  parameters only), or that the method's schema rejects (the message names the field),
  a ``_meta.progressToken`` that is neither a string nor an integer (``true`` included,
  which the SDK would read as ``1``).
- ``-32601`` Method not found: a method MCP does not define for a client. A method MCP defines
  that this server does not serve (``prompts/list``, …) gets ``-32601`` from the SDK.
- ``-32000`` Server not initialized: a request other than ``initialize`` or ``ping`` before
  ``initialize`` (MCP's lifecycle lets a client send only pings before it; JSON-RPC names no
  code for this, so it is an implementation-defined server error, the code and text the
  official TypeScript SDK uses).

A notification (a valid object without ``id``) is never answered, even when its method or
params are wrong (JSON-RPC section 4.1); it is dropped with a warning on stderr, as is a
response from the client that is malformed or answers no request of the server, and a
cancellation whose ``requestId`` is not a string or an integer (``true`` would cancel request
``1``). Blank lines are skipped.

On the way out, a request cancelled by ``notifications/cancelled`` gets no response: MCP
(https://modelcontextprotocol.io/specification/2025-06-18/basic/utilities/cancellation) says
the receiver SHOULD NOT send one, and the client SHOULD ignore any that arrives. Any other
error with code ``0`` (the SDK's code for an exception in a handler) goes out as ``-32603``
Internal error, so no response carries a code outside JSON-RPC's.
"""

from __future__ import annotations

import json
import logging
import sys
import typing
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import types
from mcp.shared.message import SessionMessage
from pydantic import BaseModel, ValidationError

from workspace_tools._errors import ECHO_LIMIT, echoed, json_error_message, json_kind

logger = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 4 * 1024 * 1024
"""Most bytes of one message (one line, without its newline) either MCP transport takes."""

_READ_CHUNK = 1 << 16

SERVER_NOT_INITIALIZED = -32000
"""Implementation-defined server error (JSON-RPC reserves -32000 to -32099 for these)."""

_REQUEST_TYPES: dict[str, type[BaseModel]] = {
    typing.get_args(model.model_fields["method"].annotation)[0]: model
    for model in typing.get_args(types.ClientRequest.model_fields["root"].annotation)
}
"""The request model of each method a client may call, from the SDK's ``ClientRequest``."""

_BEFORE_INITIALIZE = frozenset({"initialize", "ping"})


def error_response(request_id: str | int | None, code: int, message: str) -> dict[str, Any]:
    """A JSON-RPC 2.0 error response object (section 5) with ``id`` ``request_id``."""
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def parse_message(data: bytes) -> tuple[Any, dict[str, Any] | None]:
    """``(value, None)`` for UTF-8 JSON text, else ``(None, the -32700 answer)``: text that is
    not JSON, ``NaN``/``Infinity`` (not JSON, though Python's parser takes them), or arrays
    and objects nested deeper than the parser recurses (``[[[[...]]]]``)."""
    try:
        text = data.decode("utf-8")
        return json.loads(text, parse_constant=_reject_constant, parse_int=_integer), None
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None, error_response(None, types.PARSE_ERROR, f"Parse error: {exc}")
    except RecursionError:
        message = "Parse error: arrays or objects nested too deeply"
        return None, error_response(None, types.PARSE_ERROR, message)


def _valid_id(value: object) -> bool:
    # MCP: "Requests MUST include a string or integer ID", never null; bool is not an integer.
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _server_id(value: str | int) -> str | int:
    """The id of a response as the SDK matches it to its request: a string of digits is the
    integer (the SDK's ids are integers; some clients echo them as strings)."""
    try:
        return int(value)
    except ValueError:
        return value


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _integer(text: str) -> int:
    """A JSON integer; Python reads one of at most ``sys.get_int_max_str_digits()`` digits
    (4,300), and its own refusal speaks of a setting of this process."""
    try:
        return int(text)
    except ValueError:
        digits = len(text.lstrip("-"))
        most = sys.get_int_max_str_digits()
        raise ValueError(
            f"a number has {digits:,} digits, more than the {most:,} this server reads"
        ) from None


def _validation_summary(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors()[:3]:
        path = error["loc"][1:] if error["loc"][1:] else error["loc"]  # leave out "params."
        parts.append(f"{'.'.join(str(p) for p in path)}: {json_error_message(error)}")
    summary = "; ".join(parts)
    # Field names come from the client (an object's keys) and may be any size.
    limit = 5 * ECHO_LIMIT
    return summary if len(summary) <= limit else f"{summary[:limit]}… ({len(summary):,} characters)"


class JsonRpcGate:
    """Per-connection checks between the raw stream and the SDK (see the module docstring).

    ``incoming`` takes one line and says what to do with it; ``outgoing`` takes one message
    from the SDK and gives the line to write, if any. It remembers whether ``initialize`` was
    passed on, which requests are in flight and which of them the client cancelled, and which
    requests of the server await a response (the SDK reports any other response as an
    internal error to the client).
    """

    def __init__(self) -> None:
        self._initialized = False
        self._in_flight: set[str | int] = set()
        self._cancelled: set[str | int] = set()
        self._awaiting: set[str | int] = set()  # ids of the server's requests to the client

    def incoming(self, line: bytes) -> types.JSONRPCMessage | dict[str, Any] | None:
        """For one line read: the message to pass to the server, the error response object to
        send back, or ``None`` (nothing to do: a blank line or a dropped notification)."""
        if not line.strip():
            return None
        value, refused = parse_message(line)
        if refused is not None:
            return refused
        if isinstance(value, list):
            reason = "an empty array" if not value else "a batch (MCP 2025-06-18 has no batching)"
            return error_response(None, types.INVALID_REQUEST, f"Invalid Request: {reason}")
        if not isinstance(value, dict):
            reason = f"expected a JSON object, got {json_kind(value)}"
            return error_response(None, types.INVALID_REQUEST, f"Invalid Request: {reason}")
        if "method" not in value and ("result" in value or "error" in value):
            return self._response(value)
        return self._request(value)

    def _request(self, value: dict[str, Any]) -> types.JSONRPCMessage | dict[str, Any] | None:
        has_id = "id" in value
        request_id = value.get("id") if _valid_id(value.get("id")) else None
        method = value.get("method")
        reason = None
        if has_id and request_id is None:
            reason = "id must be a string or an integer"
        elif value.get("jsonrpc") != "2.0":
            reason = 'jsonrpc must be "2.0"'
        if reason is not None or not isinstance(method, str):
            reason = reason or ("method must be a string" if "method" in value else "no method")
            return error_response(request_id, types.INVALID_REQUEST, f"Invalid Request: {reason}")
        if request_id is None:
            return self._notification(value, method)
        params = value.get("params", {})
        if not isinstance(params, dict):
            message = f"Invalid params: params must be an object, got {json_kind(params)}"
            return error_response(request_id, types.INVALID_PARAMS, message)
        model = _REQUEST_TYPES.get(method)
        if model is None:
            return error_response(
                request_id, types.METHOD_NOT_FOUND, f"Method not found: {echoed(method)}"
            )
        try:
            model.model_validate({k: v for k, v in value.items() if k in ("method", "params")})
        except ValidationError as exc:
            message = f"Invalid params for {method}: {_validation_summary(exc)}"
            return error_response(request_id, types.INVALID_PARAMS, message)
        meta = params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        if token is not None and not _valid_id(token):
            # The SDK's lax validation reads true as 1: progress would name another token.
            message = (
                f"Invalid params for {method}: _meta.progressToken: must be a string or an integer"
            )
            return error_response(request_id, types.INVALID_PARAMS, message)
        if not self._initialized and method not in _BEFORE_INITIALIZE:
            message = "Server not initialized: send initialize first"
            return error_response(request_id, SERVER_NOT_INITIALIZED, message)
        self._initialized = self._initialized or method == "initialize"
        self._in_flight.add(request_id)
        return types.JSONRPCMessage.model_validate(value)

    def _notification(self, value: dict[str, Any], method: str) -> types.JSONRPCMessage | None:
        try:
            notification = types.ClientNotification.model_validate(
                {k: v for k, v in value.items() if k in ("method", "params")}
            )
        except ValidationError:
            logger.warning("dropped an invalid notification %s", echoed(method))
            return None
        root = notification.root
        if isinstance(root, types.CancelledNotification):
            named = value["params"].get("requestId")
            if named is not None and not _valid_id(named):
                # true would be read as 1 and cancel another request.
                logger.warning("dropped a cancellation whose requestId is not an id")
                return None
            cancelled = root.params.requestId
            if cancelled is not None and cancelled in self._in_flight:
                self._cancelled.add(cancelled)
        return types.JSONRPCMessage.model_validate(value)

    def _response(self, value: dict[str, Any]) -> types.JSONRPCMessage | None:
        try:
            message = types.JSONRPCMessage.model_validate(value)
        except ValidationError:
            logger.warning(
                "dropped an invalid response from the client (id %s)", echoed(value.get("id"))
            )
            return None
        request_id = _server_id(value["id"])
        if request_id not in self._awaiting:
            logger.warning(
                "dropped a response to no request of the server (id %s)", echoed(value["id"])
            )
            return None
        self._awaiting.discard(request_id)
        return message

    def outgoing(self, message: types.JSONRPCMessage) -> bytes | None:
        """The line to write for a message from the server, or ``None`` to send nothing."""
        root = message.root
        if isinstance(root, types.JSONRPCRequest):
            self._awaiting.add(root.id)
        elif isinstance(root, types.JSONRPCResponse | types.JSONRPCError):
            self._in_flight.discard(root.id)
            if root.id in self._cancelled:
                self._cancelled.discard(root.id)
                return None
            if isinstance(root, types.JSONRPCError) and root.error.code == 0:
                error = root.error.model_copy(update={"code": types.INTERNAL_ERROR})
                root = root.model_copy(update={"error": error})
        return root.model_dump_json(by_alias=True, exclude_none=True).encode() + b"\n"


class Oversized(int):
    """A line refused by :func:`bounded_lines`: its value is its length in bytes (without
    its newline), counted as it was read and dropped."""


def oversized_response(size: int) -> dict[str, Any]:
    """The ``-32600`` answer to a message of ``size`` bytes, over :data:`MAX_MESSAGE_BYTES`."""
    message = (
        f"Invalid Request: the message is {size:,} bytes long, over the limit of "
        f"{MAX_MESSAGE_BYTES:,} bytes (4 MiB); send a smaller one"
    )
    return error_response(None, types.INVALID_REQUEST, message)


async def bounded_lines(
    source: anyio.AsyncFile[bytes], limit: int = MAX_MESSAGE_BYTES
) -> AsyncIterator[bytes | Oversized]:
    """The lines of ``source`` without their ``\\n``, none longer than ``limit`` bytes: a
    longer one is read and dropped from the point it passes the limit and yielded as its
    length (:class:`Oversized`) at its end. Memory stays under ``limit`` plus one chunk
    however long a line is. A last line without a newline is yielded at end of file."""
    pending = bytearray()
    dropping = 0  # > 0: bytes of an oversized line seen so far (its rest is dropped)
    while chunk := await source.read1(_READ_CHUNK):
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if dropping:
                dropping += len(piece)
            elif len(pending) + len(piece) > limit:
                dropping = len(pending) + len(piece)
                pending.clear()
            else:
                pending += piece
            if end < 0:
                break
            yield Oversized(dropping) if dropping else bytes(pending)
            pending.clear()
            dropping = 0
            start = end + 1
    if dropping or pending:
        yield Oversized(dropping) if dropping else bytes(pending)


_ToServer = MemoryObjectReceiveStream[SessionMessage | Exception]
_FromServer = MemoryObjectSendStream[SessionMessage]


@asynccontextmanager
async def validated_stdio(
    stdin: anyio.AsyncFile[bytes] | None = None,
    stdout: anyio.AsyncFile[bytes] | None = None,
) -> AsyncIterator[tuple[_ToServer, _FromServer]]:
    """The ``(read_stream, write_stream)`` pair for ``Server.run``, over stdin/stdout (or the
    binary files given), with :class:`JsonRpcGate` between them and the server.

    Messages are one JSON text a line, UTF-8, as MCP's stdio transport says, each at most
    :data:`MAX_MESSAGE_BYTES` (a longer one is answered ``-32600`` and skipped). The pair ends
    when stdin reaches end of file (the server then cancels the calls in flight and returns).
    The process's standard streams are not closed.
    """
    source = stdin or anyio.wrap_file(sys.stdin.buffer)
    sink = stdout or anyio.wrap_file(sys.stdout.buffer)
    gate = JsonRpcGate()
    to_server_send, to_server = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    from_server, from_server_receive = anyio.create_memory_object_stream[SessionMessage](0)
    write_lock = anyio.Lock()  # the reader's replies and the server's messages share stdout

    async def write(line: bytes) -> None:
        async with write_lock:
            await sink.write(line)
            await sink.flush()

    async def read_lines() -> None:
        async with to_server_send:
            async for line in bounded_lines(source):
                if isinstance(line, Oversized):
                    verdict: Any = oversized_response(line)
                else:
                    verdict = gate.incoming(line)
                if isinstance(verdict, dict):
                    await write(json.dumps(verdict, separators=(",", ":")).encode() + b"\n")
                elif verdict is not None:
                    await to_server_send.send(SessionMessage(verdict))

    async def write_lines() -> None:
        async with from_server_receive:
            async for session_message in from_server_receive:
                line = gate.outgoing(session_message.message)
                if line is not None:
                    await write(line)

    async with anyio.create_task_group() as tg:
        tg.start_soon(read_lines)
        tg.start_soon(write_lines)
        yield to_server, from_server
