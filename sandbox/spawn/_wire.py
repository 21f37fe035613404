"""Messages between the caller, the spawn server and supervisors (typed in
:mod:`sandbox.spawn._jobs`): length-prefixed over a Unix stream socket, with file
descriptors attached (``SCM_RIGHTS``, unix(7)).

A message is its encoded tuple (:func:`~sandbox.spawn._jobs.encode`) in :mod:`marshal`'s
format: both ends are this interpreter (the spawn server is started with
``sys.executable``), it reads tuples back as tuples, and it costs a fraction of JSON on
every command's path. Only the caller and the processes it forked hold these sockets.

A stream socket rather than ``SOCK_SEQPACKET``, which macOS lacks for Unix sockets; the
length prefix keeps the message boundaries.
"""

from __future__ import annotations

import array
import marshal
import os
import socket

from sandbox.spawn._jobs import Encoded, Message, decode, encode

_PREFIX = 4
_READ_SIZE = 64 * 1024
_MAX_FDS = 4
_ANCILLARY_SIZE = socket.CMSG_SPACE(_MAX_FDS * array.array("i").itemsize)

#: Whether descriptors arrive close-on-exec (``MSG_CMSG_CLOEXEC``, Linux), as every
#: descriptor Python opens is; elsewhere the receiver sets it.
RECEIVED_CLOEXEC = hasattr(socket, "MSG_CMSG_CLOEXEC")
# Plain ints: or-ing the socket module's flags (an IntFlag) runs Python code on each read.
_RECEIVE_FLAGS = int(getattr(socket, "MSG_CMSG_CLOEXEC", 0))
_RECEIVE_NOW_FLAGS = _RECEIVE_FLAGS | int(socket.MSG_DONTWAIT)


class Channel:
    """One end of a message stream.

    Messages are :data:`~sandbox.spawn._jobs.Message` dataclasses. A message sent with
    descriptors delivers them to the receiver, who takes them with :meth:`take_fds` after
    reading that message (each kind of message in the protocol carries a known number);
    they arrive close-on-exec where :data:`RECEIVED_CLOEXEC` says so.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer = bytearray()
        self._fds: list[int] = []

    def fileno(self) -> int:
        """The socket's descriptor (for select and event loops)."""
        return self.sock.fileno()

    def send(self, message: Message, fds: list[int] | tuple[int, ...] = ()) -> None:
        """Send ``message`` with ``fds`` (duplicated into the receiver).

        Raises:
            OSError: the other end is gone (or, non-blocking, the socket is full).
        """
        self.send_encoded(encode(message), fds)

    def send_encoded(self, encoded: Encoded, fds: list[int] | tuple[int, ...] = ()) -> None:
        """:meth:`send` of a message already encoded (:func:`~sandbox.spawn._jobs.encode`).

        Raises:
            OSError: the other end is gone (or, non-blocking, the socket is full).
        """
        data = marshal.dumps(encoded)
        frame = len(data).to_bytes(_PREFIX, "big") + data
        sent = socket.send_fds(self.sock, [frame], list(fds)) if fds else self.sock.send(frame)
        if sent < len(frame):
            self.sock.sendall(frame[sent:])

    def receive(self) -> Message | None:
        """The next message, blocking until it is complete; ``None`` at end of file."""
        while True:
            message = self.poll()
            if message is not None:
                return message
            if not self.fill():
                return None

    def poll(self) -> Message | None:
        """The next message if it is complete in the buffer, else ``None``.

        Raises:
            ValueError: the message is not one of :data:`~sandbox.spawn._jobs.Message`
                (or not in :mod:`marshal`'s format).
        """
        if len(self._buffer) < _PREFIX:
            return None
        size = int.from_bytes(self._buffer[:_PREFIX], "big")
        if len(self._buffer) < _PREFIX + size:
            return None
        end = _PREFIX + size
        try:
            encoded = marshal.loads(self._buffer[_PREFIX:end])
        except (EOFError, TypeError) as exc:
            raise ValueError(f"not a message: {exc}") from None
        finally:
            del self._buffer[:end]
        return decode(encoded)

    def fill(self, wait: bool = True) -> bool:
        """Read what the socket has into the buffer, waiting for something to read unless
        ``wait`` is false (``MSG_DONTWAIT``: the socket itself stays blocking, one system
        call rather than three); False at end of file.

        Raises:
            BlockingIOError: nothing to read, and ``wait`` false or the socket non-blocking.
        """
        # Not socket.recv_fds, which drops its flags before Python 3.12.
        flags = _RECEIVE_FLAGS if wait else _RECEIVE_NOW_FLAGS
        try:
            data, ancillary, _, _ = self.sock.recvmsg(_READ_SIZE, _ANCILLARY_SIZE, flags)
        except ConnectionError:
            return False
        for level, kind, fds in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                received = array.array("i")
                received.frombytes(fds[: len(fds) - len(fds) % received.itemsize])
                self._fds.extend(received)
        self._buffer += data
        return bool(data)

    def take_fds(self, count: int) -> list[int]:
        """The next ``count`` descriptors received (fewer if fewer came)."""
        taken, self._fds = self._fds[:count], self._fds[count:]
        return taken

    def close(self) -> None:
        """Close the socket and any descriptors received but not taken."""
        for fd in self._fds:
            os.close(fd)
        self._fds = []
        self.sock.close()
