"""A hostile MCP server on 127.0.0.1 for RemoteWorkspace's client: it opens a session as
any streamable HTTP server does, then answers ``tools/call`` as told: a JSON body or an
SSE event without end, a body that stalls part-way. Raw sockets, so nothing in between
limits what it sends."""

from __future__ import annotations

import json
import socket
import socketserver
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

#: Bytes a reply without end sends at most, should the client never stop reading.
SEND_AT_MOST = 512 * 1024 * 1024
CHUNK = b"x" * 65536


def _initialized(request_id: Any) -> bytes:
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "result": {
                "protocolVersion": "2025-06-18",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "1"},
            },
        }
    ).encode()


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        sock: socket.socket = self.request
        data = b""
        while b"\r\n\r\n" not in data:
            got = sock.recv(65536)
            if not got:
                return
            data += got
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method = lines[0].split()[0]
        headers = {
            k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])
        }
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            got = sock.recv(65536)
            if not got:
                return
            body += got
        if method != "POST":
            self._send(sock, "405 Method Not Allowed", {}, b"")
            return
        message = json.loads(body)
        if "id" not in message:
            self._send(sock, "202 Accepted", {}, b"")
        elif message["method"] == "initialize" and self.server.mode.startswith("init-"):
            self._misbehave(sock, self.server.mode.removeprefix("init-"))
        elif message["method"] == "initialize":
            answer = _initialized(message["id"])
            self._send(sock, "200 OK", {"Content-Type": "application/json"}, answer)
        elif message["method"] == "tools/call" and self.server.reply is not None:
            self.server.calls += 1
            answer = self.server.reply(message["id"])
            self._send(sock, "200 OK", {"Content-Type": "application/json"}, answer)
        elif message["method"] == "tools/call":
            self.server.calls += 1
            self._misbehave(sock, self.server.mode)
        else:
            answer = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {}}).encode()
            self._send(sock, "200 OK", {"Content-Type": "application/json"}, answer)

    def _send(self, sock: socket.socket, status: str, headers: dict[str, str], body: bytes) -> None:
        lines = [f"HTTP/1.1 {status}", "Connection: close", "mcp-session-id: s1"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        lines.append(f"Content-Length: {len(body)}")
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)

    def _misbehave(self, sock: socket.socket, mode: str) -> None:
        start = ["HTTP/1.1 200 OK", "Connection: close", "mcp-session-id: s1"]
        if mode == "json-declared":
            start += ["Content-Type: application/json", f"Content-Length: {SEND_AT_MOST}"]
            first = b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"'
        elif mode == "json-chunked":
            start += ["Content-Type: application/json"]  # no length: read to the close
            first = b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"'
        elif mode in ("sse", "sse-stall"):
            start += ["Content-Type: text/event-stream"]
            first = b"event: message\r\ndata: "
        else:  # "json-stall"
            start += ["Content-Type: application/json", "Content-Length: 1000"]
            first = b'{"jsonrpc":"2.0",'
        try:
            sock.sendall(("\r\n".join(start) + "\r\n\r\n").encode() + first)
            if mode.endswith("stall"):
                sock.settimeout(120)
                sock.recv(1)  # until the client closes
                return
            sent = 0
            while sent < SEND_AT_MOST:
                sock.sendall(CHUNK)
                sent += len(CHUNK)
        except OSError:
            return  # the client closed: as it should


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    mode = ""
    calls = 0
    #: When set, ``tools/call`` is answered with the body it makes of the request's id.
    reply: Callable[[Any], bytes] | None = None


@contextmanager
def hostile(mode: str) -> Iterator[_Server]:
    """A hostile server answering ``tools/call`` in ``mode`` (``json-declared``,
    ``json-chunked``, ``sse``, ``json-stall``, ``sse-stall``; ``init-MODE`` answers
    ``initialize`` so instead); its MCP URL is
    ``http://127.0.0.1:PORT/mcp`` with ``server.server_address[1]``."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.mode = mode
    # shutdown() waits for serve_forever's next poll: a short interval ends each test's
    # server at once rather than after the default half second of pure waiting.
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    )
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
